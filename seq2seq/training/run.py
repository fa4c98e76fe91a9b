"""From a validated :class:`~seq2seq.config.RunConfig` and its claimed run directory to a trained,
checkpointed model: the data, the module and the Lightning Trainer with its callbacks
(:mod:`seq2seq.launch.start` gets a run this far).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only

from seq2seq.config import ConfigError, RunConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.sampler import BatchOrder
from seq2seq.formats.run_directory import RunDirectory
from seq2seq.training.budget import Budget
from seq2seq.training.checkpointing import AtomicCheckpointIO, InterruptBetweenBatches, SaveLast
from seq2seq.training.final_validation import ValidateAtTheEnd
from seq2seq.training.module import TranslationModule
from seq2seq.training.monitoring import TensorBoardPanels
from seq2seq.training.progress_log import GlobalBatch, ProgressLog, progress_bar
from seq2seq.training.requeue import slurm_environment
from seq2seq.training.starting_point import load_weights, open_start
from seq2seq.training.stopping import EarlyStoppingAfterWarmup, StopReport, ValidationSpacing, counting_from
from seq2seq.training.time_shares import TimeShares

log = logging.getLogger(__name__)


def config_yaml(run: RunConfig, header: list[str]) -> str:
    """The run's ``config.yaml``: ``header`` as comment lines, then every key of ``run``."""
    return "".join(f"# {line}\n" for line in header) + OmegaConf.to_yaml(OmegaConf.structured(run))


def build_trainer(run: RunConfig, run_dir: Path) -> pl.Trainer:
    """Lightning Trainer from ``run.trainer`` (any Lightning Trainer argument, so no schema of ours)
    plus the callbacks and logger that ``run`` configures."""
    callbacks_cfg, logger_cfg = run.callbacks, run.logger
    ckpt_dir = run_dir / "checkpoints"
    callbacks: list[pl.Callback] = [
        ModelCheckpoint(
            dirpath=ckpt_dir,
            filename="best",
            monitor="val/bleu",
            mode="max",
            save_top_k=1,
            enable_version_counter=False,  # a resumed run replaces best.ckpt, never adds best-v1.ckpt
        ),
        SaveLast(ckpt_dir, callbacks_cfg.checkpoint_every_n_steps),
        InterruptBetweenBatches(),
        BatchOrder(),
        Budget(run.optim.dropout_min_epochs),
        TimeShares(),
        GlobalBatch(run.data.max_tokens),
        ProgressLog(callbacks_cfg.progress_every_n_steps, callbacks_cfg.progress_every_s),
        ValidationSpacing(callbacks_cfg.min_steps_between_validations),
        StopReport(),
    ]
    if callbacks_cfg.keep_last:
        # Weights only, for averaging (python -m seq2seq.training.average); "step" always rises, so the top N
        # by step are the last N validations.
        callbacks.append(
            ModelCheckpoint(
                dirpath=ckpt_dir,
                filename="step-{step}",
                monitor="step",
                mode="max",
                save_top_k=callbacks_cfg.keep_last,
                save_weights_only=True,
                auto_insert_metric_name=False,
                enable_version_counter=False,
            )
        )
    if callbacks_cfg.early_stopping_patience:
        callbacks.append(
            EarlyStoppingAfterWarmup(callbacks_cfg.early_stopping_patience, *counting_from(run.optim))
        )
    bar = progress_bar(callbacks_cfg.progress_bar)
    if bar is not None:
        callbacks.append(bar)
    loggers: list[Any] = []
    if logger_cfg.tensorboard:
        loggers.append(
            TensorBoardLogger(str(run_dir), name="tensorboard", version="", default_hp_metric=False)
        )
        callbacks.append(TensorBoardPanels(logger_cfg.samples, logger_cfg.attention_images))
    try:
        trainer = pl.Trainer(
            **run.trainer,
            default_root_dir=str(run_dir),
            callbacks=callbacks,
            logger=loggers or False,
            enable_progress_bar=bar is not None,
            use_distributed_sampler=False,  # the token-budget sampler shards by rank itself
            plugins=[AtomicCheckpointIO(), *slurm_environment()],
        )
    except (TypeError, ValueError) as err:  # unknown or invalid trainer.* option
        raise ConfigError(f"trainer: {err}") from err
    trainer.callbacks.append(ValidateAtTheEnd())  # after the Timer that max_time adds: see its docstring
    return trainer


def train(run: RunConfig, claimed: RunDirectory, header: list[str]) -> dict[str, float]:
    """Train as ``run``, with this machine's choices settled, says, in ``claimed``, whose claim the
    caller holds (its rank 0 does); ``header``: the lines that head config.yaml. Returns the final
    logged metrics. ``run.init_from`` and ``run.ckpt_path`` are opened and checked against the run
    before anything is written; the run keeps ``init_from``'s tokenizer (also when it resumes)."""
    start = open_start(run)
    run_dir = claimed.path
    if rank_zero_only.rank == 0:  # every rank of a torchrun or SLURM launch runs this; one writes
        (run_dir / "config.yaml").write_text(config_yaml(run, header))
    pl.seed_everything(run.seed, workers=True)
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere+; no effect on CPU

    datamodule = TranslationDataModule(run.data, seed=run.seed, tokenizer=start.tokenizer if start else None)
    datamodule.setup("fit")  # in every process: one per cache directory builds, the others load it
    if rank_zero_only.rank == 0:
        datamodule.tokenizer.save(run_dir)

    module = TranslationModule(
        model=run.model,
        optim=run.optim,
        decode=run.decode,
        data=run.data,
        src_vocab_size=datamodule.tokenizer.src_vocab_size,
        tgt_vocab_size=datamodule.tokenizer.tgt_vocab_size,
        skip_nonfinite=run.skip_nonfinite,
        tokenizer=datamodule.tokenizer,
        compile=run.compile,
    )
    if start is not None and run.ckpt_path is None:  # a resumed run gets its weights from ckpt_path
        load_weights(module, start)
    n_params = module.model.num_parameters()
    log.info("model: %.2fM parameters; run directory: %s", n_params / 1e6, run_dir)
    trainer = build_trainer(run, run_dir)
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=run.ckpt_path)
    except SystemExit:
        if trainer.interrupted and not trainer.received_sigterm:  # Lightning's exit(1) after a Ctrl-C
            raise KeyboardInterrupt from None
        raise  # SIGTERM: Lightning's SIGTERMException, once SaveLast has saved
    return {name: float(value) for name, value in trainer.callback_metrics.items()}
