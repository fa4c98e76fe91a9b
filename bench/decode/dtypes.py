"""A checkpoint's test split by each of several decoders: a compute dtype, with or without the
vocabulary shortlist, or the CTranslate2 int8 export; speed, BLEU and agreement against the first.

Each decoder is built in this process on ``--device`` and warmed up (200 sentences), then the whole
test split is decoded greedily and with beam 5, repetitions interleaved: seconds (the fastest
repetition), BLEU, and the share of lines equal to the first decoder's. The ratios compare decoders
of this one run: each against the first (speed, BLEU), and beam 5 against ``ct2-int8`` when it is
one of them; on a GPU also the seconds themselves (``decode_test_*``), on a CPU ``decode_cpu_*``.
``DTYPE+shortlist`` needs the checkpoint's shortlist (``python -m seq2seq.inference.shortlist``);
``DTYPE+captured`` decodes with the step compiled at fixed shapes (``decode.capture``), its first
repetition compiling the shapes the warm-up did not.

    python -m bench.decode.dtypes --ckpt best.ckpt --decoders float32 int8 int8+shortlist ct2-int8
    python -m bench.decode.dtypes --device cuda --ckpt best.ckpt --decoders float32 bfloat16 [--reps 3]
    python -m bench.decode.dtypes --device cuda --ckpt best.ckpt --decoders float32 float32+captured
"""

from __future__ import annotations

import itertools
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.lib.decoders import export_engines
from bench.lib.measure import bench_parser, ratio_line, target_for, targets
from seq2seq.data import corpus
from seq2seq.decoding.shortlist import default_path
from seq2seq.formats.checkpoint import LoadedModel, load_model
from seq2seq.inference.evaluation import score
from seq2seq.inference.shortlist import open_shortlist
from seq2seq.inference.translator import Translator, TranslatorBase
from seq2seq.machine.hardware import INFERENCE_DTYPES, describe

CT2_INT8 = "ct2-int8"  # the CTranslate2 int8 export of the checkpoint, as a decoder
SHORTLISTED = "+shortlist"  # DTYPE+shortlist: with the shortlist beside the checkpoint
CAPTURED = "+captured"  # DTYPE+captured: the decoder step compiled at fixed shapes
CAPTURED_DTYPES = ("float32",)  # the captured step decodes in float32 only (capture_refusal)
TARGETS = {
    "decode_test_beam5_seconds": 0.6,  # on a GPU: at most this, the base model's test split
    "decode_test_greedy_seconds": 0.25,
    "decode_cpu_beam5_seconds": 4,  # on 2 cores of a CPU with AMX or AVX512-BF16, the default model
    "decode_cpu_greedy_seconds": 1.5,
    "decode_beam5_speed_vs_float32": 1,  # another decoder no slower than float32 (float32 s / its s)
    "decode_greedy_speed_vs_float32": 1,
    "decode_beam5_bleu_vs_float32": -0.3,  # ... and its BLEU at most 0.3 below float32's
    "decode_greedy_bleu_vs_float32": -0.3,
    "decode_beam5_speed_vs_ct2_int8_": 2,  # beam 5 at least 2x the CTranslate2 int8 export
}


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


def compare_dtypes(ckpt: str, device: torch.device, names: list[str], reps: int) -> dict[str, float]:
    """The test split by each decoder, after a warm-up, interleaved; seconds (the fastest
    repetition), BLEU, agreement with the first."""
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
    ratios, first = {}, names[0]
    fastest = {key: min(times) for key, times in seconds.items()}
    bleu = {key: score(lines, references)["bleu"] for key, lines in outputs.items()}
    print(f"{ckpt}: {len(sources)} test sentences on {device}, fastest of {reps}")
    for (name, beam), times in seconds.items():
        same = sum(a == b for a, b in zip(outputs[name, beam], outputs[first, beam], strict=True))
        search = "beam5" if beam == 5 else "greedy"
        print(
            f"  {name} {search}: {fastest[name, beam]:.3f} s (all: {', '.join(f'{t:.2f}' for t in times)}), "
            f"BLEU {bleu[name, beam]:.2f}, {same} of {len(sources)} lines as {first}'s"
        )
        where = "test" if device.type == "cuda" else "cpu"
        ratios[f"decode_{where}_{search}_seconds_{name}"] = fastest[name, beam]
        if name != first:
            ratios[f"decode_{search}_speed_vs_{first}_{name}"] = fastest[first, beam] / fastest[name, beam]
            ratios[f"decode_{search}_bleu_vs_{first}_{name}"] = bleu[name, beam] - bleu[first, beam]
        if CT2_INT8 in names and name != CT2_INT8 and beam == 5:
            ratios[f"decode_beam5_speed_vs_ct2_int8_{name}"] = fastest[CT2_INT8, 5] / fastest[name, 5]
    return ratios


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
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(describe())
    goals = targets(args)
    for name, value in compare_dtypes(args.ckpt, torch.device(args.device), args.decoders, args.reps).items():
        print(ratio_line(name, value, target_for(name, goals), digits=3))


if __name__ == "__main__":
    main()
