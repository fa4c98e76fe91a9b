"""The learning curves of the result records, drawn into ``docs/learning-curves.png``.

The records placed in the ``curves`` table (one per machine, its ``label`` the line's name) give
validation BLEU against steps and, where a record has them, against minutes. The picture carries
the SHA-256 of those records in its PNG metadata, so a test can tell a picture drawn from older
records without trusting file times (a git clone resets them).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

PICTURE = Path(__file__).resolve().parents[2] / "docs" / "learning-curves.png"
TABLE = "curves"
KEY = "records-sha256"


def curve_records(records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the ``curves`` table that hold validations, in row order."""
    placed = [r for r in records.values() if TABLE in r.get("tables", {}) and r.get("validations")]
    return sorted(placed, key=lambda r: r["tables"][TABLE]["row"])


def records_hash(records: dict[str, dict[str, Any]]) -> str:
    """The SHA-256 of the drawn records, whole: a change to any of them makes the picture stale."""
    text = json.dumps(curve_records(records), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def stored_hash(path: Path = PICTURE) -> str | None:
    """The hash a picture was drawn from, or None for a missing picture or one without it."""
    if not path.exists():
        return None
    from PIL import Image

    with Image.open(path) as image:
        return image.info.get(KEY)


def draw(records: dict[str, dict[str, Any]], path: Path = PICTURE) -> None:
    """Validation BLEU against steps (left) and against minutes (right), one line per machine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_step, by_minute) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=80, sharey=True)
    for record in curve_records(records):
        label = record["tables"][TABLE]["label"]
        points = record["validations"]
        line = by_step.plot([p["step"] for p in points], [p["bleu"] for p in points], marker="o",
                            markersize=3, label=label)[0]  # fmt: skip
        timed = [p for p in points if p.get("minutes") is not None]
        if timed:
            by_minute.plot([p["minutes"] for p in timed], [p["bleu"] for p in timed], marker="o",
                           markersize=3, color=line.get_color())  # fmt: skip
    by_step.set(xlabel="training steps", ylabel="validation BLEU (greedy)")
    by_minute.set(xlabel="minutes of training (where recorded)")
    for axes in (by_step, by_minute):
        axes.grid(alpha=0.3)
    by_step.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, metadata={KEY: records_hash(records), "Software": None})
    plt.close(figure)


def stale(records: dict[str, dict[str, Any]], path: Path = PICTURE) -> str | None:
    """Why the picture does not show these records, or None when it does."""
    if stored_hash(path) != records_hash(records):
        return f"{path.name} was not drawn from the current records: run python -m tools.docs.results_page"
    return None
