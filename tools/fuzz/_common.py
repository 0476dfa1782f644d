"""Shared pieces of the atheris harnesses in tools/fuzz (see tools/fuzz/README.md).

Every harness runs the same ``check_<target>(data: bytes)`` function that
tests/reliability/test_fuzz_regressions.py replays over the seed corpus and every crash ever found, so a
fuzz finding becomes a regression test by dropping its input into tools/fuzz/corpus/<target>/
(or tests/reliability/fuzz_regressions/<target>/).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import warnings
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"

# Exceptions a loader may raise for a bad file: ValueError (ragfind.IndexFileError is one) and
# OSError. Anything else (IndexError, KeyError, MemoryError, SystemError, a crash, a hang) is
# a finding.
CLEAN_ERRORS = (ValueError, OSError)


def fix_checksums(kind: str, buf: bytearray, sections: bool = False) -> bytearray:
    """Recomputes the checksums a mutated file would fail, so mutations reach the parser
    (the dense section CRCs too when ``sections``)."""
    if kind == "bm25" and len(buf) >= 64 and buf[:8] == b"RAGFBM25":
        hb, _file_size, ns = struct.unpack_from("<IQI", buf, 12)
        if 64 <= hb <= len(buf):
            struct.pack_into("<I", buf, 28, zlib.crc32(bytes(buf[hb:])))
        table_end = 64 + 40 * ns
        if table_end <= len(buf):
            struct.pack_into("<I", buf, 32, zlib.crc32(bytes(buf[64:table_end])))
        struct.pack_into("<I", buf, 36, zlib.crc32(bytes(buf[40:64]), zlib.crc32(bytes(buf[:36]))))
    elif kind.startswith("dense") and len(buf) >= 16 and buf[:8] == b"RFDENSE\x00" and buf[8] == 2:
        _fix_sectioned_checksums(buf, sections)
    elif kind.startswith("dense") and len(buf) >= 32 and buf[:8] == b"RFDENSE\x00":
        (hlen,) = struct.unpack_from("<Q", buf, 16)
        if 32 + hlen <= len(buf):
            if sections:
                _fix_dense_section_checksums(buf, hlen)
            struct.pack_into("<I", buf, 24, zlib.crc32(bytes(buf[32 : 32 + hlen])))
    return buf


_CRC_KEY = b'{"header_crc32": "'


def _fix_sectioned_checksums(buf: bytearray, sections: bool) -> None:
    """Recomputes a sectioned file's header CRC (persist/sectioned.py), and its section CRCs
    when ``sections``, in place (same length)."""
    (hlen,) = struct.unpack_from("<I", buf, 12)
    if 16 + hlen > len(buf):
        return
    if sections:
        try:
            header = json.loads(bytes(buf[16 : 16 + hlen]))
            for s in header["sections"].values():
                off, nbytes = int(s["offset"]), int(s["nbytes"])
                if 0 <= off and off + nbytes <= len(buf):
                    s["crc32"] = zlib.crc32(bytes(buf[off : off + nbytes]))
            new = json.dumps(header, separators=(",", ":")).encode()
            if new.startswith(b'{"header_crc32":"'):  # the prefix the reader looks for
                new = _CRC_KEY + new[len(b'{"header_crc32":"') :]
            if len(new) <= hlen:
                buf[16 : 16 + hlen] = new + b" " * (hlen - len(new))
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            pass
    at = 16 + len(_CRC_KEY)
    if bytes(buf[16:at]) == _CRC_KEY and at + 8 <= 16 + hlen:
        zeroed = bytes(buf[16:at]) + b"0" * 8 + bytes(buf[at + 8 : 16 + hlen])
        buf[at : at + 8] = f"{zlib.crc32(zeroed):08x}".encode()


def _fix_dense_section_checksums(buf: bytearray, hlen: int) -> None:
    """Rewrites a dense header's section CRCs in place (same length), so that mutated section
    bytes (the HNSW graph above all) reach the structural checks behind the CRCs."""
    try:
        header = json.loads(bytes(buf[32 : 32 + hlen]))
        for s in header["sections"].values():
            off, nbytes = int(s["offset"]), int(s["nbytes"])
            if 0 <= off and off + nbytes <= len(buf):
                s["crc32"] = zlib.crc32(bytes(buf[off : off + nbytes]))
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        return
    new = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    if len(new) <= hlen:  # JSON allows the trailing spaces that keep the length
        buf[32 : 32 + hlen] = new + b" " * (hlen - len(new))


def load_any(kind: str, path: str, mmap: bool, verify: bool):
    from ragfind import BM25Index, DenseIndex, LateInteractionIndex

    if kind == "bm25":
        return BM25Index.load(path, mmap=mmap)
    if kind.startswith("dense"):
        return DenseIndex.load(path, mmap=mmap, verify=verify)
    if kind == "late":
        return LateInteractionIndex.load(path, mmap=mmap, verify=verify)
    if kind == "sparse":
        from ragfind.sparse.splade_index import SparseVectorIndex

        return SparseVectorIndex.load(path, mmap=mmap, verify=verify)
    raise ValueError(kind)


def exercise(kind: str, index) -> None:
    """Uses a loaded index the way an application would (a corrupt one must fail cleanly)."""
    if kind == "bm25":
        index.search("alpha beta gamma", k=5)
        index.search_tokenized(["alpha", "zeta"], k=3)
        index.search_batch(["alpha", "beta delta"], k=4, threads=2)
        index.score("alpha")
        index.add(["a new document about alpha"])
        index.delete(index.ids[-1:])
    elif kind.startswith("dense"):
        rng = np.random.default_rng(0)
        q = rng.standard_normal(index.dim).astype(np.float32)
        index.search(q, k=5)
        index.search_batch(np.stack([q, -q]), k=3, threads=2)
        index.search_batch_padded(np.stack([q, -q]), k=3, threads=2)
        if len(index) and index.kind in ("exact", "ivf"):
            index.delete(index.ids[:1])
        new = index.add(
            rng.standard_normal((2, index.dim)).astype(np.float32),
            ids=None if index.ids.dtype != object else ["fz1", "fz2"],
        )
        index.search(q, k=5)
        del new
    elif kind == "sparse":
        _exercise_sparse(index)
    elif kind == "late":
        rng = np.random.default_rng(0)
        q = rng.standard_normal((3, index.dim)).astype(np.float32)
        index.search(q, k=5)
        if len(index):
            index.score(q)
            index.rerank(q, np.arange(min(3, len(index))))


def _exercise_sparse(index) -> None:
    index.search({0: 1.0, 3: 0.5, index.dim - 1: 2.0}, k=5)
    index.search({1: 1.0}, k=3, algorithm="exhaustive")
    index.search_batch([{0: 1.0}, {2: 0.3, 4: 0.1}], k=4, threads=2)
    if len(index):
        index.score({0: 1.0})
    index.add([{0: 0.5, 1: 1.5}])


def check_loader(kind: str, data: bytes) -> None:
    """Load a (mutated) index file: it must load and work, or raise a clean error."""
    if not data:
        return
    mode = data[0]
    buf = bytearray(data[1:])
    if mode & 1:
        buf = fix_checksums(kind, buf, sections=bool(mode & 8))
    mmap = bool(mode & 2)
    verify = not (mode & 4)  # dense/late: skip section CRCs so corrupt structure is parsed
    # bit 3 (with bit 0): dense section CRCs recomputed, so mutated graphs reach the graph check
    fd, path = tempfile.mkstemp(prefix="ragfind-fuzz-", suffix=".idx")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buf)
        try:
            index = load_any(kind, path, mmap, verify)
        except CLEAN_ERRORS:
            return
        try:
            exercise(kind, index)
        except (ValueError, KeyError, TypeError):
            # A file with valid checksums may still describe an odd but loadable index whose
            # use is refused with a clean error; only crashes and unexpected errors count.
            pass
        del index
    finally:
        os.unlink(path)


def check_analyzer(data: bytes) -> None:
    """Any bytes / any str through every analyzer configuration: terms are non-empty str."""

    for analyzer in _analyzers():
        for text in (
            data,
            data.decode("utf-8", "surrogatepass") if _valid_surrogatepass(data) else None,
            data.decode("utf-8", "replace"),
            data.decode("latin-1"),
        ):
            if text is None:
                continue
            terms = analyzer.analyze(text)
            assert isinstance(terms, list)
            for t in terms:
                assert isinstance(t, str) and t, (text, terms)


def _valid_surrogatepass(data: bytes) -> bool:
    try:
        data.decode("utf-8", "surrogatepass")
        return True
    except UnicodeDecodeError:
        return False


_ANALYZERS: list = []


def _analyzers():
    if not _ANALYZERS:
        from ragfind import Analyzer

        _ANALYZERS.extend(
            [
                Analyzer(),
                Analyzer(lowercase=False, stopwords=None, stemmer=None, split_identifiers=True),
                Analyzer(stemmer="french", split_identifiers=False, symbol_letters=False),
                Analyzer(cjk=True),
                Analyzer(stopwords=["the", "é"], stemmer="russian"),
            ]
        )
    return _ANALYZERS


def check_query(data: bytes) -> None:
    """Random corpora and queries through BM25Index, DenseIndex and rrf: no crash, sane results."""
    from ragfind import BM25Index, rrf

    if len(data) < 4:
        return
    k = 1 + (data[0] | (data[1] << 8)) % 2000
    body = data[2:]
    text = body.decode("utf-8", "replace")
    parts = text.split("\n")
    docs, queries = parts[: max(1, len(parts) // 2)], parts[max(1, len(parts) // 2) :] or [text]
    index = BM25Index()
    index.add(docs)
    for q in queries[:8]:
        ids, scores = index.search(q, k=k)
        assert len(ids) == len(scores) <= min(k, len(docs))
        assert np.all(np.isfinite(scores))
    index.search_batch(queries[:8], k=k, threads=2)
    index.search_tokenized(text.split(), k=k)

    # Dense: the raw bytes as float32 values (NaN/inf/huge must be rejected cleanly). numpy
    # may warn about float32 overflow for huge finite values (DenseIndex.search squares the
    # query); warnings are not failures here (reported to the dense owner).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _check_dense(data, body, k)
    lists = [[b % 50 for b in body[i : i + 8]] for i in range(0, min(len(body), 40), 8)]
    lists = [list(dict.fromkeys(li)) for li in lists] or [[1]]
    ids, scores = rrf(lists, k=float(data[3]), top_k=k)
    assert len(ids) <= k


def _check_dense(data: bytes, body: bytes, k: int) -> None:
    from ragfind import DenseIndex

    dim = 1 + data[2] % 16
    usable = len(body) // (4 * dim) * (4 * dim)
    if usable:
        X = np.frombuffer(body[:usable], dtype=np.float32).reshape(-1, dim)
        for metric in ("cosine", "ip", "l2"):
            dense = DenseIndex(dim, metric=metric)
            try:
                dense.add(X)
            except ValueError:
                continue
            try:
                ids, scores = dense.search(X[0], k=k)
                assert len(ids) <= min(k, len(X))
                dense.search_batch(X[:4], k=k, threads=2)
            except ValueError:
                pass  # e.g. a query that overflows float32 once squared


def main(check, argv=None) -> None:
    import atheris

    atheris.Setup(sys.argv if argv is None else argv, check)
    atheris.Fuzz()


# ---------------------------------------------------------------------------- load_retriever
#
# A saved Retriever is a folder; a fuzz input packs it as a mode byte followed by records
# ``[file id: u8][size: u32 LE][bytes]`` (a short last record takes what is left; unknown ids
# are skipped), so the fuzzer mutates the manifest, the SQLite store and the index files alike.

RETRIEVER_FILES = ("manifest.json", "store.sqlite", "bm25.idx", "dense.idx")
RETRIEVER_DOCS = [
    {
        "id": "cats",
        "title": "Cats",
        "text": "Cats purr and hunt mice.",
        "metadata": {"lang": "en", "year": 2020},
    },
    {"id": "dogs", "title": "Dogs", "text": "Dogs bark and fetch sticks.", "metadata": {"lang": "en"}},
    {
        "id": "chats",
        "text": "Les chats ronronnent.",
        "metadata": {"lang": "fr", "source": "https://x.example"},
    },
]


class HashEncoder:
    """A deterministic bag-of-words encoder (no ONNX model): words hashed into ``dim`` buckets."""

    def __init__(self, dim: int = 8) -> None:
        from ragfind.pipeline.chunking import load_tokenizer

        self.dim = dim
        self.fingerprint = f"fuzz-hash-{dim}"
        self.max_length = 128
        self.tokenizer = load_tokenizer()

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, np.float32)
        for w in text.lower().split():
            h = zlib.crc32(w.encode("utf-8", "surrogatepass"))
            v[h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
        if not v.any():
            v[0] = 1.0
        return v / np.linalg.norm(v)

    def encode(self, texts, batch_size=32, show_progress=False, normalize=True):
        return np.stack([self._vec(t) for t in texts]).reshape(len(texts), self.dim)

    def encode_query(self, text: str) -> np.ndarray:
        return self._vec(text)


_ENCODER: list = []


def hash_encoder() -> HashEncoder:
    if not _ENCODER:
        _ENCODER.append(HashEncoder())
    return _ENCODER[0]


def pack_folder(folder: Path, mode: int) -> bytes:
    out = bytearray([mode])
    for i, name in enumerate(RETRIEVER_FILES):
        p = Path(folder) / name
        if p.is_file():
            data = p.read_bytes()
            out += struct.pack("<BI", i, len(data)) + data
    return bytes(out)


def _unpack_folder(buf: bytes) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    pos = 0
    while pos + 5 <= len(buf):
        fid, size = struct.unpack_from("<BI", buf, pos)
        data = buf[pos + 5 : pos + 5 + size]
        pos += 5 + size
        if fid < len(RETRIEVER_FILES):
            files[RETRIEVER_FILES[fid]] = data
    return files


def _fix_manifest(files: dict[str, bytes]) -> None:
    """Rewrites the manifest's sizes and SHA-256s to match the (mutated) files."""
    import hashlib

    try:
        manifest = json.loads(files["manifest.json"])
        for name, info in manifest["files"].items():
            if name in files:
                info["size"] = len(files[name])
                info["sha256"] = hashlib.sha256(files[name]).hexdigest()
    except (KeyError, ValueError, TypeError, AttributeError, RecursionError):
        return
    files["manifest.json"] = json.dumps(manifest).encode()


def check_retriever(data: bytes) -> None:
    """Load a (mutated) saved Retriever folder: it must load and work, or raise a clean error.

    Mode byte: bit 0 recomputes the index files' own checksums, bit 1 the manifest's sizes and
    SHA-256s (so mutations reach the structural checks), bit 2 loads with verify=False, bit 3
    loads without an encoder (a lexical-only folder).
    """
    from ragfind import Retriever

    if not data:
        return
    mode = data[0]
    files = _unpack_folder(data[1:])
    if mode & 1:
        for name, kind in (("bm25.idx", "bm25"), ("dense.idx", "dense")):
            if name in files:
                files[name] = bytes(fix_checksums(kind, bytearray(files[name]), sections=True))
    if mode & 2:
        _fix_manifest(files)
    encoder = None if mode & 8 else hash_encoder()
    with tempfile.TemporaryDirectory(prefix="ragfind-fuzz-") as tmp:
        folder = Path(tmp) / "kb"
        folder.mkdir()
        for name, content in files.items():
            (folder / name).write_bytes(content)
        try:
            r = Retriever.load(folder, encoder=encoder, reranker=None, verify=not (mode & 4))
        except CLEAN_ERRORS:
            return
        try:
            _exercise_retriever(r, Path(tmp))
        finally:
            r.close()


def _exercise_retriever(r, tmp: Path) -> None:
    """Uses a loaded retriever the way an application would: every call must succeed."""
    from ragfind import Retriever

    n = len(r)
    for q in ("cats purr", ["dogs bark", "chats"]):
        res = r.search(q, k=3)
        assert len(res) <= 3
    fields = set(r.fields)
    if "lang" in fields:
        r.search("cats", k=2, filters={"lang": "en"})
    r.search("cats", k=2, filters={"doc_id": {"$in": ["cats", "dogs"]}})
    added = r.add_documents(
        [{"id": "fuzz-new", "text": "Otters float on rivers.", "metadata": {"lang": "en"}}]
    )
    assert len(r) == n + 1
    r.search("otters", k=2)
    r.save(tmp / "again")
    again = Retriever.load(tmp / "again", encoder=r.encoder, reranker=None)
    try:
        assert len(again) == n + 1 and again.n_chunks == r.n_chunks
        again.search("otters", k=2)
    finally:
        again.close()
    assert r.delete_documents(["fuzz-new"]) == added
    assert len(r) == n


# ---------------------------------------------------------------------------- query_parser
#
# Query strings with phrases: quotes, slop (huge too), escapes, unbalanced quotes. The input
# is "docs\n\nquery..." (no blank line: fixed documents); parsing never raises, a positional
# index answers every query with finite, sorted scores, and the highlights are sorted,
# non-overlapping offsets inside the text.

PHRASE_DOCS = [
    "new york new york",
    "new big york",
    "york new",
    'say "hi" to the \\ backslash',
    "東京都に住む 北京大学",
    "getUserById function XJ-2000",
]


def check_query_parser(data: bytes) -> None:
    from ragfind import BM25Index
    from ragfind.pipeline.highlights import highlight
    from ragfind.sparse.query import MAX_SLOP, parse_query

    text = data.decode("utf-8", "replace")
    head, sep, tail = text.partition("\n\n")
    docs, queries = (head.split("\n")[:16], tail.split("\n")[:8]) if sep else (PHRASE_DOCS, [text])
    for q in queries:
        parsed = parse_query(q)
        assert isinstance(parsed.text, str)
        for ph in parsed.phrases:
            assert 0 <= ph.slop <= MAX_SLOP
        if '"' not in q:
            assert parsed.text == q and not parsed.phrases
    for analyzer in ("default", "cjk"):
        index = BM25Index(analyzer=analyzer, positions=True)
        index.add(docs)
        for q in queries:
            ids, scores = index.search(q, k=5)
            assert len(ids) == len(scores) <= 5
            assert np.all(np.isfinite(scores)) and np.all(np.diff(scores) <= 0)
            for d in docs[:4]:
                spans = highlight(d, q, index.analyzer)
                assert all(0 <= b < e <= len(d) for b, e in spans)
                assert all(e1 < b2 for (_, e1), (b2, _) in zip(spans, spans[1:]))


# ---------------------------------------------------------------------------- add_documents
#
# A write is JSON text (decoded with surrogates allowed, so invalid Unicode reaches the check):
# a list of documents, or one document. The mode byte first: bit 0 adds to a retriever that
# already holds RETRIEVER_DOCS (their fields have kinds), bit 1 JSON-decodes with NaN and
# Infinity (Python's json takes them), bit 2 turns the list into two writes (halves), bit 3
# decodes invalid UTF-8 into lone surrogates (else into U+FFFD).


def check_add_documents(data: bytes) -> None:
    """A batch of documents: either it is kept (found by id, loadable after a save, the same
    document back) or it raises TypeError/ValueError and leaves the retriever as it was."""
    from ragfind import Retriever

    if not data:
        return
    mode, text = data[0], data[1:].decode("utf-8", "surrogateescape" if data[0] & 8 else "replace")

    def refuse_constant(name: str):
        raise ValueError(name)

    try:
        batch = json.loads(text) if mode & 2 else json.loads(text, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return
    if not isinstance(batch, list):
        batch = [batch]
    writes = [batch[: len(batch) // 2], batch[len(batch) // 2 :]] if mode & 4 else [batch]
    r = Retriever(encoder=None, chunk_size=None, contextualize=False)
    try:
        if mode & 1:
            r.add_documents(RETRIEVER_DOCS)
        kept = {d: r.get_document(d) for d in (x["id"] for x in RETRIEVER_DOCS if mode & 1)}
        for docs in writes:
            before = (len(r), r.n_chunks)
            try:
                r.add_documents(docs)
            except (TypeError, ValueError):
                assert (len(r), r.n_chunks) == before, "a refused write left something behind"
                continue
            for d in docs:
                kept[str(d["id"])] = r.get_document(d["id"])
        with tempfile.TemporaryDirectory(prefix="ragfind-fuzz-") as tmp:
            r.save(Path(tmp) / "kb")
            back = Retriever.load(Path(tmp) / "kb", encoder=None)
            try:
                assert len(back) == len(kept)
                for i, d in kept.items():
                    assert back.get_document(i) == d, i
            finally:
                back.close()
    finally:
        r.close()
