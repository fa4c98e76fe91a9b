"""Records of a corpus that cannot become a pair: counted per cause, the first of each located,
and the run stopped before training when they are more than ``data.max_malformed_share``.

A few bad lines in a large corpus are noise worth skipping; a file that is mostly unreadable (the
wrong encoding, the wrong delimiter, the wrong column names) is a mistake, and training on what is
left of it would waste the run. So the share decides, and the error says which file, how many
records, the first bad line and the likely fix.
"""

from __future__ import annotations

import codecs
import logging
from collections import Counter
from pathlib import Path

from seq2seq.config import DataError

log = logging.getLogger("seq2seq.data")

CAUSES = {  # cause -> what it means, as the log and `python -m seq2seq.data.inspect` print it
    "undecodable": "bytes that are not text in data.encoding",
    "wrong_columns": "not one field per data.columns entry",
    "bad_json": "not a JSON object",
    "missing_language": "no value for a language of data.direction",
    "not_text": "a value that is not a string",
    "empty_side": "an empty source or target",
}
_SAMPLE_BYTES = 4096  # undecodable lines kept (whole) to guess the file's encoding from
_WINDOWS_1252_ONLY = range(0x80, 0xA0)  # printable in cp1252, control characters in Latin-1
_UTF16 = ("utf-16", "utf-16-le", "utf-16-be")  # with a BOM, then without one in either byte order


def _reads_as(sample: bytes, encoding: str) -> bool:
    """Whether ``sample`` decodes in ``encoding`` to printable text; its last character may be cut."""
    try:
        text = codecs.getincrementaldecoder(encoding)().decode(sample)
    except UnicodeError:  # utf-16 without a BOM raises UnicodeError itself
        return False
    return all(char.isprintable() or char.isspace() for char in text)


def guess_encoding(sample: bytes) -> str:
    """The likely fix for lines that ``data.encoding`` cannot decode, judged from their bytes
    (``sample`` keeps their line breaks, so that UTF-16 stays aligned)."""
    if b"\x00" in sample:
        utf16 = [name for name in _UTF16 if _reads_as(sample, name)]
        if utf16:
            return f"NUL bytes: looks like UTF-16: set data.encoding={utf16[0]}"
        return "NUL bytes, and not UTF-16 text either: is it a text file?"
    try:
        sample.decode("utf-8")
        return "looks like UTF-8: set data.encoding=utf-8"
    except UnicodeDecodeError:
        pass
    if any(byte in _WINDOWS_1252_ONLY for byte in sample):
        try:
            sample.decode("cp1252")
            return "looks like Windows-1252: set data.encoding=cp1252"
        except UnicodeDecodeError:
            pass
    elif any(byte >= 0xA0 for byte in sample):
        return "looks like Latin-1: set data.encoding=latin-1"
    return "set data.encoding to the file's encoding (e.g. latin-1, cp1252, utf-16)"


class Tally:
    """Pairs kept and records skipped while one corpus is read; ``unit`` is "line" or "row"."""

    def __init__(self, unit: str) -> None:
        self.unit = unit
        self.pairs = 0
        self.counts: Counter = Counter()
        self.first: dict[str, dict] = {}  # cause -> {"file", "line", "fix"} of its first record
        self._sample = bytearray()

    def bad(self, cause: str, file: Path, line: int, fix: str) -> None:
        """Count one skipped record; ``fix`` says what would make records like it readable."""
        self.counts[cause] += 1
        self.first.setdefault(cause, {"file": str(file), "line": line, "fix": fix})

    def undecodable(self, file: Path, line: int, raw: bytes) -> None:
        """Count a record with bytes the encoding cannot decode (``raw``, with its line break); keeps
        some for the guess."""
        self.bad("undecodable", file, line, fix="")
        if len(self._sample) < _SAMPLE_BYTES:
            self._sample += raw

    def stats(self) -> dict:
        """JSON-able counts for the corpus cache's ``stats.json``."""
        if "undecodable" in self.first:
            self.first["undecodable"]["fix"] = guess_encoding(bytes(self._sample))
        malformed = {cause: {"count": self.counts[cause], **self.first[cause]} for cause in self.counts}
        return {
            "pairs": self.pairs,
            "malformed_lines": sum(self.counts.values()),
            "malformed": malformed,
            "unit": self.unit,
        }


def share(stats: dict) -> float:
    """Malformed records over all records read."""
    return stats["malformed_lines"] / max(1, stats["pairs"] + stats["malformed_lines"])


def error(stats: dict, limit: float | None = None) -> DataError:
    """The one line that stops a run: the file, the count, the first bad record of the commonest
    cause and its fix; ``limit`` is the share that was exceeded (None: nothing was usable)."""
    malformed, total, unit = stats["malformed"], stats["malformed_lines"], stats["unit"]
    by_count = sorted(malformed.items(), key=lambda item: -item[1]["count"])
    counts = ", ".join(f"{entry['count']:,} {cause}" for cause, entry in by_count)
    over = "" if limit is None else f", over data.max_malformed_share={limit:g}"
    cause, first = by_count[0]
    return DataError(
        f"{first['file']}: {total:,} of {stats['pairs'] + total:,} {unit}s are malformed ({counts}){over}; "
        f"first {cause} at {unit} {first['line']}: {first['fix']}"
    )


def check(stats: dict, limit: float) -> None:
    """Raise :func:`error` when the malformed share exceeds ``limit``; below it, log the counts."""
    if not stats["malformed"]:
        return
    if share(stats) > limit:
        raise error(stats, limit)
    counts = ", ".join(f"{entry['count']:,} {cause}" for cause, entry in stats["malformed"].items())
    log.warning("skipped %d malformed %ss: %s", stats["malformed_lines"], stats["unit"], counts)
