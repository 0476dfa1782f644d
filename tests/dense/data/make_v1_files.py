"""Writes the version-1 dense files in this folder (the layout before dense saved through
persist/sectioned.py) and expected.json, the results they gave. It ran once with the code of that
layout; today's code writes the new layout, so running it again does not reproduce them."""

import json
from pathlib import Path

import numpy as np

from ragfind import DenseIndex

HERE = Path(__file__).resolve().parent
DIM = 8


def vectors(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


CASES = {
    "v1_exact_f32_cosine.rfd": dict(kind="exact", dtype="f32", metric="cosine", str_ids=False),
    "v1_exact_i8_l2.rfd": dict(kind="exact", dtype="i8", metric="l2", str_ids=True),
    "v1_hnsw_ip.rfd": dict(kind="hnsw", dtype="f32", metric="ip", str_ids=False),
    "v1_ivf_f16_cosine.rfd": dict(kind="ivf", dtype="f16", metric="cosine", str_ids=True),
    "v1_ivf_i8_l2.rfd": dict(kind="ivf", dtype="i8", metric="l2", str_ids=False),
}


def build(name: str, kind: str, dtype: str, metric: str, str_ids: bool) -> DenseIndex:
    extra = {"M": 4, "ef_construction": 16} if kind == "hnsw" else {"nlist": 4} if kind == "ivf" else {}
    d = DenseIndex(DIM, metric=metric, dtype=dtype, kind=kind, fingerprint="fixture@1", **extra)
    X = vectors(len(name), 40)
    ids = [f"d{i}" for i in range(40)] if str_ids else list(range(100, 140))
    d.add(X, ids=ids)
    d.delete([ids[3], ids[17]])
    return d


def main() -> None:
    expected = {}
    Q = vectors(99, 4)
    for name, case in CASES.items():
        d = build(name, **case)
        d.save(HERE / name)
        back = DenseIndex.load(HERE / name)
        rows = []
        for q in Q:
            ids, scores = back.search(q, k=5)
            rows.append({"ids": ids.tolist(), "scores": scores.tolist()})
        expected[name] = {"queries_seed": 99, "k": 5, "results": rows, "len": len(back)}
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
