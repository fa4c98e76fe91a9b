"""serve.py --model: an export (CTranslate2 or transformers) behind the same HTTP API, answering as
its own translator does; attention maps, which only the checkpoint has, are refused in one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from seq2seq.inference.backends import open_model
from seq2seq.serving.app import create_app
from seq2seq.serving.batcher import DynamicBatcher
from seq2seq.serving.cli import build_parser, describe_model, load
from seq2seq.serving.cli import main as serve_main
from seq2seq.serving.service import Limits, TranslationService

TEXTS = ["How are you?", "I like coffee.", "   ", "Where is the station, please?"]
EXPORTS = {"ctranslate2": "ct2_export", "transformers": "hf_export"}  # engine -> conftest's fixture


@pytest.fixture(scope="module", params=sorted(EXPORTS))
def exported(request) -> Path:
    """The trained checkpoint exported for each engine (float32 for CTranslate2)."""
    return request.getfixturevalue(EXPORTS[request.param])


@pytest.fixture(scope="module")
def client(exported: Path) -> Iterator[TestClient]:
    translator, facts, _ = open_model(model=exported, device="cpu")
    service = TranslationService(facts, DynamicBatcher(translator, 64, 0.005), Limits())
    with TestClient(create_app(service)) as client:
        yield client


def test_an_export_translates_as_its_own_translator(client: TestClient, exported: Path) -> None:
    translator = open_model(model=exported, device="cpu").translator
    beam_3 = translator.decode_cfg_with(beam=3, nbest=1)
    expected = [nbest[0].text for nbest in translator.translate(TEXTS, beam_3)]
    response = client.post("/translate", json={"text": TEXTS, "beam": 3})
    assert response.status_code == 200, response.text
    assert [result["text"] for result in response.json()["translations"]] == expected


def test_an_export_has_no_attention_maps_and_says_so_in_one_line(client: TestClient) -> None:
    response = client.post("/attention", json={"text": "How are you?"})
    assert response.status_code == 501
    assert response.json() == {
        "error": "this server runs an export: attention maps need the checkpoint (--ckpt)"
    }


def test_info_names_the_export_its_engine_and_the_checkpoint_it_came_from(
    client: TestClient, exported: Path, trained_ckpt: Path
) -> None:
    info = client.get("/info").json()
    assert info["checkpoint"] == exported.name
    assert info["engine"] in {"CTranslate2 float32", "transformers MarianMTModel float32"}
    assert info["parameters"] > 0 and info["model"]["d_model"] == 32 and info["tgt_vocab_size"] == 300


def test_ckpt_and_model_together_are_a_usage_error(trained_ckpt: Path, exported: Path, capsys) -> None:
    assert serve_main(["--ckpt", str(trained_ckpt), "--model", str(exported)]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_folder_that_is_not_an_export_is_one_line(tmp_path: Path, capsys) -> None:
    assert serve_main(["--model", str(tmp_path), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is not a seq2seq export" in err


def test_serve_py_model_loads_the_export_and_describes_it(exported: Path, trained_ckpt: Path) -> None:
    translator, served, _ = load(build_parser().parse_args(["--model", str(exported), "--device", "cpu"]))
    line = describe_model(served)
    assert line.startswith(f"model {exported.name}: ") and "d_model 32, 2+2 layers" in line
    assert served.attention is False and translator.compute in {
        "CTranslate2 float32",
        "transformers MarianMTModel float32",
    }
