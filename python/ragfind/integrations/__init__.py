"""RAG frameworks over a :class:`ragfind.Retriever`: retrievers and vector / document stores in
:mod:`ragfind.integrations.langchain` (the ``langchain`` extra, langchain-core),
:mod:`ragfind.integrations.llama_index` (the ``llama-index`` extra, llama-index-core) and
:mod:`ragfind.integrations.haystack` (the ``haystack`` extra, haystack-ai). Each module
imports its framework, so import the one you use; this one holds what they share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "FunctionEncoder",
    "all_documents",
    "check_kwargs",
    "check_search_args",
    "existing_ids",
    "passage_metadata",
]


def passage_metadata(p: Any) -> dict:
    """A passage's metadata for a framework document: the document's own metadata, then
    ``doc_id``, ``chunk_id``, ``title``, ``source``, ``score``, ``ranks`` and ``scores`` (which
    win over metadata keys of the same name)."""
    out = dict(p.metadata)
    out.update(
        {
            "doc_id": p.doc_id,
            "chunk_id": int(p.id),
            "title": p.title,
            "source": p.source,
            "score": float(p.score),
            "ranks": {k: int(v) for k, v in p.ranks.items()},
            "scores": {k: float(v) for k, v in p.scores.items()},
        }
    )
    return out


def check_search_args(retriever: Any, k: Any, filters: Any) -> None:
    """The framework retrievers' arguments, checked when they are built (not at the first query)."""
    from ragfind.errors import check_k

    if not callable(getattr(retriever, "search", None)):
        raise TypeError(f"retriever is a {type(retriever).__name__}; expected a ragfind.Retriever")
    check_k(k)
    if filters is not None and not isinstance(filters, Mapping):
        raise TypeError(f"filters is a {type(filters).__name__}; expected a dict of field -> condition")


def check_kwargs(kwargs: Mapping[str, Any], allowed: Any, where: str) -> None:
    """TypeError naming the first keyword argument ``where`` does not take."""
    unknown = [k for k in kwargs if k not in allowed]
    if unknown:
        raise TypeError(
            f"{where}: unexpected keyword argument {unknown[0]!r}; expected some of {sorted(allowed)}"
        )


def all_documents(retriever: Any) -> list:
    """Every stored document as ``(id, title, text, metadata dict)``, in insertion order.

    The Retriever has no listing call, and the frameworks need one (delete everything, count,
    filters its filter syntax cannot say), so this reads its document table.
    """
    import json

    store = retriever.store
    with store.lock:
        rows = store.db.execute(
            "SELECT doc_id, title, text, metadata FROM documents ORDER BY rowid"
        ).fetchall()
    return [(d, t, x, json.loads(m)) for d, t, x, m in rows]


def existing_ids(retriever: Any, ids: Any) -> list:
    """The ids of ``ids`` stored in the retriever (each once, in the order given)."""
    out: list = []
    seen: set = set()
    for i in ids:
        i = str(i)
        if i in seen:
            continue
        seen.add(i)
        try:
            retriever.get_document(i)
        except KeyError:
            continue
        out.append(i)
    return out


class FunctionEncoder:
    """A ragfind bi-encoder over a framework's embedding functions, for a Retriever whose
    vectors come from that framework's embedding model.

    Args:
        embed_documents: texts -> one vector per text.
        embed_query: text -> vector.
        dim: the vectors' dimension.
        name: what the model is (part of the fingerprint a saved Retriever is checked against).
    """

    def __init__(self, embed_documents: Any, embed_query: Any, dim: int, name: str) -> None:
        self._embed_documents = embed_documents
        self._embed_query = embed_query
        self.dim = int(dim)
        self.fingerprint = f"{name}:{self.dim}"
        self.tokenizer = None

    def encode(self, texts: Any, batch_size: int = 32, show_progress: bool = False, **_: Any) -> Any:
        import numpy as np

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.asarray(self._embed_documents(texts), dtype=np.float32).reshape(len(texts), self.dim)

    def encode_query(self, text: str) -> Any:
        import numpy as np

        return np.asarray(self._embed_query(text), dtype=np.float32).reshape(self.dim)


def dense_search(retriever: Any, vector: Any, k: int, filters: Mapping[str, Any] | None = None) -> list:
    """The ``k`` chunks nearest ``vector`` (cosine, the dense stage's index) among those
    ``filters`` allow, as ``(chunk id, doc id, text, metadata dict, score)``, best first: the
    Retriever searches by text only, the frameworks also by vector.

    Raises:
        ValueError: the retriever has no dense stage, a bad filter or vector.
    """
    import json

    import numpy as np

    index = retriever.dense
    if index is None:
        raise ValueError("this retriever has no dense stage (it was built without an encoder)")
    flt = retriever.stage_runner.compile_filters(filters)
    if (flt is not None and len(flt) == 0) or len(index) == 0:
        return []
    ids, scores = index.search(np.asarray(vector, dtype=np.float32), k=k, filter=flt)
    rows = retriever.store.fetch(ids)
    out = []
    for i, s in zip(np.asarray(ids).tolist(), np.asarray(scores).tolist()):
        row = rows.get(int(i))
        if row is not None:
            out.append((int(i), row[1], row[2], json.loads(row[6]), float(s)))
    return out


def doc_ids_where(retriever: Any, filters: Mapping[str, Any]) -> list:
    """The ids of the documents ``filters`` (the Retriever's filter syntax) allows, in store order."""
    store = retriever.store
    flt = retriever.stage_runner.compile_filters(filters)
    with store.lock:
        if flt is None:
            return [r[0] for r in store.db.execute("SELECT doc_id FROM documents ORDER BY rowid")]
        chunk_ids = [int(i) for i in flt.ids]
        found: set = set()
        step = 30_000  # under SQLite's bound on parameters per statement
        for lo in range(0, len(chunk_ids), step):
            part = chunk_ids[lo : lo + step]
            sql = f"SELECT DISTINCT doc_id FROM chunks WHERE id IN ({','.join('?' * len(part))})"
            found.update(r[0] for r in store.db.execute(sql, part))
        everything = store.db.execute("SELECT doc_id FROM documents ORDER BY rowid")
        return [r[0] for r in everything if r[0] in found]


def ids_filter(allowed: Any, all_ids: Any) -> dict:
    """A Retriever filter allowing exactly the document ids ``allowed`` among ``all_ids``, as the
    shorter of an ``$in`` and a ``$nin`` list (the metadata index evaluates either)."""
    allowed = set(allowed)
    rest = set(all_ids) - allowed
    if len(allowed) <= len(rest):
        return {"doc_id": {"$in": sorted(allowed)}}
    return {"doc_id": {"$nin": sorted(rest)}}
