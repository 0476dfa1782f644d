"""SpladeStage and LateInteractionStage inside a Retriever (with small deterministic encoders)."""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from test_pipeline_retriever import DOCS, HashEncoder

import ragfind
from ragfind.models.splade import SparseEmbeddings

VOCAB = 1000


def term(w):
    return zlib.crc32(w.encode()) % VOCAB


class FakeSplade:
    """Sparse vectors: one entry per distinct word (weight = count), like a tiny SPLADE."""

    def _encode(self, texts):
        indptr, indices, values = [0], [], []
        for t in texts:
            counts = {}
            for w in re.findall(r"\w+", t.lower()):
                counts[term(w)] = counts.get(term(w), 0) + 1.0
            for k in sorted(counts):
                indices.append(k)
                values.append(counts[k])
            indptr.append(len(indices))
        return SparseEmbeddings(
            np.asarray(indptr, np.int64), np.asarray(indices, np.int32), np.asarray(values, np.float32), VOCAB
        )

    encode_documents = _encode
    encode_queries = _encode


class FakeColbert:
    """Token vectors: one-hot-ish hashed word vectors, so MaxSim counts shared words."""

    dim = 32

    def _mat(self, text):
        words = re.findall(r"\w+", text.lower()) or ["empty"]
        m = np.zeros((len(words), self.dim), np.float32)
        for i, w in enumerate(words):
            m[i, zlib.crc32(w.encode()) % self.dim] = 1.0
        return m

    def encode_documents(self, texts):
        return [self._mat(t) for t in texts]

    def encode_query(self, text):
        return self._mat(text)


def test_splade_stage_matches_brute_force():
    stage = ragfind.SpladeStage(FakeSplade())
    texts = [d["text"] for d in DOCS]
    ids = np.arange(10, 10 + len(texts), dtype=np.int64)
    stage.add(ids, texts)
    dense_docs = FakeSplade()._encode(texts).to_dense()
    q = "cats and dogs are domesticated"
    expect = dense_docs @ FakeSplade()._encode([q]).to_dense()[0]
    got_ids, got_scores = stage.search(q, 3, None)
    order = np.lexsort((ids, -expect))
    order = order[expect[order] > 0][:3]
    assert got_ids.tolist() == ids[order].tolist()
    np.testing.assert_allclose(got_scores, expect[order])
    got_ids, _ = stage.search(q, 3, {11, 12})
    assert got_ids.tolist() == [11]  # 12 (French) shares no word with the query
    stage.delete(np.asarray([10]))
    assert 10 not in stage.search(q, 5, None)[0].tolist()


def test_retriever_with_splade_and_late_interaction(tmp_path):
    splade = ragfind.SpladeStage(FakeSplade())
    late = ragfind.LateInteractionStage(FakeColbert())
    enc = HashEncoder()
    r = ragfind.Retriever(encoder=enc, stages=[splade, late], rerank_candidates=5)
    r.add_documents(DOCS)
    res = r.search("cats purr and hunt mice", k=3)
    assert {"splade", "rerank"} <= set(res.timings)
    assert res[0].doc_id == "cats"
    scores = [p.score for p in res]
    assert scores == sorted(scores, reverse=True)
    r.save(tmp_path / "kb")
    assert (tmp_path / "kb" / "stage-splade" / "splade.idx").is_file()
    with pytest.raises(ValueError, match="pass them"):
        ragfind.Retriever.load(tmp_path / "kb", encoder=enc)
    stages = [
        ragfind.SpladeStage.load(tmp_path / "kb" / "stage-splade", FakeSplade()),
        ragfind.LateInteractionStage.load(tmp_path / "kb" / "stage-late", FakeColbert()),
    ]
    loaded = ragfind.Retriever.load(tmp_path / "kb", encoder=enc, stages=stages)
    again = loaded.search("cats purr and hunt mice", k=3)
    assert [(p.id, p.score) for p in again] == [(p.id, p.score) for p in res]
    loaded.delete_documents(["cats"])
    assert "cats" not in loaded.search("cats purr and hunt mice", k=3).doc_ids


def test_stage_type_errors():
    with pytest.raises(TypeError, match="expected a ragfind.SpladeEncoder"):
        ragfind.SpladeStage(object())
    with pytest.raises(TypeError, match="expected a ragfind.ColbertEncoder"):
        ragfind.LateInteractionStage(object())
    with pytest.raises(ValueError, match="not a saved SPLADE stage"):
        ragfind.SpladeStage.load("/nonexistent", FakeSplade())
