"""Seconds to translate thousands of real sentences through the Translator and its CTranslate2 exports.

Without ``--ckpt``: ``--sentences`` real sentences (spread over all lengths) through a model with
random weights (``bench/lib/decoders.py``), beam 5, the same token-budget batches for PyTorch and the
CTranslate2 exports (float32, int8). Random weights never end a sentence early: at the default limit
(1.5·src+10) that is the worst case, at a limit of src+1 it approximates a trained model's output
lengths. With ``--ckpt``: the trained model (exported on the fly) on its held-out test split, greedy
and beam 5, batched and (the first 200) one sentence per call. ``--device cuda`` leaves the exports
out (they are timed on a CPU). Prints ``SECONDS <name> <value> [target <t>]`` lines.

    python -m bench.decode.corpus [--size small_postnorm] [--sentences 2000] [--ckpt best.ckpt]
                                  [--device cuda] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.lib.decoders import add_model_arguments, export_engines, random_model
from seq2seq.config import DecodeConfig
from seq2seq.data import corpus
from seq2seq.formats.checkpoint import load_model
from seq2seq.inference.translator import Translator, TranslatorBase
from seq2seq.machine.hardware import describe

BEAM5_SECONDS_TARGETS = {"ours": 15, "ct2 int8": 10}  # beam 5 over the sentences, at most, by decoder


def bench_translate(
    translator: TranslatorBase, sources: list[str], label: str, beam: int = 5, one_at_a_time: bool = False
) -> float:
    """Seconds to translate ``sources`` through the Translator, batched or one sentence per call."""
    settings = translator.decode_cfg_with(beam=beam)
    start = time.perf_counter()
    batches = [[source] for source in sources] if one_at_a_time else [sources]
    outputs = [best.text for batch in batches for best, *_ in translator.translate(batch, settings)]
    seconds = time.perf_counter() - start
    tokens = sum(len(ids) for ids in translator.tokenizer.encode_target(outputs))
    print(
        f"  {label}: {seconds:.2f}s ({len(sources) / seconds:.0f} sent/s, "
        f"{tokens / len(sources):.1f} output tokens/sentence)"
    )
    return seconds


def bench_corpus(
    translator: TranslatorBase, sources: list[str], trained: bool, label: str
) -> dict[str, float]:
    """A trained model as is; random weights at the default limit and at reference-like lengths."""
    print(f"{label}: {len(sources)} real sentences, token-budget batches of {translator.batch_tokens}")
    if trained:
        few = sources[:200]
        return {
            "greedy": bench_translate(translator, sources, "greedy, batched", beam=1),
            "checkpoint": bench_translate(translator, sources, "beam 5, batched", beam=5),
            "greedy_one_by_one_200": bench_translate(translator, few, "greedy, one at a time (200)", 1, True),
            "beam5_one_by_one_200": bench_translate(translator, few, "beam 5, one at a time (200)", 5, True),
        }
    worst = bench_translate(translator, sources, "random weights, limit 1.5*src+10 (no early EOS)")
    translator.decode_cfg = replace(translator.decode_cfg, max_len_a=1.0, max_len_b=1)
    typical = bench_translate(translator, sources, "random weights, limit src+1 (~reference length)")
    return {"worst_case": worst, "reference_lengths": typical}


def seconds_lines(label: str, times: dict[str, float]) -> list[str]:
    """``SECONDS`` lines of one decoder; beam 5 over all the sentences gets its target."""
    target = BEAM5_SECONDS_TARGETS.get(label)
    prefix = "decode" if label == "ours" else f"decode_{label.replace(' ', '_')}"
    lines = []
    for name, seconds in times.items():
        beam5 = name in ("checkpoint", "worst_case", "reference_lengths")
        lines.append(
            f"SECONDS {prefix}_{name} {seconds:.2f}" + (f" target {target}" if beam5 and target else "")
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--sentences", type=int, default=2000, help="real sentences without --ckpt")
    parser.add_argument("--ckpt", help="a trained checkpoint: its test split instead of random weights")
    args = parser.parse_args()
    print(describe())
    setup = random_model(args, args.sentences)
    workdir = tempfile.TemporaryDirectory(prefix="bench-decode-")
    on_cpu = setup.device.type == "cpu"
    threads = torch.get_num_threads()
    if not on_cpu:
        print("CTranslate2 exports left out: this benchmark times them on a CPU")
    if args.ckpt:  # the real held-out test split, decoded by the trained model and its exports
        loaded = load_model(args.ckpt)
        translators: dict[str, TranslatorBase] = {
            "ours": Translator(
                loaded.model, loaded.tokenizer, loaded.decode_config, device=setup.device, dtype=setup.dtype
            )
        }
        if on_cpu:
            translators.update(export_engines(loaded, Path(workdir.name) / "trained", threads))
        sources = corpus.references(corpus.load_splits(loaded.data_config)[0]["test"])[0]
    else:
        ours = Translator(
            setup.model, setup.tokenizer, DecodeConfig(beam_size=5), device=setup.device, dtype=setup.dtype
        )
        engines = export_engines(setup.loaded(), Path(workdir.name) / "random", threads) if on_cpu else {}
        translators, sources = {"ours": ours, **engines}, setup.sources
    for label, translator in translators.items():
        times = bench_corpus(translator, sources, bool(args.ckpt), label)
        print("\n".join(seconds_lines(label, times)))


if __name__ == "__main__":
    main()
