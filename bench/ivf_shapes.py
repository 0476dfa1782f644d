"""Data shapes for the IVF benchmarks: base rows and queries drawn the same way, unit rows.

IVF recall at fixed settings depends on how the data sits around the centroids, so a setting
tuned on one shape can miss on another. ``make_shape(name, n, nq, dim, seed)`` returns
``(X, Q)`` float32 with unit rows for:

- ``clustered``: a Gaussian mixture, 256 equal clusters, spread 0.5 of the centre's scale.
- ``lowdim``: a 24-dim Gaussian latent through a random dim x 24 map plus isotropic noise of
  0.3 the signal's per-coordinate scale: many near-equidistant centroids, small score gaps.
- ``sphere``: uniform on the unit sphere (no structure at all).
- ``zipf``: a mixture of 512 clusters whose sizes follow Zipf (s = 1.1): a few very long lists.
- ``real:<name>``: MiniLM embeddings of a shared collection (corpus as base, its queries as
  queries), ``n`` and ``nq`` ignored; ``real_shapes()`` lists the ones on this machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SYNTHETIC = ("clustered", "lowdim", "sphere", "zipf")
_REAL_DIRS = {
    "scifact": Path("/work/shared/data/scifact/embeddings/all-MiniLM-L6-v2"),
    "cranfield": Path("/work/shared/data/cranfield/embeddings/all-MiniLM-L6-v2"),
    "med": Path("/work/cache/emb/med"),
    "npl": Path("/work/cache/emb/npl"),
    "lisa": Path("/work/cache/emb/lisa"),
}


def _unit(X: np.ndarray) -> np.ndarray:
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def _mixture(
    rng: np.random.Generator, m: int, dim: int, weights: np.ndarray, centres: np.ndarray
) -> np.ndarray:
    which = rng.choice(len(weights), size=m, p=weights)
    noise = rng.standard_normal((m, dim)).astype(np.float32) * np.float32(0.5 / np.sqrt(dim))
    return centres[which] + noise


def make_shape(name: str, n: int, nq: int, dim: int = 384, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(base rows, queries) of one shape, float32 unit rows; raises ValueError for an unknown
    name or a real collection that is not on this machine."""
    if name.startswith("real:"):
        d = _REAL_DIRS.get(name[5:])
        if d is None or not (d / "corpus.npy").exists():
            raise ValueError(f"no embeddings for shape {name!r} on this machine")
        X = np.ascontiguousarray(np.load(d / "corpus.npy"), dtype=np.float32)
        Q = np.ascontiguousarray(np.load(d / "queries.npy"), dtype=np.float32)
        return _unit(X), _unit(Q)
    rng = np.random.default_rng(seed)
    m = n + nq
    if name == "lowdim":
        W = rng.standard_normal((24, dim)).astype(np.float32) / np.float32(np.sqrt(24))
        A = rng.standard_normal((m, 24)).astype(np.float32) @ W
        A += rng.standard_normal((m, dim)).astype(np.float32) * np.float32(0.3)
    elif name == "sphere":
        A = rng.standard_normal((m, dim)).astype(np.float32)
    elif name in ("clustered", "zipf"):
        c = 256 if name == "clustered" else 512
        centres = _unit(rng.standard_normal((c, dim)).astype(np.float32))
        if name == "clustered":
            w = np.full(c, 1.0 / c)
        else:
            w = 1.0 / np.arange(1, c + 1) ** 1.1
            w /= w.sum()
        A = _mixture(rng, m, dim, w, centres)
    else:
        raise ValueError(f"unknown shape {name!r}; expected one of {SYNTHETIC} or 'real:<name>'")
    A = _unit(A)
    # Queries from the same draw, so they follow the base rows' distribution exactly.
    return np.ascontiguousarray(A[:n]), np.ascontiguousarray(A[n:])


def real_shapes() -> list[str]:
    """The ``real:<name>`` shapes whose embeddings are on this machine."""
    return [f"real:{k}" for k, d in _REAL_DIRS.items() if (d / "corpus.npy").exists()]
