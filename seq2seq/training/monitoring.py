"""TensorBoard panels beyond scalars: sample translations, attention maps, hyperparameters, data counts."""

from __future__ import annotations

import statistics
from dataclasses import asdict

import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only

from seq2seq.data.tokenizers.tokenizer import EOS_ID, TranslationTokenizer
from seq2seq.inference.attention_views import (
    AttentionKind,
    SentenceAttention,
    grid_figure,
    heatmap_figure,
    sentence_attention,
)
from seq2seq.machine.hardware import describe


def typical_sentence(tokenizer: TranslationTokenizer, sources: list[str]) -> int:
    """Index of the first source whose token length is closest to the median: a sentence of usual
    length, the same one at every validation since the validation split is fixed."""
    lengths = [len(ids) for ids in tokenizer.encode_source(sources)]
    median = statistics.median(lengths)
    return min(range(len(lengths)), key=lambda i: abs(lengths[i] - median))


class TensorBoardPanels(pl.Callback):
    """Each validation: a text table of the first validation translations, attention maps of a typical one."""

    def __init__(self, n_samples: int = 4, attention_images: bool = True) -> None:
        self.n_samples = n_samples
        self.attention_images = attention_images

    def _logger(self, trainer: pl.Trainer) -> TensorBoardLogger | None:
        return next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)

    @rank_zero_only
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        logger = self._logger(trainer)
        if logger is not None:  # the resolved precision and the machine, so a run can be reproduced
            hparams = {
                "model": asdict(pl_module.model_cfg),
                "optim": asdict(pl_module.optim_cfg),
                "decode": asdict(pl_module.decode_cfg),
                "data": asdict(pl_module.data_cfg),
                "precision": str(trainer.precision),
                "hardware": describe(),
            }
            logger.log_hyperparams(hparams, {"hp/best_bleu": 0.0})
            self._log_data_stats(logger, trainer.datamodule)

    @staticmethod
    def _log_data_stats(logger: TensorBoardLogger, datamodule: pl.LightningDataModule | None) -> None:
        """The pairs each split kept and the training pairs over ``data.max_length``, as data/*."""
        for name, value in getattr(datamodule, "stats", {}).items():
            logger.experiment.add_scalar(f"data/{name}", value, 0)

    @rank_zero_only
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Runs after the module's ``on_validation_epoch_end``, so its fresh translations are reused."""
        logger = self._logger(trainer)
        sources, references, hypotheses = pl_module.val_samples
        if logger is None or trainer.sanity_checking or not sources:
            return
        step = trainer.global_step
        if self.n_samples:
            first = slice(self.n_samples)
            rows = [
                f"| {s} | {' / '.join(r)} | {h} |"
                for s, r, h in zip(sources[first], references[first], hypotheses[first], strict=True)
            ]
            table = "\n".join(["| source | reference(s) | hypothesis |", "|---|---|---|", *rows])
            logger.experiment.add_text("val/samples", table, step)
        if self.attention_images:
            typical = typical_sentence(pl_module.tokenizer, sources)
            attention = self._attention(pl_module, sources[typical], hypotheses[typical])
            for kind in AttentionKind:
                rows, columns = attention.axes(kind)
                last_layer = attention.maps[kind][-1].mean(0)  # (H, Tq, Tk) -> (Tq, Tk)
                figure = heatmap_figure(last_layer, rows, columns, f"{kind.title}, last layer, mean of heads")
                logger.experiment.add_figure(f"attention/{kind.value}", figure, step)
                logger.experiment.add_figure(
                    f"attention/{kind.value}_grid", grid_figure(attention, kind), step
                )

    def _attention(self, pl_module: pl.LightningModule, source: str, hypothesis: str) -> SentenceAttention:
        """Every layer's and head's maps of the validation model for one (source, hypothesis) pair."""
        tokenizer = pl_module.tokenizer
        was_training = pl_module.training
        pl_module.eval()
        attention = sentence_attention(
            pl_module.eval_model,
            tokenizer,
            [*tokenizer.encode_source([source])[0], EOS_ID],
            tokenizer.encode_target([hypothesis])[0],
        )
        pl_module.train(was_training)
        return attention
