"""``decode.capture``: the decoder step compiled at fixed shapes (:mod:`seq2seq.capture`: CUDA graphs
on a GPU, where a step's time is its kernel launches whatever the batch).

Each batch shape (sentences, source length and positions, each rounded up to a power of two) has
buffers of its own, kept for the next batch of that shape, and one compiled step that writes
position t of every row in place; t is a tensor, so one graph serves every step. Finished
sentences cannot leave a fixed-shape batch: their rows keep computing, unread. A translator owns
its models' :class:`CapturedDecoder` (:data:`Decoders`), so compiled steps and buffers live as long
as it does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.capture import Captured
from seq2seq.config import ConfigError
from seq2seq.decoding.steps import Steps
from seq2seq.model import Transformer
from seq2seq.model.int8 import Int8Linear
from seq2seq.model.layers import LayerCache

SHORTEST = 16  # the fewest source and target positions a shape has


def bucket(n: int, smallest: int = 1) -> int:
    """``n`` rounded up to a power of two, at least ``smallest``: few shapes, so few compiles."""
    return max(smallest, 1 << (n - 1).bit_length())


@dataclass
class FixedCache:
    """One batch shape's buffers, at fixed addresses for every batch of that shape. R = n·beams rows."""

    tokens: Tensor  # (R,) the newest token of each row
    position: Tensor  # () the position the next step writes
    src_mask: Tensor  # (n, 1, 1, S)
    layers: list[LayerCache]  # self-attention (R, H, capacity, D/H), cross-attention (n, H, S, D/H)


def _fixed_step(
    model: Transformer,
    tokens: Tensor,
    position: Tensor,
    src_mask: Tensor,
    layers: list[LayerCache],
    beams: int,
) -> Tensor:
    """What is compiled: every row's next-token logits, (R, V)."""
    return model.generator(model.step_at(tokens, position, layers, src_mask, beams))


class CapturedDecoder:
    """A model's compiled step and its buffers, one set per batch shape, so one search at a time (as
    the server's one worker thread runs them)."""

    def __init__(self, model: Transformer, device: torch.device) -> None:
        self.model = model
        self.step = Captured(_fixed_step, device)
        self.caches: dict[tuple[int, ...], FixedCache] = {}

    def cache(self, sentences: int, beams: int, source: int, capacity: int) -> tuple[FixedCache, bool]:
        """The buffers of this shape, made the first time, and whether they are new (the step then
        compiles for them)."""
        key = (sentences, beams, source, capacity)
        new = key not in self.caches
        if new:
            self.caches[key] = _new_cache(self.model, sentences, beams, source, capacity)
        return self.caches[key], new


Decoders = dict[Transformer, CapturedDecoder]  # a translator's, one per model it decodes with


def _new_cache(model: Transformer, sentences: int, beams: int, source: int, capacity: int) -> FixedCache:
    """Zeroed buffers: a slot read before this batch writes it is masked, and finite, so adds 0."""
    weight = model.generator.weight
    heads = model.cfg.n_heads
    head_dim = model.cfg.d_model // heads

    def zeros(*shape: int, dtype: torch.dtype = weight.dtype) -> Tensor:
        buffer = torch.zeros(shape, dtype=dtype, device=weight.device)
        torch._dynamo.mark_static_address(buffer)  # CUDA graphs read and write it in place
        return buffer

    rows = sentences * beams
    layers = [
        LayerCache(
            zeros(rows, heads, capacity, head_dim),
            zeros(rows, heads, capacity, head_dim),
            zeros(sentences, heads, source, head_dim),
            zeros(sentences, heads, source, head_dim),
        )
        for _ in model.decoder_layers
    ]
    mask = zeros(sentences, 1, 1, source, dtype=torch.bool)
    return FixedCache(zeros(rows, dtype=torch.long), zeros(dtype=torch.long), mask, layers)


def capture_refusal(model: Transformer, shortlist: bool) -> str | None:
    """Why the captured step would not decode as the eager search does, or None. In bf16 and fp16
    the compiled step rounds where the eager one does not, and some translations change."""
    if shortlist:
        return "decode.capture does not work with a shortlist"
    if any(isinstance(module, Int8Linear) for module in model.modules()):
        return "decode.capture does not work with int8 weights"
    if (dtype := model.generator.weight.dtype) != torch.float32:
        name = str(dtype).removeprefix("torch.")
        return (
            f"decode.capture decodes in float32 only, not {name}, whose translations it changes: "
            "use --dtype float32"
        )
    return None


class CapturedSteps(Steps):
    """:class:`~seq2seq.decoding.steps.CachedSteps`' interface over a :class:`CapturedDecoder`, the one
    ``decoders`` holds for the model (made there at its first search).

    Sentence i of the batch owns rows i·beams .. i·beams + beams - 1 throughout; ``slots`` maps the
    search's active rows onto them, and a beam reorder copies the rows' written positions in place.
    """

    def __init__(
        self,
        model: Transformer,
        memory: Tensor,
        src_mask: Tensor,
        limits: Tensor,
        beams: int,
        decoders: Decoders,
        candidates: Tensor | None = None,
    ) -> None:
        if reason := capture_refusal(model, candidates is not None):
            raise ConfigError(reason)
        self.model, self.beams, self.special = model, beams, model.special_ids
        n, source = src_mask.size(0), src_mask.size(-1)
        capacity = min(bucket(int(limits.max()), SHORTEST), model.cfg.max_positions)
        if model not in decoders:
            decoders[model] = CapturedDecoder(model, memory.device)
        decoder = decoders[model]
        self.step = decoder.step
        self.cache, self.new_shape = decoder.cache(bucket(n), beams, bucket(source, SHORTEST), capacity)
        self._fill(memory, src_mask)
        self.sentences = torch.arange(n, device=memory.device)  # the batch index of each active sentence
        self.slots = self.sentences * beams  # each active row's fixed row: one per sentence at first
        self.length = 0  # positions written

    def _fill(self, memory: Tensor, src_mask: Tensor) -> None:
        """This batch's source into the shape's buffers; a padding sentence sees one key, so stays finite."""
        n, source = src_mask.size(0), src_mask.size(-1)
        self.cache.src_mask.fill_(False)
        self.cache.src_mask[:n, ..., :source] = src_mask
        self.cache.src_mask[n:, ..., 0] = True
        for layer, fixed in zip(self.model.decoder_layers, self.cache.layers, strict=True):
            k, v = layer.cross_attn.project_kv(memory)  # (n, H, S, D/H) each
            fixed.cross_k[:n, :, :source] = k
            fixed.cross_v[:n, :, :source] = v
        self.cache.tokens.fill_(self.special.bos)

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens: (N,) newest token per active row -> logits (N, V)."""
        self.cache.tokens.index_copy_(0, self.slots, tokens)
        self.cache.position.fill_(self.length)
        logits = self.step(
            self.new_shape,
            self.model,
            self.cache.tokens,
            self.cache.position,
            self.cache.src_mask,
            self.cache.layers,
            self.beams,
        )
        self.length += 1
        self.new_shape = False
        return logits.index_select(0, self.slots)  # a copy: the graph's output is overwritten next step

    def vocabulary_ids(self, tokens: list[int]) -> list[int]:
        return tokens

    def select(self, index: Tensor) -> None:
        """Greedy: keep the active rows at ``index``; each stays in its fixed row."""
        self.slots = self.slots[index]

    def reorder(self, rows: Tensor, sentences: Tensor | None = None, beams: int | None = None) -> None:
        """Beam rows follow their parents ``rows`` (n'·beams,) into their sentence's fixed rows; the
        sentences at ``sentences`` (n',) stay when given. ``beams`` is the fixed layout's already."""
        if sentences is not None:
            self.sentences = self.sentences[sentences]
        parents = self.slots[rows]
        offsets = torch.arange(self.beams, device=rows.device)
        self.slots = (self.sentences[:, None] * self.beams + offsets).view(-1)  # (n'·beams,)
        for layer in self.cache.layers:
            for buffer in (layer.self_k, layer.self_v):
                written = buffer[:, :, : self.length]  # (R, H, t, D/H)
                written.index_copy_(0, self.slots, written.index_select(0, parents))
