"""Which transformers class a model is exported to, and why: the one answer the export, its message
and the model card share.

``MarianMTModel`` (post-norm) and ``PegasusForConditionalGeneration`` (pre-norm, one embedding
table) compute a model with sinusoidal positions and a ReLU or exact GELU feed-forward; they load
with the Auto classes alone. Every other model (a SwiGLU feed-forward, the default run's; learned
positions; pre-norm with untied embeddings) gets seq2seq's own class (``seq2seq/hf``), whose code
the folder carries.
"""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.config import GELU, RELU, ModelConfig

MARIAN = "MarianMTModel"
PEGASUS = "PegasusForConditionalGeneration"
OWN = "Seq2SeqTransformerForConditionalGeneration"  # seq2seq.hf.modeling_seq2seq's class
BUILTIN_ACTIVATIONS = (RELU, GELU)  # the model.activation values Marian and Pegasus compute ("gelu": erf)


@dataclass(frozen=True)
class Choice:
    """The class a model is exported to and why, in one clause."""

    class_name: str
    reason: str

    @property
    def custom_code(self) -> bool:
        """Whether loading needs seq2seq's class: ``import seq2seq.hf`` or ``trust_remote_code=True``."""
        return self.class_name == OWN

    def line(self) -> str:
        """The one line the export prints."""
        loading = (
            "loads after `import seq2seq.hf`, or with trust_remote_code=True"
            if self.custom_code
            else "loads with the Auto classes, no custom code"
        )
        return f"transformers class: {self.class_name} ({self.reason}; {loading})"


def builtin_gaps(cfg: ModelConfig) -> list[str]:
    """What about this model neither Marian nor Pegasus computes (empty when one of them does)."""
    gaps = []
    if cfg.activation not in BUILTIN_ACTIVATIONS:
        gaps.append(f"the gated {cfg.activation} feed-forward (theirs is {' or '.join(BUILTIN_ACTIVATIONS)})")
    if cfg.learned_positions:
        gaps.append("learned positions (theirs are sinusoidal)")
    if cfg.qk_norm:
        gaps.append("QK-norm (theirs scores the raw queries and keys)")
    if cfg.norm_first and not cfg.tie_embeddings:
        gaps.append("untied embeddings in a pre-norm model (Pegasus has one embedding table)")
    return gaps


def choose_class(cfg: ModelConfig) -> Choice:
    """Marian or Pegasus where one computes the model exactly, else seq2seq's own class."""
    gaps = builtin_gaps(cfg)
    if gaps:
        return Choice(OWN, f"seq2seq's own: neither {MARIAN} nor {PEGASUS} has {' and '.join(gaps)}")
    if cfg.norm_first:
        return Choice(PEGASUS, "pre-norm, with a final layer norm on each side, as this model")
    return Choice(MARIAN, "post-norm, as this model")
