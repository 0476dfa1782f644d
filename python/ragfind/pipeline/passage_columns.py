"""The passage columns: what a search fetches for each passage (chunk text, context, offsets,
document id, title, metadata JSON), kept beside the SQLite store so that fetching ``k`` rows
costs O(k log n) array work and ``k`` string decodes, with no SQL.

SQLite stays the durable store; :class:`~ragfind.pipeline.store.DocumentStore` keeps these
columns equal to its tables on every write (insert, rollback, delete) and rebuilds them from
the tables when a folder is opened. The layout holds no per-row Python objects:

- one UTF-8 byte arena holding every string;
- a chunk table (int64, one row per chunk, append order): chunk id, document row, start, end,
  and the arena span of the text and of the context;
- a document table (int64): the arena spans of the document id, title and metadata JSON;
- the live chunk ids sorted, with their chunk-table rows (the lookup).

The rows of ``k`` ids are read natively (``_core.passage_rows``, ``cpp/.../passages/``), which
checks every offset it follows.

Deleted rows stay in the tables and their bytes in the arena until dead rows outnumber live
ones; then the tables and the arena are rewritten with the live rows only.

Saved with the retriever folder as one sectioned file (:mod:`ragfind.persist.sectioned`:
atomic, checksummed) and loaded memory-mapped; the first write after a load copies the arrays.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ragfind import _core
from ragfind.errors import IndexFileError
from ragfind.persist.sectioned import SectionedFile, write_sectioned
from ragfind.pipeline.results import EMPTY_MAPPING, SLOTS, Passage, metadata_and_source, rank_views

__all__ = ["PassageColumns"]

# Chunk table columns.
_ID, _DOC, _START, _END, _TEXT_LO, _TEXT_HI, _CTX_LO, _CTX_HI = range(8)
# Document table columns.
_DOC_ID_LO, _DOC_ID_HI, _TITLE_LO, _TITLE_HI, _META_LO, _META_HI = range(6)
COLUMNS_MAGIC = b"RFPASSGC"
COLUMNS_VERSION = 1
#: Dead chunk rows tolerated before a compaction (besides outnumbering the live ones).
_COMPACT_MIN_DEAD = 4096


class _Growable:
    """A numpy array with spare capacity at the end: appends are amortised O(appended)."""

    __slots__ = ("buf", "n")

    def __init__(self, dtype: type, width: int = 0, data: np.ndarray | None = None) -> None:
        shape = (0, width) if width else (0,)
        self.buf = np.zeros(shape, dtype) if data is None else data
        self.n = len(self.buf)

    def view(self) -> np.ndarray:
        return self.buf[: self.n]

    def append(self, rows: np.ndarray) -> None:
        end = self.n + len(rows)
        if end > len(self.buf) or not self.buf.flags.writeable:  # a loaded memory map: copied
            grown = np.empty((max(end, 2 * len(self.buf), 16),) + self.buf.shape[1:], self.buf.dtype)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : end] = rows
        self.n = end

    def truncate(self, n: int) -> None:
        self.n = n


def _spans(lengths: np.ndarray, base: int) -> tuple:
    """``(lo, hi)`` arena offsets of strings of ``lengths`` laid out back to back from ``base``."""
    hi = np.cumsum(lengths, dtype=np.int64) + base
    return hi - lengths, hi


class PassageColumns:
    """The passage columns of a document store (see the module docstring).

    Writes are serialised by the caller and must not run concurrently with :meth:`rows`
    (the store holds its lock around both).
    """

    def __init__(self) -> None:
        self._arena = _Growable(np.uint8)
        self._chunks = _Growable(np.int64, 8)
        self._docs = _Growable(np.int64, 6)
        self._keys = _Growable(np.int64)  # live chunk ids, ascending
        self._slots = _Growable(np.int64)  # their chunk-table rows
        self._view: _core.PassageColumnsView | None = None  # the native view of the reads
        self._view_of: tuple = ()  # the buffers it views

    def __len__(self) -> int:
        return self._keys.n

    @property
    def nbytes(self) -> int:
        """Bytes held (capacity included)."""
        return sum(g.buf.nbytes for g in (self._arena, self._chunks, self._docs, self._keys, self._slots))

    # ----- writes

    def mark(self) -> tuple:
        """The state to return to with :meth:`rollback`."""
        return (self._arena.n, self._chunks.n, self._docs.n)

    def append(self, doc_rows: Sequence, chunk_rows: Sequence) -> None:
        """Adds documents ``(doc_id, title, text, metadata JSON)`` and their chunks ``(id, doc_id,
        index, start, end, n_tokens, text, context)`` (the store's insert rows); a chunk names
        a document of the same call. The ids must not be live already."""
        n_docs, n_chunks = len(doc_rows), len(chunk_rows)
        if not n_docs and not n_chunks:
            return
        doc_base, chunk_base = self._docs.n, self._chunks.n
        doc_row = {d[0]: doc_base + i for i, d in enumerate(doc_rows)}
        strings = [s.encode() for d in doc_rows for s in (d[0], d[1], d[3])]
        strings += [s.encode() for c in chunk_rows for s in (c[6], c[7])]
        lengths = np.fromiter(map(len, strings), np.int64, len(strings))
        lo, hi = _spans(lengths, self._arena.n)
        docs = np.empty((n_docs, 6), np.int64)
        docs[:, 0::2] = lo[: 3 * n_docs].reshape(n_docs, 3)
        docs[:, 1::2] = hi[: 3 * n_docs].reshape(n_docs, 3)
        chunks = np.empty((n_chunks, 8), np.int64)
        if n_chunks:
            chunks[:, :4] = [(c[0], doc_row[c[1]], c[3], c[4]) for c in chunk_rows]
            chunks[:, 4::2] = lo[3 * n_docs :].reshape(n_chunks, 2)
            chunks[:, 5::2] = hi[3 * n_docs :].reshape(n_chunks, 2)
        ids = chunks[:, _ID]
        order = np.argsort(ids, kind="stable")
        new_keys, new_slots = ids[order], order + chunk_base
        keys = self._keys.view()
        if len(new_keys) > 1 and (np.diff(new_keys) == 0).any():
            raise ValueError("chunk ids repeat in one insert")
        in_order = not len(keys) or not len(new_keys) or new_keys[0] > keys[-1]
        if not in_order:
            at = np.searchsorted(keys, new_keys)
            if (keys[np.minimum(at, len(keys) - 1)] == new_keys).any():
                raise ValueError("a chunk id of the insert is already stored")
        self._arena.append(np.frombuffer(b"".join(strings), np.uint8))
        self._docs.append(docs)
        self._chunks.append(chunks)
        if in_order:
            # New ids after every live one (the sequential policy): an append.
            self._keys.append(new_keys)
            self._slots.append(new_slots)
        else:
            merged_keys = np.insert(keys, at, new_keys)
            merged_slots = np.insert(self._slots.view(), at, new_slots)
            self._keys = _Growable(np.int64, data=merged_keys)
            self._slots = _Growable(np.int64, data=merged_slots)
        self._follow()

    def rollback(self, mark: tuple) -> None:
        """Undoes the :meth:`append` calls made since :meth:`mark` returned ``mark``."""
        arena_n, chunks_n, docs_n = mark
        added = self._chunks.view()[chunks_n:, _ID]
        self._drop_keys(added)
        self._arena.truncate(arena_n)
        self._chunks.truncate(chunks_n)
        self._docs.truncate(docs_n)
        self._follow()

    def remove(self, chunk_ids: np.ndarray) -> None:
        """Drops the chunks (ids not live are ignored); compacts when dead rows dominate."""
        self._drop_keys(np.asarray(chunk_ids, np.int64))
        dead = self._chunks.n - self._keys.n
        if dead > self._keys.n and dead >= _COMPACT_MIN_DEAD:
            self.compact()

    def _drop_keys(self, ids: np.ndarray) -> None:
        keys = self._keys.view()
        if not len(ids) or not len(keys):
            return
        at = np.unique(_hits(keys, ids))
        if not len(at):
            return
        if at[0] == len(keys) - len(at) and at[-1] == len(keys) - 1:
            # The last ids (an undone append): a truncation.
            self._keys.truncate(self._keys.n - len(at))
            self._slots.truncate(self._slots.n - len(at))
            self._follow()
            return
        self._keys = _Growable(np.int64, data=np.delete(keys, at))
        self._slots = _Growable(np.int64, data=np.delete(self._slots.view(), at))
        self._follow()

    def compact(self) -> None:
        """Rewrites the tables and the arena with the live rows only."""
        self._view = None
        self._view_of = ()
        out = PassageColumns()
        slots = self._slots.view()
        chunks = self._chunks.view()[slots]
        doc_rows, doc_of = np.unique(chunks[:, _DOC], return_inverse=True)
        docs = self._docs.view()[doc_rows]
        arena = self._arena.view()
        # Every live string, documents first, copied back to back in one gather.
        spans = np.concatenate([docs.reshape(-1, 2), chunks[:, 4:].reshape(-1, 2)])
        lengths = spans[:, 1] - spans[:, 0]
        lo, hi = _spans(lengths, 0)
        total = int(hi[-1]) if len(hi) else 0
        if total:
            starts = np.repeat(spans[:, 0] - lo, lengths)
            out._arena.append(arena[np.arange(total, dtype=np.int64) + starts])
        n_docs = len(docs)
        new_docs = np.empty_like(docs)
        new_docs[:, 0::2] = lo[: 3 * n_docs].reshape(n_docs, 3)
        new_docs[:, 1::2] = hi[: 3 * n_docs].reshape(n_docs, 3)
        new_chunks = chunks.copy()
        new_chunks[:, _DOC] = doc_of
        new_chunks[:, 4::2] = lo[3 * n_docs :].reshape(-1, 2)
        new_chunks[:, 5::2] = hi[3 * n_docs :].reshape(-1, 2)
        out._docs.append(new_docs)
        out._chunks.append(new_chunks)
        out._keys.append(self._keys.view())
        out._slots.append(np.arange(len(slots), dtype=np.int64))
        self._arena, self._chunks, self._docs = out._arena, out._chunks, out._docs
        self._keys, self._slots = out._keys, out._slots

    # ----- reads

    def _buffers(self) -> tuple:
        return (self._arena.buf, self._chunks.buf, self._docs.buf, self._keys.buf, self._slots.buf)

    def _follow(self) -> None:
        """After a write: the view follows it when the write stayed in the buffers it views
        (an append into their room, a truncation), else it is made again on the next read."""
        view = self._view
        if view is None:
            return
        now = self._buffers()
        if all(a is b for a, b in zip(now, self._view_of)):
            view.set_keys(self._keys.n)
        else:
            self._view, self._view_of = None, ()

    def view(self) -> _core.PassageColumnsView:
        """The native view the reads go through (made again after a write that left the buffers
        it views)."""
        view = self._view
        if view is None:
            bufs = self._buffers()
            view = self._view = _core.PassageColumnsView(
                *bufs,
                Passage,
                SLOTS,
                EMPTY_MAPPING,
                metadata_and_source,
                n_keys=self._keys.n,
            )
            self._view_of = bufs
        return view

    def rows(self, ids: Sequence[int] | np.ndarray) -> list:
        """``[(id, doc_id, text, title, start, end, metadata JSON, context)]`` (the store's
        ``ROW`` columns) of the live chunks among ``ids``, in their order (native: a binary
        search and the string decodes per id)."""
        return self.view().rows(np.asarray(ids, np.int64))

    def passages(
        self,
        ids: np.ndarray,
        fused: Sequence[float],
        stage_scores: np.ndarray,
        stage: str,
        highlights: object,
        texts: list | None = None,
    ) -> tuple:
        """The :class:`~ragfind.pipeline.results.Passage` of each live chunk of ``ids``, one
        ranked list best first (absent ids skipped): ``score`` = ``fused[i]``, ``ranks`` =
        ``{stage: i + 1}``, ``scores`` = ``{stage: stage_scores[i], "fused": fused[i]}``,
        ``highlights`` = ``highlights`` (a pending value), built natively; each text is also
        appended to ``texts`` when given."""
        return self.view().passages(ids, fused, stage_scores, stage, rank_views(stage), highlights, texts)

    def rows_json(
        self, ids: np.ndarray, fused: Sequence[float], stage_scores: np.ndarray, stage: str
    ) -> bytes | None:
        """The JSON text of the list of result rows (as ``ragfind serve`` renders
        :meth:`passages` of the same arguments), written natively from the columns with no
        passage made; None when a row's strings are not well-formed UTF-8 or its metadata holds
        values other than JSON's own types (then :meth:`passages` shows them)."""
        return self.view().rows_json(ids, fused, stage_scores, stage)

    # ----- files

    def save(self, path: str | os.PathLike) -> None:
        """Writes the columns as one sectioned file, atomically."""
        write_sectioned(
            path,
            COLUMNS_MAGIC,
            COLUMNS_VERSION,
            {
                "n_chunks": self._chunks.n,
                "n_docs": self._docs.n,
                "n_live": self._keys.n,
                "n_bytes": self._arena.n,
            },
            {
                "arena": self._arena.view(),
                "chunks": self._chunks.view(),
                "docs": self._docs.view(),
                "keys": self._keys.view(),
                "slots": self._slots.view(),
            },
            checksum_header=True,
            fault_prefix="passage_columns.save",
        )

    @classmethod
    def load(cls, path: str | os.PathLike, *, mmap: bool = True, verify: bool = True) -> PassageColumns:
        """Columns written by :meth:`save` (memory-mapped when ``mmap``; ``verify`` checks every
        section's CRC32). Raises ``ragfind.errors.IndexFileError`` (a ValueError) for a file of
        another kind, version or shape, a corrupt one, or keys that are not ascending; the
        offsets are checked by every native read."""
        f = SectionedFile(path, COLUMNS_MAGIC, COLUMNS_VERSION, "passage columns")
        n_chunks, n_docs = f.field("n_chunks", int), f.field("n_docs", int)
        n_live, n_bytes = f.field("n_live", int), f.field("n_bytes", int)

        def read(name: str, dtype: type, shape: tuple) -> np.ndarray:
            a = f.array(name, dtype, shape, mmap=True, verify=verify)
            return a if mmap else np.array(a)

        out = cls()
        out._arena = _Growable(np.uint8, data=read("arena", np.uint8, (n_bytes,)))
        out._chunks = _Growable(np.int64, 8, data=read("chunks", np.int64, (n_chunks, 8)))
        out._docs = _Growable(np.int64, 6, data=read("docs", np.int64, (n_docs, 6)))
        out._keys = _Growable(np.int64, data=read("keys", np.int64, (n_live,)))
        out._slots = _Growable(np.int64, data=read("slots", np.int64, (n_live,)))
        keys = out._keys.view()
        if len(keys) > 1 and not bool((keys[1:] > keys[:-1]).all()):
            raise IndexFileError(f"{path}: the chunk ids of the passage columns are not ascending (corrupt)")
        return out

    def ids(self) -> np.ndarray:
        """The live chunk ids, ascending."""
        return self._keys.view().copy()


def _hits(keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions in ``keys`` (sorted) of the ``ids`` present there."""
    at = np.searchsorted(keys, ids)
    inside = at < len(keys)
    at, ids = at[inside], ids[inside]
    return at[keys[at] == ids]
