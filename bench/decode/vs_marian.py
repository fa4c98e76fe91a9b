"""Decoding speed against Hugging Face Marian and CTranslate2: our greedy and beam-4 search vs
``MarianMTModel.generate`` and vs the same model exported to CTranslate2 (float32 and int8 weights).

All with identical sizes and random weights (``bench/lib/decoders.py``), the same forced number of steps
(``--length``), on the same batch of real source sentences; repetitions interleaved, medians. Marian
needs ``transformers`` (the ``bench`` extra) and is skipped with a message when it is missing.
``--device cuda`` runs ours and Marian on the GPU and leaves the CTranslate2 exports out (they are
timed on a CPU); ``--dtype bf16`` puts both models' weights in bfloat16. Run it on an otherwise
idle machine (OpenMP's default wait policy, as in ``bench/decode/cache.py``).

    python -m bench.decode.vs_marian [--size small_postnorm] [--reps 3] [--length 32] [--device cuda]
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from bench.lib.decoders import add_model_arguments, export_engines, forced, random_model
from bench.lib.measure import bench_parser, median_times, ratio_line, target_for, targets
from seq2seq.config import ModelConfig
from seq2seq.data.tokenizers.tokenizer import EOS_ID, PAD_ID
from seq2seq.decoding import generate
from seq2seq.inference.translator import TranslatorBase
from seq2seq.machine.hardware import describe
from seq2seq.model import Transformer

TARGETS = {
    "decode_tokens_per_s_vs_marian": 1.5,  # ours at least this many times Marian's tokens/s
    "ct2_int8_vs_marian": 4,  # the CTranslate2 int8 export at least this many times Marian's
}


def marian_twin(cfg: ModelConfig, vocab: int) -> torch.nn.Module | None:
    """``MarianMTModel`` sized like ours (post-norm, ReLU, sinusoidal positions); None if not installed."""
    try:
        import transformers
        from transformers import MarianConfig, MarianMTModel
    except ImportError:
        return None
    transformers.logging.set_verbosity_error()
    config = MarianConfig(
        vocab_size=vocab,
        decoder_vocab_size=vocab,
        d_model=cfg.d_model,
        encoder_layers=cfg.n_encoder_layers,
        decoder_layers=cfg.n_decoder_layers,
        encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
        max_position_embeddings=cfg.max_positions,
        activation_function="relu",
        dropout=0.0,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=1,
    )
    return MarianMTModel(config).eval()


def bench_engines(
    model: Transformer,
    marian: torch.nn.Module | None,
    engines: dict[str, TranslatorBase],
    src: torch.Tensor,
    length: int,
    reps: int,
) -> dict[str, float]:
    """Ours, Marian (when installed) and the CTranslate2 exports (when given), greedy and beam 4,
    interleaved."""
    mask = src != PAD_ID
    sources = [row[keep].tolist() for row, keep in zip(src, mask, strict=True)]  # ids with EOS, no padding

    def hf(beam: int) -> Callable[[], object]:
        def run() -> object:
            with torch.inference_mode():
                return marian.generate(
                    input_ids=src,
                    attention_mask=mask,
                    num_beams=beam,
                    do_sample=False,
                    max_new_tokens=length,
                    min_new_tokens=length,
                )

        return run

    runs: dict[str, Callable[[], object]] = {}
    for search, beam in (("greedy", 1), ("beam4", 4)):
        runs[f"ours {search}"] = lambda b=beam: generate(model, src, forced(length, beam=b))
        if marian is not None:
            runs[f"marian {search}"] = hf(beam)
        for name, engine in engines.items():
            runs[f"{name} {search}"] = lambda e=engine, b=beam: e.search(sources, forced(length, beam=b))
    times = median_times(runs, reps)
    batch = src.size(0)
    print(f"batch {batch}, {length} tokens each (median of {reps})")
    for name, seconds in times.items():
        print(
            f"  {name:20s} {seconds:7.3f}s  {batch * length / seconds:8.0f} tokens/s  "
            f"{batch / seconds:7.1f} sent/s"
        )
    if marian is None:
        return {}
    ratios = {
        f"decode_tokens_per_s_vs_marian_{search}": times[f"marian {search}"] / times[f"ours {search}"]
        for search in ("greedy", "beam4")
    }
    if "ct2 int8 greedy" in times:
        ratios["ct2_int8_vs_marian_greedy"] = times["marian greedy"] / times["ct2 int8 greedy"]
    return ratios


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    add_model_arguments(parser)
    parser.add_argument("--length", type=int, default=32, help="forced output length")
    args = parser.parse_args()
    print(describe())
    setup = random_model(args)
    workdir = tempfile.TemporaryDirectory(prefix="bench-decode-")
    on_cpu = setup.device.type == "cpu"
    threads = torch.get_num_threads()
    engines = export_engines(setup.loaded(), Path(workdir.name), threads) if on_cpu else {}
    if not on_cpu:
        print("CTranslate2 exports left out: this benchmark times them on a CPU")
    generate(setup.model, setup.src, forced(8, beam=2))  # warm-up: thread pool, allocator, kernel selection
    marian = marian_twin(setup.cfg, setup.tokenizer.src_vocab_size)
    if marian is None:
        print("without Marian: transformers is not installed (pip install -e '.[bench]')")
    marian = marian and marian.to(setup.device, setup.dtype)
    goals = targets(args)
    for name, value in bench_engines(setup.model, marian, engines, setup.src, args.length, args.reps).items():
        print(ratio_line(f"{name}{setup.suffix}", value, target_for(name, goals)))


if __name__ == "__main__":
    main()
