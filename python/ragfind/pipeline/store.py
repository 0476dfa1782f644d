"""The Retriever's document store: documents, chunk text, offsets and metadata in SQLite
(stdlib ``sqlite3``, in memory; saved as one file), the passage columns a search fetches from
(:mod:`.passage_columns`, kept equal to the tables), and the checks a loaded store must pass."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.pipeline.passage_columns import PassageColumns

__all__ = ["DocumentStore", "STORE_FILE"]

STORE_FILE = "store.sqlite"

_SCHEMA = """
CREATE TABLE documents (doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL,
                        metadata TEXT NOT NULL);
CREATE TABLE chunks (id INTEGER PRIMARY KEY, doc_id TEXT NOT NULL REFERENCES documents(doc_id),
                     idx INTEGER NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
                     n_tokens INTEGER NOT NULL, text TEXT NOT NULL, context TEXT NOT NULL);
CREATE INDEX chunks_doc ON chunks(doc_id);
CREATE TABLE fields (name TEXT PRIMARY KEY);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

#: The columns :meth:`DocumentStore.fetch` returns per chunk, in order.
ROW = ("id", "doc_id", "text", "title", "start", "end", "metadata", "context")


def _connect() -> sqlite3.Connection:
    return sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)


def _new_db() -> sqlite3.Connection:
    db = _connect()
    db.executescript(_SCHEMA)
    return db


_STORE_SCHEMA: list = []


def _store_schema() -> list:
    """sqlite_master of a new store: a saved one must match it exactly (no foreign tables,
    columns, triggers or views, which the queries and writes here do not expect)."""
    if not _STORE_SCHEMA:
        db = _new_db()
        _STORE_SCHEMA.extend(_schema_of(db))
        db.close()
    return _STORE_SCHEMA


def _schema_of(db: sqlite3.Connection) -> list:
    # The CREATE statements with whitespace collapsed: sqlite_master keeps them as written, and
    # stores written by earlier versions of this module laid them out differently.
    rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall()
    return [(t, n, tb, " ".join(sql.split()) if isinstance(sql, str) else sql) for t, n, tb, sql in rows]


def _columns_of(db: sqlite3.Connection) -> PassageColumns:
    """The passage columns of the tables of ``db`` (a store opened from a file)."""
    columns = PassageColumns()
    docs = db.execute("SELECT doc_id, title, '', metadata FROM documents ORDER BY rowid").fetchall()
    chunks = db.execute(
        'SELECT id, doc_id, idx, start, "end", n_tokens, text, context FROM chunks ORDER BY id'
    ).fetchall()
    columns.append(docs, chunks)
    return columns


def _decode_text(b: bytes) -> str:
    # A stored string with invalid UTF-8 reads as U+FFFD instead of failing every later query.
    return str(b, "utf-8", "replace")


class DocumentStore:
    """Documents and chunks in an in-memory SQLite database.

    ``generation`` counts the writes (the Retriever keys its result and filter caches on it);
    ``next_chunk_id`` is the id the next chunk gets; ``fields`` the metadata keys seen. Reads
    take ``lock`` (one connection shared by threads); writes are serialised by the caller.
    ``columns`` (:class:`PassageColumns`) hold what :meth:`fetch` returns, written with the
    tables (built from them when ``db`` is given).
    """

    def __init__(
        self,
        db: sqlite3.Connection | None = None,
        next_chunk_id: int = 0,
        fields: Sequence = (),
        columns: PassageColumns | None = None,
    ):
        self.db = db if db is not None else _new_db()
        self.lock = threading.Lock()
        self.generation = 0
        self.next_chunk_id = int(next_chunk_id)
        self.fields: set = set(fields)
        #: Metadata field -> kinds of value written (bits of MetadataIndex.kinds), documents
        #: without chunks included (the metadata index sees only chunks); saved in the manifest.
        self.kinds: dict = {}
        #: Incremented whenever :meth:`add_kinds` gives a field a kind it never held.
        self.kinds_version = 0
        if columns is None:
            columns = PassageColumns() if db is None else _columns_of(self.db)
        self.columns = columns
        self._insert_mark: tuple | None = None

    # ----- reads

    def count_documents(self) -> int:
        with self.lock:
            return self.db.execute("SELECT COUNT(*) FROM documents").fetchone()[0]

    def count_chunks(self) -> int:
        with self.lock:
            return self.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]

    def existing(self, doc_ids: list) -> list:
        """The ids of ``doc_ids`` already stored."""
        out: list = []
        with self.lock:
            for start in range(0, len(doc_ids), 500):
                part = doc_ids[start : start + 500]
                q = f"SELECT doc_id FROM documents WHERE doc_id IN ({','.join('?' * len(part))})"
                out += [r[0] for r in self.db.execute(q, part)]
        return out

    def chunks_of(self, doc_ids: list) -> np.ndarray:
        """Chunk ids of the documents; KeyError naming the first id not stored."""
        rows: list = []
        with self.lock:
            for d in doc_ids:
                if self.db.execute("SELECT 1 FROM documents WHERE doc_id = ?", (d,)).fetchone() is None:
                    raise KeyError(f"document id {d!r} is not in the store")
                rows += [r[0] for r in self.db.execute("SELECT id FROM chunks WHERE doc_id = ?", (d,))]
        return np.asarray(rows, dtype=np.int64)

    def chunk_ids(self) -> np.ndarray:
        """Every chunk id, ascending."""
        with self.lock:
            return np.fromiter((r[0] for r in self.db.execute("SELECT id FROM chunks ORDER BY id")), np.int64)

    def chunk_texts(self, limit: int) -> list:
        """The text of the first ``limit`` chunks (sample queries for benchmarks)."""
        with self.lock:
            return [r[0] for r in self.db.execute("SELECT text FROM chunks ORDER BY id LIMIT ?", (limit,))]

    def chunk_rows(self) -> Any:
        """``(chunk id, doc_id, title, metadata JSON)`` of every chunk by id (a cursor; rebuilds
        the metadata index of a folder saved without one)."""
        return self.db.execute(
            "SELECT c.id, d.doc_id, d.title, d.metadata FROM chunks c JOIN documents d "
            "ON c.doc_id = d.doc_id ORDER BY c.id"
        )

    def get_document(self, doc_id: Any) -> dict:
        """The stored document ``{"id", "title", "text", "metadata"}``; KeyError when absent."""
        with self.lock:
            row = self.db.execute(
                "SELECT doc_id, title, text, metadata FROM documents WHERE doc_id = ?", (str(doc_id),)
            ).fetchone()
        if row is None:
            raise KeyError(f"document id {doc_id!r} is not in the store")
        return {"id": row[0], "title": row[1], "text": row[2], "metadata": json.loads(row[3])}

    def fetch(self, ids: Sequence[int]) -> dict:
        """``{chunk id: row}`` (columns :data:`ROW`) for the ids stored, from the passage
        columns (no SQL; :meth:`fetch_sql` is the same read from the tables)."""
        with self.lock:
            rows = self.columns.rows(ids)
        return {r[0]: r for r in rows}

    def fetch_list(self, ids: Sequence[int]) -> list:
        """The rows of :meth:`fetch` in the order of ``ids`` (absent ids skipped)."""
        with self.lock:
            return self.columns.rows(ids)

    def add_kinds(self, kinds: dict) -> None:
        """Records the kinds of value a write gave each field (bits of MetadataIndex.kinds)."""
        for f, bits in kinds.items():
            held = self.kinds.get(f, 0)
            if held | bits != held:
                self.kinds[f] = held | bits
                self.kinds_version += 1

    def passages(
        self, ids: Any, fused: Any, stage_scores: Any, stage: str, highlights: Any, texts: Any = None
    ) -> tuple:
        """The passages of one ranked list, built from the columns
        (:meth:`PassageColumns.passages`)."""
        with self.lock:
            return self.columns.passages(ids, fused, stage_scores, stage, highlights, texts)

    def rows_json(self, ids: Any, fused: Any, stage_scores: Any, stage: str) -> bytes | None:
        """The JSON text of the result rows of :meth:`passages` of the same list, written from
        the columns (:meth:`PassageColumns.rows_json`)."""
        with self.lock:
            return self.columns.rows_json(ids, fused, stage_scores, stage)

    def fetch_sql(self, ids: Sequence[int]) -> dict:
        """:meth:`fetch` read from the SQLite tables (the reference the columns must equal)."""
        id_list = [int(i) for i in ids]
        if not id_list:
            return {}
        with self.lock:
            rows = self.db.execute(
                'SELECT c.id, c.doc_id, c.text, d.title, c.start, c."end", d.metadata, c.context '
                "FROM chunks c JOIN documents d ON c.doc_id = d.doc_id "
                f"WHERE c.id IN ({','.join('?' * len(id_list))})",
                id_list,
            ).fetchall()
        return {r[0]: r for r in rows}

    # ----- writes (the caller serialises them)

    def begin_insert(self, doc_rows: list, chunk_rows: list, new_fields: set) -> None:
        """Opens a transaction holding the new rows; :meth:`commit` or :meth:`rollback` it.
        The rows are readable (:meth:`fetch`) from now on, as they are on the connection."""
        with self.lock:
            self.db.execute("BEGIN")
            mark = self.columns.mark()
            try:
                self.db.executemany("INSERT INTO documents VALUES (?, ?, ?, ?)", doc_rows)
                self.db.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)", chunk_rows)
                self.db.executemany(
                    "INSERT OR IGNORE INTO fields VALUES (?)", [(f,) for f in sorted(new_fields)]
                )
                self.columns.append(doc_rows, chunk_rows)
            except BaseException:
                self.columns.rollback(mark)
                self.db.execute("ROLLBACK")
                raise
            self._insert_mark = mark

    def commit(self) -> None:
        with self.lock:
            self.db.execute("COMMIT")
            self._insert_mark = None

    def rollback(self) -> None:
        with self.lock:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            if self._insert_mark is not None:
                self.columns.rollback(self._insert_mark)
                self._insert_mark = None

    def remove(self, doc_ids: list) -> None:
        """Deletes the documents and their chunks (ids checked by :meth:`chunks_of`)."""
        with self.lock:
            chunk_ids = [
                r[0] for d in doc_ids for r in self.db.execute("SELECT id FROM chunks WHERE doc_id = ?", (d,))
            ]
            self.db.execute("BEGIN")
            self.db.executemany("DELETE FROM chunks WHERE doc_id = ?", [(d,) for d in doc_ids])
            self.db.executemany("DELETE FROM documents WHERE doc_id = ?", [(d,) for d in doc_ids])
            self.db.execute("COMMIT")
            self.columns.remove(np.asarray(chunk_ids, np.int64))

    def changed(self) -> None:
        self.generation += 1

    def close(self) -> None:
        self.db.close()

    # ----- files

    def save(self, path: Path) -> None:
        """Writes the store as one SQLite file (the caller fsyncs it)."""
        with self.lock:
            out = sqlite3.connect(str(path))
            try:
                self.db.backup(out)
                out.execute("PRAGMA journal_mode=DELETE")
                out.commit()
            finally:
                out.close()

    @classmethod
    def open(
        cls,
        path: Path,
        next_chunk_id: int,
        fields: Sequence,
        error: type = ValueError,
        columns: PassageColumns | None = None,
    ) -> DocumentStore:
        """Copies a saved SQLite store into memory and checks it: pages and indexes
        (integrity_check; a corrupt index passes quick_check and fails a later join), the exact
        schema, column types, metadata JSON objects, chunk ids below ``next_chunk_id``.
        ``columns``: the passage columns saved with it (the caller checks that they hold the
        store's chunk ids), else they are built from the tables (a folder saved before them).
        Raises ``error`` (a ValueError subclass) naming what is wrong."""
        folder = path.parent

        def bad(what: str) -> Exception:
            return error(f"{str(folder)!r}: the document store {what}")

        db = _connect()
        db.text_factory = _decode_text
        try:
            # A file: URI (percent-encoded, so '?' or '#' in the folder name are not parameters).
            src = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
            try:
                src.backup(db)
            finally:
                src.close()
            check = db.execute("PRAGMA integrity_check").fetchall()
            if check != [("ok",)]:
                raise bad(f"is corrupt: {'; '.join(str(r[0]) for r in check[:3])}")
            if _schema_of(db) != _store_schema():
                raise bad("has another schema than a ragfind retriever's")
            bad_rows = db.execute(
                "SELECT (SELECT COUNT(*) FROM documents WHERE typeof(doc_id) != 'text'"
                " OR typeof(title) != 'text'"
                " OR typeof(text) != 'text' OR typeof(metadata) != 'text' OR NOT json_valid(metadata)),"
                " (SELECT COUNT(*) FROM chunks WHERE typeof(doc_id) != 'text' OR typeof(idx) != 'integer'"
                " OR typeof(start) != 'integer' OR typeof(\"end\") != 'integer'"
                " OR typeof(n_tokens) != 'integer'"
                " OR typeof(text) != 'text' OR typeof(context) != 'text' OR id < 0 OR id >= ?"
                " OR doc_id NOT IN (SELECT doc_id FROM documents)),"
                " (SELECT COUNT(*) FROM fields WHERE typeof(name) != 'text')",
                (next_chunk_id,),
            ).fetchone()
            if any(bad_rows):
                raise bad(
                    f"holds malformed rows ({bad_rows[0]} documents, {bad_rows[1]} chunks, "
                    f"{bad_rows[2]} fields; "
                    f"a chunk id must be below next_chunk_id = {next_chunk_id} and name a stored document)"
                )
            # Valid JSON by now (json_valid above), so json_type cannot fail.
            row = db.execute(
                "SELECT metadata FROM documents WHERE json_type(metadata) != 'object' LIMIT 1"
            ).fetchone()
            if row is not None:
                raise bad(f"holds metadata {row[0][:80]!r} that is not a JSON object")
        except (sqlite3.DatabaseError, ValueError) as exc:
            db.close()
            if isinstance(exc, error):
                raise
            raise bad(f"is not a valid SQLite file of a ragfind retriever: {exc}") from exc
        except BaseException:
            db.close()
            raise
        return cls(db, next_chunk_id, fields, columns)
