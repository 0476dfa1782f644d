"""DenseIndex.tune: the IVF setting it chooses reaches the target recall on queries it did not
see, is the index's default afterwards, survives save/load and a retrain, and bad input is
refused with the index's errors. No timings are asserted (tune times candidates, but which
one wins only changes the cost)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from ragfind import DenseIndex
from ragfind.dense import tune as tune_mod
from ragfind.dense.ivf import default_nprobe
from ragfind.errors import IndexFileError

DIM = 32


def mixture(n: int, seed: int) -> np.ndarray:
    """A Gaussian mixture (clusters of equal size) plus a low-rank part: rows and queries drawn
    alike, so the tuned recall carries to held-back queries."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(7).standard_normal((48, DIM))
    W = np.random.default_rng(8).standard_normal((6, DIM))
    A = centres[rng.integers(0, 48, n)] + rng.standard_normal((n, 6)) @ W * 0.4
    return (A + 0.5 * rng.standard_normal((n, DIM))).astype(np.float32)


X = mixture(6000, 0)
Q = mixture(600, 1)
TUNE_Q, HELD_Q = Q[:300], Q[300:]


def recall(ix: DenseIndex, queries: np.ndarray, k: int = 10) -> float:
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    truth = np.argsort(-(queries @ U.T), axis=1)[:, :k]
    got = ix.search_batch(queries, k)
    return float(np.mean([np.isin(t, g[0]).mean() for t, g in zip(truth, got)]))


def built(dtype: str, **kw) -> DenseIndex:
    ix = DenseIndex(DIM, metric="cosine", kind="ivf", dtype=dtype, nlist=128, **kw)
    ix.add(X)
    return ix


@pytest.mark.parametrize("target", [0.9, 0.95])
@pytest.mark.parametrize("dtype", ["pq", "rabitq", "f32"])
def test_tune_reaches_its_target_on_held_back_queries(dtype, target):
    ix = built(dtype)
    got = ix.tune(TUNE_Q, target_recall=target, k=10)
    assert got["reached"] and got["recall"] >= target
    assert (ix.nprobe, ix.rerank) == (got["nprobe"], got["rerank"])
    assert ix.tuned == got
    assert recall(ix, HELD_Q) >= target - 0.01


def test_tune_picks_fewer_lists_for_a_lower_target():
    ix = built("pq")
    low = ix.tune(TUNE_Q, target_recall=0.5)
    high = ix.tune(TUNE_Q, target_recall=0.99)
    assert low["nprobe"] <= high["nprobe"]
    assert low["recall"] < high["recall"] or low == {**high, "target_recall": 0.5}


def test_tuned_settings_survive_save_and_load(tmp_path):
    ix = built("pq")
    got = ix.tune(TUNE_Q, target_recall=0.95)
    ix.save(tmp_path / "ix")
    for mmap in (True, False):
        back = DenseIndex.load(tmp_path / "ix", mmap=mmap)
        assert back.tuned == got
        assert (back.nprobe, back.rerank) == (got["nprobe"], got["rerank"])
        ids = [r[0].tolist() for r in back.search_batch(HELD_Q[:20])]
        assert ids == [r[0].tolist() for r in ix.search_batch(HELD_Q[:20])]


def test_setting_nprobe_or_rerank_by_hand_forgets_the_tuning(tmp_path):
    ix = built("rabitq")
    ix.tune(TUNE_Q)
    ix.nprobe = 3
    assert ix.tuned is None and ix.nprobe == 3
    ix.tune(TUNE_Q)
    ix.rerank = 2
    assert ix.tuned is None
    ix.save(tmp_path / "ix")
    assert DenseIndex.load(tmp_path / "ix").tuned is None


def test_a_file_with_a_tuning_record_that_disagrees_is_refused(tmp_path, monkeypatch):
    ix = built("pq")
    ix.tune(TUNE_Q)
    ix._backend.tuned = {**ix._backend.tuned, "nprobe": ix.nprobe + 1}
    ix.save(tmp_path / "ix")
    with pytest.raises(IndexFileError, match="tuning record"):
        DenseIndex.load(tmp_path / "ix")


def test_a_retrain_keeps_the_share_of_lists_probed():
    rng = np.random.default_rng(3)
    ix = DenseIndex(DIM, metric="cosine", kind="ivf", dtype="pq")  # automatic nlist: retrains
    ix.add(X[:1000])
    ix.tune(TUNE_Q[:60], target_recall=0.9)
    share = ix.nprobe / ix.nlist
    nlist0 = ix.nlist
    ix.add(np.concatenate([X, X[rng.integers(0, len(X), 2000)] + 0.01]))
    assert ix.nlist > nlist0
    assert ix.tuned["retrained"] and ix.tuned["nprobe"] == ix.nprobe
    assert ix.nprobe >= share * ix.nlist


def test_an_unreachable_target_warns_and_keeps_the_most_accurate_setting(monkeypatch):
    ix = built("pq")
    # A re-scoring depth of 1 at most: k candidates only, so the PQ estimates' misses stay.
    monkeypatch.setattr(
        tune_mod, "ladder", lambda top, first=1: [1] if top == 128 else list(range(1, top + 1, 31))
    )
    with pytest.warns(RuntimeWarning, match="no setting reached"):
        got = ix.tune(TUNE_Q, target_recall=1.0)
    assert not got["reached"] and ix.tuned == got and got["rerank"] == 1


def test_choose_walks_the_front_and_takes_the_fastest():
    truth = np.arange(10)[None, :]
    counts = np.array([10])

    def probe(npb, rr):  # recall min(1, npb * rr / 40): more lists need less re-scoring
        hits = min(10, npb * rr // 4)
        return np.concatenate([np.arange(hits), np.full(10 - hits, -1)])[None, :]

    timed = []

    def timer(npb, rr):
        timed.append((npb, rr))
        return npb + 2 * rr

    got = tune_mod.choose(probe, timer, truth, counts, 1.0, [1, 2, 4, 8, 16], [1, 2, 4, 8, 16, 32])
    assert all(n * r >= 40 for n, r in timed)  # only settings that reach the target are timed
    assert got["nprobe"] + 2 * got["rerank"] == min(n + 2 * r for n, r in timed)


@pytest.mark.parametrize(
    ("args", "kw", "err", "match"),
    [
        ((TUNE_Q,), {"target_recall": 0.0}, ValueError, r"target_recall must be a number in \(0, 1\]"),
        ((TUNE_Q,), {"target_recall": 1.5}, ValueError, "target_recall"),
        ((TUNE_Q,), {"target_recall": float("nan")}, ValueError, "target_recall"),
        ((TUNE_Q,), {"target_recall": True}, ValueError, "target_recall"),
        ((TUNE_Q,), {"k": 0}, ValueError, "k"),
        ((TUNE_Q[:39],), {}, ValueError, "at least 40 queries"),
        ((TUNE_Q[:, :16],), {}, ValueError, "dim"),
        ((TUNE_Q.astype(np.int32),), {}, TypeError, "floating"),
        ((np.where(np.arange(DIM) == 3, np.nan, TUNE_Q),), {}, ValueError, "NaN|finite"),
        ((np.zeros((50, DIM), np.float32),), {}, ValueError, "zero vector"),
    ],
)
def test_bad_input_is_refused(args, kw, err, match):
    ix = built("pq")
    before = (ix.nprobe, ix.rerank)
    with pytest.raises(err, match=match):
        ix.tune(*args, **kw)
    assert (ix.nprobe, ix.rerank) == before and ix.tuned is None


def test_tune_needs_an_ivf_index_with_vectors():
    with pytest.raises(ValueError, match="kind='exact'"):
        DenseIndex(DIM).tune(TUNE_Q)
    with pytest.raises(ValueError, match="holding vectors"):
        DenseIndex(DIM, kind="ivf", dtype="pq", nlist=8).tune(TUNE_Q)


def test_ladder_and_recall_helpers():
    assert tune_mod.ladder(64) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert tune_mod.ladder(10) == [1, 2, 3, 4, 6, 8, 10]
    truth = np.array([[1, 2], [3, 4]])
    found = np.array([[2, -1], [5, 6]])
    assert tune_mod.recall_of(found, truth, np.array([2, 2])) == pytest.approx(0.25)


def test_old_files_without_a_tuning_record_load(tmp_path):
    ix = built("pq")
    ix.save(tmp_path / "ix")
    header = json.dumps(DenseIndex.load(tmp_path / "ix")._backend.sections()[2], default=str)
    assert "tuned" not in header
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DenseIndex.load(tmp_path / "ix").tuned is None


# ----------------------------------------------------------------- calibrated defaults


def test_coded_defaults_are_calibrated_and_reach_0_9_on_held_back_queries():
    for dtype in ("pq", "rabitq"):
        ix = built(dtype)
        auto = ix._backend.auto
        assert auto is not None and auto["reached"]
        assert ix.nprobe == auto["nprobe"] >= default_nprobe(128) and ix.rerank == auto["rerank"] >= 4
        assert recall(ix, HELD_Q) >= 0.9


def test_given_settings_are_kept_and_small_indexes_keep_the_fixed_defaults():
    ix = built("pq", rerank=2)
    assert ix.rerank == 2 and ix.nprobe == ix._backend.auto["nprobe"]
    ix = built("rabitq", nprobe=5)
    assert ix.nprobe == 5 and ix.rerank == ix._backend.auto["rerank"]
    small = DenseIndex(DIM, kind="ivf", dtype="pq", nlist=16)
    small.add(X[:1000])
    assert small._backend.auto is None and (small.nprobe, small.rerank) == (16, 4)
    f32 = built("f32")
    assert f32._backend.auto is None and f32.rerank == 4


def test_calibrated_defaults_survive_save_and_load_and_a_hand_set_rerank_sticks(tmp_path):
    ix = built("pq")
    auto = dict(ix._backend.auto)
    ix.save(tmp_path / "ix")
    back = DenseIndex.load(tmp_path / "ix")
    assert back._backend.auto == auto and (back.nprobe, back.rerank) == (ix.nprobe, ix.rerank)
    back.rerank = 3
    back.save(tmp_path / "ix2")
    again = DenseIndex.load(tmp_path / "ix2")
    assert again.rerank == 3 and not again._backend.auto_rerank


def test_files_without_a_calibration_keep_their_saved_defaults(tmp_path, monkeypatch):
    ix = built("pq")
    real = ix._backend.sections

    def old_sections():
        secs, ids, extra = real()
        extra = {k: v for k, v in extra.items() if k not in ("auto", "auto_rerank")}
        return secs, ids, {**extra, "rerank": 4}

    monkeypatch.setattr(ix._backend, "sections", old_sections)
    ix.save(tmp_path / "ix")
    back = DenseIndex.load(tmp_path / "ix")
    assert back._backend.auto is None and (back.nprobe, back.rerank) == (default_nprobe(128), 4)
