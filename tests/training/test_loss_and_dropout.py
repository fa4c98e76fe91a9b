"""The fast losses against the plain one (PyTorch's own ops and autograd) and against each other, and
the CPU dropout's statistics."""

import pytest
import torch

from seq2seq.data.tokenizers.tokenizer import PAD_ID
from seq2seq.model.dropout import Dropout
from seq2seq.training import loss as loss_module
from seq2seq.training.loss import fixed_sequence_loss, plain_sequence_loss, sequence_loss
from seq2seq.training.optimizers import adamw


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("pad_id", [PAD_ID, 7])
@pytest.mark.parametrize("chunk_elements", [None, 600 * 64])  # the real rows in one chunk, or in 4
def test_fast_loss_and_gradients_equal_the_plain_loss(
    autocast: bool, smoothing: float, pad_id: int, chunk_elements: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chunk_elements:
        monkeypatch.setattr(loss_module, "CPU_CHUNK_ELEMENTS", chunk_elements)
    torch.manual_seed(0)
    states = torch.randn(4, 70, 32, requires_grad=True)
    weight = (0.3 * torch.randn(600, 32)).requires_grad_()
    target = torch.randint(1, 600, (4, 70))
    target[target == pad_id] = pad_id + 1
    target[:, 50:] = pad_id
    target[0, :3] = pad_id  # pads inside a row are skipped too
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        ours = sequence_loss(states, weight, target, smoothing, pad_id)
        reference = plain_sequence_loss(states, weight, target, smoothing, pad_id)
    loose = {"atol": 1e-2, "rtol": 1e-2} if autocast else {}  # chunked bf16 matmuls round differently
    for name, got, expected in zip(ours._fields, ours, reference, strict=True):
        torch.testing.assert_close(got, expected, msg=name, **loose)
    grads = torch.autograd.grad(ours.loss * 1.5, [states, weight])
    expected_grads = torch.autograd.grad(reference.loss * 1.5, [states, weight])
    for got, expected in zip(grads, expected_grads, strict=True):
        assert got.dtype == torch.float32
        # bf16 keeps 8 bits: the two paths round the matmuls' outputs at different points
        scale = expected.abs().max().item()
        tolerance = {"atol": 1e-2 * scale, "rtol": 2e-2} if autocast else {"atol": 1e-5, "rtol": 1e-4}
        torch.testing.assert_close(got, expected, **tolerance)
    assert grads[0][:, 50:].abs().max() == 0 and grads[0][0, :3].abs().max() == 0  # pads get no gradient


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk_elements", [None, 50 * 64])  # all rows in one chunk, or in 6
def test_the_loss_over_fixed_positions_equals_the_gathered_one_whatever_the_pads_hold(
    smoothing: float, chunk_elements: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chunk_elements:
        monkeypatch.setattr(loss_module, "CPU_CHUNK_ELEMENTS", chunk_elements)
    torch.manual_seed(0)
    target = torch.randint(1, 64, (4, 70))
    target[target == PAD_ID] = PAD_ID + 1
    target[:, 50:], target[0, :3], target[3] = PAD_ID, PAD_ID, PAD_ID  # a filler row: no target at all
    pads = (target == PAD_ID)[..., None]  # (4, 70, 1)
    states = torch.randn(4, 70, 32)
    weight = (0.3 * torch.randn(64, 32)).requires_grad_()
    gathered = sequence_loss(states.requires_grad_(), weight, target, smoothing, PAD_ID)
    expected_grads = torch.autograd.grad(gathered.loss * 1.5, [states, weight])
    for pad_states in (states.detach(), 100 * torch.randn_like(states)):  # what the pads hold is noise
        other = torch.where(pads, pad_states, states.detach()).requires_grad_()
        fixed = fixed_sequence_loss(other, weight, target, smoothing, PAD_ID)
        for name, got, expected in zip(gathered._fields, fixed, gathered[:3], strict=False):
            torch.testing.assert_close(got, expected, msg=name)
        grads = torch.autograd.grad(fixed[0] * 1.5, [other, weight])
        for got, expected in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_without_gradients_the_loss_computes_none() -> None:
    states, weight = torch.randn(2, 3, 8), torch.randn(20, 8, requires_grad=True)
    target = torch.tensor([[1, 2, 3], [4, 5, PAD_ID]])
    with torch.no_grad():
        sums = sequence_loss(states, weight, target, 0.1, PAD_ID)
    assert not sums.loss.requires_grad
    torch.testing.assert_close(sums.loss, plain_sequence_loss(states, weight, target, 0.1, PAD_ID).loss)


def test_accuracy_counts_the_real_tokens_ranked_first() -> None:
    states = torch.eye(4)[None]  # (1, 4, 4): position i gets its largest logit ...
    weight = torch.zeros(5, 4)
    weight[torch.tensor([1, 2, 3, 4]), torch.arange(4)] = 1.0  # ... at token i + 1
    sums = sequence_loss(states, weight, torch.tensor([[1, 2, 4, PAD_ID]]), 0.1, PAD_ID)  # hit, hit, miss
    assert (int(sums.correct), int(sums.tokens)) == (2, 3)


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
