"""A given tokenizer (``data.tokenizer=huggingface`` or ``sentencepiece``): special tokens moved to
the project's ids and checked, stored with the model, and one line for a file that cannot serve."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sentencepiece
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from seq2seq.config import ConfigError
from seq2seq.data.tokenizers.given import hugging_face_side
from seq2seq.data.tokenizers.sentencepiece_model import SentencePieceSide
from seq2seq.data.tokenizers.tokenizer import SPECIAL_TOKENS, TranslationTokenizer
from seq2seq.export.to_ctranslate2 import export_checkpoint
from seq2seq.export.to_transformers import export_to_transformers
from seq2seq.formats.checkpoint import load_model
from seq2seq.formats.export_folder import ExportError
from seq2seq.inference.backends import open_model
from seq2seq.launch.start import start_run
from tests.helpers.compose import tiny_job
from tests.helpers.in_process import python
from tests.helpers.tiny import CORPUS

SENTENCE = "¿Dónde está el baño? I can't find it."


def _texts(side: int | None = None) -> list[str]:
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    return [text for pair in pairs for i, text in enumerate(pair) if side in (None, i)]


def _unigram(*specials: str) -> Tokenizer:
    """A Unigram tokenizer.json, its special tokens away from the project's ids: unk first, others last."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["<unk>"], unk_token="<unk>")
    tokenizer.train_from_iterator(_texts(), trainer=trainer)
    tokenizer.add_special_tokens(list(specials))
    return tokenizer


def _sentencepiece(texts: list[str], **flags: int) -> bytes:
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=200,
        num_threads=1,
        minloglevel=2,
        **flags,
    )
    return model.getvalue()


@pytest.fixture(scope="module")
def given_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("given")
    files = {"json": directory / "tokenizer.json", "en": directory / "en.model", "es": directory / "es.model"}
    _unigram("</s>", "<pad>", "<s>").save(str(files["json"]))
    for side, name in enumerate(("en", "es")):
        files[name].write_bytes(_sentencepiece(_texts(side), pad_id=3))
    return files


def test_a_tokenizer_json_gets_the_special_ids_and_encodes_as_before() -> None:
    original = _unigram("[EOS]", "[PAD]", "[BOS]")
    given = hugging_face_side(original.to_str(), "tokenizer.json")
    assert [given.id_to_token(i) for i in range(4)] == SPECIAL_TOKENS  # renamed and renumbered
    assert given.get_vocab_size() == original.get_vocab_size()
    tokens = given.encode(SENTENCE, add_special_tokens=False).tokens
    assert tokens == original.encode(SENTENCE, add_special_tokens=False).tokens
    assert given.decode(given.encode(SENTENCE).ids) == SENTENCE


def test_a_sentencepiece_model_gets_the_special_ids_and_round_trips() -> None:
    side = SentencePieceSide(_sentencepiece(_texts(), pad_id=3))  # its own order: unk, bos, eos, pad
    assert [side.id_to_token(i) for i in range(4)] == SPECIAL_TOKENS
    ids = side.encode_ids([SENTENCE])[0]
    assert min(ids) >= len(SPECIAL_TOKENS) and side.decode_batch([ids]) == [SENTENCE]


def test_missing_special_tokens_fail_in_one_line_naming_them_and_the_fix() -> None:
    with pytest.raises(ConfigError) as raised:
        hugging_face_side(_unigram("<pad>").to_str(), "data.tokenizer_file t.json")
    assert str(raised.value) == (
        "data.tokenizer_file t.json lacks special tokens (bos: <s> or <bos> or [BOS]; eos: </s> or <eos> or "
        "[EOS]): add them with tokenizer.add_special_tokens(['<s>', '</s>']) and tokenizer.save(...)"
    )
    with pytest.raises(
        ConfigError, match=r"^data.tokenizer_file es.model has no pad piece: .* --pad_id=3\)$"
    ):
        SentencePieceSide(_sentencepiece(_texts()), "data.tokenizer_file es.model")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.tokenizer_file=t.json"], "data.tokenizer_file is read only for a given tokenizer"),
        (["data.tokenizer=huggingface"], "data.tokenizer=huggingface needs data.tokenizer_file=PATH"),
        (["data.tokenizer=spm", "data.tokenizer_file=x"], "data.tokenizer must be one of bpe, huggingface"),
        (
            ["data.tokenizer=sentencepiece", "data.tokenizer_file=x.model", "data.shared_vocab=false"],
            "data.shared_vocab=false needs one tokenizer file per side",
        ),
    ],
)
def test_tokenizer_keys_are_checked_at_compose_time(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))


def test_a_file_that_is_not_a_tokenizer_stops_train_py_in_one_line(tmp_path: Path) -> None:
    wrong = tmp_path / "spa.model"
    wrong.write_bytes(CORPUS.read_bytes())
    result = python(
        "train.py",
        "experiment=tiny",
        "data.tokenizer=sentencepiece",
        f"data.tokenizer_file={wrong}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: data.tokenizer_file {wrong} is not a SentencePiece model (it does not parse as one)"
    )


def _train_and_translate(tmp_path: Path, *overrides: str) -> Path:
    run = tmp_path / "run"
    start_run(tiny_job(run, tmp_path / "cache", "trainer.max_epochs=1", *overrides))
    checkpoint = run / "checkpoints" / "last.ckpt"
    translator = open_model(checkpoint, device="cpu", dtype="float32").translator
    (best,), (empty,) = translator.translate([SENTENCE, ""])
    assert isinstance(best.text, str) and empty.text == ""
    return checkpoint


def test_training_with_a_tokenizer_json_carries_it_to_transformers(tmp_path: Path, given_files) -> None:
    path = given_files["json"]
    checkpoint = _train_and_translate(tmp_path, "data.tokenizer=huggingface", f"data.tokenizer_file={path}")
    expected = hugging_face_side(path.read_bytes(), str(path)).to_str()
    assert load_model(checkpoint).tokenizer.to_dict() == {"shared": expected}
    assert Tokenizer.from_file(str(tmp_path / "run" / "tokenizer.json")).to_str() == expected
    exported = export_to_transformers(checkpoint, tmp_path / "hf")
    ours = open_model(checkpoint, device="cpu", dtype="float32").translator
    auto = transformers.AutoTokenizer.from_pretrained(exported)
    assert auto([SENTENCE])["input_ids"] == ours.encode([SENTENCE])  # the source and its EOS
    theirs = open_model(model=exported, device="cpu").translator
    assert next(theirs.translate([SENTENCE]))[0].text == next(ours.translate([SENTENCE]))[0].text


def test_training_with_sentencepiece_per_side_carries_it_to_ctranslate2(tmp_path: Path, given_files) -> None:
    en, es = given_files["en"], given_files["es"]
    checkpoint = _train_and_translate(
        tmp_path,
        "data.tokenizer=sentencepiece",
        f"data.tokenizer_file=[{en},{es}]",
        "data.shared_vocab=false",
        "model.tie_embeddings=false",
    )
    loaded = load_model(checkpoint)
    assert (loaded.tokenizer.src.proto, loaded.tokenizer.tgt.proto) == (en.read_bytes(), es.read_bytes())
    assert (tmp_path / "run" / "tokenizer.src.model").read_bytes() == en.read_bytes()
    exported = export_checkpoint(checkpoint, tmp_path / "ct2", quantization="float32")
    assert TranslationTokenizer.load(exported).to_dict() == loaded.tokenizer.to_dict()
    ours = open_model(checkpoint, device="cpu", dtype="float32").translator
    theirs = open_model(model=exported, device="cpu").translator
    assert next(theirs.translate([SENTENCE]))[0].text == next(ours.translate([SENTENCE]))[0].text
    with pytest.raises(
        ExportError, match=r"^transformers cannot load this model's tokenizer: a SentencePiece"
    ):
        export_to_transformers(checkpoint, tmp_path / "hf")
