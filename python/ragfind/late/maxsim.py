"""ColBERT-style MaxSim, ``score(q, d) = sum_i max_j <q_i, d_j>``: the functional kernel (C++,
register-tiled, SIMD-dispatched, threads with the GIL released) and its per-token explanation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ragfind import _core
from ragfind.index import check_threads, old_spellings

__all__ = ["maxsim", "MaxSimExplanation", "TokenMatch"]

_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16)}


def _as_query(query_vectors, name: str = "query_vectors") -> np.ndarray:
    q = np.asarray(query_vectors)
    if q.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point array, got dtype {q.dtype}")
    if q.ndim == 1:
        raise ValueError(
            f"{name} must be 2-D (query_tokens, dim), got shape {q.shape}; "
            "a single vector is a 1-token query: pass it as vector[None, :]"
        )
    if q.ndim != 2:
        raise ValueError(f"{name} must be 2-D (query_tokens, dim), got shape {q.shape}")
    if q.shape[0] == 0 or q.shape[1] == 0:
        raise ValueError(f"{name} must have at least one token vector and dim >= 1, got shape {q.shape}")
    return np.ascontiguousarray(q, dtype=np.float32)


def _as_doc(doc, name: str, dtype: np.dtype | None) -> np.ndarray:
    d = np.asarray(doc)
    if d.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point array, got dtype {d.dtype}")
    if d.ndim != 2:
        raise ValueError(f"{name} must be 2-D (tokens, dim), got shape {d.shape}")
    if d.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {d.shape}); MaxSim needs at least one token vector")
    if dtype is None:
        dtype = d.dtype if d.dtype in (np.float32, np.float16) else np.dtype(np.float32)
    return np.ascontiguousarray(d, dtype=dtype)


@old_spellings(renamed={"n_threads": "threads"})
def maxsim(
    query_vectors,
    documents,
    *,
    offsets=None,
    threads: int | None = None,
    check_finite: bool = True,
) -> np.ndarray:
    """MaxSim scores of one query against many documents.

    Args:
        query_vectors: (m, dim) floating array, the query's token vectors (converted to
            float32; float32 C-contiguous input is used without a copy).
        documents: a list of (n_i, dim) arrays (float32 or float16 are used in place; other
            float dtypes, or a list mixing float32 and float16, are converted to float32), or
            one packed (total_tokens, dim) array when ``offsets`` is given.
        offsets: (n_docs + 1,) integer array for the packed form: document ``d`` is rows
            ``offsets[d]:offsets[d + 1]`` (strictly increasing, starting at 0, ending at
            ``total_tokens``).
        threads: worker threads (None or 0: all cores; small batches use fewer).
            ``n_threads`` is its deprecated older name.
        check_finite: scan the inputs for NaN/Inf first (cheap next to the scoring).

    Returns:
        float32 array (n_docs,): ``sum_i max_j <q_i, d_j>`` per document.

    Raises:
        TypeError: non-float input. ValueError: wrong shapes, mismatched dims, an empty
        document, malformed offsets, or NaN/Inf (the message names the argument and row).
    """
    threads = check_threads(threads)
    q = _as_query(query_vectors)
    if offsets is not None:
        tokens = _as_doc(documents, "documents", None)
        off = np.ascontiguousarray(np.asarray(offsets), dtype=np.int64)
        if tokens.shape[1] != q.shape[1]:
            raise ValueError(f"documents has dim {tokens.shape[1]}, expected {q.shape[1]} (the query's dim)")
        return _core.maxsim_packed(q, tokens, off, None, threads, check_finite)
    if isinstance(documents, np.ndarray) and documents.ndim == 3:
        documents = list(documents)
    if not isinstance(documents, Sequence) or isinstance(documents, (str, bytes)):
        raise TypeError(
            f"documents must be a list of (tokens, dim) arrays, got {type(documents).__name__} "
            "(pass offsets= for a packed (total_tokens, dim) array)"
        )
    docs = [np.asarray(d) for d in documents]
    kinds = {d.dtype for d in docs}
    target = None if kinds <= {np.dtype(np.float32)} or kinds <= {np.dtype(np.float16)} else np.float32
    docs = [_as_doc(d, f"documents[{i}]", target) for i, d in enumerate(docs)]
    return _core.maxsim_list(q, docs, threads, check_finite)


@dataclass
class TokenMatch:
    """One query token's best match in a document."""

    query_token: int
    doc_token: int
    similarity: float
    query_text: str | None = None
    doc_text: str | None = None


@dataclass
class MaxSimExplanation:
    """Per query token, the document token it matched; ``score`` is the sum of similarities."""

    doc_id: int
    score: float
    matches: list[TokenMatch] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"doc {self.doc_id}: MaxSim {self.score:.4f}"]
        for mt in self.matches:
            q = mt.query_text if mt.query_text is not None else f"q[{mt.query_token}]"
            d = mt.doc_text if mt.doc_text is not None else f"d[{mt.doc_token}]"
            lines.append(f"  {q:>16} -> {d:<16} {mt.similarity:+.4f}")
        return "\n".join(lines)
