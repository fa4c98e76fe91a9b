"""The fast loss against the plain one (PyTorch's own ops and autograd), and the CPU dropout's statistics."""

import pytest
import torch

from seq2seq.data.tokenizer import PAD_ID
from seq2seq.model.dropout import Dropout
from seq2seq.training.loss import label_smoothed_loss, plain_label_smoothed_loss, sequence_loss
from seq2seq.training.module import adamw


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("pad_id", [PAD_ID, 7])
def test_fast_loss_and_gradient_equal_the_plain_loss(dtype: torch.dtype, smoothing: float, pad_id: int):
    torch.manual_seed(0)
    logits = (3 * torch.randn(3, 70, 600)).to(dtype).requires_grad_()  # 210 rows: several chunks
    target = torch.randint(0, 600, (3, 70))
    target[:, 50:] = pad_id
    ours = label_smoothed_loss(logits, target, smoothing, pad_id)
    reference = plain_label_smoothed_loss(logits, target, smoothing, pad_id)
    for got, expected in zip(ours, reference, strict=True):
        torch.testing.assert_close(got.float(), expected.float())
    (grad,) = torch.autograd.grad(ours[0] * 1.5, logits)
    (expected_grad,) = torch.autograd.grad(reference[0] * 1.5, logits)
    assert grad.dtype == dtype
    tolerance = {"atol": 1e-5, "rtol": 1e-3} if dtype == torch.float32 else {"atol": 1e-4, "rtol": 1e-2}
    torch.testing.assert_close(grad.float(), expected_grad.float(), **tolerance)
    assert grad[:, 50:].abs().max() == 0  # pad rows get no gradient


def test_loss_leaves_float32_logits_untouched() -> None:
    logits = torch.randn(2, 3, 10, requires_grad=True)
    before = logits.detach().clone()
    label_smoothed_loss(logits, torch.tensor([[1, 2, 3], [4, 5, PAD_ID]]), 0.1, PAD_ID).loss.backward()
    assert torch.equal(logits.detach(), before)


def test_accuracy_counts_the_real_tokens_ranked_first() -> None:
    logits = torch.zeros(1, 4, 5)
    logits[0, torch.arange(4), torch.tensor([1, 2, 3, 4])] = 1.0  # the model ranks 1, 2, 3, 4 first
    sums = label_smoothed_loss(logits, torch.tensor([[1, 2, 4, PAD_ID]]), 0.1, PAD_ID)  # hit, hit, miss
    assert (int(sums.correct), int(sums.tokens)) == (2, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_projecting_only_real_tokens_equals_the_loss_of_all_logits(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    states = torch.randn(3, 40, 16, requires_grad=True)
    generator = torch.nn.Linear(16, 300, bias=False)
    target = torch.randint(1, 300, (3, 40))
    target[1:, 25:] = PAD_ID
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        ours = sequence_loss(states, generator, target, 0.1, PAD_ID)
        reference = label_smoothed_loss(generator(states), target, 0.1, PAD_ID)
    for got, expected in zip(ours, reference, strict=True):
        torch.testing.assert_close(got, expected)
    grads = torch.autograd.grad(ours.loss, [states, generator.weight])
    expected_grads = torch.autograd.grad(reference.loss, [states, generator.weight])
    for got, expected in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_dropout_rate_scale_and_gradient(p: float) -> None:
    torch.manual_seed(0)
    x = torch.ones(400, 1000, requires_grad=True)
    y = Dropout(p).train()(x)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - p) < 0.005  # 400k draws: ~0.0007 standard error
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)), atol=1e-4, rtol=1e-4)
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach())  # the same mask scales the gradient


def test_dropout_lanes_are_independent_and_seeded() -> None:
    torch.manual_seed(1)
    kept = Dropout(0.5).train()(torch.ones(200_000)) != 0
    lanes = kept.view(-1, 4).float()  # the four 16-bit lanes of each 64-bit draw
    assert (lanes.mean(0) - 0.5).abs().max() < 0.01
    pairs = (lanes[:, 0] * lanes[:, 3]).mean()  # P(both kept) = 0.25 when independent
    assert abs(pairs - 0.25) < 0.01
    torch.manual_seed(1)
    assert torch.equal(Dropout(0.5).train()(torch.ones(200_000)) != 0, kept)


def test_dropout_is_identity_in_eval_mode_and_at_zero() -> None:
    x = torch.randn(5, 7)
    assert Dropout(0.5).eval()(x) is x
    assert Dropout(0.0).train()(x) is x


def test_cpu_adamw_is_fused_and_updates_like_the_foreach_one() -> None:
    torch.manual_seed(0)
    weights = [torch.randn(40, 30, requires_grad=True), torch.randn(30, requires_grad=True)]
    twins = [w.detach().clone().requires_grad_() for w in weights]
    start = [w.detach().clone() for w in weights]
    hyper = {"lr": 1e-2, "betas": (0.9, 0.98), "eps": 1e-9, "weight_decay": 0.01}
    fused = adamw(weights, fused=True, **hyper)
    assert fused.defaults["fused"]
    reference = torch.optim.AdamW(twins, foreach=True, **hyper)
    for _ in range(5):
        grads = [torch.randn_like(w) for w in weights]
        for params, optimizer in ((weights, fused), (twins, reference)):
            for param, grad in zip(params, grads, strict=True):
                param.grad = grad.clone()
            optimizer.step()
    for got, expected, initial in zip(weights, twins, start, strict=True):
        assert not torch.allclose(got, initial)  # the steps did move the weights
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
