"""What the decoding benchmarks share: a model of a config size with random weights, its tokenizer and
a batch of real sentences; decoding forced to a length; and a model's CTranslate2 exports.

Random weights never end a sentence early, so every search takes every step it is allowed.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from bench.lib.measure import model_config, sample_corpus_pairs
from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.data.batching import pad_ids
from seq2seq.data.tokenizers.tokenizer import EOS_ID, TranslationTokenizer
from seq2seq.formats.checkpoint import LoadedModel
from seq2seq.formats.export_folder import load_bundle
from seq2seq.inference.translator import DEFAULT_BATCH_TOKENS, TranslatorBase
from seq2seq.machine.hardware import AUTO, resolve_dtype
from seq2seq.model import Transformer

# configs/model/<size>.yaml -> vocabulary: post-norm ReLU, as Marian
VOCAB = {"tiny": 2000, "small_postnorm": 8000}
QUANTIZATIONS = ("float32", "int8")  # the CTranslate2 exports timed against ours
POOL = 2000  # real sentences the batch is picked from, spread over all lengths


def forced(length: int, beam: int = 1) -> DecodeConfig:
    """Exactly ``length`` output tokens per sentence: EOS banned until the limit."""
    return DecodeConfig(beam_size=beam, max_len_a=0.0, max_len_b=length, min_len=length)


@dataclass
class RandomModel:
    """A model with random weights on the benchmark's device and dtype, and what it decodes."""

    cfg: ModelConfig
    model: Transformer
    tokenizer: TranslationTokenizer
    sources: list[str]  # distinct real sentences, spread over all lengths
    src: torch.Tensor  # (B, S): a batch of them, every len(sources) // B-th, with EOS
    device: torch.device
    dtype: torch.dtype
    suffix: str  # of the RATIO names: "" in float32, else "_bf16"

    def loaded(self) -> LoadedModel:
        """The model as a checkpoint's record, for an export."""
        return LoadedModel.from_model(
            self.model, "random weights", self.tokenizer, DecodeConfig(beam_size=5), DataConfig()
        )


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the benchmarks that decode a model with random weights."""
    parser.add_argument("--size", choices=sorted(VOCAB), default="small_postnorm")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per measurement")
    parser.add_argument("--batch", type=int, default=64, help="sentences per batch")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--dtype",
        choices=["fp32", "bf16", "auto"],
        default="fp32",
        help="weights of the decoders; auto = what translate.py --dtype auto picks here",
    )


def random_model(args: argparse.Namespace, sentences: int = POOL) -> RandomModel:
    """The ``--size`` model with random weights, a tokenizer trained on 40,000 real pairs, and a batch
    of ``--batch`` real sentences out of ``sentences``. ``--dtype auto`` is resolved as translate.py
    resolves it."""
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda: torch sees no CUDA GPU here")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    cfg, vocab = replace(model_config(args.size), dropout=0.0), VOCAB[args.size]
    distinct = list(dict.fromkeys(sample_corpus_pairs(3 * sentences)[0]))
    sources = distinct[:: max(1, len(distinct) // sentences)][:sentences]  # the corpus is sorted by length
    tokenizer = TranslationTokenizer.train(*sample_corpus_pairs(40_000), vocab, shared=True)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    if args.dtype == "auto":
        dtype, reason = resolve_dtype(AUTO, cfg, device.type)
        args.dtype = "bf16" if dtype == torch.bfloat16 else "fp32"
        print(f"auto: {args.dtype} ({reason})")
    model = Transformer(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size).eval().to(device, dtype)
    step = len(sources) // args.batch
    batch_sources = [sources[i * step] for i in range(args.batch)]
    src = pad_ids([[*ids, EOS_ID] for ids in tokenizer.encode_source(batch_sources)]).to(device)
    print(
        f"size {args.size}: {cfg}, vocab {tokenizer.src_vocab_size}, {torch.get_num_threads()} threads, "
        f"{args.dtype}, on {device.type}"
    )
    print(f"batch of {args.batch} real sentences, {src.size(1)} source tokens at most")
    suffix = "" if args.dtype == "fp32" else f"_{args.dtype}"
    return RandomModel(cfg, model, tokenizer, sources, src, device, dtype, suffix)


def export_engines(
    loaded: LoadedModel, directory: Path, threads: int, quantizations: tuple[str, ...] = QUANTIZATIONS
) -> dict[str, TranslatorBase]:
    """The model exported to CTranslate2 in each of ``quantizations``, loaded on the CPU. CTranslate2 is
    imported here, where its exports are timed, so the GPU benchmarks run where it is not installed."""
    from seq2seq.export.to_ctranslate2 import export_model
    from seq2seq.inference.ct2_translator import CT2Translator

    engines: dict[str, TranslatorBase] = {}
    for quantization in quantizations:
        out = export_model(loaded, directory / quantization, quantization, source=loaded.name)
        engines[f"ct2 {quantization}"] = CT2Translator(
            out, load_bundle(out), "cpu", DEFAULT_BATCH_TOKENS, threads=threads
        )
    return engines
