"""A tiny model must memorise a handful of pairs: proves the whole gradient path works."""

import torch

from seq2seq.config import DecodeConfig, ModelConfig
from seq2seq.data.batching import pad_ids
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.decoding import generate
from seq2seq.model import Transformer
from seq2seq.training.loss import sequence_loss

PAIRS = [  # source ids -> target ids, different lengths, no specials
    ([5, 6, 7], [10, 11, 12, 13]),
    ([8, 9], [14, 15]),
    ([7, 6, 5, 9, 8], [16, 17, 18]),
    ([9, 9, 6], [13, 12, 11, 10, 19]),
]


def test_tiny_model_overfits_and_greedy_reproduces_targets(tiny_model_cfg: ModelConfig):
    torch.manual_seed(0)
    model = Transformer(tiny_model_cfg, 24, 24)
    src = pad_ids([[*s, EOS_ID] for s, _ in PAIRS])
    tgt_in = pad_ids([[BOS_ID, *t] for _, t in PAIRS])
    tgt_out = pad_ids([[*t, EOS_ID] for _, t in PAIRS])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        memory, src_mask = model.encode(src)
        states = model.decode_states(tgt_in, memory, src_mask)
        sums = sequence_loss(states, model.generator.weight, tgt_out, smoothing=0.0, pad_id=PAD_ID)
        optimizer.zero_grad()
        (sums.loss / sums.tokens).backward()
        optimizer.step()
    assert (sums.loss / sums.tokens).item() < 0.01
    model.eval()
    hypotheses = generate(model, src, DecodeConfig(beam_size=1))
    assert [h[0].tokens for h in hypotheses] == [t for _, t in PAIRS]
