"""ragfind.fusion.convex and fit_convex_weight against a plain numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from ragfind.fusion import convex, fit_convex_weight


def ref_norm(s: np.ndarray, norm: str) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    if norm == "min-max":
        lo, hi = s.min(), s.max()
        return (s - lo) / (hi - lo) if hi > lo else np.ones_like(s)
    sd = s.std()
    return (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)


def ref_convex(first, second, w: float, norm: str) -> dict:
    """weight * n1 + (1 - weight) * n2 per id, an id missing from a list adding 0."""
    out: dict = {}
    for (ids, scores), share in ((first, w), (second, 1.0 - w)):
        for d, x in zip(ids, ref_norm(scores, norm)):
            out[int(d)] = out.get(int(d), 0.0) + share * float(x)
    return out


def random_pair(rng, n_ids=60, n=25):
    ids_a = rng.choice(n_ids, size=n, replace=False)
    ids_b = rng.choice(n_ids, size=n, replace=False)
    a = (ids_a.astype(np.int64), np.sort(rng.normal(10, 3, n))[::-1].copy())
    b = (ids_b.astype(np.int64), np.sort(rng.uniform(0.1, 0.9, n))[::-1].copy())
    return a, b


@pytest.mark.parametrize("norm", ["min-max", "z-score"])
@pytest.mark.parametrize("w", [0.0, 0.3, 0.5, 1.0])
def test_convex_equals_numpy_reference(norm, w):
    rng = np.random.default_rng(7)
    for _ in range(20):
        a, b = random_pair(rng)
        ids, scores = convex(a, b, weight=w, norm=norm)
        ref = ref_convex(a, b, w, norm)
        assert sorted(int(d) for d in ids) == sorted(ref)
        got = dict(zip((int(d) for d in ids), scores))
        np.testing.assert_allclose([got[d] for d in ref], list(ref.values()), rtol=1e-9, atol=1e-12)
        assert np.all(np.diff(scores) <= 0)  # best first


def test_convex_top_k_and_checks():
    a, b = random_pair(np.random.default_rng(1))
    ids, _ = convex(a, b, 0.4, top_k=5)
    full, _ = convex(a, b, 0.4)
    assert list(ids) == list(full[:5])
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="weight"):
            convex(a, b, bad)
    with pytest.raises(ValueError, match="norm"):
        convex(a, b, 0.5, norm="max")


def test_fit_convex_weight_finds_the_informative_list():
    # Query q: the relevant document is first in `good` and last in `noise`, so only weights
    # that favour `good` rank it first; the fit must pick a weight above 0.5.
    rng = np.random.default_rng(3)
    good, noise, qrels = {}, {}, {}
    for i in range(12):
        q = f"q{i}"
        rel = int(rng.integers(0, 50))
        others = [d for d in rng.choice(50, size=11, replace=False) if d != rel][:10]
        good[q] = (np.array([rel, *others], dtype=np.int64), np.linspace(2.0, 1.0, 11))
        noise[q] = (np.array([*others, rel], dtype=np.int64), np.linspace(2.0, 1.0, 11))
        qrels[q] = {str(rel): 1}
    w, means = fit_convex_weight(good, noise, qrels, norm="min-max", metric="mrr@10")
    assert w > 0.5 and means[w] == pytest.approx(1.0)
    assert set(means) == {i / 20 for i in range(21)}
    # The reference: the same grid by hand with numpy normalisation.
    for g in (0.0, 0.25, 1.0):
        rr = []
        for q in good:
            fused = ref_convex(good[q], noise[q], g, "min-max")
            ranked = sorted(fused, key=lambda d: -fused[d])
            rel = int(next(iter(qrels[q])))
            pos = ranked.index(rel) + 1
            rr.append(1.0 / pos if pos <= 10 else 0.0)
        assert means[g] == pytest.approx(np.mean(rr))


def test_fit_convex_weight_needs_judged_queries():
    a, b = random_pair(np.random.default_rng(2))
    with pytest.raises(ValueError, match="judged"):
        fit_convex_weight({"q": a}, {"q": b}, {"other": {"1": 1}})
