"""What int8 decoding quantises and how it is reported (its bounds against float32 are tested with
bf16's, in test_bf16_inference.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seq2seq.formats.checkpoint import load_model
from seq2seq.inference.backends import open_model
from seq2seq.inference.cli import main
from seq2seq.inference.translator import Translator
from seq2seq.machine.hardware import DeviceError
from seq2seq.model.int8 import INT8, Int8Linear


def test_int8_quantises_a_copy_of_the_decoder_and_leaves_the_model_given(memorised_ckpt: Path) -> None:
    loaded = load_model(memorised_ckpt)
    translator = Translator(loaded.model, loaded.tokenizer, loaded.decode_config, dtype=INT8)
    assert isinstance(translator.model.generator, Int8Linear)
    layer = translator.model.decoder_layers[0]
    assert isinstance(layer.self_attn.q_proj, Int8Linear)
    assert isinstance(layer.cross_attn.out_proj, Int8Linear)
    assert not isinstance(layer.cross_attn.kv_proj, Int8Linear)  # once per source: float32
    assert not any(isinstance(m, Int8Linear) for m in translator.model.encoder_layers.modules())
    assert not any(isinstance(m, Int8Linear) for m in loaded.model.modules())
    assert translator.compute == "PyTorch int8 weights, float32 activations"
    with pytest.raises(DeviceError, match="on a CPU only"):
        Translator(loaded.model, loaded.tokenizer, loaded.decode_config, device="cuda", dtype=INT8)


def test_int8_decodes_on_the_cpu_when_the_device_is_auto_beside_a_gpu(
    memorised_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert open_model(memorised_ckpt, device="auto", dtype="int8").translator.device.type == "cpu"


def test_translate_reports_int8(memorised_ckpt: Path, capsys) -> None:
    assert main(["--ckpt", str(memorised_ckpt), "--dtype", "int8", "--beam", "3", "I like coffee."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
