"""The LightningModule: loss, logging and validation BLEU, trained with the optimizer and LR schedule
of :mod:`seq2seq.training.optimizers`.

Its configuration and tokenizer travel in the checkpoint's own entry (:mod:`seq2seq.formats.checkpoint`),
the one copy of them in the file: Lightning's copy of the hyperparameters is not saved.
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor

from seq2seq.config import ConfigError, DataConfig, DecodeConfig, ModelConfig, OptimConfig
from seq2seq.data.batching import Batch
from seq2seq.data.cache import cache_root
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer
from seq2seq.formats.checkpoint import KEY, resume_state, seq2seq_entry
from seq2seq.inference.evaluation import score
from seq2seq.inference.translator import Translator
from seq2seq.machine.hardware import precision_dtype
from seq2seq.model import Transformer
from seq2seq.training.budget import budget_spent
from seq2seq.training.captured_step import CapturedStep
from seq2seq.training.loss import LossSums, sequence_loss
from seq2seq.training.optimizers import build_optimizer, fused_adamw_applies, lr_schedule
from seq2seq.training.sharding import translate_sharded

log = logging.getLogger(__name__)

# The state dict names each weight after the attribute holding its Transformer: the trained one at
# `TranslationModule.model`, the moving average of its weights at `TranslationModule.ema_model`.
MODEL_PREFIX = "model."
EMA_PREFIX = "ema_model."


class NonFiniteLossError(RuntimeError):
    """The loss became NaN/inf; training stops rather than corrupting the weights."""


def host_scalar(value: float) -> Tensor:
    """A value known on the host, as the CPU tensor ``self.log`` keeps where it is. Given a float,
    Lightning makes a tensor on the module's device, and on a GPU that blocking copy waits for
    every kernel queued before it: the step's host would stop running ahead of the GPU. Float64,
    the host's own precision, which no device computation here produces (tests tell them apart)."""
    return torch.tensor(value, dtype=torch.float64)


class FiniteLossWatch:
    """Stops training at a non-finite loss without making every step wait for the device.

    On a GPU the verdict on a step's loss is copied to the host asynchronously and read once the
    device is past it, at a later step, so the host keeps queueing work ahead of the GPU; the
    error then names the step whose loss it was. On a CPU the verdict is read at once.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[Tensor, torch.cuda.Event, int, Tensor]] = []  # (verdict, event, step, loss)

    def watch(self, loss: Tensor, step: int) -> None:
        """Raises :class:`NonFiniteLossError` for this step's loss or an earlier one, once known."""
        if loss.device.type != "cuda":
            self._check(torch.isfinite(loss), step, loss)
            return
        verdict = torch.empty((), dtype=torch.bool, pin_memory=True)
        verdict.copy_(torch.isfinite(loss.detach()), non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._pending.append((verdict, event, step, loss.detach()))
        while self._pending and self._pending[0][1].query():  # computed already: reading costs nothing
            verdict, _, step, loss = self._pending.pop(0)
            self._check(verdict, step, loss)

    @staticmethod
    def _check(finite: Tensor, step: int, loss: Tensor) -> None:
        if not finite:
            raise NonFiniteLossError(
                f"non-finite loss ({loss.item()}) at step {step}; lower optim.lr, "
                "or set skip_nonfinite=true to skip such batches"
            )


class TranslationModule(pl.LightningModule):
    """Trains a :class:`Transformer` with label-smoothed cross-entropy and scores it with BLEU/chrF."""

    def __init__(
        self,
        model: ModelConfig,
        optim: OptimConfig,
        decode: DecodeConfig,
        data: DataConfig,
        src_vocab_size: int,
        tgt_vocab_size: int,
        skip_nonfinite: bool = False,
        tokenizer: TranslationTokenizer | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.model_cfg = model
        self.optim_cfg = optim
        self.decode_cfg = decode
        self.data_cfg = data
        # `model` and `ema_model` name the weights in the state dict (MODEL_PREFIX, EMA_PREFIX).
        self.model = Transformer(self.model_cfg, src_vocab_size, tgt_vocab_size)
        # A running average of the weights is a better model than the noisy latest one while the
        # learning rate is still high, i.e. for the whole of a short run; it is what gets validated.
        self.ema_model = (
            copy.deepcopy(self.model).requires_grad_(False) if self.optim_cfg.ema_decay > 0 else None
        )
        # compile=true: with static shapes, the training step's forward and loss, one graph per
        # shape; else each layer in place, for any shape (the parameters keep their names).
        self.captured: CapturedStep | None = None
        if compile and data.static_shapes:
            cache = cache_root(data)  # compiled graphs persist beside the data caches
            self.captured = CapturedStep(self.model, optim.label_smoothing, cache_root=cache)
        elif compile:
            self.model.compile()
        self.tokenizer = tokenizer
        self.skip_nonfinite = skip_nonfinite
        self._finite_watch = FiniteLossWatch()
        self._step_started = time.perf_counter()
        self.best_bleu = 0.0
        self.val_samples: tuple[list[str], list[list[str]], list[str]] = ([], [], [])

    @property
    def eval_model(self) -> Transformer:
        """The weights that are validated and that inference loads: the EMA when enabled."""
        return self.ema_model if self.ema_model is not None else self.model

    @property
    def eval_prefix(self) -> str:
        """The state-dict prefix of :attr:`eval_model`'s weights, which the checkpoint names for inference."""
        return EMA_PREFIX if self.ema_model is not None else MODEL_PREFIX

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        return self.model(src, tgt)

    def _loss_sums(self, batch: Batch, stage: str) -> LossSums:
        """The batch's loss sums: captured in training where it is, else eager, at real tokens only."""
        if stage == "train" and self.captured is not None:
            return self.captured(batch)
        model = self.model if stage == "train" else self.eval_model
        memory, src_mask = model.encode(batch.src)
        states = model.decode_states(batch.tgt_in, memory, src_mask)  # (B, T, D)
        smoothing, pad_id = self.optim_cfg.label_smoothing, self.model.pad_id
        return sequence_loss(states, model.generator.weight, batch.tgt_out, smoothing, pad_id, batch.tgt_real)

    def _shared_step(self, batch: Batch, stage: str) -> Tensor:
        sums = self._loss_sums(batch, stage)
        loss, nll = sums.loss / sums.tokens, sums.nll / sums.tokens
        on_step = stage == "train"
        metrics = {"loss": loss, "nll": nll, "ppl": nll.detach().exp(), "acc": sums.correct / sums.tokens}
        for name, value in metrics.items():
            # Each rank validates its own batches: the epoch values are token-weighted over all ranks.
            # A training step's values are logged as they are, so they need no count from the device.
            self.log(
                f"{stage}/{name}",
                value,
                batch_size=1 if on_step else sums.tokens,
                # Lightning reads the bar's values at every step: a training loss there would make
                # each step on a GPU wait for the device. The progress lines show it instead.
                prog_bar=name == "loss" and not on_step,
                on_step=on_step,
                on_epoch=not on_step,
                sync_dist=not on_step,
            )
        return loss

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor | None:
        loss = self._shared_step(batch, "train")
        if self.skip_nonfinite:  # skipping needs the verdict before this step's update: a device sync
            if not torch.isfinite(loss):
                log.warning("skipping batch %d: non-finite loss at step %d", batch_idx, self.global_step)
                return None
        else:
            self._finite_watch.watch(loss, self.global_step)
        tokens = batch.real_tokens()
        now = time.perf_counter()
        elapsed, self._step_started = now - self._step_started, now
        tokens_per_s = host_scalar(tokens / max(elapsed, 1e-6))
        self.log("train/tokens_per_s", tokens_per_s, prog_bar=True, on_step=True, batch_size=1)
        self.log("train/lr", host_scalar(self.optimizers().param_groups[0]["lr"]), on_step=True, batch_size=1)
        return loss

    def on_train_batch_start(self, batch: Batch, batch_idx: int) -> None:
        if batch_idx == 0:
            self._step_started = time.perf_counter()

    def compile_seconds(self) -> float:
        """Seconds spent so far compiling the captured step (0 without one): the budget's step rate
        leaves them out."""
        return 0.0 if self.captured is None else self.captured.compile_seconds

    def on_train_batch_end(self, outputs: Any, batch: Batch, batch_idx: int) -> None:
        line = self.captured.step_ended() if self.captured is not None else None
        if line and self.trainer.is_global_zero:
            log.info("%s", line)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        """Decode the held-out sources with the same code as the evaluation command and score them.

        Under DDP each rank decodes a share of the sources and every rank gets all hypotheses back
        (:mod:`seq2seq.training.sharding`), so every rank scores the same full, ordered lists and
        logs the same BLEU, and ``val_samples`` is complete wherever the sample panel reads it.
        """
        if self.trainer.sanity_checking or self.tokenizer is None or self.trainer.datamodule is None:
            return
        sources, references = self.trainer.datamodule.references("valid")
        if not sources:
            return
        dtype = precision_dtype(str(self.trainer.precision))  # decode as training computes
        translator = Translator(
            self.eval_model,
            self.tokenizer,
            self.decode_cfg,
            self.device,
            self.data_cfg.eval_max_tokens,
            dtype,
        )
        hypotheses = translate_sharded(
            lambda share: [best.text for best, *_ in translator.translate(share)],
            sources,
            self.trainer.global_rank,
            self.trainer.world_size,
        )
        self.val_samples = (sources, references, hypotheses)
        scores = score(hypotheses, references)
        self.best_bleu = max(self.best_bleu, scores["bleu"])
        # The same value on every rank already. sync_dist spares DDP runs Lightning's warning about
        # unsynced epoch metrics; max keeps the value exact, where a mean of N copies can round.
        self.log("val/bleu", scores["bleu"], prog_bar=True, sync_dist=True, reduce_fx="max")
        self.log("val/chrf", scores["chrf"], sync_dist=True, reduce_fx="max")
        self.log("hp/best_bleu", self.best_bleu, sync_dist=True, reduce_fx="max")

    def configure_optimizers(self) -> Any:
        fused = fused_adamw_applies(str(self.trainer.precision))
        optimizer = build_optimizer(self.model, self.optim_cfg, fused)
        scheduler = lr_schedule(optimizer, self.optim_cfg, budget_spent(self.trainer))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """``trainer.gradient_clip_val`` by the global norm, as Lightning clips, done here.

        Under mixed precision Lightning refuses to clip for a fused optimizer, since one that
        unscales fp16 gradients inside its step would see them clipped while still scaled. Where
        :func:`fused_adamw_applies`, gradients are never scaled (fp32 and bf16 have no loss
        scaling), so the clip is the same as Lightning's. Clipping by value stays Lightning's.
        """
        if gradient_clip_algorithm not in (None, "norm"):
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        elif gradient_clip_val:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val, foreach=True)

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        if self.ema_model is not None:
            self._update_ema()

    @torch.no_grad()
    def _update_ema(self) -> None:
        """ema += (1 - decay)·(weights - ema); the decay ramps up over the first steps, so the
        average does not drag the random initialisation along."""
        n = self.global_step
        decay = min(self.optim_cfg.ema_decay, (1 + n) / (10 + n))
        torch._foreach_lerp_(list(self.ema_model.parameters()), list(self.model.parameters()), 1.0 - decay)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.tokenizer is None:
            raise RuntimeError("attach the tokenizer before saving: checkpoints must be self-contained")
        checkpoint[KEY] = seq2seq_entry(
            self.model_cfg, self.decode_cfg, self.data_cfg, self.tokenizer, self.eval_prefix, self.best_bleu
        )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        tokenizer, self.best_bleu = resume_state(checkpoint)
        if tokenizer is None:
            return
        if self.tokenizer is not None and tokenizer.to_dict() != self.tokenizer.to_dict():
            # the data were encoded with this run's tokenizer: the checkpoint's would mean other tokens
            raise ConfigError(
                "ckpt_path: the checkpoint's tokenizer is not the one this run's data.* settings give; "
                "resume a run started with init_from with that init_from too"
            )
        self.tokenizer = tokenizer
