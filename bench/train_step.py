"""Training-step benchmark: our Transformer vs a ``torch.nn.Transformer`` twin, and model FLOPs utilisation.

One step = forward, label-smoothed loss, backward, gradient clipping and an AdamW update (fused
on a CPU, as the Lightning module does), for both models; ours uses the module's loss (which also
yields the NLL and accuracy it logs, at real target tokens only), the twin
``F.cross_entropy(label_smoothing=0.1)`` in float32. The twin
has identical sizes (d_model, heads, layers, d_ff, shared vocabulary, tied embeddings, dropout)
and gets the same real-corpus batches and the same masks (source padding, target padding +
causal). Repetitions are interleaved and medians reported. Like ``train.py``, it runs with
OpenMP's passive wait policy (:mod:`seq2seq.threads`); it starts with the hardware line.

(a) tokens/s (source + target, pad excluded) on token-budget batches of real sentence pairs;
(b) the same as GFLOP/s against a square matmul timed with them, interleaved (the ceiling);
(c) per-token cost at source/target length 64 vs 16: real text cut to exact lengths, same tokens;
(d) with ``--contention``: both models idle and with one busy process (a plain Python loop) that
    the benchmark starts itself, repetitions alternating between the two states;
(e) with ``--dtype auto``: the precision ``trainer.precision=auto`` picks on this machine, and
    ours timed in fp32 and in bf16 so the pick can be compared with the faster of the two.

``--device cuda`` does all of this on the GPU (models and batches on it, bf16 autocast unless
``--dtype`` says otherwise, AdamW in foreach mode as the module runs it there); every timed region
ends with ``torch.cuda.synchronize()``, so wall-clock time covers the kernels it queued, and the
ceiling is an 8192x8192 matmul in the same dtype, timed in the same run. The header names the GPU.

Model FLOPs per step = 6 · (encoder non-embedding params · source tokens + decoder non-embedding
params · target tokens + d_model · vocab · target tokens for the output projection) plus
attention, 12 · d_model · (queries · keys) per layer and attention kind (forward 4, backward 8).

(f) with ``--loop``: the default recipe's real training loop (``train.py``'s Trainer, module, data
    module, EMA, logging and callbacks; ``bench/loop_run.py``) for ``--steps`` steps after
    ``--warmup``, this working tree against the code at ``--baseline`` (by default the training
    path before the step changes of docs/performance.md), extracted with ``git archive``: each run
    in its own process, repetitions alternating which goes first, medians; also per CPU-second of
    the training process, which load from other processes moves much less than wall time. Then our
    bare step of the same model as a share of the matmul ceiling. ``--record FILE`` instead writes
    one run's per-step loss and LR (``--steps 500 --seed S``, the code at ``--ref`` or this tree) as
    JSON, for the loss-curve check.

Ends with ``RATIO <name> <value> target <t>`` lines.

    python bench/train_step.py [--sizes small_postnorm base] [--dtype fp32|bf16|auto] [--contention]
                               [--compile] [--device cpu|cuda]
    python bench/train_step.py --loop [--steps 30] [--warmup 5] [--reps 3] [--baseline REF] [--set K=V ...]
    python bench/train_step.py --loop --record FILE --steps 500 --seed S [--ref REF] [--set K=V ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import seq2seq.threads  # noqa: E402, F401  (OpenMP's wait policy as in training: before torch loads)

# isort: split
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import Tensor, nn  # noqa: E402

from bench.loop_run import code_at, compose_default, loop_in_subprocess  # noqa: E402
from bench.measure import median_times, model_config, sample_corpus_pairs  # noqa: E402
from seq2seq.config import ModelConfig, validated  # noqa: E402
from seq2seq.data.batching import Batch, collate, pad_ids  # noqa: E402
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, TranslationTokenizer  # noqa: E402
from seq2seq.hardware import AUTO, Hardware, describe, detect, precision_dtype, resolve_precision  # noqa: E402
from seq2seq.model import Transformer  # noqa: E402
from seq2seq.model.transformer import sinusoidal_table  # noqa: E402
from seq2seq.training.loss import sequence_loss  # noqa: E402
from seq2seq.training.optimizers import adamw, fused_adamw_applies  # noqa: E402

VOCAB = 8000
SIZES = ("small_postnorm", "base")  # configs/model/<size>.yaml: post-norm ReLU, as nn.Transformer
BASELINE = "a2c4f28"  # --baseline's default: the training path before the step changes (docs/performance.md)
LOOP_TARGETS = (("amx_bf16", 1.5), ("avx512_bf16", 1.3))  # the loop's target by CPU class; AVX2: 1.15


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


def torch_loss(model: nn.Module, batch: Batch) -> Tensor:
    """PyTorch's own label-smoothed cross-entropy, as a plain ``nn.Transformer`` script would use."""
    logits = model(batch.src, batch.tgt_in)
    return F.cross_entropy(
        logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=PAD_ID, label_smoothing=0.1
    )


PRECISIONS = {torch.float32: "32-true", torch.bfloat16: "bf16-mixed", torch.float16: "16-mixed"}


def train_step_fn(
    model: nn.Module, loss_fn: Callable[[Any, Batch], Tensor], dtype: torch.dtype
) -> Callable[[Batch], None]:
    """One optimisation step on a batch (on the model's device), the way the Lightning module does it:
    forward and loss under autocast, gradient clipping by norm, AdamW fused where the module fuses it."""
    device = next(model.parameters()).device.type
    fused = fused_adamw_applies(device, PRECISIONS[dtype])
    optimizer = adamw(model.parameters(), fused=fused, lr=1e-4, betas=(0.9, 0.98))

    def step(batch: Batch) -> None:
        with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
            loss = loss_fn(model, batch)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def real_batches(
    tokenizer: TranslationTokenizer, sources: list[str], targets: list[str], budget: int, count: int
) -> list[Batch]:
    """``count`` batches spread over all lengths, packed as the token-budget sampler does: pairs
    sorted by length, each batch filled until its padded size reaches ``budget`` tokens per side."""
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


def fixed_length_batch(
    tokenizer: TranslationTokenizer, sources: list[str], targets: list[str], length: int, budget: int
) -> Batch:
    """Real text cut into rows of exactly ``length`` tokens (no padding), ``budget`` tokens per side."""

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


def to_device(batch: Batch, device: torch.device) -> Batch:
    """The batch's id tensors on ``device``: timed steps then copy nothing from the host."""
    return batch.to(device)


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


def square_matmul(dtype: torch.dtype, device: torch.device) -> tuple[Callable[[], object], float, int]:
    """A square matmul of this dtype, its FLOPs and size: what the cores can do at best. It is timed
    interleaved with the training steps, so that load from other processes hits both alike; a GPU
    needs 8192 rows to reach its peak, and a millisecond-long kernel for launch costs to vanish."""
    n = 8192 if device.type == "cuda" else 2048
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
    a @ b
    return (lambda: a @ b), 2.0 * n**3, n


def bench_size(
    name: str, args: argparse.Namespace, data: tuple, dtype: torch.dtype
) -> list[tuple[str, float, float]]:
    tokenizer, sources, targets = data
    cfg = model_config(name)
    torch.manual_seed(0)
    ours, peer = Transformer(cfg, VOCAB, VOCAB), TorchTransformer(cfg, VOCAB)
    batches = real_batches(tokenizer, sources, targets, args.max_tokens, args.batches)
    tokens = sum(int((b.src != PAD_ID).sum() + (b.tgt_out != PAD_ID).sum()) for b in batches)
    flops = sum(model_flops(cfg, ours, b) for b in batches)
    ours, peer = ours.to(args.device), peer.to(args.device)
    batches = [to_device(batch, args.device) for batch in batches]
    if args.compile:  # ours in place: training runs its layers through encode/decode_states
        ours.compile(dynamic=True)
        peer = torch.compile(peer, dynamic=True)
    steps = {
        "ours": train_step_fn(ours, ours_loss, dtype),
        "nn.Transformer": train_step_fn(peer, torch_loss, dtype),
    }
    for step in steps.values():  # warm-up: allocator, autotuning, compilation
        for batch in batches[:2]:
            step(batch)
    runs: dict[str, Callable[[], object]] = {
        label: lambda s=step: [s(b) for b in batches] for label, step in steps.items()
    }
    runs["matmul"], matmul_flops, n = square_matmul(dtype, args.device)
    times = median_times(runs, args.reps)
    ceiling = matmul_flops / times.pop("matmul") / 1e9
    print(f"({name}) {len(batches)} real batches of ~{args.max_tokens} tokens/side (median of {args.reps})")
    print(f"  matmul ceiling ({n}x{n}, {dtype}): {ceiling:.0f} GFLOP/s")
    for label, seconds in times.items():
        print(
            f"  {label:15s} {tokens / seconds:8.0f} tokens/s   {flops / seconds / 1e9:7.1f} GFLOP/s   "
            f"{100 * flops / seconds / 1e9 / ceiling:5.1f}% of the matmul ceiling"
        )
    on_gpu = "_cuda" if args.device.type == "cuda" else ""
    variant = name + ("" if args.dtype == "fp32" else f"_{args.dtype}")
    variant += ("_compiled" if args.compile else "") + on_gpu
    ratios = [
        (f"train_tokens_per_s_vs_nn_transformer_{variant}", times["nn.Transformer"] / times["ours"], 1.15),
        (f"train_mfu_{variant}", flops / times["ours"] / 1e9 / ceiling, 0.60),
        (f"train_time_per_token_len64_vs_len16_{variant}", bench_lengths(steps["ours"], data, args), 1.25),
    ]
    if args.dtype == "auto":
        auto_vs_best = bench_precisions(ours, batches, dtype, args.reps)
        ratios.append((f"train_auto_vs_best_precision_{name}{on_gpu}", auto_vs_best, 0.95))
    if args.contention:
        ratios += bench_contention(steps, batches, tokens, args, variant)
    return ratios


def bench_lengths(step: Callable[[Batch], None], data: tuple, args: argparse.Namespace) -> float:
    """(c) step time at length 64 over length 16, the same number of tokens."""
    by_length = {
        length: to_device(fixed_length_batch(*data, length, args.max_tokens), args.device)
        for length in (16, 64)
    }
    for batch in by_length.values():
        step(batch)
    runs = {length: lambda b=batch: step(b) for length, batch in by_length.items()}
    times = median_times(runs, args.reps)
    print(
        f"  ours, {args.max_tokens} tokens/side at length 16: {1e3 * times[16]:.0f} ms/step, "
        f"at length 64: {1e3 * times[64]:.0f} ms/step"
    )
    return times[64] / times[16]


def bench_precisions(model: nn.Module, batches: list[Batch], chosen: torch.dtype, reps: int) -> float:
    """Tokens/s of the precision ``auto`` chose over the faster of fp32 and bf16 (and fp16 where
    ``auto`` chose it: CUDA compute capability 7.x), ours, interleaved."""
    dtypes = dict.fromkeys((torch.float32, torch.bfloat16, chosen))
    steps = {dtype: train_step_fn(model, ours_loss, dtype) for dtype in dtypes}
    for step in steps.values():
        step(batches[0])
    runs = {dtype: (lambda s=step: [s(b) for b in batches]) for dtype, step in steps.items()}
    times = median_times(runs, reps)
    print("  ours by precision: " + ", ".join(f"{dtype} {seconds:.2f} s" for dtype, seconds in times.items()))
    return min(times.values()) / times[chosen]


@contextlib.contextmanager
def busy_process() -> Iterator[None]:
    """One other CPU-bound process on the machine (a plain Python loop), as on a laptop or CI runner."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # running, and scheduled, before the timing starts
        yield
    finally:
        process.kill()
        process.wait()


def bench_contention(
    steps: dict[str, Callable[[Batch], None]],
    batches: list[Batch],
    tokens: int,
    args: argparse.Namespace,
    variant: str,
) -> list[tuple[str, float, float]]:
    """(d) both models idle and with one busy process, each repetition timing all four."""
    runs = {label: (lambda s=step: [s(b) for b in batches]) for label, step in steps.items()}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.reps):
        for state in ("idle", "busy"):
            with busy_process() if state == "busy" else contextlib.nullcontext():
                for label, seconds in median_times(runs, 1).items():
                    times.setdefault((label, state), []).append(seconds)
    speed = {key: tokens / statistics.median(values) for key, values in times.items()}
    print(f"  (d) with one busy process on the machine (median of {args.reps}), tokens/s idle -> busy:")
    for label in steps:
        idle, busy = speed[label, "idle"], speed[label, "busy"]
        print(f"    {label:15s} {idle:8.0f} -> {busy:8.0f}  ({100 * busy / idle:.0f} % kept)")
    return [
        (f"train_contention_keep_{variant}", speed["ours", "busy"] / speed["ours", "idle"], 0.45),
        (
            f"train_contention_vs_twin_{variant}",
            speed["ours", "busy"] / speed["nn.Transformer", "busy"],
            1.0,
        ),
    ]


def loop_target(hardware: Hardware) -> float:
    """The target for the loop's speed-up on this machine's class (no slower on a GPU)."""
    if hardware.gpu is not None:
        return 1.0
    return next((target for flag, target in LOOP_TARGETS if flag in hardware.flags), 1.15)


def bench_loop(args: argparse.Namespace, data: tuple) -> list[tuple[str, float, float]]:
    """(f) tokens/s of the real loop, this tree vs ``--baseline``, then the bare step's MFU."""
    load = os.getloadavg()[0]
    print(
        f"(f) the default recipe's training loop: {args.steps} steps after {args.warmup}, "
        f"{args.reps} runs of each version"
    )
    labels = (f"{args.baseline} (today's path)", "this tree")
    results: dict[str, list[dict]] = {label: [] for label in labels}
    with code_at(ROOT, args.baseline) as baseline:
        trees = dict(zip(labels, (baseline, ROOT), strict=True))
        for rep in range(args.reps):
            for label in labels[:: 1 if rep % 2 == 0 else -1]:  # which goes first alternates
                result = loop_in_subprocess(trees[label], args.steps, args.warmup, args.set)
                results[label].append(result)
                print(
                    f"  {label:24s} {result['tokens_per_s']:8.0f} tokens/s, "
                    f"{result['tokens_per_cpu_s']:6.0f} per CPU-second ({result['precision']})"
                )
    (old, new), (old_cpu, new_cpu) = (
        [statistics.median(r[key] for r in results[label]) for label in labels]
        for key in ("tokens_per_s", "tokens_per_cpu_s")
    )
    print(
        f"  median: {new:.0f} vs {old:.0f} tokens/s ({new / old:.3f}x); per CPU-second of the training "
        f"process, which other load moves less: {new_cpu:.0f} vs {old_cpu:.0f} ({new_cpu / old_cpu:.3f}x); "
        f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    cfg = compose_default(args.set)
    model_cfg = validated(ModelConfig, cfg.model, "model")
    dtype = precision_dtype(str(result["precision"]))
    mfu = bench_bare_step(model_cfg, args, data, dtype)
    name, target = str(dtype).removeprefix("torch."), loop_target(detect())
    return [
        ("train_loop_speedup", new / old, target),
        ("train_loop_speedup_per_cpu_second", new_cpu / old_cpu, target),  # for a busy machine
        (f"train_mfu_bare_step_{name}", mfu, 0.25 if dtype == torch.bfloat16 else 0.60),
    ]


def bench_bare_step(
    model_cfg: ModelConfig, args: argparse.Namespace, data: tuple, dtype: torch.dtype
) -> float:
    """Our step of the default recipe's model (dropout off, as its budget sets it) over the matmul
    ceiling of ``dtype``, timed interleaved."""
    tokenizer, sources, targets = data
    torch.manual_seed(0)
    model = Transformer(replace(model_cfg, dropout=0.0), VOCAB, VOCAB).to(args.device)
    batches = real_batches(tokenizer, sources, targets, args.max_tokens, args.batches)
    tokens = sum(int((b.src != PAD_ID).sum() + (b.tgt_out != PAD_ID).sum()) for b in batches)
    flops = sum(model_flops(model_cfg, model, b) for b in batches)
    batches = [to_device(batch, args.device) for batch in batches]
    step = train_step_fn(model, ours_loss, dtype)
    for batch in batches[:2]:
        step(batch)
    runs: dict[str, Callable[[], object]] = {"ours": lambda: [step(b) for b in batches]}
    runs["matmul"], matmul_flops, n = square_matmul(dtype, args.device)
    times = median_times(runs, args.reps)
    ceiling = matmul_flops / times["matmul"] / 1e9
    achieved = flops / times["ours"] / 1e9
    print(
        f"  bare step of that model, {dtype}: {tokens / times['ours']:.0f} tokens/s, {achieved:.1f} GFLOP/s, "
        f"{100 * achieved / ceiling:.1f} % of the {n}x{n} matmul ceiling ({ceiling:.0f} GFLOP/s)"
    )
    return achieved / ceiling


def record_curve(args: argparse.Namespace) -> None:
    """``--record``: one run's per-step loss and LR, with what reproduces it, as JSON."""
    ref = args.ref or "HEAD"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", ref], capture_output=True, text=True)
    dirty = (
        not args.ref
        and subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True
        ).stdout.strip()
    )
    overrides = [f"seed={args.seed}", *args.set]
    with code_at(ROOT, args.ref) if args.ref else contextlib.nullcontext(ROOT) as tree:
        result = loop_in_subprocess(tree, args.steps - 1, 1, overrides, record=True)
    result.update(
        steps=len(result["losses"]),
        commit=commit.stdout.strip() + (" with uncommitted changes" if dirty else ""),
        overrides=overrides,
        hardware=describe(),
    )
    args.record.write_text(json.dumps(result, indent=1))
    print(f"{len(result['losses'])} steps recorded in {args.record}: final loss {result['losses'][-1]:.4f}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=list(SIZES))
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both models train")
    parser.add_argument(
        "--dtype",
        choices=["fp32", "bf16", "auto"],
        help="default fp32 on a CPU, bf16 on CUDA; bf16 = autocast; "
        "auto = as trainer.precision=auto chooses, also timed against both",
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile both models")
    parser.add_argument("--max-tokens", type=int, default=2500, help="tokens per side per batch")
    parser.add_argument("--batches", type=int, default=4, help="real batches per repetition")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--contention", action="store_true", help="also time both models with a busy process running"
    )
    loop = parser.add_argument_group("the real training loop (--loop)")
    loop.add_argument("--loop", action="store_true", help="time the default recipe's loop against --baseline")
    loop.add_argument("--steps", type=int, default=30, help="timed steps per run (--record: steps recorded)")
    loop.add_argument("--warmup", type=int, default=5, help="steps before the timed window")
    loop.add_argument("--baseline", default=BASELINE, help="git ref of today's path")
    loop.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", help="Hydra overrides of every run"
    )
    loop.add_argument("--record", type=Path, help="write one run's loss and LR per step to this JSON file")
    loop.add_argument("--seed", type=int, default=42, help="--record: the run's seed")
    loop.add_argument("--ref", help="--record: the git ref to run (default: this tree as it is)")
    args = parser.parse_args()
    if args.record and not args.loop:
        parser.error("--record needs --loop")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    args.device = torch.device(args.device)
    return args


def compute_dtype(args: argparse.Namespace) -> torch.dtype:
    """The autocast dtype ``--dtype`` asks for; ``auto`` is resolved as training resolves it."""
    if args.dtype != "auto":
        return torch.bfloat16 if args.dtype == "bf16" else torch.float32
    precision, reason = resolve_precision(AUTO, model_config(args.sizes[0]), args.device.type)
    print(f"auto: {precision} ({reason})")
    return precision_dtype(precision)


def main() -> None:
    args = parse_args()
    if args.device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"error: --device cuda, but torch {torch.__version__} sees no CUDA GPU on this machine")
    torch.manual_seed(0)
    print(describe())
    if args.record:
        record_curve(args)
        return
    if args.device.type == "cuda":
        print(f"device: cuda, {torch.cuda.get_device_name(args.device)}")
        torch.set_float32_matmul_precision("high")  # TF32 for fp32 matmuls, as train.py sets on a GPU
    dtype = compute_dtype(args)

    sources, targets = sample_corpus_pairs(20000)
    tokenizer = TranslationTokenizer.train(sources, targets, VOCAB, shared=True)
    data = (tokenizer, sources, targets)
    print(f"threads {torch.get_num_threads()}, dtype {args.dtype}, compile {args.compile}")
    if args.loop:
        ratios = bench_loop(args, data)
    else:
        ratios = [ratio for name in args.sizes for ratio in bench_size(name, args, data, dtype)]
    for name, value, target in ratios:
        print(f"RATIO {name} {value:.2f} target {target}")


if __name__ == "__main__":
    main()
