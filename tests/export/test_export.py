"""Export to CTranslate2: the spec reproduces the model, decoding matches, the command fails cleanly."""

from __future__ import annotations

from pathlib import Path

import ctranslate2
import pytest
import torch
from torch import nn

from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, TranslationTokenizer
from seq2seq.decoding import Hypothesis
from seq2seq.decoding.steps import length_penalty
from seq2seq.export import __main__ as export_command
from seq2seq.export.__main__ import main as export_main
from seq2seq.export.to_ctranslate2 import build_spec, export_checkpoint
from seq2seq.formats.checkpoint import load_model, seq2seq_entry
from seq2seq.formats.export_folder import ENGINES, ExportError
from seq2seq.inference.backends import BACKENDS, open_model
from seq2seq.model import Transformer
from seq2seq.training.module import MODEL_PREFIX
from tests.helpers.compose import model_config
from tests.helpers.tiny import CORPUS, tiny_tokenizer


@pytest.fixture(scope="module")
def exported(trained_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The trained checkpoint exported in float32 and in int8."""
    directory = tmp_path_factory.mktemp("exports")
    return {q: export_checkpoint(trained_ckpt, directory / q, q, force=True) for q in ("float32", "int8")}


@pytest.fixture(scope="module")
def held_out(trained_ckpt: Path) -> tuple[list[str], list[list[str]]]:
    """Sources and references of the fixture's valid and test splits, as ``--eval`` builds them."""
    from seq2seq.data import corpus

    splits, _ = corpus.load_splits(load_model(trained_ckpt).data_config)
    valid, test = corpus.references(splits["valid"]), corpus.references(splits["test"])
    return valid[0] + test[0], valid[1] + test[1]


TINY = model_config("tiny")


def _tokenizer(shared: bool) -> TranslationTokenizer:
    if shared:
        return tiny_tokenizer()
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    return TranslationTokenizer.train((s for s, _ in pairs), (t for _, t in pairs), 300, shared)


def _save(directory: Path, model: Transformer, tokenizer: TranslationTokenizer) -> Path:
    """``model`` as training would save it, its weights under ``model.``."""
    data_cfg = DataConfig(path=str(CORPUS), vocab_size=300, cache_dir=str(directory / "cache"))
    state = {MODEL_PREFIX + name: tensor for name, tensor in model.state_dict().items()}
    path = directory / "model.ckpt"
    meta = seq2seq_entry(model.cfg, DecodeConfig(), data_cfg, tokenizer, MODEL_PREFIX)
    torch.save({"state_dict": state, "seq2seq": meta}, path)
    return path


def _log_prob_gaps(
    model: Transformer,
    tokenizer: TranslationTokenizer,
    engine: ctranslate2.Translator,
    sources: list[list[int]],
    targets: list[list[int]],
) -> torch.Tensor:
    """|log p(token)| differences of CTranslate2 and PyTorch, teacher-forced, every target token + EOS."""
    results = engine.score_batch(
        [[tokenizer.src.id_to_token(i) for i in ids] for ids in sources],
        [[tokenizer.tgt.id_to_token(i) for i in ids] for ids in targets],
    )
    gaps = []
    for src, tgt, result in zip(sources, targets, results, strict=True):
        with torch.inference_mode():
            logits = model.eval()(torch.tensor([src]), torch.tensor([[BOS_ID, *tgt]]))[0]  # (T, V)
        ours = logits.log_softmax(-1).gather(1, torch.tensor([*tgt, EOS_ID])[:, None])[:, 0]  # (T,)
        gaps.append((torch.tensor(result.log_probs) - ours).abs())
    return torch.cat(gaps)


VARIANTS = {
    "post-norm, tied, shared vocabulary": ({"norm_first": False}, True),
    "pre-norm, untied, two vocabularies, learned positions": (
        {"norm_first": True, "tie_embeddings": False, "learned_positions": True},
        False,
    ),
    "post-norm, exact GELU": ({"activation": "gelu"}, True),
    "pre-norm, SwiGLU (gated, d_ff 43)": ({"norm_first": True, "activation": "swiglu", "d_ff": 43}, True),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_float32_export_reproduces_the_log_probabilities(variant: str, tmp_path: Path) -> None:
    """Teacher-forced log-probabilities of CTranslate2 and PyTorch agree: every weight is where it belongs."""
    overrides, shared = VARIANTS[variant]
    tokenizer = _tokenizer(shared)
    torch.manual_seed(0)
    cfg = ModelConfig(**{**vars(TINY), **overrides})
    model = Transformer(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size).eval()
    with torch.no_grad():  # non-trivial norms, biases and positions, so a misplaced one shows
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.1)
        for embed in (model.src_embed, model.tgt_embed):
            if embed.positions is not None:
                embed.positions.normal_(0, 0.5)
    out = export_checkpoint(_save(tmp_path, model, tokenizer), tmp_path / "out", "float32")
    generator = torch.Generator().manual_seed(1)
    sources = [[*torch.randint(4, 300, (n,), generator=generator).tolist(), EOS_ID] for n in (3, 9, 15)]
    targets = [torch.randint(4, 300, (n,), generator=generator).tolist() for n in (5, 1, 12)]
    gaps = _log_prob_gaps(model, tokenizer, ctranslate2.Translator(str(out)), sources, targets)
    assert gaps.max() < 2e-4


SAME_NBEST_SHARE = 0.9  # sentences whose n-best lists are token for token the same (measured 23 and 24 of 24)
NEAR_TIE = 0.05  # where they differ, the scores at each rank (mean log-probability; measured at most 0.016)


def mean_log_prob(hypothesis: Hypothesis, alpha: float) -> float:
    """Log-probability per token (EOS counted) of a hypothesis whose score is length-normalised."""
    length = len(hypothesis.tokens) + 1
    return hypothesis.score * length_penalty(length, alpha) / length


@pytest.mark.parametrize(("beam", "nbest"), [(1, 1), (5, 1), (5, 5)])
def test_float32_export_decodes_the_same_tokens_as_pytorch(
    trained_ckpt: Path, exported: dict[str, Path], held_out, beam: int, nbest: int
) -> None:
    """Both decode in float32, yet CTranslate2 renormalises over the tokens it may emit (see
    ct2_translator): its scores are never below ours, and where two hypotheses are nearly tied the
    difference, or a CPU's own float32 kernels, may rank them apart. So: the same lists for nearly
    every sentence, and only near ties where they differ."""
    ours = open_model(trained_ckpt, device="cpu", dtype="float32").translator  # auto may pick bf16
    theirs = open_model(model=exported["float32"], device="cpu").translator
    sources = ours.encode(held_out[0])
    decode_cfg = ours.decode_cfg_with(beam=beam, nbest=nbest)
    expected, got = ours.search(sources, decode_cfg), theirs.search(sources, decode_cfg)
    same = [[h.tokens for h in e] == [h.tokens for h in g] for e, g in zip(expected, got, strict=True)]
    assert sum(same) >= SAME_NBEST_SHARE * len(sources)
    for ours_hyps, their_hyps in zip(expected, got, strict=True):
        assert len(their_hyps) == len(ours_hyps)
        for o, t in zip(ours_hyps, their_hyps, strict=True):
            if t.tokens == o.tokens:
                assert t.score >= o.score - 1e-5
                assert t.score == pytest.approx(o.score, rel=1e-3)
            else:
                alpha = decode_cfg.length_penalty
                assert abs(mean_log_prob(t, alpha) - mean_log_prob(o, alpha)) <= NEAR_TIE


def test_int8_export_stays_close_to_the_model(
    trained_ckpt: Path, exported: dict[str, Path], held_out
) -> None:
    """int8 weights alone cost little; int8 activations cost more, the more so the narrower the model.

    A weight in the wrong place costs nats per token; this d_model=32 model loses about 0.015 nats
    per token to int8 weights and 0.3 to int8 activations (d_model=256 loses far less).
    """
    loaded = load_model(trained_ckpt)
    sources = [[*ids, EOS_ID] for ids in loaded.tokenizer.encode_source(held_out[0])]
    targets = loaded.tokenizer.encode_target([refs[0] for refs in held_out[1]])
    directory = str(exported["int8"])
    weights_only = ctranslate2.Translator(directory, compute_type="float32")  # int8 weights, widened
    gaps = _log_prob_gaps(loaded.model, loaded.tokenizer, weights_only, sources, targets)
    assert gaps.mean() < 0.05 and gaps.max() < 0.5, (gaps.mean(), gaps.max())
    int8 = ctranslate2.Translator(directory, compute_type="int8")
    assert _log_prob_gaps(loaded.model, loaded.tokenizer, int8, sources, targets).mean() < 0.5
    translations = list(open_model(model=directory, device="cpu").translator.translate(held_out[0]))
    assert len(translations) == len(sources) and all(best.text for best, *_ in translations)


def test_seeded_sampling_repeats(exported: dict[str, Path]) -> None:
    translator = open_model(model=exported["float32"], device="cpu").translator
    decode_cfg = DecodeConfig(sampling=True, temperature=1.5, top_k=50, top_p=0.9)
    texts = ["How are you?", "I like coffee.", "Where is the station?", "Good morning."] * 4
    runs = []
    for seed in (3, 3, 4):
        translator.seed(seed)
        runs.append([best.text for best, *_ in translator.translate(texts, decode_cfg)])
    assert runs[0] == runs[1] != runs[2]


def test_a_weight_the_spec_has_no_place_for_is_named() -> None:
    tokenizer = _tokenizer(True)
    model = Transformer(TINY, 300, 300)
    model.decoder_layers[1].register_parameter("gate", nn.Parameter(torch.ones(32)))
    with pytest.raises(ExportError, match=r"no place for these weights: decoder_layers\.1\.gate$"):
        build_spec(model, tokenizer)


def test_a_qk_norm_model_is_refused_and_the_engine_that_takes_it_named() -> None:
    model = Transformer(ModelConfig(**{**vars(TINY), "qk_norm": True}), 300, 300)
    with pytest.raises(ExportError, match=r"does not compute QK-norm.*--to transformers"):
        build_spec(model, _tokenizer(True))


def _export(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    code = export_main(list(argv))
    return code, capsys.readouterr().err


def test_export_command_refuses_to_overwrite_and_keeps_what_was_there(
    trained_ckpt: Path, tmp_path: Path, capsys
) -> None:
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me", encoding="utf-8")
    out = tmp_path / "model"
    cases = [
        ((str(out), "--ckpt", str(tmp_path / "missing.ckpt")), 1, "checkpoint not found"),
        ((str(other), "--ckpt", str(trained_ckpt), "--force"), 1, "not a seq2seq export"),
        ((str(out), "--ckpt", str(trained_ckpt), "--quantization", "int3"), 2, "invalid choice"),
        ((str(out), "--ckpt", str(trained_ckpt)), 0, "exported"),
        ((str(out), "--ckpt", str(trained_ckpt)), 1, "pass --force"),
        ((str(out), "--ckpt", str(trained_ckpt), "--force", "--quantization", "float32"), 0, "exported"),
    ]
    for argv, expected_code, message in cases:
        code, err = _export(capsys, *argv)
        assert (code, len(err.strip().splitlines())) == (expected_code, 1) and message in err, (argv, err)
    assert (other / "todo.txt").read_text(encoding="utf-8") == "keep me"
    assert open_model(model=out, device="cpu").translator.decode_cfg == load_model(trained_ckpt).decode_config
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "notes"]  # no partial directories


def test_a_failed_export_leaves_the_earlier_one(
    trained_ckpt: Path, exported: dict[str, Path], tmp_path: Path, monkeypatch
) -> None:
    out = export_checkpoint(trained_ckpt, tmp_path / "model", "int8")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail(*args) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr("seq2seq.export.to_ctranslate2.save_bundle", fail)
    with pytest.raises(OSError, match="No space left"):
        export_checkpoint(trained_ckpt, out, "float32", force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_the_command_says_what_it_wrote_and_ctrl_c_exits_130(
    trained_ckpt: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    out = tmp_path / "model"
    assert _export(capsys, str(out), "--ckpt", str(trained_ckpt)) == (
        0, f"exported {trained_ckpt} to {out} (ctranslate2, int8)\n",
    )  # fmt: skip

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setitem(
        export_command.EXPORTERS, "ctranslate2", export_command.Exporter(interrupted, ("int8",))
    )
    assert _export(capsys, str(tmp_path / "other"), "--ckpt", str(trained_ckpt)) == (130, "")


def test_every_engine_of_the_folder_format_has_an_exporter_and_a_backend() -> None:
    assert list(export_command.EXPORTERS) == list(BACKENDS) == list(ENGINES)


def test_a_checkpoint_and_its_export_give_the_same_facts(
    trained_ckpt: Path, exported: dict[str, Path]
) -> None:
    ckpt = open_model(trained_ckpt, device="cpu").facts
    export = open_model(model=exported["int8"], device="cpu").facts
    assert (ckpt.name, ckpt.engine, ckpt.attention) == (trained_ckpt.name, "pytorch", True)
    assert (export.name, export.engine, export.attention) == ("int8", "ctranslate2", False)
    same = ("model_config", "decode_config", "data_config", "parameters", "global_step", "best_bleu")
    assert [getattr(export, name) for name in same] == [getattr(ckpt, name) for name in same]
    assert export.tokenizer.to_dict() == ckpt.tokenizer.to_dict()
    assert ckpt.parameters == sum(p.numel() for p in load_model(trained_ckpt).model.parameters())
