"""Writes the seed corpus in tools/fuzz/corpus/<target>/ (small files; rerun after a format change).

Loader seeds are tiny valid index files of each kind (int and str ids, deletions, centroids),
prefixed with the mode byte (see _common.check_loader); load_retriever seeds are small saved
Retriever folders packed into one input (see _common.check_retriever); analyzer seeds are interesting text
(case mappings that change length, combining marks, invalid UTF-8, lone surrogates, identifier
shapes, very long tokens); query seeds mix corpora, queries and vector bytes.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def saved_bytes(index) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "seed.idx"
        index.save(p)
        return p.read_bytes()


def loader_seeds() -> dict[str, list[bytes]]:
    from ragfind import BM25Index, DenseIndex, LateInteractionIndex

    rng = np.random.default_rng(0)
    out: dict[str, list[bytes]] = {
        "load_bm25": [],
        "load_dense_exact": [],
        "load_dense_hnsw": [],
        "load_dense_ivf": [],
        "load_late": [],
    }
    a = BM25Index()
    a.add(["alpha beta gamma", "beta delta", "getUserById XJ-2000 v2.3.1", "alpha alpha zeta"])
    out["load_bm25"].append(saved_bytes(a))
    b = BM25Index(method="bm25+")
    b.add(["one two", "two three", "three four five"], ids=["x", "y", "z"])
    b.delete(["y"])
    out["load_bm25"].append(saved_bytes(b))
    out["load_bm25"].append(saved_bytes(BM25Index()))
    for kind, key in (("exact", "load_dense_exact"), ("hnsw", "load_dense_hnsw")):
        for metric, dtype, str_ids in (
            ("cosine", "f32", False),
            ("l2", "f32", True),
            ("ip", "f16", False),
            ("l2", "i8", False),
        ):
            if kind == "hnsw" and dtype != "f32":
                continue
            d = DenseIndex(4, metric=metric, dtype=dtype, kind=kind, M=4, ef_construction=8)
            d.add(
                rng.standard_normal((5, 4)).astype(np.float32),
                ids=[f"s{i}" for i in range(5)] if str_ids else None,
            )
            d.delete(d.ids[:1])
            out[key].append(saved_bytes(d))
    for metric, dtype, str_ids in (("cosine", "f32", False), ("l2", "i8", True), ("ip", "f16", False)):
        d = DenseIndex(4, metric=metric, dtype=dtype, kind="ivf", nlist=2)
        d.add(
            rng.standard_normal((6, 4)).astype(np.float32),
            ids=[f"s{i}" for i in range(6)] if str_ids else None,
        )
        d.delete(d.ids[:1])
        out["load_dense_ivf"].append(saved_bytes(d))
    out["load_dense_ivf"].append(saved_bytes(DenseIndex(4, kind="ivf", nlist=3)))
    li = LateInteractionIndex(4)
    li.add([rng.standard_normal((int(n), 4)).astype(np.float32) for n in (1, 3, 2, 4)])
    out["load_late"].append(saved_bytes(li))
    li.build_centroids(n_centroids=2) if _has_kw(li.build_centroids, "n_centroids") else li.build_centroids(2)
    out["load_late"].append(saved_bytes(li))
    out["load_late"].append(saved_bytes(LateInteractionIndex(3, dtype="float16")))
    from ragfind.sparse.splade_index import SparseVectorIndex

    out["load_sparse"] = []
    sp = SparseVectorIndex(16)
    sp.add([{0: 1.0, 3: 0.5}, {3: 2.0, 15: 0.25}, {7: 1.5}])
    out["load_sparse"].append(saved_bytes(sp))
    sp_exact = SparseVectorIndex(8, scale=0)
    sp_exact.add([{1: 0.125, 2: 3.0}, {}])
    out["load_sparse"].append(saved_bytes(sp_exact))
    sp_quantised = SparseVectorIndex(8, exact=False)  # no float vectors saved
    sp_quantised.add([{1: 0.125, 2: 3.0}, {5: 0.004}])
    out["load_sparse"].append(saved_bytes(sp_quantised))
    # Every mode byte once per seed: raw / fixed checksums x mmap x verify; dense files also
    # with their section checksums fixed (mode 9), so mutated graphs reach the graph check.
    seeds = {k: [bytes([mode]) + s for s in v for mode in (0, 1, 3, 5, 7)] for k, v in out.items()}
    for k in ("load_dense_exact", "load_dense_hnsw", "load_dense_ivf"):
        seeds[k] += [b"\x09" + s for s in out[k]]
    return seeds


def retriever_seeds() -> list[bytes]:
    """Small saved Retriever folders (hybrid exact / hnsw, lexical only, empty), each packed with
    every mode (see _common.check_retriever). The store is rewritten with 512-byte SQLite pages
    and the manifest re-hashed, so a folder fits in a few KiB."""
    import sqlite3

    from _common import RETRIEVER_DOCS, _fix_manifest, _unpack_folder, hash_encoder, pack_folder

    from ragfind import Retriever

    enc = hash_encoder()
    configs = [
        (dict(encoder=enc), True, 0),
        (dict(encoder=enc, dense_kind="hnsw", chunk_size=None, contextualize=False), True, 0),
        (dict(encoder=None), True, 8),
        (dict(encoder=enc), False, 0),
    ]
    seeds = []
    for kw, with_docs, no_encoder in configs:
        r = Retriever(**kw, cache_size=4)
        if with_docs:
            r.add_documents(RETRIEVER_DOCS)
            r.delete_documents(["dogs"])
        with tempfile.TemporaryDirectory() as d:
            r.save(Path(d) / "kb")
            r.close()
            db = sqlite3.connect(Path(d) / "kb" / "store.sqlite")
            db.execute("PRAGMA page_size=512")
            db.execute("VACUUM")
            db.close()
            packed = pack_folder(Path(d) / "kb", 0)
        files = _unpack_folder(packed[1:])
        _fix_manifest(files)
        with tempfile.TemporaryDirectory() as d:
            for name, content in files.items():
                (Path(d) / name).write_bytes(content)
            body = pack_folder(Path(d), 0)[1:]
        seeds += [bytes([mode | no_encoder]) + body for mode in (0, 3, 6)]
    return seeds


def _has_kw(fn, name: str) -> bool:
    import inspect

    return name in inspect.signature(fn).parameters


ANALYZER_SEEDS = [
    "The quick brown fox jumps over the lazy dog",
    "getUserById E_ACCESS_DENIED XJ-2000 v2.3.1 foo/bar.baz",
    "İstanbul ΣΊΣΥΦΟΣ ß ﬁ ŉ ǰ ΐ",  # case mappings that change length
    "e\u0301 a\u0308\u0308\u0308 \u200b\u200d\ufeff zero\u00adwidth",
    "😀👩‍👩‍👧 🇫🇷 ＡＢＣ１２３ 東京タワー",
    "مرحبا بالعالم שלום עולם",
    "a" * 3000,
    "x_" * 500,
    "-.-/-.-/" * 100,
]
ANALYZER_BYTES = [
    b"\xff\xfe\x00abc\xc3",
    b"\xed\xa0\x80lone\xed\xb0\x80",
    b"\xf4\x90\x80\x80 over",
    b"\x00" * 64,
]

QUERY_SEEDS = [
    b"\x0a\x00" + b"alpha beta\nbeta gamma\ngetUserById\nalpha\nbeta",
    b"\xe8\x03" + np.arange(16, dtype=np.float32).tobytes(),
    b"\x01\x00" + np.array([np.nan, 1, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, 0], np.float32).tobytes(),
    b"\xff\x07" + "İ\n\n\nß\n😀".encode(),
]


def main() -> None:
    corpus = HERE / "corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    seeds = loader_seeds()
    seeds["analyzer"] = [s.encode("utf-8", "surrogatepass") for s in ANALYZER_SEEDS] + ANALYZER_BYTES
    seeds["query"] = QUERY_SEEDS
    seeds["load_retriever"] = retriever_seeds()
    total = 0
    for target, items in seeds.items():
        folder = corpus / target
        folder.mkdir(parents=True)
        for i, data in enumerate(items):
            (folder / f"seed-{i:03d}").write_bytes(data)
            total += len(data)
    print(f"wrote {sum(map(len, seeds.values()))} seeds, {total / 1024:.0f} KiB, to {corpus}")


if __name__ == "__main__":
    main()
