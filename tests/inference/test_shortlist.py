"""The vocabulary shortlist: its candidate sets, the search over them, the file and the commands."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from seq2seq.config import SPECIAL_IDS, DecodeConfig
from seq2seq.data.batching import pad_ids
from seq2seq.decoding import generate
from seq2seq.decoding.shortlist import Shortlist, ShortlistError
from seq2seq.formats.checkpoint import load_model
from seq2seq.inference.cli import main as translate_main
from seq2seq.inference.evaluation import score
from seq2seq.inference.shortlist import fingerprint
from seq2seq.inference.shortlist import main as shortlist_main
from seq2seq.inference.translator import Translator
from tests.helpers.tiny import CORPUS
from tests.helpers.trained import MEMORISED_PAIRS


def hand_made(src_vocab: int, tgt_vocab: int, lists: dict[int, list[int]], frequent: list[int]) -> Shortlist:
    offsets = np.zeros(src_vocab + 1, dtype=np.int64)
    for s in range(src_vocab):
        offsets[s + 1] = offsets[s] + len(lists.get(s, []))
    targets = np.array([t for s in range(src_vocab) for t in lists.get(s, [])], dtype=np.int64)
    return Shortlist(offsets, targets, np.array(frequent, dtype=np.int64), tgt_vocab, False, "hand-made")


def test_a_batch_gets_its_source_types_lists_the_frequent_types_and_the_special_ones() -> None:
    shortlist = hand_made(10, 30, {5: [20, 21], 6: [22], 7: [29]}, frequent=[10, 11])
    candidates = shortlist.candidates([[5, 2], [6, 5, 2]], SPECIAL_IDS).tolist()
    assert candidates == [0, 1, 2, 3, 10, 11, 20, 21, 22]  # sorted; 29 belongs to source type 7 only
    copying = Shortlist(*[getattr(shortlist, f) for f in ("offsets", "targets", "frequent")], 30, True, "x")
    assert copying.candidates([[5, 8, 2]], SPECIAL_IDS).tolist() == [0, 1, 2, 3, 5, 8, 10, 11, 20, 21]


def test_every_type_as_candidate_decodes_exactly_as_the_whole_vocabulary(memorised_ckpt: Path) -> None:
    """The search over candidate positions maps tokens, specials and scores back correctly."""
    model = load_model(memorised_ckpt).model
    src = pad_ids([[5, 9, 14, 2], [7, 2]])
    everything = torch.arange(model.generator.out_features)
    for cfg in (DecodeConfig(beam_size=1), DecodeConfig(beam_size=4, nbest=3)):
        assert generate(model, src, cfg, everything) == generate(model, src, cfg)


def test_the_output_stays_within_the_candidates(memorised_ckpt: Path) -> None:
    model = load_model(memorised_ckpt).model
    src = pad_ids([[5, 9, 14, 2], [7, 2]])
    candidates = torch.tensor([0, 1, 2, 3, 17, 40, 41, 99])
    cfg = DecodeConfig(beam_size=3, nbest=3, min_len=3, max_len_a=0.0, max_len_b=6)  # EOS banned at first
    for sentence in generate(model, src, cfg, candidates):
        for hypothesis in sentence:
            assert len(hypothesis.tokens) >= 3
            assert set(hypothesis.tokens) <= {17, 40, 41, 99}


@pytest.fixture(scope="module")
def built(memorised_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small shortlist of the memorised model: no frequent types, 4 per source type."""
    path = tmp_path_factory.mktemp("shortlist") / "tiny.npz"
    assert shortlist_main(["--ckpt", str(memorised_ckpt), "--output", str(path), "--per-source", "4",
                           "--frequent", "0"]) == 0  # fmt: skip
    return path


def test_the_built_shortlist_restricts_and_keeps_the_memorised_translations(
    memorised_ckpt: Path, built: Path
) -> None:
    loaded = load_model(memorised_ckpt)
    shortlist = Shortlist.load(built, fingerprint(loaded.tokenizer))
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()][:MEMORISED_PAIRS]
    learnt = Counter(source for source, _ in pairs)
    sources, references = zip(*[(s, [t]) for s, t in pairs if learnt[s] == 1], strict=True)
    full = Translator(loaded.model, loaded.tokenizer, loaded.decode_config)
    short = Translator(loaded.model, loaded.tokenizer, loaded.decode_config, shortlist=shortlist)
    ids = full.encode(list(sources))
    assert shortlist.candidates(ids[:1], SPECIAL_IDS).numel() < loaded.tokenizer.tgt_vocab_size / 4
    bleu = {}
    for name, translator in (("full", full), ("short", short)):
        bleu[name] = score([best.text for best, *_ in translator.translate(sources)], list(references))[
            "bleu"
        ]
    assert bleu["full"] > 90 and bleu["short"] >= bleu["full"] - 10  # one sentence of 38 moves BLEU 2-4
    assert short.compute == "PyTorch float32, shortlist"


def test_translate_uses_the_shortlist_beside_the_checkpoint_and_refuses_a_bad_one(
    memorised_ckpt: Path, built: Path, tmp_path: Path, capsys
) -> None:
    beside = tmp_path / "tiny.ckpt"
    beside.symlink_to(memorised_ckpt)
    assert translate_main(["--ckpt", str(beside), "--shortlist", "Hello."]) == 1
    assert "build it with python -m seq2seq.inference.shortlist" in capsys.readouterr().err
    (tmp_path / "shortlist.npz").symlink_to(built)
    assert translate_main(["--ckpt", str(beside), "--shortlist", "--dtype", "int8", "Hello."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    other = hand_made(4, 4, {}, [])
    other.save(tmp_path / "other.npz")
    assert translate_main(["--ckpt", str(beside), "--shortlist", str(tmp_path / "other.npz"), "Hi."]) == 1
    err = capsys.readouterr().err
    assert "built for another tokenizer" in err and len(err.splitlines()) == 1
    assert translate_main(["--model", str(tmp_path), "--shortlist", "Hi."]) == 2
    assert "--shortlist needs --ckpt" in capsys.readouterr().err


def test_a_file_that_is_not_a_shortlist_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ShortlistError, match="cannot read shortlist"):
        Shortlist.load(tmp_path / "junk.npz", "any")
