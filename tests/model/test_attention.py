"""Attention maths against values written out by hand, and fast path == explicit path."""

import math

import torch

from seq2seq.model.attention import (
    MultiHeadAttention,
    causal_mask,
    fast_attention,
    padding_mask,
    reference_attention,
)


def test_reference_attention_matches_hand_computed_example():
    # One head, d_k = 2: scores = q·k / sqrt(2) = [1/sqrt(2), 0].
    q = torch.tensor([[[[1.0, 0.0]]]])  # (B=1, H=1, Tq=1, Dh=2)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])  # (1, 1, Tk=2, 2)
    v = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    w0 = math.exp(1 / math.sqrt(2)) / (math.exp(1 / math.sqrt(2)) + 1.0)  # ≈ 0.6698
    out, weights = reference_attention(q, k, v)
    torch.testing.assert_close(weights[0, 0, 0], torch.tensor([w0, 1 - w0]))
    expected = torch.tensor([w0 * 1 + (1 - w0) * 3, w0 * 2 + (1 - w0) * 4])  # ≈ [1.6605, 2.6605]
    torch.testing.assert_close(out[0, 0, 0], expected)


def test_masked_key_gets_zero_weight():
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    v = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    mask = torch.tensor([True, False])
    out, weights = reference_attention(q, k, v, mask)
    torch.testing.assert_close(weights[0, 0, 0], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(out[0, 0, 0], torch.tensor([1.0, 2.0]))


def test_masks_shapes_and_values():
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    assert padding_mask(ids, 0).tolist() == [[[[True, True, False]]], [[[True, False, False]]]]
    # Strict upper triangle hidden; the diagonal is visible.
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_fast_attention_equals_reference_with_padding_and_causal_masks():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), 0) & causal_mask(5)
    torch.testing.assert_close(fast_attention(q, k, v, mask), reference_attention(q, k, v, mask)[0])


def test_bf16_training_path_equals_reference_forward_and_backward():
    """bf16 with gradients takes SDPA's math backend on a CPU; same outputs and gradients."""
    torch.manual_seed(0)
    leaves = [torch.randn(2, 3, 5, 4, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), 0) & causal_mask(5)
    fast = fast_attention(*leaves, mask)
    fast_grads = torch.autograd.grad(fast.float().square().sum(), leaves)
    reference = reference_attention(*leaves, mask)[0]
    reference_grads = torch.autograd.grad(reference.float().square().sum(), leaves)
    torch.testing.assert_close(fast, reference, atol=2e-2, rtol=2e-2)
    for got, expected in zip(fast_grads, reference_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=5e-2, rtol=5e-2)


def test_multi_head_attention_need_weights_path_matches_fast_path():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=8, n_heads=2).eval()
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    mask = padding_mask(torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]), 0)
    fast, none = mha(x, memory, mask)
    slow, weights = mha(x, memory, mask, need_weights=True)
    assert none is None and weights.shape == (2, 2, 3, 4)
    torch.testing.assert_close(fast, slow)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 3))
    assert (weights[0, :, :, 2:] == 0).all()  # pad keys get no weight


def test_pad_value_content_does_not_leak():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=8, n_heads=2).eval()
    x = torch.randn(1, 4, 8)
    mask = padding_mask(torch.tensor([[1, 1, 1, 0]]), 0)
    out1, _ = mha(x, mask=mask)
    x2 = x.clone()
    x2[0, 3] = 100 * torch.randn(8)  # change the pad position's content
    out2, _ = mha(x2, mask=mask)
    torch.testing.assert_close(out1[0, :3], out2[0, :3])
