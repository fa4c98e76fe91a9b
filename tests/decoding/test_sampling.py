"""Sampling: what the temperature, top-k and top-p filters let through, and seeded reproducibility."""

from __future__ import annotations

import pytest
import torch

from seq2seq.config import ConfigError, DecodeConfig
from seq2seq.decoding.sampling import pick_next_tokens, sampling_probs

DRAWS = 20_000


def _logprobs(*probs: float, vocab: int = 12) -> torch.Tensor:
    """One row of log-probabilities: ``probs`` on tokens 0.. in order, the rest spread evenly. (1, V)."""
    rest = (1.0 - sum(probs)) / (vocab - len(probs))
    return torch.tensor([*probs, *[rest] * (vocab - len(probs))]).log()[None]


def _draw_counts(logprobs: torch.Tensor, cfg: DecodeConfig) -> torch.Tensor:
    """How often each token is drawn in DRAWS draws from the row. (V,)"""
    torch.manual_seed(0)
    tokens, _ = pick_next_tokens(logprobs.expand(DRAWS, -1), cfg)
    return torch.bincount(tokens, minlength=logprobs.size(-1))


@pytest.mark.parametrize(
    ("settings", "nucleus"),
    [
        ({"top_p": 0.75}, [0, 1]),  # 0.5 + 0.3 reach 0.75
        ({"top_p": 0.85}, [0, 1, 2]),  # 0.5 + 0.3 fall short of 0.85, so the 0.15 token is needed
        ({"top_p": 0.3}, [0]),  # the top token alone holds more than p
        ({"top_p": 0.75, "temperature": 2.0}, [0, 1, 2]),  # flatter: the same mass needs more tokens
        ({"top_p": 0.5, "top_k": 2}, [0]),  # top-k first: 0.5 / 0.8 of what is left already reaches p
        ({"top_p": 0.9, "top_k": 2}, [0, 1]),  # top-k caps what top-p alone would keep
    ],
)
def test_tokens_outside_the_nucleus_are_never_drawn(settings: dict, nucleus: list[int]) -> None:
    logprobs = _logprobs(0.5, 0.3, 0.15, 0.04)
    counts = _draw_counts(logprobs, DecodeConfig(sampling=True, **settings))
    assert torch.nonzero(counts).squeeze(1).tolist() == nucleus
    probs = sampling_probs(logprobs, DecodeConfig(sampling=True, **settings))[0]
    assert torch.nonzero(probs).squeeze(1).tolist() == nucleus
    torch.testing.assert_close(counts.float() / DRAWS, probs, atol=0.015, rtol=0)  # renormalised mass


def test_top_p_one_and_top_k_zero_keep_the_whole_vocabulary() -> None:
    logprobs = _logprobs(0.5, 0.3, 0.15, 0.04)
    probs = sampling_probs(logprobs, DecodeConfig(sampling=True, top_p=1.0, top_k=0))
    torch.testing.assert_close(probs, logprobs.exp())
    assert (_draw_counts(logprobs, DecodeConfig(sampling=True)) > 0).all()


def test_banned_tokens_stay_banned_and_the_score_is_untempered() -> None:
    logprobs = _logprobs(0.5, 0.3, 0.15, 0.04)
    logprobs[0, 0] = float("-inf")  # e.g. EOS before min_len
    cfg = DecodeConfig(sampling=True, top_p=0.6, temperature=0.5)
    torch.manual_seed(0)
    tokens, scores = pick_next_tokens(logprobs.expand(500, -1), cfg)
    assert set(tokens.tolist()) == {1}  # tempered, 0.3 holds 0.8 of what is left: more than 0.6
    torch.testing.assert_close(scores, logprobs[0, tokens])


def test_same_seed_same_draws() -> None:
    logprobs = _logprobs(0.2, 0.2, 0.2, 0.2).expand(64, -1)
    cfg = DecodeConfig(sampling=True, top_p=0.9, top_k=6, temperature=1.3)
    torch.manual_seed(7)
    first, _ = pick_next_tokens(logprobs, cfg)
    torch.manual_seed(7)
    assert torch.equal(pick_next_tokens(logprobs, cfg)[0], first)
    torch.manual_seed(8)
    assert not torch.equal(pick_next_tokens(logprobs, cfg)[0], first)


@pytest.mark.parametrize("top_p", [0.0, -0.1, 1.5])
def test_top_p_outside_zero_one_is_a_config_error(top_p: float) -> None:
    with pytest.raises(ConfigError, match=r"decode\.top_p"):
        DecodeConfig(sampling=True, top_p=top_p)
