"""One checkpoint's test split decoded by this tree, by another checkout of the project (``--peer``,
e.g. a ``git worktree`` of the code before a change), and by its exports.

Each decode runs in a fresh process of its own: the checkout's code first on its ``PYTHONPATH``,
OpenMP's passive wait policy, the model opened as ``translate.py`` opens it, a warm-up on the first 20
sentences, then the timed translation of the split and its BLEU. Loading and imports are outside the
timing. Repetitions run in turn (ours, the peer, the exports, then again), so drifting load hits
every decoder alike; the fastest repetition counts, the one least disturbed by other processes on
the cores. The peer also runs with OpenMP's spinning wait policy (``OMP_WAIT_POLICY=ACTIVE``): the
peer's seconds over ours are then the code's gain alone and the gain against a user of
``translate.py`` whose threads spin. Beam 5 and greedy in each of ``--dtypes``, and at beam 5 the
CTranslate2 int8/float32 and transformers exports.

    python -m bench.decode.peer --ckpt best.ckpt --peer /tmp/before [--sentences 500] [--reps 3]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.lib.loop_run import pythonpath_of
from bench.lib.measure import ROOT, bench_parser, print_ratios, targets
from seq2seq.machine.hardware import describe

TARGETS = {
    "decode_beam5_vs_peer_spin_bfloat16": 2.5,  # beam 5 at least this times faster than the peer, spinning
    "decode_beam5_vs_peer_spin_float32": 2.2,  # ... in float32 (a target for AVX2 CPUs)
    "decode_beam5_vs_peer_bfloat16": 2.5,  # the same targets for the code alone
    "decode_beam5_vs_peer_float32": 2.2,
    "decode_greedy_vs_peer": 2,
    "decode_beam5_vs_ct2_int8": 1,  # faster than the CTranslate2 int8 export
}

# Runs in the checkout being timed: only what both checkouts have (open_model, corpus, score).
RUNNER = """
import json, sys, time
from dataclasses import replace
ckpt, model, dtype, beam, sentences = sys.argv[1:6]
from seq2seq.data import corpus
try:
    from seq2seq.formats.checkpoint import load_model
except ModuleNotFoundError:  # a peer checkout whose checkpoint format sits at the package's top
    from seq2seq.checkpoint import load_model
from seq2seq.inference.backends import open_model
from seq2seq.inference.evaluation import score
sources, references = corpus.references(corpus.load_splits(load_model(ckpt).data_config)[0]["test"])
sources, references = sources[: int(sentences)], references[: int(sentences)]
if model == "-":
    opened = open_model(ckpt, device="cpu", dtype=dtype)
else:
    opened = open_model(model=model, device="cpu")
settings = replace(opened.translator.decode_cfg, beam_size=int(beam), nbest=1)
list(opened.translator.translate(sources[:20], settings))
start = time.perf_counter()
out = [best.text for best, *_ in opened.translator.translate(sources, settings)]
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "bleu": score(out, references)["bleu"],
                  "compute": opened.translator.compute}))
"""


@dataclass(frozen=True)
class Decoder:
    """One decoder to time: a checkout and a checkpoint (dtype) or an export folder."""

    name: str
    root: Path
    dtype: str = "float32"
    model: Path | None = None  # an export folder instead of the checkpoint
    wait_policy: str = "PASSIVE"  # OMP_WAIT_POLICY; libgomp's default is to spin


def run_once(decoder: Decoder, ckpt: Path, beam: int, sentences: int) -> dict:
    """Seconds, BLEU and compute of one decode of the split, in a fresh process on the decoder's code."""
    model = str(decoder.model) if decoder.model else "-"
    args = [str(ckpt), model, decoder.dtype, str(beam), str(sentences)]
    env = {**os.environ, "OMP_WAIT_POLICY": decoder.wait_policy, "PYTHONPATH": pythonpath_of(decoder.root)}
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, *args], cwd=decoder.root, capture_output=True, text=True, env=env
    )
    if result.returncode != 0:
        raise RuntimeError(f"{decoder.name}: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def exports(ckpt: Path, directory: Path) -> list[Decoder]:
    """The checkpoint exported to CTranslate2 (int8, float32) and transformers, by this tree."""
    from seq2seq.export.to_ctranslate2 import export_model
    from seq2seq.export.to_transformers import export_to_transformers
    from seq2seq.formats.checkpoint import load_model

    loaded = load_model(ckpt)
    decoders = [
        Decoder(f"ct2 {q}", ROOT, model=export_model(loaded, directory / q, q, source=str(ckpt)))
        for q in ("int8", "float32")
    ]
    decoders.append(Decoder("transformers", ROOT, model=export_to_transformers(ckpt, directory / "hf")))
    return decoders


def compare(
    ckpt: Path, peer: Path, reps: int, sentences: int, dtypes: list[str], with_exports: bool
) -> dict[str, float]:
    """Beam 5 and greedy per dtype, ours against the peer (passive, then spinning), plus the exports
    at beam 5. Returns the peer's seconds over ours (the code alone; against spinning threads) and
    the CTranslate2 int8 export's over ours."""
    runs: list[tuple[Decoder, int]] = []
    for dtype in dtypes:
        for beam in (5, 1):
            runs += [
                (Decoder(f"ours {dtype}", ROOT, dtype), beam),
                (Decoder(f"peer {dtype}", peer, dtype), beam),
                (Decoder(f"peer {dtype} spin", peer, dtype, wait_policy="ACTIVE"), beam),
            ]
    with tempfile.TemporaryDirectory(prefix="decode-peer-") as directory:
        if with_exports:
            runs += [(decoder, 5) for decoder in exports(ckpt, Path(directory))]
        results: dict[tuple[str, int], list[dict]] = {}
        for _ in range(reps):
            for decoder, beam in runs:
                results.setdefault((decoder.name, beam), []).append(run_once(decoder, ckpt, beam, sentences))
    best = {key: min(rs, key=lambda r: r["seconds"]) for key, rs in results.items()}
    print(f"{sentences} test sentences, fastest of {reps}, each decoder in its own process:")
    for (name, beam), r in best.items():
        times = ", ".join(f"{x['seconds']:.2f}" for x in results[(name, beam)])
        print(
            f"  {name:16s} beam {beam}: {r['seconds']:7.2f} s ({times})  BLEU {r['bleu']:.2f}  {r['compute']}"
        )
    ratios = {}
    for dtype in dtypes:
        for beam, search in ((5, "beam5"), (1, "greedy")):
            ours = best[(f"ours {dtype}", beam)]["seconds"]
            ratios[f"decode_{search}_vs_peer_{dtype}"] = best[(f"peer {dtype}", beam)]["seconds"] / ours
            ratios[f"decode_{search}_vs_peer_spin_{dtype}"] = (
                best[(f"peer {dtype} spin", beam)]["seconds"] / ours
            )
    if with_exports:
        ours = min(best[(f"ours {dtype}", 5)]["seconds"] for dtype in dtypes)
        ratios["decode_beam5_vs_ct2_int8"] = best[("ct2 int8", 5)]["seconds"] / ours
    return ratios


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    parser.add_argument("--ckpt", type=Path, required=True, help="the trained checkpoint both sides decode")
    parser.add_argument("--peer", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each decoder")
    parser.add_argument("--sentences", type=int, default=2000, help="the first N sentences of the test split")
    parser.add_argument(
        "--dtypes", nargs="+", default=["bfloat16", "float32"], help="compute dtypes of both sides"
    )
    parser.add_argument("--no-exports", action="store_true", help="without the exports")
    args = parser.parse_args()
    print(describe())
    goals = targets(args)
    ratios = compare(args.ckpt, args.peer, args.reps, args.sentences, args.dtypes, not args.no_exports)
    print_ratios(ratios.items(), goals)


if __name__ == "__main__":
    main()
