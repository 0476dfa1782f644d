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


def test_stages_keep_chunk_ids_in_the_index_and_filter_inside_it(tmp_path):
    from ragfind.ids import IdFilter

    texts = [d["text"] for d in DOCS]
    ids = np.arange(100, 100 + 3 * len(texts), 3, dtype=np.int64)
    splade = ragfind.SpladeStage(FakeSplade())
    late = ragfind.LateInteractionStage(FakeColbert())
    for stage in (splade, late):
        stage.add(ids, texts)
    assert splade._index.ids.tolist() == ids.tolist() == late._index.ids.tolist()
    q = "cats and dogs are domesticated"
    dense_docs = FakeSplade()._encode(texts).to_dense()
    expect = dense_docs @ FakeSplade()._encode([q]).to_dense()[0]
    allowed = ids[::2]
    for flt in (set(allowed.tolist()), IdFilter(allowed), allowed.tolist()):
        got_ids, got_scores = splade.search(q, 3, flt)
        keep = np.isin(ids, allowed) & (expect > 0)
        order = np.flatnonzero(keep)[np.lexsort((np.flatnonzero(keep), -expect[keep]))][:3]
        assert got_ids.tolist() == ids[order].tolist()
        np.testing.assert_allclose(got_scores, expect[order])
    # Deletes go to the indexes (unknown ids ignored); the late index frees the vectors.
    splade.delete(np.asarray([ids[0], 999]))
    late.delete(np.asarray(ids[: len(ids) // 2].tolist() + [999]))
    assert len(splade) == len(ids) - 1 and ids[0] not in splade.search(q, 50, None)[0].tolist()
    assert late._index.ids.tolist() == ids[len(ids) // 2 :].tolist()
    assert len(late._index.offsets) - 1 == len(ids) - len(ids) // 2  # compacted
    r_ids, r_scores = late.rerank(q, ids, texts)
    assert sorted(r_ids.tolist()) == ids[len(ids) // 2 :].tolist()
    assert np.all(np.diff(r_scores) <= 0)
    for stage in (splade, late):
        (tmp_path / stage.name).mkdir()
        stage.save(tmp_path / stage.name)
    assert sorted(p.name for p in (tmp_path / "splade").iterdir()) == ["splade.idx"]
    assert sorted(p.name for p in (tmp_path / "late").iterdir()) == ["late.idx"]
    s2 = ragfind.SpladeStage.load(tmp_path / "splade", FakeSplade())
    l2 = ragfind.LateInteractionStage.load(tmp_path / "late", FakeColbert())
    assert s2.search(q, 5, allowed)[0].tolist() == splade.search(q, 5, allowed)[0].tolist()
    assert l2.rerank(q, ids, texts)[0].tolist() == r_ids.tolist()
    assert l2.dtype == "float16"


def test_empty_stages_round_trip_and_old_layouts_are_refused(tmp_path):
    for cls, enc, name in (
        (ragfind.SpladeStage, FakeSplade(), "splade"),
        (ragfind.LateInteractionStage, FakeColbert(), "late"),
    ):
        folder = tmp_path / name
        folder.mkdir()
        stage = cls(enc)
        stage.save(folder)
        again = cls.load(folder, enc)
        assert len(again) == 0 and again._index is None
        again.add(np.asarray([5, 6]), ["cats purr", "dogs bark"])
        assert len(again) == 2
    (tmp_path / "splade" / "splade_ids.npz").write_bytes(b"old")
    with pytest.raises(ValueError, match="older ragfind .*splade_ids.npz.*rebuild"):
        ragfind.SpladeStage.load(tmp_path / "splade", FakeSplade())
    (tmp_path / "late" / "late_ids.json").write_text("{}")
    with pytest.raises(ValueError, match="older ragfind .*late_ids.json.*rebuild"):
        ragfind.LateInteractionStage.load(tmp_path / "late", FakeColbert())
    with pytest.raises(ValueError, match="not a saved late-interaction stage"):
        ragfind.LateInteractionStage.load(tmp_path / "nowhere", FakeColbert())
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "splade.idx").write_bytes(b"RAGFBM25" + b"\0" * 100)
    with pytest.raises(ValueError, match="not a saved SPLADE stage .*bad magic"):
        ragfind.SpladeStage.load(bad, FakeSplade())


def test_every_stage_explains_its_score():
    splade = ragfind.SpladeStage(FakeSplade())
    late = ragfind.LateInteractionStage(FakeColbert())
    r = ragfind.Retriever(encoder=HashEncoder(), stages=[splade, late], rerank_candidates=5)
    r.add_documents(DOCS)
    query = "cats purr and hunt mice"
    top = r.search(query, k=3)[0]
    for stage in r.first_stages + r.rerank_stages:
        ex = stage.explain(query, top.id, text=top.text)
        assert isinstance(ex, ragfind.Explanation) and ex.id == top.id
        assert ex.kind == stage.kind and stage.kind in ("bm25", "dense", "splade", "late")
        assert sum(c.value for c in ex.contributions) == pytest.approx(ex.score, rel=1e-5, abs=1e-5)
        if stage.name in top.scores:
            assert ex.score == pytest.approx(top.scores[stage.name], rel=1e-5, abs=1e-5)
        with pytest.raises(ragfind.UnknownIdError):
            stage.explain(query, 10**6)
    r.close()
