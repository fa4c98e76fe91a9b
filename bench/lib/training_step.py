"""The training step the training benchmarks time, and its ``torch.nn.Transformer`` twin.

One step = forward, label-smoothed loss, backward, gradient clipping and an AdamW update (fused on a
CPU, as the Lightning module does). Ours uses the module's loss (which also yields the NLL and
accuracy it logs, at real target tokens only), the twin ``F.cross_entropy(label_smoothing=0.1)`` in
float32. The twin has identical sizes (d_model, heads, layers, d_ff, shared vocabulary, tied
embeddings, dropout) and gets the same real-corpus batches and masks (source padding, target padding
+ causal). Model FLOPs per step = 6 · (encoder non-embedding params · source tokens + decoder
non-embedding params · target tokens + d_model · vocab · target tokens for the output projection)
plus attention, 12 · d_model · (queries · keys) per layer and attention kind (forward 4, backward 8).
With ``--capture`` the batches are padded to static shapes (``data.static_shapes``) and our step is
also timed captured, as ``compile=true`` runs it then (:mod:`seq2seq.training.captured_step`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.lib.measure import bench_parser, model_config, sample_corpus_pairs, targets
from seq2seq.config import ModelConfig
from seq2seq.data.batching import Batch, collate, pack, pad_ids, pair_lengths
from seq2seq.data.static_shapes import StaticShapes
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID, TranslationTokenizer
from seq2seq.machine.hardware import AUTO, describe, precision_dtype, resolve_precision
from seq2seq.model import Transformer
from seq2seq.model.transformer import sinusoidal_table
from seq2seq.training.captured_step import CapturedStep
from seq2seq.training.loss import sequence_loss
from seq2seq.training.optimizers import adamw, fused_adamw_applies

VOCAB = 8000
SIZES = ("small_postnorm", "base")  # configs/model/<size>.yaml: post-norm ReLU, as nn.Transformer
PRECISIONS = {torch.float32: "32-true", torch.bfloat16: "bf16-mixed", torch.float16: "16-mixed"}
Data = tuple[TranslationTokenizer, list[str], list[str]]  # a tokenizer and the pairs it was trained on


class TorchTransformer(nn.Module):
    """The peer: ``nn.Transformer`` with scaled, tied embeddings, sinusoidal positions and a generator."""

    def __init__(self, cfg: ModelConfig, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, cfg.d_model, padding_idx=PAD_ID)
        self.register_buffer("positions", sinusoidal_table(cfg.max_positions, cfg.d_model), persistent=False)
        self.scale = math.sqrt(cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.transformer = nn.Transformer(
            d_model=cfg.d_model,
            nhead=cfg.n_heads,
            num_encoder_layers=cfg.n_encoder_layers,
            num_decoder_layers=cfg.n_decoder_layers,
            dim_feedforward=cfg.d_ff,
            dropout=cfg.dropout,
            batch_first=True,
        )
        self.generator = nn.Linear(cfg.d_model, vocab, bias=False)
        self.generator.weight = self.embed.weight

    def _embed(self, ids: Tensor) -> Tensor:
        return self.dropout(self.embed(ids) * self.scale + self.positions[: ids.size(1)])

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        src_pad, tgt_pad = src == PAD_ID, tgt == PAD_ID
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), tgt.device, torch.bool)
        out = self.transformer(
            self._embed(src),
            self._embed(tgt),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return self.generator(out)


def ours_loss(model: Transformer, batch: Batch) -> Tensor:
    """What the Lightning module computes: the output projection and the smoothed loss (and the NLL
    and accuracy it logs) at real target tokens only."""
    memory, src_mask = model.encode(batch.src)
    states = model.decode_states(batch.tgt_in, memory, src_mask)
    sums = sequence_loss(states, model.generator.weight, batch.tgt_out, 0.1, PAD_ID, batch.tgt_real)
    return sums.loss / sums.tokens


def captured_loss(step: CapturedStep) -> Callable[[Any, Batch], Tensor]:
    """What the Lightning module computes with ``compile=true`` and static shapes, through ``step``."""

    def loss(_model: Any, batch: Batch) -> Tensor:
        sums = step(batch)
        return sums.loss / sums.tokens

    return loss


def torch_loss(model: nn.Module, batch: Batch) -> Tensor:
    """PyTorch's own label-smoothed cross-entropy, as a plain ``nn.Transformer`` script would use."""
    logits = model(batch.src, batch.tgt_in)
    return F.cross_entropy(
        logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=PAD_ID, label_smoothing=0.1
    )


def train_step_fn(
    model: nn.Module, loss_fn: Callable[[Any, Batch], Tensor], dtype: torch.dtype
) -> Callable[[Batch], None]:
    """One optimisation step on a batch (on the model's device), the way the Lightning module does it:
    forward and loss under autocast, gradient clipping by norm, AdamW fused where the module fuses it."""
    device = next(model.parameters()).device.type
    fused = fused_adamw_applies(PRECISIONS[dtype])
    optimizer = adamw(model.parameters(), fused=fused, lr=1e-4, betas=(0.9, 0.98))

    def step(batch: Batch) -> None:
        with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
            loss = loss_fn(model, batch)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def real_batches(data: Data, budget: int, count: int) -> list[Batch]:
    """``count`` batches spread over all lengths, packed as the token-budget sampler does: pairs
    sorted by length, each batch filled until its padded size reaches ``budget`` tokens per side."""
    tokenizer, sources, targets = data
    pairs = sorted(
        zip(tokenizer.encode_source(sources), tokenizer.encode_target(targets), strict=True),
        key=lambda pair: max(map(len, pair)),
    )
    batches, current, longest = [], [], 0
    for src_ids, tgt_ids in pairs:
        longest = max(longest, len(src_ids) + 1, len(tgt_ids) + 1)
        current.append({"src_ids": src_ids, "tgt_ids": tgt_ids})
        if longest * len(current) >= budget:
            batches.append(collate(current))
            current, longest = [], 0
    return batches[:: max(1, len(batches) // count)][:count]


def static_batches(data: Data, budget: int, count: int) -> list[Batch]:
    """``count`` batches spread over all lengths as ``data.static_shapes`` makes them: packed by the
    sampler's packing on their pairs' rungs, each padded to its rung's shape."""
    tokenizer, sources, targets = data
    src, tgt = tokenizer.encode_source(sources), tokenizer.encode_target(targets)
    lengths = pair_lengths(np.array([len(ids) for ids in src]), np.array([len(ids) for ids in tgt]))
    shapes = StaticShapes.of(int(lengths.max()) - 1, budget)  # every pair fits the top rung
    rungs = shapes.rounded(lengths)
    batches = pack(np.argsort(rungs, kind="stable"), rungs, budget)
    chosen = batches[:: max(1, len(batches) // count)][:count]
    return [shapes.pad(collate([{"src_ids": src[i], "tgt_ids": tgt[i]} for i in batch])) for batch in chosen]


def fixed_length_batch(data: Data, length: int, budget: int) -> Batch:
    """Real text cut into rows of exactly ``length`` tokens (no padding), ``budget`` tokens per side."""
    tokenizer, sources, targets = data

    def rows(ids: list[list[int]], width: int) -> list[list[int]]:
        flat = [token for sentence in ids for token in sentence]
        return [flat[i * width : (i + 1) * width] for i in range(budget // length)]

    src = rows(tokenizer.encode_source(sources), length - 1)
    tgt = rows(tokenizer.encode_target(targets), length - 1)
    return Batch.of(
        pad_ids([[*row, EOS_ID] for row in src]),
        pad_ids([[BOS_ID, *row] for row in tgt]),
        pad_ids([[*row, EOS_ID] for row in tgt]),
    )


def real_tokens(batches: list[Batch]) -> int:
    """Source and target tokens of ``batches``, pad and filler rows excluded: what tokens/s counts."""
    return sum(batch.real_tokens() for batch in batches)


def model_flops(cfg: ModelConfig, model: Transformer, batch: Batch) -> float:
    """Training FLOPs of one step counted from the model's shape and the batch's real tokens."""
    embedding = model.src_embed.tokens.weight.numel()
    encoder = sum(p.numel() for p in model.encoder_layers.parameters())
    decoder = sum(p.numel() for p in model.decoder_layers.parameters())
    src_len = (batch.src != PAD_ID).sum(dim=1).double()
    tgt_len = (batch.tgt_out != PAD_ID).sum(dim=1).double()
    n_src, n_tgt = float(src_len.sum()), float(tgt_len.sum())
    dense = 6 * (encoder * n_src + decoder * n_tgt + embedding * n_tgt)
    pairs = cfg.n_encoder_layers * (src_len**2).sum() + cfg.n_decoder_layers * (
        (tgt_len**2).sum() + (tgt_len * src_len).sum()
    )
    return dense + 12 * cfg.d_model * float(pairs)


@dataclass
class Twins:
    """Ours and the twin of one size, built on the same seed, and the batches both are timed on."""

    name: str
    cfg: ModelConfig
    ours: Transformer
    peer: nn.Module
    batches: list[Batch]  # on the device
    tokens: int  # real tokens of the batches
    flops: float  # our model FLOPs on the batches
    steps: dict[str, Callable[[Batch], None]]  # "ours", "nn.Transformer" (and "ours captured"), warmed up

    def runs(self) -> dict[str, Callable[[], object]]:
        """Each model's steps over all the batches, as one timed run."""
        return {label: (lambda s=step: [s(b) for b in self.batches]) for label, step in self.steps.items()}


def twins(name: str, args: argparse.Namespace, data: Data, dtype: torch.dtype) -> Twins:
    """Ours and the twin of ``configs/model/<name>.yaml`` on ``args.device`` (compiled with
    ``--compile``), their steps warmed up on two batches: the allocator, autotuning, compilation.
    With ``--capture``, ours captured too, warmed up twice on every batch: each shape compiled, and
    recorded as a CUDA graph on a GPU."""
    cfg = model_config(name)
    torch.manual_seed(0)
    ours, peer = Transformer(cfg, VOCAB, VOCAB), TorchTransformer(cfg, VOCAB)
    batches = (static_batches if args.capture else real_batches)(data, args.max_tokens, args.batches)
    tokens = real_tokens(batches)
    flops = sum(model_flops(cfg, ours, b) for b in batches)
    ours, peer = ours.to(args.device), peer.to(args.device)
    batches = [batch.to(args.device) for batch in batches]
    if args.compile:  # ours in place: training runs its layers through encode/decode_states
        ours.compile(dynamic=True)
        peer = torch.compile(peer, dynamic=True)
    steps = {
        "ours": train_step_fn(ours, ours_loss, dtype),
        "nn.Transformer": train_step_fn(peer, torch_loss, dtype),
    }
    if args.capture:
        captured = CapturedStep(ours, 0.1, args.capture_backend)
        steps["ours captured"] = train_step_fn(ours, captured_loss(captured), dtype)
    for label, step in steps.items():
        started = time.perf_counter()
        for batch in 2 * batches if args.capture else batches[:2]:
            step(batch)
        print(f"({name}) {label}: warmed up in {time.perf_counter() - started:.1f} s")
    return Twins(name, cfg, ours, peer, batches, tokens, flops, steps)


def add_step_arguments(
    parser: argparse.ArgumentParser, dtypes: tuple[str, ...] = ("fp32", "bf16", "auto")
) -> None:
    """The options every training-step benchmark takes: sizes, device, precision, batches."""
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=list(SIZES))
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the models train")
    if dtypes:
        parser.add_argument(
            "--dtype",
            choices=dtypes,
            help="default fp32 on a CPU, bf16 on CUDA; bf16 = autocast; "
            "auto = as trainer.precision=auto chooses",
        )
    compiled = parser.add_mutually_exclusive_group()
    compiled.add_argument("--compile", action="store_true", help="torch.compile the models")
    compiled.add_argument(
        "--capture", action="store_true", help="static batch shapes, and our step also timed captured"
    )
    parser.add_argument(
        "--capture-backend", default="inductor", choices=["inductor", "cudagraphs"], help="torch.compile's"
    )
    parser.add_argument("--max-tokens", type=int, default=2500, help="tokens per side per batch")
    parser.add_argument("--batches", type=int, default=4, help="real batches per repetition")
    parser.add_argument("--reps", type=int, default=3)


def start(args: argparse.Namespace) -> torch.dtype:
    """What every training-step benchmark does first: refuse a missing GPU in one line, print the
    hardware, settle ``--device`` and ``--dtype``; returns the autocast dtype."""
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"error: --device cuda, but torch {torch.__version__} sees no CUDA GPU on this machine")
    args.dtype = getattr(args, "dtype", None) or ("bf16" if args.device == "cuda" else "fp32")
    args.device = torch.device(args.device)
    torch.manual_seed(0)
    print(describe())
    if args.device.type == "cuda":
        print(f"device: cuda, {torch.cuda.get_device_name(args.device)}")
        torch.set_float32_matmul_precision("high")  # TF32 for fp32 matmuls, as train.py sets on a GPU
    return compute_dtype(args)


def corpus_data(args: argparse.Namespace) -> Data:
    """20,000 real pairs and a shared tokenizer trained on them."""
    sources, targets = sample_corpus_pairs(20000)
    tokenizer = TranslationTokenizer.train(sources, targets, VOCAB, shared=True)
    print(f"threads {torch.get_num_threads()}, dtype {args.dtype}, compile {getattr(args, 'compile', False)}")
    return tokenizer, sources, targets


def step_bench(
    doc: str | None, defaults: dict[str, float]
) -> tuple[argparse.Namespace, torch.dtype, Data, dict[str, float]]:
    """A step benchmark's command line read, and what each needs: its dtype (threads set), the
    corpus, and the targets of its ratios."""
    parser = bench_parser(doc, defaults)
    add_step_arguments(parser)
    args = parser.parse_args()
    return args, start(args), corpus_data(args), targets(args)


def compute_dtype(args: argparse.Namespace) -> torch.dtype:
    """The autocast dtype ``--dtype`` asks for; ``auto`` is resolved as training resolves it."""
    if args.dtype != "auto":
        return torch.bfloat16 if args.dtype == "bf16" else torch.float32
    precision, reason = resolve_precision(AUTO, model_config(args.sizes[0]), args.device.type)
    print(f"auto: {precision} ({reason})")
    return precision_dtype(precision)


def variant(name: str, args: argparse.Namespace) -> str:
    """The end of a size's RATIO names: the size, then the dtype, compilation, static shapes and GPU
    if not the default."""
    suffix = name + ("" if args.dtype == "fp32" else f"_{args.dtype}") + ("_compiled" if args.compile else "")
    suffix += "_static_shapes" if args.capture else ""
    return suffix + ("_cuda" if args.device.type == "cuda" else "")
