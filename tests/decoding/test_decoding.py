"""Decoding equivalences: cached vs full, batched vs one-by-one, beam 1 vs greedy, and length limits."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from seq2seq.config import DecodeConfig, ModelConfig
from seq2seq.data.batching import pad_ids
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.decoding import Hypothesis, beam_search, generate, greedy_search
from seq2seq.decoding.forced import forced_scores
from seq2seq.inference.backends import open_model
from seq2seq.model import Transformer
from seq2seq.model.int8 import quantize_decoder
from tests.helpers.tiny import CORPUS
from tests.helpers.trained import MEMORISED_PAIRS

VOCAB = 24
# |score difference| the int8 decoder may show between two ways of decoding the same sentence: the
# rows of one call share their activations' int8 scale, so the rows beside a sentence move its
# rounding (measured at most 0.001 on the trained model, 0.047 on random weights); float32 shows none
SCORE_BOUND = {"float32": 1e-4, "int8": 0.1}
# Random weights leave near ties: a greedy step's two best tokens 0.026 apart, a beam's two best
# hypotheses 0.10, less than int8 rounding may move them, so which one wins hangs on the CPU's
# kernels. int8 is compared on the trained model (margins above 3); random weights, in float32.
MODELS_AND_DTYPES = [("trained", "float32"), ("untrained", "float32"), ("trained", "int8")]
SOURCES = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14, 15], [16, 17, 18, 19, 20], [21, 22, 23, 4], [6]]


def _target(source: list[int]) -> list[int]:
    """Reverse the source: output lengths differ per sentence, so early finishing is exercised."""
    return source[::-1]


def _model(cfg: ModelConfig, seed: int) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(cfg, VOCAB, VOCAB)


@pytest.fixture(scope="module")
def trained(tiny_model_cfg: ModelConfig) -> Transformer:
    """A tiny model taught to reverse a handful of id sequences (40 steps, a few seconds on CPU)."""
    model = _model(tiny_model_cfg, 0)
    src = pad_ids([[*s, EOS_ID] for s in SOURCES])
    tgt_in = pad_ids([[BOS_ID, *_target(s)] for s in SOURCES])
    tgt_out = pad_ids([[*_target(s), EOS_ID] for s in SOURCES])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.view(-1, VOCAB), tgt_out.view(-1), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def untrained(tiny_model_cfg: ModelConfig) -> Transformer:
    """Random weights: outputs rarely end early, so they run into the length limits."""
    return _model(tiny_model_cfg, 1).eval()


def _src() -> torch.Tensor:
    return pad_ids([[*s, EOS_ID] for s in SOURCES])


def _tokens(hypotheses: list[list[Hypothesis]]) -> list[list[list[int]]]:
    return [[h.tokens for h in sentence] for sentence in hypotheses]


def _assert_same(a: list[list[Hypothesis]], b: list[list[Hypothesis]], bound: float = 1e-4) -> None:
    """The same hypotheses with scores within ``bound``, in the same order. With a bound above float32
    rounding only the best of each n-best list: the near-ties below it may swap or trade places with
    the next candidate (random weights make many)."""
    if bound > SCORE_BOUND["float32"]:
        a, b = ([sentence[:1] for sentence in side] for side in (a, b))
    assert _tokens(a) == _tokens(b)
    for sentence_a, sentence_b in zip(a, b, strict=True):
        assert [h.score for h in sentence_a] == pytest.approx([h.score for h in sentence_b], abs=bound)


def _in(dtype: str, model: Transformer) -> Transformer:
    """The model as the Translator decodes in ``dtype``: a copy with int8 weights for "int8"."""
    return quantize_decoder(copy.deepcopy(model)) if dtype == "int8" else model


def test_trained_model_decodes_its_targets(trained: Transformer) -> None:
    for beam in (1, 3):
        out = generate(trained, _src(), DecodeConfig(beam_size=beam))
        assert [sentence[0].tokens for sentence in out] == [_target(s) for s in SOURCES]


@pytest.mark.parametrize(("name", "dtype"), MODELS_AND_DTYPES)
def test_cached_greedy_equals_full_recomputation(
    name: str, dtype: str, request: pytest.FixtureRequest
) -> None:
    model = _in(dtype, request.getfixturevalue(name))
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=4)
    cached = greedy_search(model, _src(), cfg)
    _assert_same(cached, greedy_search(model, _src(), cfg, cached=False), SCORE_BOUND[dtype])
    assert any(sentence[0].tokens for sentence in cached)


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize(("name", "dtype"), MODELS_AND_DTYPES)
def test_batched_equals_one_by_one(name: str, beam: int, dtype: str, request: pytest.FixtureRequest) -> None:
    model = _in(dtype, request.getfixturevalue(name))
    cfg = DecodeConfig(beam_size=beam, nbest=beam, max_len_a=1.0, max_len_b=3)
    batched = generate(model, _src(), cfg)
    alone = [generate(model, pad_ids([[*s, EOS_ID]]), cfg)[0] for s in SOURCES]
    _assert_same(batched, alone, SCORE_BOUND[dtype])
    assert any(h.tokens for sentence in batched for h in sentence)


@pytest.mark.parametrize("dtype", SCORE_BOUND)
def test_what_the_padding_holds_changes_nothing(
    trained: Transformer, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The encoder's output at pad positions is masked out of cross-attention, and no int8 scale
    sees it (the cross-attention keys and values stay float32)."""
    model = _in(dtype, trained)
    cfg = DecodeConfig(beam_size=3, nbest=3, max_len_a=1.0, max_len_b=3)
    reference = generate(model, _src(), cfg)
    encode = model.encode

    def loud_padding(src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        memory, mask = encode(src)  # (B, S, D), (B, 1, 1, S)
        return memory.masked_fill(~mask.view(*src.shape, 1), 1e3), mask

    monkeypatch.setattr(model, "encode", loud_padding)
    _assert_same(generate(model, _src(), cfg), reference, 0.0)


@pytest.mark.parametrize("name", ["trained", "untrained"])
def test_forced_decoding_scores_each_hypothesis_as_the_search_did(
    name: str, request: pytest.FixtureRequest
) -> None:
    """Those that ended with EOS and, from random weights, those that stopped at their length limit."""
    model = request.getfixturevalue(name)
    cfg = DecodeConfig(beam_size=4, nbest=4, max_len_a=1.0, max_len_b=3)
    hypotheses = generate(model, _src(), cfg)
    rows = [i for i, sentence in enumerate(hypotheses) for _ in sentence]
    forced = forced_scores(model, _src()[rows], [h.tokens for sentence in hypotheses for h in sentence], cfg)
    assert forced == pytest.approx([h.score for sentence in hypotheses for h in sentence], abs=1e-5)


@pytest.mark.parametrize("name", ["trained", "untrained"])
def test_beam_of_one_is_greedy(name: str, request: pytest.FixtureRequest) -> None:
    model = request.getfixturevalue(name)
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=3)
    _assert_same(beam_search(model, _src(), cfg), greedy_search(model, _src(), cfg))


@pytest.mark.parametrize("nbest", [1, 3, 5])
def test_nbest_count_and_order(untrained: Transformer, nbest: int) -> None:
    out = generate(untrained, _src(), DecodeConfig(beam_size=5, nbest=nbest))
    for sentence in out:
        assert len(sentence) == nbest
        scores = [h.score for h in sentence]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in sentence}) == nbest


def test_wider_beam_finds_no_worse_best_score(untrained: Transformer) -> None:
    greedy = generate(untrained, _src(), DecodeConfig())
    beam = generate(untrained, _src(), DecodeConfig(beam_size=6))
    assert all(b[0].score >= g[0].score - 1e-5 for b, g in zip(beam, greedy, strict=True))


@pytest.mark.parametrize("beam", [1, 4])
def test_max_length_is_respected(untrained: Transformer, beam: int) -> None:
    cfg = DecodeConfig(beam_size=beam, nbest=beam, max_len_a=0.5, max_len_b=1)
    out = generate(untrained, _src(), cfg)
    limits = [int(0.5 * (len(s) + 1)) + 1 for s in SOURCES]  # a·(tokens + EOS) + b
    assert all(len(h.tokens) <= limit for sentence, limit in zip(out, limits, strict=True) for h in sentence)
    # random weights rarely emit EOS, so every sentence runs into its own limit
    assert [max(len(h.tokens) for h in sentence) for sentence in out] == limits


@pytest.mark.parametrize("beam", [1, 4])
def test_min_length_is_respected(trained: Transformer, beam: int) -> None:
    cfg = DecodeConfig(beam_size=beam, nbest=beam, min_len=5, max_len_a=0.0, max_len_b=8)
    out = generate(trained, _src(), cfg)
    assert all(len(h.tokens) >= 5 for sentence in out for h in sentence)
    forced = replace(cfg, min_len=8)
    assert all(len(h.tokens) == 8 for sentence in generate(trained, _src(), forced) for h in sentence)


def test_sampling_top1_is_greedy_and_seeded_sampling_repeats(untrained: Transformer) -> None:
    greedy = generate(untrained, _src(), DecodeConfig())
    _assert_same(generate(untrained, _src(), DecodeConfig(sampling=True, top_k=1)), greedy)
    _assert_same(generate(untrained, _src(), DecodeConfig(sampling=True, top_p=1e-6)), greedy)
    cfg = DecodeConfig(sampling=True, temperature=1.5, top_p=0.9)
    torch.manual_seed(3)
    first = generate(untrained, _src(), cfg)
    torch.manual_seed(3)
    assert _tokens(generate(untrained, _src(), cfg)) == _tokens(first)


def test_encoder_and_cross_attention_run_once(trained: Transformer, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"encode": 0, "cross_kv": 0}
    encode, project_kv = trained.encode, type(trained.decoder_layers[0].cross_attn).project_kv

    def counting_encode(*args, **kwargs):
        calls["encode"] += 1
        return encode(*args, **kwargs)

    def counting_project_kv(self, source):
        calls["cross_kv"] += any(self is layer.cross_attn for layer in trained.decoder_layers)
        return project_kv(self, source)

    monkeypatch.setattr(trained, "encode", counting_encode)
    monkeypatch.setattr(type(trained.decoder_layers[0].cross_attn), "project_kv", counting_project_kv)
    generate(trained, _src(), DecodeConfig(beam_size=3))
    assert calls == {"encode": 1, "cross_kv": len(trained.decoder_layers)}


def test_beam_keeps_searching_while_a_live_beam_can_still_win(memorised_ckpt) -> None:
    """A confident model finishes poor hypotheses early: EOS after other beams' prefixes enters the
    top K while the best beam is still mid-sentence. Stopping once K hypotheses had finished
    returned those, below greedy's translation, for 8 of these 40 sentences."""
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    sources = [source for source, _ in pairs[:MEMORISED_PAIRS]]
    translator = open_model(memorised_ckpt, device="cpu", dtype="float32").translator
    greedy, beam = (
        [
            nbest[0].score
            for nbest in translator.translate(sources, translator.decode_cfg_with(beam=k, nbest=1))
        ]
        for k in (1, 5)
    )
    pairs_of_scores = list(zip(greedy, beam, strict=True))
    assert all(b >= g - 1e-5 for g, b in pairs_of_scores), pairs_of_scores
