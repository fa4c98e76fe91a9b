"""``python -m seq2seq.data.inspect [overrides]``: what a corpus holds, before training on it.

It takes the overrides ``train.py`` takes (``data.path=...``, ``data.columns=[de,fr]``,
``experiment=tiny``) and composes the same config, so it reads the corpus exactly as training
would, and the corpus cache it builds is the one training then loads. Bad input is one line.
Installed as a package, without the checkout's ``configs/``, it composes the schemas alone
(:class:`~seq2seq.config.RunConfig`, ``run_schema`` in Hydra's ConfigStore): the ``data.*``
overrides work as in a checkout, group options (``data=tiny``, ``experiment=...``) need configs/.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra import compose, initialize, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from seq2seq.command_line import help_asked
from seq2seq.config import RUN_SCHEMA, ConfigError, DataConfig, DataError, validated
from seq2seq.data.describe import PERCENTILES, Report, describe_corpus
from seq2seq.data.readers import malformed
from seq2seq.data.split import HELD_OUT_PARTS, held_out_sizes
from seq2seq.data.tokenizers import vocab_size

CONFIGS = Path(__file__).resolve().parents[2] / "configs"  # a checkout's; an installed package has none


def data_config(overrides: list[str], config_dir: Path = CONFIGS) -> DataConfig:
    """``data`` of the config ``train.py`` would compose from these overrides, validated; without
    ``config_dir``, of the schemas alone."""
    try:
        if (config_dir / "train.yaml").is_file():
            with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
                cfg = compose("train", overrides=overrides)
        else:
            with initialize(config_path=None, version_base="1.3"):
                cfg = compose(RUN_SCHEMA, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(str(err).splitlines()[0]) from err
    return validated(DataConfig, cfg.data, "data")


def _malformed_lines(report: Report, cfg: DataConfig) -> list[str]:
    stats, unit = report.stats, report.stats["unit"]
    lines = [
        f"malformed {unit}s: {stats['malformed_lines']:,} ({malformed.share(stats):.2%}; training stops "
        f"above data.max_malformed_share={cfg.max_malformed_share:g})"
    ]
    for cause, entry in stats["malformed"].items():
        lines.append(f"  {entry['count']:>10,} {cause} ({malformed.CAUSES[cause]})")
        lines.append(f"  {'':>10} first: {entry['file']} {unit} {entry['line']}: {entry['fix']}")
    if report.verdict:
        lines.append(f"training would stop: {report.verdict}")
    return lines


def _length_lines(report: Report, cfg: DataConfig) -> list[str]:
    names = [f"p{p}" if p < 100 else "max" for p in PERCENTILES]
    lines = [f"lengths {'':<12}" + "".join(f"{name:>8}" for name in names)]
    for name, values in report.lengths.items():
        lines.append(f"  {name:<18}" + "".join(f"{value:>8.0f}" for value in values))
    action = "dropped" if cfg.too_long == "drop" else "truncated"
    lines.append(
        f"over data.max_length={cfg.max_length} tokens: {report.over_max_length:.2%} of the sampled pairs "
        f"({action}: data.too_long={cfg.too_long})"
    )
    return lines


def _vocabulary_lines(report: Report, cfg: DataConfig) -> list[str]:
    sizes = sorted({size for suggestion in report.vocabulary for size in suggestion.shares})
    lines = ["  types occurring >= 100 times, by vocabulary size:"]
    lines.append(f"  {'size':<14}" + "".join(f"{size:>8}" for size in sizes))
    labels = ["shared"] if cfg.shared_vocab else ["source", "target"]
    for label, suggestion in zip(labels, report.vocabulary, strict=True):
        shares = [suggestion.shares.get(size) for size in sizes]
        cells = (f"{share:>8.1%}" if share is not None else " " * 8 for share in shares)
        lines.append(f"  {label:<14}" + "".join(cells))
    size = min(suggestion.size for suggestion in report.vocabulary)
    met = all(suggestion.met for suggestion in report.vocabulary)
    rule = (
        f"the largest size at which >= {vocab_size.MIN_SHARE:.0%} of the subword types occur >= "
        f"{vocab_size.MIN_OCCURRENCES} times (Gowda & May 2020), counted on the sample, scaled to the corpus"
        if met
        else "the smallest size tried: at no size do enough types occur often enough (a small corpus)"
    )
    return [f"vocabulary: suggested data.vocab_size={size} (now {cfg.vocab_size}): {rule}", *lines]


def _held_out_line(report: Report, cfg: DataConfig) -> str:
    asked = (
        0 if cfg.valid_path is not None else cfg.valid_size,
        0 if cfg.test_path is not None else cfg.test_size,
    )  # a given set is not carved out of the corpus
    line = f"distinct sources: {report.distinct_sources:,}; data.valid_size + data.test_size = {sum(asked):,}"
    try:
        held = held_out_sizes(report.distinct_sources, *asked)
    except DataError:
        return f"{line}: too many to hold out; give data.valid_path and data.test_path"
    if held != asked:
        return f"{line}, of which {held[0]:,} + {held[1]:,} are held out (at most 1/{HELD_OUT_PARTS} each)"
    return f"{line} of them are held out"


def render(report: Report, cfg: DataConfig) -> str:
    """The report as the command prints it."""
    stats = report.stats
    pairs = stats["pairs"]
    source = cfg.hub_dataset or (cfg.path if isinstance(cfg.path, str) else ", ".join(cfg.path))
    lines = [
        f"corpus: {source} ({cfg.direction}, data.encoding={cfg.encoding})",
        f"pairs: {pairs:,}",
        *_malformed_lines(report, cfg),
        f"duplicates: {pairs - report.distinct_pairs:,} pairs repeat an earlier pair "
        f"({(pairs - report.distinct_pairs) / pairs:.2%})",
        _held_out_line(report, cfg),
        f"source == target: {report.same_pairs:,} pairs ({report.same_pairs / pairs:.2%})",
        *_length_lines(report, cfg),
        *_vocabulary_lines(report, cfg),
        f"characters, duplicates: all pairs; tokens: a byte-level BPE trained on an evenly spread sample "
        f"of {report.sample_pairs:,} pairs, at data.vocab_size={cfg.vocab_size} (training learns its own "
        f"from up to data.tokenizer_max_pairs={cfg.tokenizer_max_pairs:,} training pairs)",
        f"took {report.seconds:.1f} s",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the report; exit status 1 when training would stop on this corpus, or on bad input
    (one ``error:`` line)."""
    args = sys.argv[1:] if argv is None else argv
    if help_asked(args, __doc__):
        return 0
    try:
        cfg = data_config(args)
        report = describe_corpus(cfg)
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(render(report, cfg))
    return 1 if report.verdict else 0


if __name__ == "__main__":
    sys.exit(main())
