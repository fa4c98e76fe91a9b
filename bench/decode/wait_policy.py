"""Decoding speed under each OpenMP wait policy: a fresh process per policy (libgomp reads it once).

Each process opens the checkpoint in float32, translates 50 sentences as a warm-up, then times beam
5 and greedy over the first ``--sentences`` sentences of its test split. Policies alternate within
each round. ``--busy`` runs every round beside one process that spins on a core. Prints each
policy's seconds and ``RATIO`` lines of the decoders' default (:mod:`seq2seq.machine.threads`) against the
best policy of each column.

    python -m bench.decode.wait_policy --ckpt best.ckpt [--sentences 1000] [--rounds 2] [--busy]
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

from bench.lib.measure import ROOT, bench_parser, busy_process, ratio_line, target_for, targets
from seq2seq.machine.threads import DECODERS, USER_SETTINGS, wait_policy

POLICIES = {  # label -> OpenMP variables
    "passive (OMP_WAIT_POLICY=PASSIVE)": {"OMP_WAIT_POLICY": "PASSIVE"},
    "libgomp's default (spin, then sleep)": {},
    "GOMP_SPINCOUNT=2000": {"GOMP_SPINCOUNT": "2000"},
}
TARGETS = {"decode_wait_policy": 0.9}  # the decoders' default at least this share of the best policy's speed
CHILD = """
import json, sys, time
from bench.lib.measure import held_out_test
from seq2seq.inference.backends import open_model
from pathlib import Path
ckpt, count = sys.argv[1], int(sys.argv[2])
sources = held_out_test(Path(ckpt))[0][:count]
translator = open_model(ckpt, device="cpu", dtype="float32").translator
list(translator.translate(sources[:50], translator.decode_cfg_with(beam=5)))
seconds = {}
for beam in (5, 1):
    start = time.perf_counter()
    list(translator.translate(sources, translator.decode_cfg_with(beam=beam)))
    seconds[beam] = time.perf_counter() - start
print(json.dumps(seconds))
"""


def timed(ckpt: str, sentences: int, policy: dict[str, str]) -> dict[str, float]:
    env = {key: value for key, value in os.environ.items() if key not in USER_SETTINGS}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, ckpt, str(sentences)],
        env={**env, **policy},
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--busy", action="store_true", help="beside one process spinning on a core")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in POLICIES}
    with busy_process() if args.busy else contextlib.nullcontext():
        for _ in range(args.rounds):
            for label, policy in POLICIES.items():
                runs[label].append(timed(args.ckpt, args.sentences, policy))
                print(label, runs[label][-1], flush=True)
    default = next(label for label, policy in POLICIES.items() if policy == wait_policy(DECODERS[0]))
    for beam, search in (("5", "beam5"), ("1", "greedy")):
        fastest = {label: min(run[beam] for run in times) for label, times in runs.items()}
        print(f"{search}: " + ", ".join(f"{label} {seconds:.2f} s" for label, seconds in fastest.items()))
        ratio = min(fastest.values()) / fastest[default]  # 1: the default is the fastest
        name = f"decode_wait_policy_{search}_default_vs_best"
        print(ratio_line(name, ratio, target_for(name, targets(args))))


if __name__ == "__main__":
    main()
