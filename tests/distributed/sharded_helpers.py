"""Helpers of the sharded-retriever tests (a module, not a conftest: the name "conftest" is
taken by tests/conftest.py): one local Ray per session (2 CPUs), the
shared collections, and an encoder that looks up the shared MiniLM embeddings (no model)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest


def shared_data_dir() -> Path:
    """../shared/data next to the repository, or $RAGFIND_DATA (as tests/conftest.py)."""
    repo = Path(__file__).resolve().parent.parent.parent
    return Path(os.environ.get("RAGFIND_DATA", repo.parent / "shared" / "data"))


if os.environ.get("CI") == "true":
    import ray  # noqa: F401 - in CI a missing Ray is a failure, not a skip
else:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'ragfind[ray]')")


def start_local_ray(ray, **options) -> None:
    """``ray.init(**options)``, tried twice. Ray gives its raylet a fixed 30 s to register
    (ray/_private/node.py), which a loaded machine can miss ("The current node timed out during
    startup"); the failed attempt's processes are then killed and waited for, so that neither
    they nor the "subprocess ... is still running" warning of their Popen objects (an error
    here, raised in whichever test collects them) outlive it."""
    from ray._private.node import Node

    try:
        ray.init(**options)
        return
    except Exception as exc:  # Ray raises a plain Exception for this
        if "timed out during startup" not in str(exc):
            raise
        tb = exc.__traceback__
        while tb is not None:  # the Node whose __init__ gave up
            node = tb.tb_frame.f_locals.get("self")
            if isinstance(node, Node):
                node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
            tb = tb.tb_next
        del tb, exc
    ray.shutdown()
    ray.init(**options)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        start_local_ray(
            ray,
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}},
        )
    yield ray
    ray.shutdown()


class LookupEncoder:
    """A bi-encoder over precomputed embeddings: text -> its row (picklable, no model)."""

    def __init__(self, texts: list, vectors: np.ndarray, queries: dict, fingerprint: str) -> None:
        self.dim = int(vectors.shape[1])
        self.fingerprint = fingerprint
        self.max_length = 256
        self.tokenizer = None
        self._rows = {t: i for i, t in enumerate(texts)}
        self._vectors = np.ascontiguousarray(vectors, np.float32)
        self._queries = {q: np.ascontiguousarray(v, np.float32) for q, v in queries.items()}

    def encode(self, texts, batch_size=32, show_progress=False, normalize=True):
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        return self._vectors[[self._rows[t] for t in texts]]

    def encode_query(self, text):
        return self._queries[text].copy()


def load_collection(name: str, limit: int | None = None) -> dict:
    """``{"docs": [...], "queries": [(id, text)], "encoder": LookupEncoder}`` for a shared
    collection (document text = title + " " + text, as its embeddings were computed)."""
    root = shared_data_dir() / name
    if not (root / "corpus.jsonl").exists():
        pytest.skip(f"shared evaluation data not found at {root} (set RAGFIND_DATA)")
    emb = root / "embeddings" / "all-MiniLM-L6-v2"
    with open(root / "corpus.jsonl", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    corpus_ids = Path(emb / "corpus_ids.txt").read_text().split()
    vectors = np.load(emb / "corpus.npy")
    pos = {d: i for i, d in enumerate(corpus_ids)}
    docs = []
    for r in rows:
        text = (r.get("title", "") + " " + r["text"]).strip() or "(empty)"
        docs.append({"id": r["_id"], "text": text, "metadata": {"bucket": int(pos[r["_id"]]) % 4}})
    docs.sort(key=lambda d: pos[d["id"]])
    if limit is not None:
        docs = docs[:limit]
    q_ids = Path(emb / "query_ids.txt").read_text().split()
    q_vectors = np.load(emb / "queries.npy")
    q_text = {}
    with open(root / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            q_text[q["_id"]] = q["text"]
    queries = [(q, q_text[q]) for q in q_ids if q in q_text]
    texts = [d["text"] for d in docs]
    all_vec = vectors[[pos[d["id"]] for d in docs]]
    enc = LookupEncoder(
        texts,
        all_vec,
        {q_text[q]: q_vectors[i] for i, q in enumerate(q_ids) if q in q_text},
        f"lookup-{name}",
    )
    return {"docs": docs, "queries": queries, "encoder": enc}


def _words(text: str) -> list:
    return re.findall(r"\w+", text.lower())


class OverlapCrossEncoder:
    """A cross-encoder stand-in (sentence-transformers ``rank`` semantics): query-word overlap."""

    def rank(self, query: str, texts: list) -> list:
        q = set(_words(query))
        scores = [len(q & set(_words(t))) / (1.0 + 0.01 * len(t)) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: (-scores[i], i))
        return [{"corpus_id": i, "score": scores[i]} for i in order]


class TermRerank:
    """A RerankStage stand-in run on the shards: query-term frequency in the passage."""

    name = "terms"

    def rerank(self, query: str, ids: np.ndarray, texts: list) -> tuple:
        q = set(_words(query))
        scores = np.asarray([sum(w in q for w in _words(t)) / (1.0 + len(t)) for t in texts], np.float32)
        order = np.argsort(-scores, kind="stable")
        return np.asarray(ids, np.int64)[order], scores[order]


def _key(p) -> tuple:
    return (p.doc_id, p.start, p.end)


def assert_same(single, sharded, query, **kw) -> None:
    """Same passages with the same scores (1e-6 relative); passages tied at the cut may differ."""
    a = single.search(query, **kw)
    b = sharded.search(query, **kw)
    assert not b.partial
    assert len(a) == len(b), (query, kw)
    sa = np.array([p.score for p in a])
    sb = np.array([p.score for p in b])
    np.testing.assert_allclose(sb, sa, rtol=1e-6, atol=1e-9, err_msg=f"{query!r} {kw}")
    if not len(a):
        return
    cut = sa[-1]
    above_a = {_key(p) for p in a if p.score > cut + 1e-6 * abs(cut)}
    above_b = {_key(p) for p in b if p.score > cut + 1e-6 * abs(cut)}
    assert above_a == above_b, (query, kw)
    by_key = {_key(p): p for p in a}
    for p in b:
        q = by_key.get(_key(p))
        if q is None:
            continue  # tied at the cut
        assert p.text == q.text and p.doc_id == q.doc_id and dict(p.metadata) == dict(q.metadata)
        assert set(p.scores) == set(q.scores)
        for name in q.scores:
            assert p.scores[name] == pytest.approx(q.scores[name], rel=1e-6, abs=1e-9), (query, name)


class FakeSplade:
    """Sparse vectors: one entry per distinct hashed word (weight = count), a tiny SPLADE."""

    vocab_size = 1000

    def _encode(self, texts):
        import zlib

        from ragfind import SparseEmbeddings

        indptr, indices, values = [0], [], []
        for t in texts:
            counts: dict = {}
            for w in _words(t):
                h = zlib.crc32(w.encode()) % self.vocab_size
                counts[h] = counts.get(h, 0) + 1.0
            for k in sorted(counts):
                indices.append(k)
                values.append(counts[k])
            indptr.append(len(indices))
        return SparseEmbeddings(
            np.asarray(indptr, np.int64),
            np.asarray(indices, np.int32),
            np.asarray(values, np.float32),
            self.vocab_size,
        )

    encode_documents = _encode
    encode_queries = _encode


def splade_stages() -> list:
    """A stage factory (SpladeStage holds a lock, so it cannot be pickled to the actors)."""
    import ragfind

    return [ragfind.SpladeStage(FakeSplade())]


def _pickle_by_value() -> None:
    # The actors cannot import this conftest module: ship LookupEncoder's class by value.
    import sys

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


_pickle_by_value()
