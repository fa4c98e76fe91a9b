"""seq2seq's own transformers model class, registered with ``AutoConfig`` and
``AutoModelForSeq2SeqLM``: after ``import seq2seq.hf`` the Auto classes load a folder that
``python -m seq2seq.export --to transformers`` wrote with this class, with no
``trust_remote_code``. Not imported by ``import seq2seq``: importing transformers costs seconds
that training and translating without it should not pay (docs/export.md, Hugging Face transformers).
"""

from transformers import AutoConfig, AutoModelForSeq2SeqLM

from seq2seq.hf.configuration_seq2seq import Seq2SeqTransformerConfig
from seq2seq.hf.modeling_seq2seq import Seq2SeqTransformerForConditionalGeneration

AutoConfig.register(Seq2SeqTransformerConfig.model_type, Seq2SeqTransformerConfig)
AutoModelForSeq2SeqLM.register(Seq2SeqTransformerConfig, Seq2SeqTransformerForConditionalGeneration)

__all__ = ["Seq2SeqTransformerConfig", "Seq2SeqTransformerForConditionalGeneration"]
