"""bench/decode.py (e): one checkpoint's test split decoded by this tree, by another checkout of the
project (``--peer``, e.g. a ``git worktree`` of the code before a change), and by its exports.

Each decode runs in a fresh process of its own: the checkout's code on ``sys.path``, OpenMP's
passive wait policy as ``translate.py`` sets it (:mod:`seq2seq.threads`), the model opened as
``translate.py`` opens it, a warm-up on the first 20 sentences, then the timed
translation of the split and its BLEU. Loading and imports are outside the timing. Repetitions run
in turn (ours, the peer, the exports, then again), so drifting load hits every decoder alike; the
fastest repetition counts, the one least disturbed by other processes on the cores. The peer also
runs with OpenMP's default (spinning) wait policy, as its ``translate.py`` ran before it set one:
the peer's seconds over ours are then the code's gain alone and the gain a user of ``translate.py``
sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs in the checkout being timed: only what both checkouts have (open_model, corpus, score).
RUNNER = """
import json, sys, time
from dataclasses import replace
root, ckpt, model, dtype, beam, sentences = sys.argv[1:7]
sys.path.insert(0, root)
from seq2seq.data import corpus
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
    """Seconds, BLEU and compute of one decode of the split, in a fresh process."""
    model = str(decoder.model) if decoder.model else "-"
    args = [str(decoder.root), str(ckpt), model, decoder.dtype, str(beam), str(sentences)]
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        cwd=decoder.root,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_WAIT_POLICY": decoder.wait_policy},
    )
    if result.returncode != 0:
        raise RuntimeError(f"{decoder.name}: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def exports(ckpt: Path, directory: Path) -> list[Decoder]:
    """The checkpoint exported to CTranslate2 (int8, float32) and transformers, by this tree."""
    from seq2seq.checkpoint import load_model
    from seq2seq.export.to_ctranslate2 import export_model
    from seq2seq.export.to_transformers import export_to_transformers

    loaded = load_model(ckpt)
    decoders = [
        Decoder(f"ct2 {q}", ROOT, model=export_model(loaded, directory / q, q, source="bench/decode.py"))
        for q in ("int8", "float32")
    ]
    decoders.append(Decoder("transformers", ROOT, model=export_to_transformers(ckpt, directory / "hf")))
    return decoders


def compare(
    ckpt: Path, peer: Path, reps: int, sentences: int, dtypes: list[str], with_exports: bool
) -> dict[str, float]:
    """(e): beam 5 and greedy per dtype, ours against the peer (passive, then spinning), plus the
    exports at beam 5.

    Returns the RATIO values: the peer's seconds over ours (code alone; as ``translate.py`` ran), and
    the CTranslate2 int8 export's over ours.
    """
    runs: list[tuple[Decoder, int]] = []
    for dtype in dtypes:
        for beam in (5, 1):
            runs += [
                (Decoder(f"ours {dtype}", ROOT, dtype), beam),
                (Decoder(f"peer {dtype}", peer, dtype), beam),
                (Decoder(f"peer {dtype} spin", peer, dtype, wait_policy="ACTIVE"), beam),
            ]
    with tempfile.TemporaryDirectory(prefix="decode-versus-") as directory:
        if with_exports:
            runs += [(decoder, 5) for decoder in exports(ckpt, Path(directory))]
        results: dict[tuple[str, int], list[dict]] = {}
        for _ in range(reps):
            for decoder, beam in runs:
                results.setdefault((decoder.name, beam), []).append(run_once(decoder, ckpt, beam, sentences))
    best = {key: min(rs, key=lambda r: r["seconds"]) for key, rs in results.items()}
    print(f"(e) {sentences} test sentences, fastest of {reps}, each decoder in its own process:")
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
