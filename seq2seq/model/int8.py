"""int8 weights for decoding on a CPU: the decoder's and the output projection's linear layers.

Each weight is quantised once, per output channel (symmetric, scale = max |w| / 127), and each
input row is quantised at every call (dynamic quantisation); the product runs in FBGEMM's int8
kernels that ship in PyTorch's CPU wheels (``torch.ops.quantized.linear_dynamic``). The rows of
one call share their activations' scale, so a sentence's numbers depend (within int8 rounding) on
the rows decoded beside it. Activations use 7 bits (``reduce_range``): on a CPU without VNNI,
FBGEMM's 8-bit products saturate their 16-bit sums. Why these kernels and not ``torchao``:
docs/translating.md.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from seq2seq.model.transformer import Transformer

INT8 = torch.qint8  # the `dtype` that names int8 weights with float32 activations (--dtype int8)
# the one warning quantised tensors raise on creation: they are what FBGEMM's int8 kernels take
QUANTIZED_TENSOR_WARNING = r"torch\.quantize_per_tensor, torch\.quantize_per_channel"


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights and float32 inputs and outputs, for inference only.

    It keeps the float weight it was made from, so :meth:`rows` can quantise a subset of its
    output channels (a vocabulary shortlist) exactly as they are quantised here.
    """

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().float().contiguous(), persistent=False)
        self.register_buffer("bias", None if bias is None else bias.detach().float(), persistent=False)
        self.in_features, self.out_features = weight.size(1), weight.size(0)
        self.packed = _pack(self.weight, self.bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        return cls(linear.weight, linear.bias)

    def rows(self, index: Tensor) -> Int8Linear:
        """The layer restricted to the output channels at ``index`` (C,)."""
        return Int8Linear(self.weight[index], None if self.bias is None else self.bias[index])

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., in_features) float32 -> (..., out_features) float32."""
        return torch.ops.quantized.linear_dynamic(x, self.packed, True)  # True: 7-bit activations

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"


def _pack(weight: Tensor, bias: Tensor | None) -> torch.ScriptObject:
    """FBGEMM's packed form of ``weight`` (out, in) quantised per output channel."""
    scales = (weight.abs().amax(dim=1) / 127).clamp_min(1e-8).double()  # (out,)
    zero_points = torch.zeros(weight.size(0), dtype=torch.long)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=QUANTIZED_TENSOR_WARNING, category=UserWarning)
        quantized = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(quantized, bias)


def quantize_decoder(model: Transformer) -> Transformer:
    """``model`` (float32, on the CPU) with the linear layers of every decoder step and the output
    projection in int8, in place; returns it.

    The encoder, the embeddings and the cross-attention key/value projections, which run once per
    source, stay float32: the activations of a call share one int8 scale, so quantising those would
    let a source's padding move its keys and values.
    """
    for layer in model.decoder_layers:
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear) and child is not layer.cross_attn.kv_proj:
                    setattr(parent, name, Int8Linear.from_linear(child))
    model.generator = Int8Linear.from_linear(model.generator)
    return model
