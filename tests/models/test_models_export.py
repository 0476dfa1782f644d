"""ragfind.export for every role against transformers, both backends, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ragfind
from ragfind.models import read_model_folder

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _models_hf import TINYBERT_L2, save_random_bert  # noqa: E402

TEXTS = ["sparse lexical and expansion model", "late interaction over BERT", "a"]


def _feeds(hf, texts):
    tok = transformers.AutoTokenizer.from_pretrained(str(hf))
    return tok(texts, padding=True, truncation=True, return_tensors="pt")


def _run(folder, feats):
    import onnxruntime as ort

    cfg = read_model_folder(folder)
    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run([cfg.output], {n: feats[n].numpy() for n in names})[0]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "standard-ops"])
def test_bi_encoder_token_embeddings_equal_bert_model(tmp_path, fused):
    hf = save_random_bert(tmp_path / "hf", TINYBERT_L2, kind="base")
    ragfind.export(hf, tmp_path / "rf", fused=fused)
    feats = _feeds(hf, TEXTS)
    with torch.no_grad():
        ref = transformers.BertModel.from_pretrained(str(hf)).eval()(**feats).last_hidden_state.numpy()
    got = _run(tmp_path / "rf", feats)
    mask = feats["attention_mask"].numpy().astype(bool)
    np.testing.assert_allclose(got[mask], ref[mask], atol=1e-4)
    enc = ragfind.Encoder(tmp_path / "rf")
    assert enc.pooling == "mean" and enc.dim == TINYBERT_L2[1] and enc.max_length == 512


def test_splade_sparse_embedding_equals_masked_lm(tmp_path):
    hf = save_random_bert(tmp_path / "hf", TINYBERT_L2, kind="masked-lm")
    ragfind.export(hf, tmp_path / "rf", role="splade")
    feats = _feeds(hf, TEXTS)
    with torch.no_grad():
        logits = transformers.BertForMaskedLM.from_pretrained(str(hf)).eval()(**feats).logits
        act = torch.log1p(torch.relu(logits)) * feats["attention_mask"].unsqueeze(-1)
        ref = act.max(dim=1).values.numpy()
    got = _run(tmp_path / "rf", feats)
    cfg = read_model_folder(tmp_path / "rf")
    assert cfg.role == "splade" and cfg.output == "sparse_embedding" and cfg.dim == 30522
    np.testing.assert_allclose(got, ref, atol=1e-4)
    assert (got > 0).sum() > 0


def test_colbert_projection(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf = save_random_bert(tmp_path / "hf", TINYBERT_L2, kind="base")
    weights = load_file(str(hf / "model.safetensors"))
    rng = np.random.default_rng(0)
    weights["linear.weight"] = rng.standard_normal((32, TINYBERT_L2[1])).astype(np.float32) * 0.1
    save_file(weights, str(hf / "model.safetensors"))
    ragfind.export(
        hf, tmp_path / "rf", role="colbert", extra_config={"colbert": {"query_marker": "[unused0]"}}
    )
    feats = _feeds(hf, TEXTS)
    with torch.no_grad():
        h = transformers.BertModel.from_pretrained(str(hf)).eval()(**feats).last_hidden_state.numpy()
    ref = h @ weights["linear.weight"].T
    got = _run(tmp_path / "rf", feats)
    mask = feats["attention_mask"].numpy().astype(bool)
    np.testing.assert_allclose(got[mask], ref[mask], atol=1e-4)
    cfg = read_model_folder(tmp_path / "rf")
    assert cfg.dim == 32 and cfg.normalize and cfg.raw["colbert"] == {"query_marker": "[unused0]"}


def test_torch_backend_matches_builder(tmp_path):
    hf = save_random_bert(tmp_path / "hf", TINYBERT_L2, num_labels=1)
    ragfind.export(hf, tmp_path / "builder", role="cross-encoder", backend="builder")
    ragfind.export(hf, tmp_path / "torch", role="cross-encoder", backend="torch")
    assert read_model_folder(tmp_path / "torch").backend == "torch"
    pairs = [("query one", t) for t in TEXTS]
    a = ragfind.CrossEncoder(tmp_path / "builder").predict(pairs, activation="raw")
    b = ragfind.CrossEncoder(tmp_path / "torch").predict(pairs, activation="raw")
    np.testing.assert_allclose(a, b, atol=1e-4)
    # same weights and settings: same fingerprint whichever backend wrote the graph
    assert (
        ragfind.CrossEncoder(tmp_path / "builder").fingerprint
        == ragfind.CrossEncoder(tmp_path / "torch").fingerprint
    )


def test_sentence_transformers_metadata_is_read(tmp_path):
    hf = save_random_bert(tmp_path / "hf", TINYBERT_L2, kind="base")
    (hf / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (hf / "1_Pooling").mkdir()
    (hf / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    (hf / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64}))
    (hf / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "document": "passage: "}})
    )
    ragfind.export(hf, tmp_path / "rf")
    enc = ragfind.Encoder(tmp_path / "rf")
    assert (enc.pooling, enc.max_length, enc.config.normalize) == ("cls", 64, False)
    assert (enc.config.query_prefix, enc.config.document_prefix) == ("query: ", "passage: ")
    # the prefixes are applied: a query equals the document-side encoding of "query: " + text
    q = enc.encode_query("alpha beta")
    plain = tmp_path / "plain"  # same weights, prefixes overridden to none
    ragfind.export(hf, plain, query_prefix="", document_prefix="")
    plain_enc = ragfind.Encoder(plain)
    np.testing.assert_allclose(plain_enc.encode(["query: alpha beta"])[0], q, atol=1e-5)
    np.testing.assert_allclose(
        plain_enc.encode(["passage: alpha beta"])[0], enc.encode(["alpha beta"])[0], atol=1e-5
    )
    assert plain_enc.fingerprint != enc.fingerprint  # prefixes are part of the fingerprint
    np.testing.assert_allclose(enc.encode_queries(["alpha beta"])[0], q, atol=1e-5)
    assert not np.allclose(enc.encode(["alpha beta"])[0], q, atol=1e-3)


def test_cli_export(tmp_path, capsys):
    from ragfind.cli import main

    hf = save_random_bert(tmp_path / "hf", TINYBERT_L2, num_labels=1)
    assert (
        main(["export", str(hf), str(tmp_path / "rf"), "--role", "cross-encoder", "--quantize", "int8"]) == 0
    )
    out = capsys.readouterr().out
    assert "cross-encoder" in out and "int8" in out and "fingerprint" in out
    assert read_model_folder(tmp_path / "rf").quantization == "int8"
    with pytest.raises(SystemExit, match="already exists"):
        main(["export", str(hf), str(tmp_path / "rf"), "--role", "cross-encoder"])
    assert main(["export", str(hf), str(tmp_path / "rf"), "--role", "cross-encoder", "--overwrite"]) == 0
    assert read_model_folder(tmp_path / "rf").quantization is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
