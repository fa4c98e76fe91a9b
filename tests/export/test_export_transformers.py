"""Export to transformers as Marian or Pegasus: the folder loads with the Auto classes and no custom
code, computes our logits, and generate() gives translate.py's translations; a tokenizer per side
is refused. (seq2seq's own class: test_export_own_class.py.)"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from seq2seq.config import DecodeConfig
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID, TranslationTokenizer
from seq2seq.decoding.steps import output_limits
from seq2seq.export.__main__ import main as export_main
from seq2seq.export.marian_pegasus import residual_permutation
from seq2seq.export.to_transformers import export_to_transformers
from seq2seq.formats.checkpoint import load_model, save_atomically, seq2seq_entry
from seq2seq.inference.backends import open_model
from seq2seq.inference.cli import main as translate_main
from seq2seq.inference.translator import Translator
from seq2seq.model import Transformer
from seq2seq.training.module import MODEL_PREFIX
from tests.helpers.compose import data_config
from tests.helpers.tiny import tiny_tokenizer
from tests.helpers.transformers_parity import SOURCES, teacher_forced_logits, variant_checkpoint

transformers = pytest.importorskip(
    "transformers", reason="the transformers export needs pip install -e '.[hf]'"
)


@pytest.fixture
def exported(hf_export: Path) -> Path:
    return hf_export


@pytest.fixture(scope="module")
def ours(trained_ckpt: Path) -> Translator:
    return open_model(trained_ckpt, device="cpu", dtype="float32").translator


def test_the_folder_loads_with_the_auto_classes_and_no_custom_code(exported: Path) -> None:
    names = {path.name for path in exported.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names
    assert {"tokenizer_config.json", "README.md"} <= names
    config = json.loads((exported / "config.json").read_text())
    assert "auto_map" not in config and config["architectures"] == ["MarianMTModel"]
    generation = json.loads((exported / "generation_config.json").read_text())
    assert (generation["decoder_start_token_id"], generation["eos_token_id"], generation["pad_token_id"]) == (
        BOS_ID, EOS_ID, PAD_ID,
    )  # fmt: skip
    assert generation.get("forced_eos_token_id") is None and generation["suppress_tokens"] == [PAD_ID, BOS_ID]
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(exported)
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
    assert type(model).__name__ == "MarianMTModel" and tokenizer.eos_token_id == EOS_ID
    assert set(tokenizer(["Hi."])) == {"input_ids", "attention_mask"}  # 4.x added token_type_ids


def test_the_tokenizer_gives_the_encoder_the_ids_translate_py_gives_it(
    exported: Path, ours: Translator
) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
    sources = [*SOURCES, "Ünïcödé — “quotes” and emoji 🙂", "  spaces  around  "]
    assert tokenizer([s.strip() for s in sources])["input_ids"] == ours.encode(sources)


def test_float32_logits_equal_ours_within_1e_4(exported: Path, ours: Translator) -> None:
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(exported).eval()
    mine, theirs, real = teacher_forced_logits(model, ours, SOURCES)
    assert (mine - theirs)[real].abs().max().item() < 1e-4


def test_without_the_feature_permutation_the_logits_differ(
    trained_ckpt: Path, exported: Path, ours: Translator
) -> None:
    """The permutation is what makes the function equal (so the test above can fail)."""
    from seq2seq.export import marian_pegasus

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(exported).eval()
    with pytest.MonkeyPatch.context() as unpermuted:
        unpermuted.setattr(marian_pegasus, "residual_permutation", lambda d: torch.arange(d))
        model.load_state_dict(marian_pegasus.hf_state_dict(load_model(trained_ckpt).model), strict=False)
    mine, theirs, real = teacher_forced_logits(model, ours, SOURCES[:8])
    assert (mine - theirs)[real].abs().max().item() > 1.0
    assert residual_permutation(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]


def test_generate_translates_as_translate_py(exported: Path, ours: Translator) -> None:
    """Greedy ``generate()`` called per sentence with our length limit: translate.py's translations."""
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(exported).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
    expected = [best.text for best, *_ in ours.translate(SOURCES, ours.decode_cfg_with(beam=1))]
    got = []
    for source in SOURCES:
        batch = tokenizer([source], return_tensors="pt")
        limit = int(
            output_limits(batch["input_ids"], ours.decode_cfg, model.config.max_position_embeddings, PAD_ID)
        )
        with torch.inference_mode():
            out = model.generate(**batch, max_new_tokens=limit)
        got.append(tokenizer.decode(out[0], skip_special_tokens=True))
    assert got == expected


@pytest.mark.parametrize("beam", ["1", "5"])
def test_translate_py_model_prints_what_the_checkpoint_prints(
    trained_ckpt: Path, exported: Path, capsys, beam: str
) -> None:
    reports = []
    for model in (["--ckpt", str(trained_ckpt), "--dtype", "float32"], ["--model", str(exported)]):
        assert translate_main([*model, "--device", "cpu", "--beam", beam, "--eval", "test"]) == 0
        *scores, compute = capsys.readouterr().out.splitlines()
        reports.append((scores, compute))
    assert reports[1][0] == reports[0][0]
    assert reports[1][1] == "compute = transformers MarianMTModel float32 (the export's weight type)"


@pytest.mark.parametrize("tied", [True, False])
def test_a_post_norm_model_with_or_without_tied_embeddings_is_marian(
    trained_ckpt, tmp_path, tied: bool
) -> None:
    ckpt = variant_checkpoint(tmp_path, trained_ckpt, tie_embeddings=tied)
    out = export_to_transformers(ckpt, tmp_path / "out")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    translator = open_model(ckpt, device="cpu", dtype="float32").translator
    mine, theirs, real = teacher_forced_logits(model, translator, SOURCES[:16])
    assert type(model).__name__ == "MarianMTModel" and (mine - theirs)[real].abs().max().item() < 1e-4


def test_a_gelu_model_is_marian_with_exact_gelu_and_the_same_logits(
    trained_ckpt: Path, tmp_path: Path
) -> None:
    ckpt = variant_checkpoint(tmp_path, trained_ckpt, activation="gelu")
    out = export_to_transformers(ckpt, tmp_path / "out")
    assert json.loads((out / "config.json").read_text())["activation_function"] == "gelu"  # erf, not tanh
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    translator = open_model(ckpt, device="cpu", dtype="float32").translator
    mine, theirs, real = teacher_forced_logits(model, translator, SOURCES[:16])
    assert type(model).__name__ == "MarianMTModel" and (mine - theirs)[real].abs().max().item() < 1e-4
    assert "feed-forward 64 (GELU)" in (out / "README.md").read_text(encoding="utf-8")


def test_a_pre_norm_model_is_pegasus_with_the_same_logits(trained_ckpt: Path, tmp_path: Path) -> None:
    ckpt = variant_checkpoint(tmp_path, trained_ckpt, norm_first=True)
    out = export_to_transformers(ckpt, tmp_path / "out")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    translator = open_model(ckpt, device="cpu", dtype="float32").translator
    mine, theirs, real = teacher_forced_logits(model, translator, SOURCES[:16])
    assert type(model).__name__ == "PegasusForConditionalGeneration"
    assert (mine - theirs)[real].abs().max().item() < 1e-4


def test_the_command_writes_the_folder_and_refuses_a_quantization(trained_ckpt: Path, tmp_path: Path, capsys):
    out = tmp_path / "hf"
    assert (
        export_main(["--ckpt", str(trained_ckpt), "--to", "transformers", "--quantization", "int8", str(out)])
        == 2
    )
    assert "--quantization is for --to ctranslate2" in capsys.readouterr().err and not out.exists()
    assert export_main(["--ckpt", str(trained_ckpt), "--to", "transformers", str(out)]) == 0
    assert f"exported {trained_ckpt} to {out} (transformers" in capsys.readouterr().err


def test_the_model_card_says_what_the_model_is_and_how_well_it_translates(exported: Path) -> None:
    card = (exported / "README.md").read_text(encoding="utf-8")
    assert "license: cc-by-2.0" in card and "English → Spanish" in card
    assert "| test | 12 |" in card and "nrefs:" in card  # scores with sacrebleu's signature
    assert "AutoModelForSeq2SeqLM" in card and "MarianMTModel" in card
    assert "no custom code and no flag" in card and "trust_remote_code" not in card
    assert "hardware: not recorded" in card  # the fixture is not in a run directory: said, not guessed


def test_the_model_card_names_the_bundled_data_and_says_what_it_could_not_measure(
    tmp_path: Path, trained_ckpt: Path
) -> None:
    from seq2seq.export.model_card import model_card
    from seq2seq.export.transformers_class import choose_class

    bundled = replace(data_config("spa_eng"), path=str(tmp_path / "spa.txt.gz"))  # the corpus, not here
    loaded = replace(load_model(trained_ckpt), data_config=bundled)
    card = model_card(loaded, trained_ckpt, choose_class(loaded.model.cfg))
    assert "Tatoeba" in card and "manythings.org/anki" in card and "CC-BY 2.0" in card
    assert "not measured: the training corpus cannot be read here" in card


def test_a_tokenizer_per_side_cannot_be_one_tokenizer_json(
    trained_ckpt: Path, tmp_path: Path, capsys
) -> None:
    loaded = load_model(trained_ckpt)
    split = TranslationTokenizer(tiny_tokenizer().src, tiny_tokenizer(vocab_size=280).tgt)
    cfg = replace(loaded.model.cfg, tie_embeddings=False)
    meta = seq2seq_entry(cfg, DecodeConfig(), loaded.data_config, split, MODEL_PREFIX)
    torch.manual_seed(0)
    model = Transformer(cfg, split.src_vocab_size, split.tgt_vocab_size)
    state = {MODEL_PREFIX + name: tensor for name, tensor in model.state_dict().items()}
    save_atomically({"state_dict": state, "seq2seq": meta}, tmp_path / "split.ckpt")
    assert (
        export_main(["--ckpt", str(tmp_path / "split.ckpt"), "--to", "transformers", str(tmp_path / "o")])
        == 1
    )
    assert "separate source and target vocabularies" in capsys.readouterr().err


def test_without_transformers_the_command_says_what_to_install(trained_ckpt, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # what an install without .[hf] has
    assert export_main(["--ckpt", str(trained_ckpt), "--to", "transformers", str(tmp_path / "hf")]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pip install -e '.[hf]'" in err
    assert not (tmp_path / "hf").exists()
