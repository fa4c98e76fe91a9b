"""A checkpoint's test split by each of several decoders: a compute dtype, with or without the
vocabulary shortlist, or the CTranslate2 int8 export; speed, BLEU and agreement against the first.

Each decoder is built in this process on ``--device`` and warmed up (200 sentences), then the whole
test split is decoded greedily and with beam 5, repetitions interleaved: seconds (the fastest
repetition), BLEU, and the share of lines equal to the first decoder's. The ratios compare decoders
of this one run: each against the first (speed, BLEU), beam 5 against ``ct2-int8`` when it is one of
them, and each decoder's beam 5 against its own greedy search (``beam5_over_greedy_*``, what the
extra beams cost); on a GPU also the seconds themselves (``decode_test_*``), on a CPU
``decode_cpu_*``. ``--record`` writes the table and the ratios to docs/records/, one record per
machine class (a ``ONEDNN_MAX_CPU_ISA`` mask is part of the class).
``DTYPE+shortlist`` needs the checkpoint's shortlist (``python -m seq2seq.inference.shortlist``);
``DTYPE+captured`` decodes with the step compiled at fixed shapes (``decode.capture``), its first
repetition compiling the shapes the warm-up did not.

    python -m bench.decode.dtypes --ckpt best.ckpt --decoders float32 int8 int8+shortlist ct2-int8
    python -m bench.decode.dtypes --ckpt best.ckpt --decoders float32 bfloat16 int8 ct2-int8 --record
    python -m bench.decode.dtypes --device cuda --ckpt best.ckpt --decoders float32 bfloat16 [--reps 3]
    python -m bench.decode.dtypes --device cuda --ckpt best.ckpt --decoders float32 float32+captured
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from bench.lib.decoders import export_engines
from bench.lib.measure import (
    RECORDS,
    bench_parser,
    machine,
    print_ratios,
    table_record,
    targets,
    write_record,
)
from seq2seq.data import corpus
from seq2seq.decoding.shortlist import default_path
from seq2seq.formats.checkpoint import LoadedModel, load_model
from seq2seq.inference.evaluation import score
from seq2seq.inference.shortlist import open_shortlist
from seq2seq.inference.translator import Translator, TranslatorBase
from seq2seq.machine.hardware import INFERENCE_DTYPES, cpu_class, describe

CT2_INT8 = "ct2-int8"  # the CTranslate2 int8 export of the checkpoint, as a decoder
SHORTLISTED = "+shortlist"  # DTYPE+shortlist: with the shortlist beside the checkpoint
CAPTURED = "+captured"  # DTYPE+captured: the decoder step compiled at fixed shapes
CAPTURED_DTYPES = ("float32",)  # the captured step decodes in float32 only (capture_refusal)
TARGETS = {  # by prefix, the first that matches: every ratio the bench prints has one
    "decode_test_beam5_seconds": 0.6,  # on a GPU: at most this, the base model's test split
    "decode_test_greedy_seconds": 0.25,
    "decode_cpu_beam5_seconds": 4,  # on 2 cores of a CPU with AMX or AVX512-BF16, the default model
    "decode_cpu_greedy_seconds": 1.5,
    "decode_beam5_speed_vs_ct2_int8_": 2,  # beam 5 at least 2x the CTranslate2 int8 export
    "decode_beam5_speed_vs_": 1,  # another decoder no slower than the first (its s / their s)
    "decode_greedy_speed_vs_": 1,
    "decode_beam5_bleu_vs_": -0.3,  # ... and its BLEU at most 0.3 below the first's
    "decode_greedy_bleu_vs_": -0.3,
    "beam5_over_greedy_": 2.0,  # each decoder's beam 5 at most 2x its greedy seconds
}
HEADER = ["decoder", "greedy, s", "beam 5, s", "beam 5 / greedy", "greedy BLEU", "beam 5 BLEU", "same lines"]


def decoders(
    ckpt: str, loaded: LoadedModel, device: torch.device, names: list[str], directory: Path
) -> dict[str, TranslatorBase]:
    """``DTYPE``, ``DTYPE+shortlist`` (the shortlist beside the checkpoint) or ``DTYPE+captured``, and
    ``ct2-int8`` for the CTranslate2 int8 export of the same checkpoint."""
    built: dict[str, TranslatorBase] = {}
    for name in names:
        if name == CT2_INT8:
            built[name] = export_engines(loaded, directory, torch.get_num_threads(), ("int8",))["ct2 int8"]
            continue
        shortlisted = name.endswith(SHORTLISTED)
        shortlist = open_shortlist(default_path(ckpt), loaded.tokenizer) if shortlisted else None
        dtype = INFERENCE_DTYPES[name.removesuffix(SHORTLISTED).removesuffix(CAPTURED)]
        decode_cfg = replace(loaded.decode_config, capture=name.endswith(CAPTURED))
        built[name] = Translator(
            loaded.model, loaded.tokenizer, decode_cfg, device, dtype=dtype, shortlist=shortlist,
        )  # fmt: skip
    return built


@dataclass
class Run:
    """What each decoder did, by (decoder, beam): the fastest repetition, all of them, BLEU and how
    many lines equal the first decoder's."""

    fastest: dict[tuple[str, int], float]
    times: dict[tuple[str, int], list[float]]
    bleu: dict[tuple[str, int], float]
    same: dict[tuple[str, int], int]
    sentences: int


def compare_dtypes(ckpt: str, device: torch.device, names: list[str], reps: int) -> Run:
    """The test split by each decoder, after a warm-up, greedy and beam 5, repetitions interleaved."""
    loaded = load_model(ckpt)
    sources, references = corpus.references(corpus.load_splits(loaded.data_config)[0]["test"])
    workdir = tempfile.TemporaryDirectory(prefix="bench-decode-")
    translators = decoders(ckpt, loaded, device, names, Path(workdir.name))
    seconds: dict[tuple[str, int], list[float]] = {}
    outputs: dict[tuple[str, int], list[str]] = {}
    for translator in translators.values():  # warm-up: kernels, the allocator, library set-up
        list(translator.translate(sources[:200], translator.decode_cfg_with(beam=5)))
    for _ in range(reps):
        for (name, translator), beam in itertools.product(translators.items(), (1, 5)):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            outputs[name, beam] = [
                best.text for best, *_ in translator.translate(sources, translator.decode_cfg_with(beam=beam))
            ]
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.setdefault((name, beam), []).append(time.perf_counter() - start)
    first = names[0]
    same = {
        (name, beam): sum(a == b for a, b in zip(lines, outputs[first, beam], strict=True))
        for (name, beam), lines in outputs.items()
    }
    return Run(
        {key: min(times) for key, times in seconds.items()},
        seconds,
        {key: score(lines, references)["bleu"] for key, lines in outputs.items()},
        same,
        len(sources),
    )


def ratios_of(run: Run, names: list[str], device: torch.device) -> dict[str, float]:
    """The ratios of a run: seconds, each decoder against the first, against ``ct2-int8``, and each
    decoder's beam 5 over its own greedy search."""
    ratios, first, fastest = {}, names[0], run.fastest
    where = "test" if device.type == "cuda" else "cpu"
    for name in names:
        for search, beam in (("greedy", 1), ("beam5", 5)):
            ratios[f"decode_{where}_{search}_seconds_{name}"] = fastest[name, beam]
            if name != first:
                against = f"{search}_{{}}_vs_{first}_{name}"
                ratios["decode_" + against.format("speed")] = fastest[first, beam] / fastest[name, beam]
                ratios["decode_" + against.format("bleu")] = run.bleu[name, beam] - run.bleu[first, beam]
        if CT2_INT8 in names and name != CT2_INT8:
            ratios[f"decode_beam5_speed_vs_ct2_int8_{name}"] = fastest[CT2_INT8, 5] / fastest[name, 5]
        ratios[f"beam5_over_greedy_{name}"] = fastest[name, 5] / fastest[name, 1]
    return ratios


def table_rows(run: Run, names: list[str]) -> list[list[str]]:
    """One row per decoder, as :data:`HEADER` names the columns."""
    rows = []
    for name in names:
        greedy, beam5 = run.fastest[name, 1], run.fastest[name, 5]
        rows.append(
            [
                name,
                f"{greedy:.2f}",
                f"{beam5:.2f}",
                f"{beam5 / greedy:.2f}",
                f"{run.bleu[name, 1]:.2f}",
                f"{run.bleu[name, 5]:.2f}",
                f"{run.same[name, 1]}; {run.same[name, 5]} of {run.sentences}",
            ]
        )
    return rows


def machine_class() -> dict[str, str]:
    """The record's machine: :func:`~bench.lib.measure.machine`, with a oneDNN ISA mask in its class."""
    described = machine()
    mask = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return described | {"class": f"{described['class']}, oneDNN at most {mask}"} if mask else described


def record_path(described: dict[str, str]) -> Path:
    """docs/records/decode-dtypes-<class>.json: one record per machine class, the latest run's."""
    slug = re.sub(r"[^a-z0-9]+", "-", described["class"].lower()).strip("-")
    return RECORDS / f"decode-dtypes-{slug}.json"


def write_dtypes_record(run: Run, args: argparse.Namespace, ratios: dict[str, float], hardware: str) -> Path:
    """The run's table and ratios as this machine class's record; returns its path."""
    on_gpu = args.device == "cuda"
    described = {"gpu": hardware, "class": cpu_class(hardware)} if on_gpu else machine_class()
    notes = (
        f"python -m bench.decode.dtypes --decoders {' '.join(args.decoders)} --reps {args.reps}: the "
        f"{run.sentences} sentences of the checkpoint's test split, each decoder built and warmed up in one "
        f"process, repetitions interleaved, the fastest; {torch.get_num_threads()} threads. {hardware}"
    )
    path = record_path(described)
    rows = table_rows(run, args.decoders)
    write_record(path, table_record(path.stem, described, notes, HEADER, rows, ratios))
    return path


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    parser.add_argument("--ckpt", required=True, help="the trained checkpoint whose test split is decoded")
    parser.add_argument(
        "--decoders",
        nargs="+",
        required=True,
        choices=[
            *INFERENCE_DTYPES,
            *(name + SHORTLISTED for name in INFERENCE_DTYPES),
            *(name + CAPTURED for name in CAPTURED_DTYPES),
            CT2_INT8,
        ],
        help=f"the decoders, first the reference: a dtype, DTYPE{SHORTLISTED} (the checkpoint's "
        f"shortlist, python -m seq2seq.inference.shortlist), DTYPE{CAPTURED} (decode.capture) or "
        f"{CT2_INT8} (its CTranslate2 int8 export)",
    )
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions of each decoder")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--record", action="store_true", help="write the record of this machine class")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    if len(set(args.decoders)) < len(args.decoders):
        parser.error("--decoders: each decoder once")
    if args.threads:
        torch.set_num_threads(args.threads)
    hardware = describe()
    print(hardware)
    goals = targets(args)
    device = torch.device(args.device)
    run = compare_dtypes(args.ckpt, device, args.decoders, args.reps)
    first = args.decoders[0]
    print(f"{args.ckpt}: {run.sentences} test sentences on {device}, fastest of {args.reps}")
    for (name, beam), times in run.times.items():
        print(
            f"  {name} {'beam5' if beam == 5 else 'greedy'}: {run.fastest[name, beam]:.3f} s "
            f"(all: {', '.join(f'{t:.2f}' for t in times)}), BLEU {run.bleu[name, beam]:.2f}, "
            f"{run.same[name, beam]} of {run.sentences} lines as {first}'s"
        )
    ratios = ratios_of(run, args.decoders, device)
    print_ratios(ratios.items(), goals, digits=3)
    if args.record:
        print(f"record: {write_dtypes_record(run, args, ratios, hardware)}")


if __name__ == "__main__":
    main()
