"""The service's state and operations, without HTTP: a retriever, its write log, the locks and
the metrics. :mod:`ragfind.serve.app` maps requests onto :class:`Service` methods.

Durability: a write is applied in memory, then appended to the write log
(``FOLDER/serve-log.jsonl``, a :class:`ragfind.persist.wal.WriteLog`, fsync'd), and only then
answered (a failed append undoes it in memory, so searches may see a write a few milliseconds
before it is durable, never one that is lost); a checkpoint re-saves the folder atomically
(:meth:`Retriever.save`) and then empties the log. The log lives inside the folder, so the
atomic save that replaces the folder also drops the records it folded in. If the process dies
between the save and the truncation, the log is replayed over a folder that already holds some
of its records; :func:`replay` therefore uses idempotent semantics (an add replaces a document
of the same id, a delete of a missing id is a no-op), under which every document ends in the
state of the last record that touched it, whatever state replay started from.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from operator import attrgetter
from pathlib import Path
from typing import Any

from ragfind import _core
from ragfind.errors import UnknownIdError, check_k
from ragfind.persist.wal import WriteLog, WriteLogError
from ragfind.pipeline.documents import DocumentError, a_json_type, check_documents, json_type
from ragfind.pipeline.results import Passage
from ragfind.pipeline.retriever import Retriever
from ragfind.serve.config import ServeConfig
from ragfind.serve.explain import explain_passage
from ragfind.serve.metrics import Metrics

try:  # the JSON codec of the serve extra: encoding ten passages took a fifth of a request
    import orjson
except ImportError:  # pragma: no cover - the stdlib codec, slower but the same JSON
    orjson = None

__all__ = [
    "Service",
    "ApiError",
    "passage_json",
    "passage_rows",
    "results_json",
    "render_json",
    "load_retriever",
    "LOG_FILE",
    "refused_file",
    "replay",
    "settle_heap",
]

#: The write log's file in the folder (named when it held JSON lines; those still replay).
LOG_FILE = "serve-log.jsonl"


def refused_file(folder: Path) -> Path:
    """Where the logged adds that replay refused (written by an older ragfind that took, say,
    NaN metadata) are kept rather than dropped: ``FOLDER.refused.jsonl``, beside the folder."""
    return folder.with_name(folder.name + ".refused.jsonl")


log = logging.getLogger("ragfind.serve")

#: The longest query a search takes, in characters: the encoders' own default limit
#: (``max_text_chars``), checked here so that a longer query is refused as a query (field
#: ``query``) whichever stages the retriever runs, not with the encoder's advice for documents.
MAX_QUERY_CHARS = 100_000

SEARCH_KEYS = ("query", "k", "filters", "stages", "rerank", "collapse", "highlight")
EXPLAIN_KEYS = ("query", "chunk_id", "filters", "k1", "b")
DOC_KEYS = ("id", "title", "text", "metadata")


def replay(retriever: Any, records: list, refused: list | None = None) -> int:
    """Applies write-log ``records`` idempotently (see the module docstring); returns how many.

    An add that the document check refuses (a log written by an older ragfind that took NaN
    metadata, say) is left out rather than stopping the start, and appended to ``refused``.

    Raises:
        ragfind.persist.wal.WriteLogError: a record that is neither an add nor a delete.
    """

    for n, rec in enumerate(records):
        if rec.get("op") not in ("add", "delete"):
            raise WriteLogError(
                f"write log record {n + 1} has op {rec.get('op')!r}; expected 'add' or 'delete'"
            )
    for rec in records:
        if rec["op"] == "add":
            try:
                docs = check_documents(rec["documents"])
            except DocumentError as exc:
                _refuse(rec, exc, refused)
                continue
            present = []
            for d in docs:
                try:
                    present.append(retriever.get_document(d["id"]))
                except KeyError:
                    pass
            if present:
                retriever.delete_documents([d["id"] for d in present])
            try:
                retriever.add_documents(docs)
            except DocumentError as exc:
                if present:  # the documents this add would have replaced stay
                    retriever.add_documents([{k: v for k, v in d.items() if v is not None} for d in present])
                _refuse(rec, exc, refused)
        else:
            gone = []
            for i in rec["ids"]:
                try:
                    retriever.get_document(i)
                    gone.append(i)
                except KeyError:
                    pass
            if gone:
                retriever.delete_documents(gone)
    return len(records)


def _refuse(rec: dict, exc: Exception, refused: list | None) -> None:
    log.error("a logged add is refused by the document check and left out: %s", exc)
    if refused is not None:
        refused.append(rec)


def settle_heap() -> None:
    """Takes every object alive now out of the cycle collector's sight (:func:`gc.freeze`; with
    ``ServeConfig.freeze_gc``), once the retriever is loaded: its objects live as long as the
    server, and each full collection otherwise walks them all (50-60 ms with SciFact loaded: a
    stall of every request in flight). Unfreezing and collecting first lets a retriever
    replaced since (a worker's reload) be collected."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _check_query_length(q: str) -> None:
    if len(q) > MAX_QUERY_CHARS:
        raise ApiError(
            400,
            f"'query' has {len(q):,} characters; expected at most {MAX_QUERY_CHARS:,} "
            "(a question or a few sentences, not a document)",
            "query",
        )


class ApiError(Exception):
    """A request the service refuses: an HTTP status and a message naming the problem."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    def body(self) -> dict:
        out: dict = {"error": self.message, "status": self.status}
        if self.field is not None:
            out["field"] = self.field
        return out


def load_retriever(folder: str | os.PathLike, encoder: Any = None) -> Any:
    """A saved :class:`ragfind.Retriever` folder, or a sharded one (``shards.json``: loaded by
    ``ragfind.distributed.ShardedRetriever``, which needs the ``ray`` extra)."""
    path = Path(folder)
    if (path / "shards.json").is_file():
        try:
            from ragfind.distributed import ShardedRetriever  # the ray extra
        except ImportError as exc:
            raise RuntimeError(
                f"{str(folder)!r} is a sharded retriever (shards.json); serving it needs "
                f"ragfind.distributed and Ray: pip install 'ragfind[ray]' ({exc})"
            ) from exc
        return ShardedRetriever.load(path)
    return Retriever.load(path) if encoder is None else Retriever.load(path, encoder=encoder)


def _typed(
    body: Mapping, name: str, types: tuple, what: str, default: Any = None, required: bool = False
) -> Any:
    if name not in body or body[name] is None:
        if required:
            raise ApiError(400, f"'{name}' is required ({what})", name)
        return default
    v = body[name]
    if isinstance(v, bool) and bool not in types:
        raise ApiError(400, f"'{name}' is a bool; expected {what}", name)
    if not isinstance(v, types):
        raise ApiError(400, f"'{name}' is {a_json_type(v)}; expected {what}", name)
    return v


def _only(body: Mapping, keys: tuple, what: str) -> None:
    extra = [k for k in body if k not in keys]
    if extra:
        raise ApiError(
            400, f"unknown field {extra[0]!r} in {what}; expected some of {', '.join(keys)}", extra[0]
        )


#: The JSON keys of a result row, in order (``highlights`` last when asked for).
ROW_KEYS = tuple("doc_id chunk_id title text score ranks scores metadata source start end".split())
#: The passage's fields they hold.
_ROW_SLOTS = tuple("id" if key == "chunk_id" else key for key in ROW_KEYS)
#: A passage's fields in the order of its JSON row, read in one call.
_ROW_FIELDS = attrgetter(*_ROW_SLOTS)


def passage_json(p: Any, highlight: bool = False) -> dict:
    """One result as JSON; ``highlight``: add ``highlights``, the character (code point) offsets
    into ``text`` where an analyzed query term or phrase matched (computed here: it re-analyzes
    the passage, most of a BM25 search's cost, so only when the request asks).

    A search answers ten of these, a tenth of a served search's CPU: the fields are read in one
    call, and a value already of its JSON type (a plain int rank, a finite float score) is kept
    as it is instead of converted. Other numbers (NumPy's, say) are converted as before, and a
    NaN or infinite score is null (JSON has neither)."""
    doc_id, chunk_id, title, text, score, ranks, scores, metadata, source, start, end = _ROW_FIELDS(p)
    # x - x is 0.0 for a finite float, NaN otherwise.
    if type(score) is not float or score - score != 0.0:
        score = float(score)
        if score - score != 0.0:
            score = None
    rank_row = {}
    for key, v in ranks.items():
        rank_row[key] = v if type(v) is int else int(v)
    score_row = {}
    for key, v in scores.items():
        if type(v) is not float or v - v != 0.0:
            v = float(v)
            if v - v != 0.0:
                v = None
        score_row[key] = v
    out = {
        "doc_id": doc_id,
        "chunk_id": chunk_id if type(chunk_id) is int else int(chunk_id),
        "title": title,
        "text": text,
        "score": score,
        "ranks": rank_row,
        "scores": score_row,
        "metadata": dict(metadata),
        "source": source,
        "start": start,
        "end": end,
    }
    if highlight:
        out["highlights"] = _highlights(p)
    return out


def _highlights(p: Any) -> list:
    return [[int(a), int(b)] for a, b in getattr(p, "highlights", ())]


def render_json(content: Any) -> bytes:
    """``content`` as compact UTF-8 JSON: orjson when installed, else the stdlib codec (which
    also names a type orjson does not know)."""
    if orjson is not None:
        try:
            return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
        except TypeError:
            pass
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _native_rows(text: bool = False) -> Any:
    """``rows(passages, fallback)`` reading :class:`ragfind.Passage` slots natively (the rows of
    :func:`passage_json`, without highlights), or with ``text`` ``text(passages)``, those rows'
    JSON text or None; None with a ``_core`` that lacks it."""
    make = getattr(_core, "json_row_maker", None)
    if make is None:  # pragma: no cover - a _core built before it
        return None
    return make(Passage, tuple(Passage.__dict__[name] for name in _ROW_SLOTS), ROW_KEYS, text)


_json_rows = _native_rows()
_json_text = _native_rows(text=True) if orjson is not None else None


def passage_rows(passages: Any, highlight: bool = False) -> list:
    """:func:`passage_json` of each passage, the same rows: a :class:`ragfind.Passage` holding
    values of their JSON types (a plain int id and ranks, float scores, dicts or read-only views
    of dicts) is read natively, in one call for the list (the rows were a tenth of a served
    search's CPU); anything else (another class, NumPy numbers) goes through
    :func:`passage_json`. ``highlight``: each row's ``highlights`` added last, as there."""
    if _json_rows is None:
        return [passage_json(p, highlight) for p in passages]
    rows = _json_rows(passages, passage_json)
    if highlight:
        for row, p in zip(rows, passages):
            row["highlights"] = _highlights(p)
    return rows


def results_json(passages: Any, highlight: bool = False) -> Any:
    """``orjson.Fragment`` of the JSON text of :func:`passage_rows`, written natively in one
    pass (the rows and their encoding were a tenth of a served search's CPU); None when that
    cannot be (highlights asked for, passages of another class or with values of other types,
    no orjson), and the caller renders :func:`passage_rows` instead."""
    if highlight or _json_text is None:
        return None
    text = _json_text(passages)
    return None if text is None else orjson.Fragment(text)


class Service:
    """A retriever behind the HTTP API: validated searches (concurrent) and writes (serialised,
    durable before they return).

    Args:
        retriever: a :class:`ragfind.Retriever` (or anything with its ``search``,
            ``add_documents``, ``delete_documents``, ``get_document``, ``save`` and ``len``).
        folder: where it was loaded from; the write log lives there and checkpoints save there.
            None: writes are refused (nothing could make them durable).
        config: the :class:`ServeConfig`.
    """

    def __init__(
        self, retriever: Any, folder: str | os.PathLike | None, config: ServeConfig | None = None
    ) -> None:
        self.config = config or ServeConfig()
        self.retriever = retriever
        if retriever is not None:
            self.size_caches(retriever)
        self.folder = Path(folder) if folder is not None else None
        self.metrics = Metrics()
        self.write_lock = threading.Lock()
        self.started = time.time()
        self.log: WriteLog | None = None
        self.replayed = 0
        if self.folder is not None and not self.config.read_only:
            self.log = WriteLog(self.folder / LOG_FILE)
            records = self.log.recover()
            if records:
                log.warning("replaying %d write(s) from %s", len(records), self.log.path)
                refused: list = []
                self.replayed = replay(retriever, records, refused)
                if refused:
                    # Kept beside the folder, before the checkpoint below drops the log: a save
                    # replaces the folder whole, so a file inside it would go too.
                    refused_path = refused_file(self.folder)
                    with open(refused_path, "a", encoding="utf-8") as f:
                        for rec in refused:
                            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                        f.flush()
                        os.fsync(f.fileno())
                    log.error("%d logged add(s) refused; kept in %s", len(refused), refused_path)
                self.checkpoint()

    def size_caches(self, retriever: Any) -> None:
        """Gives ``retriever`` the configured cache size (:attr:`ServeConfig.cache_size`)."""
        if self.config.cache_size is not None:
            retriever.set_cache_size(self.config.cache_size)

    # ------------------------------------------------------------------ writes

    @property
    def writable(self) -> bool:
        return self.log is not None

    def _check_writable(self) -> None:
        if self.log is None:
            why = "read-only" if self.config.read_only else "not serving a folder"
            raise ApiError(405, f"writes are disabled ({why})")

    def checkpoint(self) -> bool:
        """Saves the folder atomically and empties the log; True when it folded anything."""
        if self.log is None:
            return False
        with self.write_lock:
            if self.log.size == 0 and not self.replayed:
                return False
            return self._fold()

    def _durable(self, record: dict, apply, undo) -> Any:
        """Applies a write, then logs it (fsync); a failed log write undoes it (nothing changes)."""
        assert self.log is not None
        out = apply()
        try:
            self.log.append(record)
        except BaseException:
            try:
                undo()
            finally:
                self.metrics.count("ragfind_write_log_errors_total")
            raise
        if self.log.size >= self.config.checkpoint_bytes:
            self._fold()
        return out

    def _fold(self) -> bool:
        """Saves the folder and empties the log (write lock held). A failed save is logged, not
        raised: the write is already durable in the log, which is kept and replayed."""
        try:
            self.retriever.save(self.folder)
        except Exception as exc:
            log.error("checkpoint of %s failed (the write log is kept): %s", self.folder, exc)
            self.metrics.count("ragfind_checkpoint_errors_total")
            return False
        self.log.reset()
        self.replayed = 0
        self.metrics.count("ragfind_checkpoints_total")
        return True

    def check_documents(self, body: Any) -> list:
        if not isinstance(body, dict):
            raise ApiError(
                400, f'the body is a JSON {json_type(body)}; expected an object {{"documents": [...]}}'
            )
        _only(body, ("documents",), "the body")
        docs = _typed(body, "documents", (list,), "a list of documents", required=True)
        if not docs:
            raise ApiError(400, "'documents' is empty; expected at least one document", "documents")
        if len(docs) > self.config.max_documents:
            raise ApiError(
                413, f"{len(docs)} documents in one request; at most {self.config.max_documents}", "documents"
            )
        out, seen = [], set()
        for n, d in enumerate(docs):
            where = f"documents[{n}]"
            if not isinstance(d, dict):
                raise ApiError(
                    400, f"{where} is {a_json_type(d)}; expected an object with 'id' and 'text'", where
                )
            _only(d, DOC_KEYS, where)
            i = d.get("id")
            if isinstance(i, bool) or not isinstance(i, (str, int)) or (isinstance(i, str) and not i):
                raise ApiError(
                    400, f"{where}.id is {i!r}; expected a non-empty string or an integer", f"{where}.id"
                )
            _typed(d, "text", (str,), "a string", required=True)
            _typed(d, "title", (str,), "a string")
            _typed(d, "metadata", (dict,), "an object")
            if str(i) in seen:
                raise ApiError(400, f"document id {str(i)!r} appears twice in the request", f"{where}.id")
            seen.add(str(i))
            out.append({k: d[k] for k in DOC_KEYS if d.get(k) is not None})
        try:
            return check_documents(out)
        except DocumentError as exc:
            raise ApiError(400, str(exc), exc.field) from exc

    def add(self, body: Any) -> dict:
        """``POST /documents``: all or nothing; 409 for an id already stored."""
        self._check_writable()
        docs = self.check_documents(body)
        with self.write_lock:
            present = []
            for d in docs:
                try:
                    self.retriever.get_document(d["id"])
                    present.append(d["id"])
                except KeyError:
                    pass
            if present:
                raise ApiError(
                    409,
                    f"document id {present[0]!r} is already stored ({len(present)} of the request are); "
                    "DELETE it first to replace it",
                )
            ids = [d["id"] for d in docs]
            try:
                chunks = self._durable(
                    {"op": "add", "documents": docs},
                    lambda: self.retriever.add_documents(docs),
                    lambda: self.retriever.delete_documents(ids),
                )
            except (ValueError, TypeError) as exc:
                raise ApiError(400, str(exc), exc.field if isinstance(exc, DocumentError) else None) from exc
        self.metrics.count("ragfind_documents_added_total", len(docs))
        return {"added": len(docs), "chunks": int(chunks), "ids": ids}

    def delete(self, doc_id: str) -> dict:
        """``DELETE /documents/{id}``: 404 when absent."""
        self._check_writable()
        with self.write_lock:
            doc = self.get(doc_id)
            chunks = self._durable(
                {"op": "delete", "ids": [doc_id]},
                lambda: self.retriever.delete_documents([doc_id]),
                lambda: self.retriever.add_documents([{k: v for k, v in doc.items() if v is not None}]),
            )
        self.metrics.count("ragfind_documents_deleted_total")
        return {"deleted": doc_id, "chunks": int(chunks)}

    def get(self, doc_id: str) -> dict:
        try:
            return dict(self.retriever.get_document(doc_id))
        except KeyError as exc:
            raise ApiError(404, f"document id {doc_id!r} is not stored") from exc

    # ------------------------------------------------------------------ reads

    def _k(self, body: Mapping, default: int = 10) -> int:
        """``k`` checked as the library checks it (:func:`ragfind.errors.check_k`: the same
        message for the same mistake), then against this server's ``max_k``."""
        k = body.get("k")
        if k is None:
            return default
        try:
            k = check_k(k)
        except (TypeError, ValueError) as exc:
            raise ApiError(400, str(exc), "k") from None
        if k > self.config.max_k:
            # A limit of this server (--max-k), not of the library, which clamps a large k.
            raise ApiError(400, f"k = {k}; expected an integer in [1, {self.config.max_k}]", "k")
        return k

    def _query(self, body: Mapping, phrasings: bool) -> Any:
        what = "a non-empty string" + (" or a list of strings (phrasings)" if phrasings else "")
        q = _typed(body, "query", (str, list) if phrasings else (str,), what, required=True)
        if isinstance(q, list):
            if not q or not all(isinstance(x, str) and x.strip() for x in q):
                raise ApiError(400, f"'query' must be {what}", "query")
            for x in q:
                _check_query_length(x)
        elif not q.strip():
            raise ApiError(400, "'query' is blank; expected a non-empty string", "query")
        else:
            _check_query_length(q)
        return q

    def search(self, body: Any) -> dict:
        """``POST /search``: ``{"query", "k"?, "filters"?, "stages"?, "rerank"?, "collapse"?,
        "highlight"?}``.

        ``highlight`` (default false), as in Elasticsearch and Solr, asks for highlights: each
        result then carries ``"highlights": [[start, end], ...]``, equal to
        :attr:`ragfind.Passage.highlights`; without it the key is absent (not computed).
        """
        res, highlight = self._search(body, self._plain(body))
        return self._answer(
            passage_rows(getattr(res, "passages", res), highlight), res.timings, bool(res.cached)
        )

    def search_json(self, body: Any) -> bytes:
        """:meth:`search`'s answer as the JSON ``/search`` sends (:func:`render_json` of it),
        its rows written natively: for a body of a query and ``k`` alone, straight from the
        retriever's store when it can (:meth:`ragfind.Retriever.search_rows_json`, no passage
        made), else from the passages (:func:`results_json`)."""
        plain = self._plain(body)
        store_rows = getattr(self.retriever, "search_rows_json", None) if orjson is not None else None
        got = None if plain is None or store_rows is None else store_rows(*plain)
        if got is not None:
            text, timings, cached = got
            self.metrics.search(timings, cached)
            return orjson.dumps(self._answer(orjson.Fragment(text), timings, cached))
        res, highlight = self._search(body, plain)
        passages = getattr(res, "passages", res)
        rows = results_json(passages, highlight)
        if rows is None:
            rows = passage_rows(passages, highlight)
        return render_json(self._answer(rows, res.timings, bool(res.cached)))

    def _plain(self, body: Any) -> tuple | None:
        """``(query, k)`` of a valid body of a query and maybe ``k``, nothing else (most
        requests: taken in a few checks), else None (checked in full by :meth:`_search`)."""
        if type(body) is dict and len(body) <= 2:
            query, k = body.get("query"), body.get("k", 10)
            if (
                type(query) is str
                and type(k) is int
                and 1 <= k <= self.config.max_k
                and len(body) == 1 + ("k" in body)
                and not query.isspace()
                and query
                and len(query) <= MAX_QUERY_CHARS
            ):
                return query, k
        return None

    def _search(self, body: Any, plain: tuple | None) -> tuple:
        """The search of a checked body (``plain``: its :meth:`_plain`), counted in the metrics:
        ``(result, highlight)``."""
        if plain is not None:
            return self._run(*plain, {"filters": None, "stages": None}), False
        if not isinstance(body, dict):
            raise ApiError(400, f"the body is a JSON {json_type(body)}; expected an object with 'query'")
        _only(body, SEARCH_KEYS, "the body")
        query = self._query(body, True)
        k = self._k(body)
        # The optional fields, checked only when given (most requests send a query and k).
        get = body.get
        filters = stages = collapse = None
        rerank, highlight = True, False
        if get("filters") is not None:
            filters = _typed(body, "filters", (dict,), "an object of field -> condition")
        if get("stages") is not None:
            stages = _typed(body, "stages", (list,), "a list of stage names")
            if not all(isinstance(s, str) for s in stages):
                raise ApiError(400, "'stages' must be a list of stage names (strings)", "stages")
        if get("rerank") is not None:
            rerank = _typed(body, "rerank", (bool,), "a boolean", True)
        if get("collapse") is not None:
            collapse = _typed(body, "collapse", (str,), "'document' or null")
        if get("highlight") is not None:
            highlight = _typed(body, "highlight", (bool,), "a boolean", False)
        kwargs: dict = {"filters": filters or None, "stages": stages}
        if rerank is not True:
            kwargs["rerank"] = rerank
        if collapse is not None:
            kwargs["collapse"] = collapse
        return self._run(query, k, kwargs), highlight

    def _run(self, query: Any, k: int, kwargs: dict) -> Any:
        """The retriever's search of a checked request, counted in the metrics."""
        try:
            res = self.retriever.search(query, k=k, **kwargs)
        except (ValueError, TypeError) as exc:
            field = "filters" if "filter" in str(exc) else "stages" if "stages" in str(exc) else None
            raise ApiError(400, str(exc), field) from exc
        self.metrics.search(res.timings, bool(res.cached))
        return res

    @staticmethod
    def _answer(results: Any, timings: dict, cached: bool) -> dict:
        """The answer to a search: ``results`` (its rows), its timings (seconds, answered in
        milliseconds) and whether the cache answered."""
        return {
            "results": results,
            "timings": {k_: v * 1e3 for k_, v in timings.items()},
            "timings_unit": "ms",
            "cached": cached,
        }

    def explain(self, body: Any) -> dict:
        """``POST /explain``: the per-stage explanation of one chunk for one query."""
        if not isinstance(body, dict):
            raise ApiError(400, f"the body is a JSON {json_type(body)}; expected an object")
        _only(body, EXPLAIN_KEYS, "the body")
        query = self._query(body, False)
        chunk_id = _typed(body, "chunk_id", (int,), "an integer (a result's chunk_id)", required=True)
        filters = _typed(body, "filters", (dict,), "an object of field -> condition")
        k1 = _typed(body, "k1", (int, float), "a number >= 0")
        b = _typed(body, "b", (int, float), "a number in [0, 1]")
        if not hasattr(self.retriever, "store") or not hasattr(self.retriever, "first_stages"):
            raise ApiError(501, "explain needs a single (unsharded) Retriever")
        try:
            return explain_passage(self.retriever, query, chunk_id, filters=filters or None, k1=k1, b=b)
        except UnknownIdError as exc:
            raise ApiError(404, str(exc), "chunk_id") from exc
        except (ValueError, TypeError) as exc:
            msg = str(exc)
            field = "k1" if msg.startswith("k1") else "b" if msg.startswith("b =") else None
            raise ApiError(400, msg, field) from exc

    def info(self) -> dict:
        """``GET /info``: what the page needs to draw its controls."""
        r = self.retriever
        out: dict = {"documents": len(r), "writable": self.writable}
        if hasattr(r, "first_stages"):
            out["stages"] = [s.name for s in r.first_stages]
            out["rerank_stages"] = [s.name for s in r.rerank_stages]
            out["fusion"] = getattr(r, "fusion", "rrf")
            out["rrf_k"] = r.rrf_k
            out["weights"] = dict(r.weights)
            out["fields"] = r.fields
            out["chunks"] = r.n_chunks
            bm = r.bm25
            if bm is not None:
                st = bm.stats()
                out["bm25"] = {"method": st["method"], "k1": st["k1"], "b": st["b"], "delta": st["delta"]}
        return out

    def health(self) -> dict:
        return {"status": "ok", "documents": len(self.retriever), "uptime_s": time.time() - self.started}

    def metrics_text(self, more: dict | None = None) -> str:
        """The Prometheus text; ``more``: gauges of the caller, as in :meth:`Metrics.render`."""
        extra: dict = {
            "ragfind_documents": ("gauge", "Documents stored.", len(self.retriever)),
            **(more or {}),
        }
        if self.log is not None:
            extra["ragfind_write_log_bytes"] = (
                "gauge",
                "Bytes in the write log not yet folded.",
                self.log.size,
            )
        stats = getattr(self.retriever, "cache_stats", None)
        if stats is not None:
            for cache, s in stats().items():
                for key in ("hits", "misses"):
                    if key in s:
                        extra[f"ragfind_{cache}_cache_{key}"] = (
                            "gauge",
                            f"{cache} cache {key} (Retriever.cache_stats).",
                            s[key],
                        )
        return self.metrics.render(extra)

    def close(self) -> None:
        """Folds the log into the folder (atomic save) and closes it."""
        try:
            self.checkpoint()
        finally:
            if self.log is not None:
                self.log.close()
