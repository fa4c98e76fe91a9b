"""TensorBoard panels beyond scalars: sample translations, attention heatmaps, hyperparameters."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from matplotlib.figure import Figure
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only
from torch import Tensor

from seq2seq.data.tokenizer import BOS_ID, EOS_ID, token_labels
from seq2seq.hardware import describe


def attention_figure(weights: Tensor, query_tokens: list[str], key_tokens: list[str], title: str) -> Figure:
    """Heatmap of attention weights (Tq, Tk) with token labels; no pyplot, so no display is needed."""
    fig = Figure(figsize=(1 + 0.4 * len(key_tokens), 1 + 0.4 * len(query_tokens)))
    ax = fig.subplots()
    ax.imshow(weights.float().cpu().numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=8)
    ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


class TensorBoardPanels(pl.Callback):
    """Each validation: a text table of the first validation translations, attention maps of the first."""

    def __init__(self, n_samples: int = 4, attention_images: bool = True) -> None:
        self.n_samples = n_samples
        self.attention_images = attention_images

    def _logger(self, trainer: pl.Trainer) -> TensorBoardLogger | None:
        return next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)

    @rank_zero_only
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        logger = self._logger(trainer)
        if logger is not None:  # the resolved precision and the machine, so a run can be reproduced
            hparams = {**pl_module.hparams, "precision": str(trainer.precision), "hardware": describe()}
            logger.log_hyperparams(hparams, {"hp/best_bleu": 0.0})

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
            for name, fig in self._attention_figures(pl_module, sources[0], hypotheses[0]).items():
                logger.experiment.add_figure(f"attention/{name}", fig, step)

    def _attention_figures(self, pl_module: pl.LightningModule, source: str, hypothesis: str) -> dict:
        """Last-layer, head-averaged encoder self, decoder self and cross attention for one pair."""
        tokenizer = pl_module.tokenizer
        src_ids = tokenizer.encode_source([source])[0] + [EOS_ID]
        tgt_ids = [BOS_ID, *tokenizer.encode_target([hypothesis])[0]]
        src_tokens = token_labels(tokenizer.src, src_ids)
        tgt_tokens = token_labels(tokenizer.tgt, tgt_ids)
        device = pl_module.device
        was_training = pl_module.training
        pl_module.eval()
        with torch.no_grad():
            maps = pl_module.eval_model.attention_maps(
                torch.tensor([src_ids], device=device), torch.tensor([tgt_ids], device=device)
            )
        pl_module.train(was_training)
        return {
            "encoder_self": attention_figure(
                maps["encoder"][-1][0].mean(0), src_tokens, src_tokens, "encoder self"
            ),
            "decoder_self": attention_figure(
                maps["decoder_self"][-1][0].mean(0), tgt_tokens, tgt_tokens, "decoder self (causal)"
            ),
            "cross": attention_figure(
                maps["cross"][-1][0].mean(0), tgt_tokens, src_tokens, "cross (target→source)"
            ),
        }
