"""Static encoders: lookup-and-mean parity, the model2vec folder, fingerprints, the ridge fit and
a Retriever with a fitted static query encoder (tiny seeded tables, no download)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from tests.hash_encoders import HashEncoder

import ragfind
from ragfind.models.static import (
    StaticEncoder,
    read_safetensors,
    write_safetensors,
    write_static_folder,
    zipf_sif_weights,
)
from ragfind.models.static_fit import _Bag, fit_table, pseudo_queries
from ragfind.pipeline.chunking import default_tokenizer_path

DIM = 8

DOCS = [
    {"id": "a", "text": "vitamin d deficiency and bone density in older adults"},
    {"id": "b", "text": "neural networks learn representations of text for retrieval"},
    {"id": "c", "text": "the aircraft wing boundary layer at high mach numbers"},
    {"id": "d", "text": "bone fractures heal faster with calcium and vitamin supplements"},
    {"id": "e", "text": "sparse retrieval with bm25 and dense retrieval with embeddings"},
]


def _vocab() -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(default_tokenizer_path())).get_vocab_size(with_added_tokens=True)


def _table(dim=DIM, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((_vocab(), dim)).astype(np.float32)


def _static(tmp_path, name="m", dim=DIM, seed=0, **kw):
    return write_static_folder(tmp_path / name, _table(dim, seed), default_tokenizer_path(), **kw)


def _reference(enc: StaticEncoder, text: str) -> np.ndarray:
    """A slow obvious reference: the python-loop mean of the token rows, then L2 norm."""
    ids = enc.tokenizer.encode(text, add_special_tokens=False).ids[: enc.max_length]
    acc = [0.0] * enc.dim
    for i in ids:
        for j in range(enc.dim):
            acc[j] += float(enc.table[i, j])
    v = np.array([a / max(1, len(ids)) for a in acc])
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


def test_encode_matches_python_loop_reference(tmp_path):
    enc = ragfind.load_model(_static(tmp_path))
    assert isinstance(enc, StaticEncoder) and enc.dim == DIM
    texts = [d["text"] for d in DOCS] + ["Unseen WORDS, punctuation!?", "x"]
    batch = enc.encode(texts, batch_size=3)
    for t, row in zip(texts, batch):
        ref = _reference(enc, t)
        np.testing.assert_allclose(row, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(enc.encode_query(t), ref, rtol=1e-5, atol=1e-6)
    assert enc.encode(texts[0]).shape == (DIM,)
    raw = enc.encode_query(texts[0], normalize=False)
    ids = enc.token_ids(texts[0])
    np.testing.assert_allclose(raw, enc.table[ids].mean(axis=0), rtol=1e-5)


def test_bad_input_and_empty_text(tmp_path):
    enc = StaticEncoder(_static(tmp_path))
    with pytest.raises(ValueError, match="empty string"):
        enc.encode_query("")
    with pytest.raises(ValueError, match="empty list"):
        enc.encode([])
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        enc.encode(["ok", 3])
    with pytest.raises(ValueError, match="batch_size"):
        enc.encode(["ok"], batch_size=0)
    # no token at all: the zero vector, in both paths
    assert not enc.encode_query("   ").any()
    out = enc.encode(["   ", "bone"])
    assert not out[0].any() and np.isclose(np.linalg.norm(out[1]), 1.0)


def test_model2vec_folder_is_read(tmp_path):
    """model2vec's layout, written by the safetensors package: an embeddings tensor, per-token
    weights, its config.json."""
    st = pytest.importorskip("safetensors.numpy")
    folder = tmp_path / "m2v"
    folder.mkdir()
    table = _table()
    w = np.linspace(0.5, 2.0, table.shape[0]).astype(np.float32)
    st.save_file({"embeddings": table.astype(np.float16), "weights": w}, str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_bytes(default_tokenizer_path().read_bytes())
    cfg = {"model_type": "model2vec", "architectures": ["StaticModel"], "hidden_dim": DIM, "normalize": True}
    (folder / "config.json").write_text(json.dumps(cfg))
    enc = ragfind.load_model(folder)
    assert isinstance(enc, StaticEncoder) and enc.target_fingerprint is None
    np.testing.assert_allclose(enc.table, table.astype(np.float16).astype(np.float32) * w[:, None], rtol=1e-6)
    np.testing.assert_allclose(enc.encode_query("bone density"), _reference(enc, "bone density"), rtol=1e-5)


def test_safetensors_writer_is_read_by_the_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    write_safetensors(tmp_path / "x.safetensors", {"embeddings": a})
    np.testing.assert_array_equal(st.load_file(str(tmp_path / "x.safetensors"))["embeddings"], a)
    np.testing.assert_array_equal(read_safetensors(tmp_path / "x.safetensors")["embeddings"], a)


def test_corrupt_folders_are_refused(tmp_path):
    bad = _static(tmp_path, "short")
    write_safetensors(bad / "model.safetensors", {"embeddings": np.zeros((10, DIM), np.float32)})
    with pytest.raises(ragfind.ModelFolderError, match="rows but the tokenizer"):
        StaticEncoder(bad)
    trunc = _static(tmp_path, "trunc")
    data = (trunc / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(data[:-100])
    with pytest.raises(ragfind.ModelFolderError, match="byte range"):
        StaticEncoder(trunc)
    head = _static(tmp_path, "head")
    (head / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(ragfind.ModelFolderError, match="header"):
        StaticEncoder(head)
    noemb = _static(tmp_path, "noemb")
    write_safetensors(noemb / "model.safetensors", {"other": np.zeros((3, 2), np.float32)})
    with pytest.raises(ragfind.ModelFolderError, match="embeddings"):
        StaticEncoder(noemb)


def test_fingerprint_differs_and_mixed_index_is_refused(tmp_path):
    a = StaticEncoder(_static(tmp_path, "a", seed=0))
    b = StaticEncoder(_static(tmp_path, "b", seed=1))
    assert a.fingerprint != b.fingerprint
    assert StaticEncoder(a.path).fingerprint == a.fingerprint
    assert a.save(tmp_path / "a2") and StaticEncoder(tmp_path / "a2").fingerprint == a.fingerprint
    r = ragfind.Retriever(encoder=a, chunk_size=None, cache_size=0)
    r.add_documents(DOCS)
    r.save(tmp_path / "r")
    with pytest.raises(ragfind.ModelMismatchError):
        ragfind.Retriever.load(tmp_path / "r", encoder=b)
    # a static model of its own space cannot embed the queries of another model's index
    with pytest.raises(ragfind.ModelMismatchError):
        ragfind.Retriever(encoder=HashEncoder(dim=DIM), query_encoder=a)
    # nor one of another dimension
    other = StaticEncoder(_static(tmp_path, "c", dim=DIM + 1))
    with pytest.raises(ragfind.ModelMismatchError):
        ragfind.Retriever(encoder=a, query_encoder=other)


def _bag_dense(rows, vocab):
    A = np.zeros((len(rows), vocab))
    for r, ids in enumerate(rows):
        for i in ids:
            A[r, i] += 1.0 / len(ids)
    return A


def test_bag_products_match_dense_matrix():
    rng = np.random.default_rng(3)
    rows = [rng.integers(0, 40, rng.integers(1, 9)) for _ in range(30)]
    bag = _Bag(rows, 40)
    A = _bag_dense(rows, 40)[:, bag.tokens]
    X = rng.standard_normal((bag.n_cols, 5)).astype(np.float32)
    R = rng.standard_normal((30, 5)).astype(np.float32)
    np.testing.assert_allclose(bag.matvec(X), A @ X, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bag.rmatvec(R), A.T @ R, rtol=1e-4, atol=1e-5)


def test_fit_table_solves_the_ridge_problem():
    """Against the normal equations solved densely (float64) on a small problem."""
    rng = np.random.default_rng(4)
    vocab, d = 50, 6
    prior = rng.standard_normal((vocab, d)).astype(np.float32)
    rows = [rng.integers(0, 30, rng.integers(2, 8)) for _ in range(80)]
    targets = rng.standard_normal((80, d)).astype(np.float32)
    got = fit_table(prior, rows, targets, l2=0.5, iterations=300, tol=1e-7)
    bag = _Bag(rows, vocab)
    A = _bag_dense(rows, vocab)[:, bag.tokens]
    E0 = prior[bag.tokens].astype(np.float64)
    scale = np.linalg.norm(A @ E0, axis=1, keepdims=True)
    Y = targets / np.linalg.norm(targets, axis=1, keepdims=True) * scale
    diag = (A**2).sum(axis=0)
    lam = 0.5 * diag.mean()
    D = np.linalg.solve(A.T @ A + lam * np.eye(A.shape[1]), A.T @ (Y - A @ E0))
    np.testing.assert_allclose(got[bag.tokens], E0 + D, rtol=1e-3, atol=1e-3)
    unseen = np.setdiff1d(np.arange(vocab), bag.tokens)
    np.testing.assert_array_equal(got[unseen], prior[unseen])


def test_pseudo_queries_are_spans_of_the_text():
    qs = pseudo_queries([d["text"] for d in DOCS], per_text=2, span=(3, 5), seed=1)
    assert len(qs) == 2 * len(DOCS)
    for q in qs:
        assert 3 <= len(q.split()) <= 5 and any(q in d["text"] for d in DOCS)


def _prior_for(encoder, tmp_path):
    """A tiny prior table 'in the space of' a HashEncoder (what distill_static would give)."""
    folder = write_static_folder(
        tmp_path / "prior",
        _table(encoder.dim, 7),
        default_tokenizer_path(),
        extra={"target_fingerprint": encoder.fingerprint},
    )
    return StaticEncoder(folder)


def test_retriever_fits_saves_and_reloads_a_static_query_encoder(tmp_path, monkeypatch):
    import ragfind.models.static_fit as static_fit

    enc = HashEncoder(dim=DIM)
    prior = _prior_for(enc, tmp_path)
    monkeypatch.setattr(static_fit, "distilled_prior", lambda *a, **k: prior)
    r = ragfind.Retriever(encoder=enc, query_encoder="static", chunk_size=None, cache_size=0)
    assert r.query_encoder is None  # nothing indexed yet: queries use the encoder
    r.add_documents(DOCS[:3])
    first = r.query_encoder
    assert isinstance(first, StaticEncoder) and first.target_fingerprint == enc.fingerprint
    r.add_documents(DOCS[3:])
    assert r.query_encoder.fingerprint != first.fingerprint  # refitted from the previous fit
    assert (r.fusion, r.weights) == ragfind.pipeline.retriever.STATIC_QUERY_FUSION
    calls = enc.calls
    before = r.search("vitamin bone", k=5)
    assert enc.calls == calls  # the query never went through the document encoder
    r.save(tmp_path / "r")
    back = ragfind.Retriever.load(tmp_path / "r", encoder=enc)
    assert back.query_encoder.fingerprint == r.query_encoder.fingerprint and back.fit_queries
    assert back.fusion == "convex" and back.weights == r.weights
    after = back.search("vitamin bone", k=5)
    assert [p.id for p in after.passages] == [p.id for p in before.passages]
    assert [p.score for p in after.passages] == [p.score for p in before.passages]
    # a fitted query encoder handed over directly
    given = ragfind.Retriever(encoder=enc, query_encoder=r.query_encoder, chunk_size=None, cache_size=0)
    given.add_documents(DOCS)
    assert not given.fit_queries
    assert [p.id for p in given.search("vitamin bone", k=5).passages] == [p.id for p in before.passages]


def test_query_encoder_needs_an_encoder(tmp_path):
    with pytest.raises(ValueError, match="needs an encoder"):
        ragfind.Retriever(encoder=None, query_encoder="static")
    with pytest.raises(TypeError, match="HashEncoder"):
        ragfind.distill_static(HashEncoder(), tmp_path / "x")


def test_zipf_sif_weights_decrease_with_frequency():
    w = zipf_sif_weights(1000)
    assert w.shape == (1000,) and np.all(np.diff(w) > 0) and 0 < w[0] < w[-1] < 1


def test_distill_static_on_a_tiny_seeded_bert(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.models._models_hf import save_random_bert

    hf = save_random_bert(tmp_path / "hf", (1, 32, 2, 64), kind="base")
    ragfind.export(hf, tmp_path / "rf")
    model = ragfind.load_model(tmp_path / "rf", threads=1)
    full = ragfind.load_model(ragfind.distill_static(model, tmp_path / "full", dim=None, show_progress=False))
    assert full.dim == 32
    sif = zipf_sif_weights(full.table.shape[0])
    cls_, sep = model.tokenizer.token_to_id("[CLS]"), model.tokenizer.token_to_id("[SEP]")
    for tok in (cls_ + 1, 2000, 7592, full.table.shape[0] - 1):
        ids = np.array([[cls_, tok, sep]], np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        out = model._run({k: feeds[k] for k in model._input_names})[0].mean(axis=0)
        np.testing.assert_allclose(full.table[tok], out * sif[tok], rtol=1e-4, atol=1e-6)
    with pytest.raises(FileExistsError):
        ragfind.distill_static(model, tmp_path / "full", dim=8)
    with pytest.raises(ValueError, match="dim"):
        ragfind.distill_static(model, tmp_path / "x", dim=0)
    from ragfind.cli import main

    assert main(["export", str(tmp_path / "rf"), str(tmp_path / "cli"), "--static", "--dim", "4"]) == 0
    small = ragfind.load_model(tmp_path / "cli")
    assert small.dim == 4 and small.fingerprint != full.fingerprint
    # PCA: centred, so the reduced table has zero mean before the SIF weights
    np.testing.assert_allclose((small.table / sif[:, None]).mean(axis=0), 0, atol=1e-4)
    with pytest.raises(SystemExit, match="already exists"):
        main(["export", str(tmp_path / "rf"), str(tmp_path / "cli"), "--static"])


def test_convex_fusion_matches_fuse_scores(tmp_path):
    r = ragfind.Retriever(
        encoder=HashEncoder(dim=DIM),
        chunk_size=None,
        cache_size=0,
        fusion="convex",
        weights={"bm25": 0.7, "dense": 0.3},
    )
    r.add_documents(DOCS)
    q = "vitamin retrieval bone"
    lists = [r.stage("bm25").search(q, 100), r.stage("dense").search(q, 100)]
    ids, scores = ragfind.fuse_scores(lists, "min-max", "sum", [0.7, 0.3], top_k=3)
    got = r.search(q, k=3).passages
    assert [p.id for p in got] == ids.tolist()
    np.testing.assert_allclose([p.score for p in got], scores)
    with pytest.raises(ValueError, match="fusion"):
        ragfind.Retriever(encoder=None, fusion="max")
    r.save(tmp_path / "r")
    assert ragfind.Retriever.load(tmp_path / "r", encoder=r.encoder).fusion == "convex"


def test_saved_query_encoder_is_checked(tmp_path, monkeypatch):
    import ragfind.models.static_fit as static_fit

    enc = HashEncoder(dim=DIM)
    prior = _prior_for(enc, tmp_path)
    monkeypatch.setattr(static_fit, "distilled_prior", lambda *a, **k: prior)
    r = ragfind.Retriever(encoder=enc, query_encoder="static", chunk_size=None, cache_size=0)
    r.add_documents(DOCS)
    r.save(tmp_path / "r")
    table = tmp_path / "r" / "query_encoder" / "model.safetensors"
    data = bytearray(table.read_bytes())
    data[-1] ^= 0xFF
    table.write_bytes(bytes(data))
    with pytest.raises(ragfind.RetrieverFolderError, match="checksum"):
        ragfind.Retriever.load(tmp_path / "r", encoder=enc)


def test_fit_query_encoder_checks_its_inputs(tmp_path):
    enc = HashEncoder(dim=DIM)
    prior = _prior_for(enc, tmp_path)
    texts = [d["text"] for d in DOCS]
    with pytest.raises(ValueError, match="shape"):
        ragfind.fit_query_encoder(texts, np.zeros((2, DIM)), enc, prior=prior)
    with pytest.raises(ValueError, match="columns"):
        ragfind.fit_query_encoder(texts, np.zeros((len(texts), DIM + 1)), enc, prior=prior)
    other = StaticEncoder(_static(tmp_path, "other", dim=DIM))  # no target: not enc's space
    with pytest.raises(ValueError, match="not in the space"):
        ragfind.fit_query_encoder(texts, enc.encode(texts), enc, prior=other)
    wrong = StaticEncoder(
        write_static_folder(
            tmp_path / "wrong",
            _table(DIM),
            default_tokenizer_path(),
            extra={"target_fingerprint": "elsewhere"},
        )
    )
    with pytest.raises(ValueError, match="not in the space"):
        ragfind.fit_query_encoder(texts, enc.encode(texts), enc, prior=wrong)
    fitted = ragfind.fit_query_encoder(texts, enc.encode(texts), enc, prior=prior, folder=tmp_path / "fit")
    assert ragfind.load_model(tmp_path / "fit").fingerprint == fitted.fingerprint
