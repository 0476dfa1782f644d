"""BM25F over documents with fields: :class:`BM25FIndex` (made by ``BM25Index(fields=...)``).

The simple BM25F of Zaragoza et al., "Microsoft Cambridge at TREC-13: Web and HARD tracks"
(2004): per query term, a pseudo term frequency

    ptf(t, d) = sum over fields f of w_f * tf_f(t, d) / (1 - b_f + b_f * len_f(d) / avglen_f)

then one BM25 saturation with one ``k1`` and the collection idf (Lucene's,
``log(1 + (N - df + .5) / (df + .5))``, df = documents with the term in any field):

    score(q, d) = sum over query terms t of idf(t) * ptf / (k1 + ptf)

With one field of weight 1 this is exactly Lucene BM25. This differs from a sum of per-field
BM25 scores (what tantivy and a multi-field Lucene query compute): the fields share one
saturation, so a term repeated in title and body does not count twice at full strength.

Each field is its own inverted index (one ``BM25Index`` per field, kept in step: same
documents, ids and deletes), combined at query time over the postings of the query terms.
"""

from __future__ import annotations

import math
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.errors import IndexFileError, check_k
from ragfind.ids import as_id_filter
from ragfind.index import Contribution, Explanation, check_threads, old_spellings
from ragfind.persist.sectioned import SectionedFile, write_sectioned
from ragfind.sparse.analyzer import Analyzer, resolve_analyzer
from ragfind.sparse.bm25 import BM25Index, _check_texts, _positions_of, register_fielded

__all__ = ["BM25FIndex", "FIELDS_MAGIC"]

#: First 8 bytes of a saved BM25F index (a plain BM25 file starts with b"RAGFBM25").
FIELDS_MAGIC = b"RAGFBM2F"
_VERSION = 1


def _check_fields(fields: Any, field_b: Any, b: float) -> tuple[dict, dict]:
    if not isinstance(fields, Mapping) or not fields:
        raise ValueError("fields: expected a non-empty dict of field name -> weight")
    weights = {}
    for name, w in fields.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"fields: names must be non-empty str, got {name!r}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ValueError(f"fields[{name!r}]: expected a finite weight >= 0, got {w!r}")
        weights[name] = float(w)
    bs = {name: float(b) for name in weights}
    for name, v in dict(field_b or {}).items():
        if name not in weights:
            raise ValueError(f"field_b: {name!r} is not one of the fields {list(weights)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 <= v <= 1.0):
            raise ValueError(f"field_b[{name!r}]: expected a number in [0, 1], got {v!r}")
        bs[name] = float(v)
    return weights, bs


class BM25FIndex:
    """Fielded BM25 (BM25F); see the module docstring for the formula.

    Made by ``BM25Index(fields={"title": 2.0, "body": 1.0}, field_b={"title": 0.5})``.
    Documents are dicts of field name -> str (a missing field is empty); ids, deletes,
    filters, save/load and the errors are those of :class:`~ragfind.BM25Index`.

    Args:
        fields: field name -> weight (>= 0).
        field_b: field name -> length normalisation in [0, 1] (default: ``b`` for each).
        k1: the one saturation parameter.  b: the default ``b_f``.
        analyzer: an Analyzer or a name, shared by every field.
    """

    def __init__(
        self,
        fields: Mapping[str, float],
        field_b: Mapping[str, float] | None = None,
        k1: float = 1.2,
        b: float = 0.75,
        analyzer: Any = None,
    ) -> None:
        if isinstance(k1, bool) or not isinstance(k1, (int, float)) or not math.isfinite(k1) or k1 < 0:
            raise ValueError(f"k1: expected a finite number >= 0, got {k1!r}")
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not (0.0 <= b <= 1.0):
            raise ValueError(f"b: expected a number in [0, 1], got {b!r}")
        self._weights, self._b = _check_fields(fields, field_b, b)
        self._k1 = float(k1)
        self._analyzer = Analyzer() if analyzer is None else resolve_analyzer(analyzer)
        self._parts = {name: BM25Index(analyzer=self._analyzer) for name in self._weights}

    # ----- building

    @old_spellings(renamed={"docs": "items"})
    def add(self, items: Sequence[Mapping[str, str]], ids: Any = None) -> np.ndarray:
        """Adds documents (dicts of field -> str; missing fields are empty); returns their ids
        (int64, or an object array of str).

        Raises:
            TypeError: a document is not a dict or a field value is not str.
            ValueError: a key that is not a field. Id errors as BM25Index.add.
            Nothing is added when an error is raised.
        """
        if isinstance(items, Mapping) or isinstance(items, (str, bytes)):
            raise TypeError("docs: expected a list of dicts (field -> text), got a single one")
        docs = list(items)
        columns: dict[str, list[str]] = {f: [] for f in self._weights}
        for i, d in enumerate(docs):
            if not isinstance(d, Mapping):
                raise TypeError(f"docs[{i}]: expected a dict of field -> text, got {type(d).__name__}")
            for key, v in d.items():
                if key not in columns:
                    raise ValueError(f"docs[{i}]: {key!r} is not one of the fields {list(columns)}")
                if not isinstance(v, str):
                    raise TypeError(f"docs[{i}][{key!r}]: expected str, got {type(v).__name__}")
            for f in columns:
                columns[f].append(d.get(f, ""))
        names = list(self._parts)
        first = self._parts[names[0]]
        added = first.add(columns[names[0]], ids)  # raises the id errors before anything changes
        for f in names[1:]:
            self._parts[f].add(columns[f], added)
        return added

    def delete(self, ids: Any) -> None:
        """Removes documents by id (UnknownIdError, nothing deleted, for an unknown one)."""
        names = list(self._parts)
        self._parts[names[0]].delete(ids)
        for f in names[1:]:
            self._parts[f].delete(ids)

    # ----- scoring

    def _terms(self, query: str) -> dict[str, int]:
        if not isinstance(query, str):
            raise TypeError(f"query: expected str, got {type(query).__name__}")
        counts: dict[str, int] = {}
        for t in self._analyzer.analyze(query):
            counts[t] = counts.get(t, 0) + 1
        return counts

    def _field_norms(self) -> dict[str, np.ndarray]:
        out = {}
        for f, part in self._parts.items():
            lens = part._core.document_lengths().astype(np.float64)
            avg = lens.mean() if len(lens) and lens.sum() > 0 else 0.0
            b = self._b[f]
            out[f] = (1.0 - b + b * lens / avg) if avg > 0 else np.ones_like(lens)
        return out

    def _pseudo_tf(self, term: str, norms: dict) -> tuple[np.ndarray, np.ndarray, dict]:
        """(docs with the term in any field, their ptf, {field: (tf, weighted tf) over them})."""
        per = {}
        touched = []
        for f, part in self._parts.items():
            ords, tfs = part._core.postings(term)
            per[f] = (ords, tfs)
            touched.append(ords)
        docs = np.unique(np.concatenate(touched)) if touched else np.zeros(0, np.int64)
        ptf = np.zeros(len(docs))
        shares = {}
        for f, (ords, tfs) in per.items():
            pos = np.searchsorted(docs, ords)
            tf = np.zeros(len(docs))
            tf[pos] = tfs
            # A field with no words (norm 0 when b_f = 1) holds no term: its part is 0.
            norm = norms[f][docs]
            wtf = np.divide(self._weights[f] * tf, norm, out=np.zeros(len(docs)), where=tf > 0)
            ptf += wtf
            shares[f] = (tf, wtf)
        return docs, ptf, shares

    def _idf(self, df: int) -> float:
        n = len(self)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def score(self, query: str, ids: Any = None) -> np.ndarray:
        """The BM25F score of the documents ``ids`` (default: every live document, in
        :attr:`ids` order), float64, in that order. UnknownIdError for an id not in the index."""
        scores = self._all_scores(query)
        if ids is None:
            return scores
        return scores[_positions_of(self._ids_array(), ids)]

    def get_scores(self, query: str) -> np.ndarray:
        """Deprecated name of :meth:`score`."""
        warnings.warn(
            "BM25FIndex.get_scores is deprecated and will be removed in the next release; use score()",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.score(query)

    def _all_scores(self, query: str) -> np.ndarray:
        scores = np.zeros(len(self))
        norms = self._field_norms()
        for term, qtf in self._terms(query).items():
            docs, ptf, _ = self._pseudo_tf(term, norms)
            keep = ptf > 0
            docs, ptf = docs[keep], ptf[keep]
            if len(docs):
                scores[docs] += qtf * self._idf(len(docs)) * ptf / (self._k1 + ptf)
        return scores

    def search(
        self,
        query: str,
        k: int = 10,
        filter: Any = None,  # noqa: A002
        *,
        threads: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best documents (matching at least one query term in any field), best
        first, ties by insertion order; ``filter`` as in :meth:`BM25Index.search`.
        ``threads`` is checked (None or an int >= 0) and otherwise unused.

        Returns ``(ids, float32 scores)``."""
        k = check_k(k)
        check_threads(threads)
        n = len(self)
        norms = self._field_norms()
        scores = np.zeros(n)
        hit = np.zeros(n, dtype=bool)
        for term, qtf in self._terms(query).items():
            docs, ptf, _ = self._pseudo_tf(term, norms)
            keep = ptf > 0
            docs, ptf = docs[keep], ptf[keep]
            if len(docs):
                scores[docs] += qtf * self._idf(len(docs)) * ptf / (self._k1 + ptf)
                hit[docs] = True
        if filter is not None:
            allowed = as_id_filter(filter).ids
            ids = self._ids_array()
            if len(allowed) and (allowed.dtype == object) != (ids.dtype == object):
                allowed = allowed[:0]  # ids of the other kind: none allowed, as BM25Index
            hit &= np.isin(ids, allowed)
        cand = np.flatnonzero(hit)
        s32 = scores[cand].astype(np.float32)
        order = np.lexsort((cand, -s32))[:k]
        return self._ids_array()[cand[order]], s32[order]

    def search_batch(
        self,
        queries: Sequence[str],
        k: int = 10,
        filter: Any = None,  # noqa: A002
        *,
        threads: int | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search` for each query, in order: one ``(ids, scores)`` per query. The
        queries run one after another on the calling thread (``threads`` is checked only)."""
        queries = _check_texts(queries, "queries")
        k = check_k(k)
        check_threads(threads)
        flt = as_id_filter(filter)
        return [self.search(q, k, flt) for q in queries]

    @old_spellings(renamed={"doc_id": "id"})
    def explain(self, query: str, id: Any) -> Explanation:  # noqa: A002
        """Why ``id`` scores what it does: an :class:`~ragfind.index.Explanation` of kind
        ``"bm25f"`` whose ``detail`` holds ``k1``, ``num_docs`` and ``terms`` (per distinct
        query term ``term``, ``query_tf``, ``df``, ``idf``, ``pseudo_tf``, ``contribution``)
        and whose contributions are one per query term and field (name ``field:term``, value
        the field's ``share`` of the term's contribution: contribution * weighted_tf /
        pseudo_tf), ``detail`` with ``term``, ``field``, ``tf``, ``length``, ``avg_length``,
        ``weight``, ``b`` and ``weighted_tf`` (its part of pseudo_tf). The values sum to
        ``score``.

        Raises:
            ragfind.UnknownIdError (a KeyError): ``id`` is not in the index.
        """
        first = next(iter(self._parts.values()))
        first.explain("", id)  # the id check (and its error)
        ids = self._ids_array()
        at = int(np.flatnonzero(ids == id)[0])
        norms = self._field_norms()
        lens = {f: p._core.document_lengths() for f, p in self._parts.items()}
        terms, total = [], 0.0
        for term, qtf in self._terms(query).items():
            docs, ptf, shares = self._pseudo_tf(term, norms)
            df = int((ptf > 0).sum())
            j = np.searchsorted(docs, at)
            inside = j < len(docs) and docs[j] == at
            p = float(ptf[j]) if inside else 0.0
            idf = self._idf(df) if df else 0.0
            contrib = qtf * idf * p / (self._k1 + p) if p > 0 else 0.0
            total += contrib
            per = {}
            for f in self._parts:
                tf, wtf = shares[f]
                w = float(wtf[j]) if inside else 0.0
                per[f] = {
                    "tf": int(tf[j]) if inside else 0,
                    "length": int(lens[f][at]),
                    "avg_length": float(lens[f].mean()),
                    "weight": self._weights[f],
                    "b": self._b[f],
                    "weighted_tf": w,
                    "share": contrib * w / p if p > 0 else 0.0,
                }
            terms.append(
                {
                    "term": term,
                    "query_tf": qtf,
                    "df": df,
                    "idf": idf,
                    "pseudo_tf": p,
                    "contribution": contrib,
                    "fields": per,
                }
            )
        old = {"score": total, "k1": self._k1, "num_docs": len(self), "terms": terms}
        parts = tuple(
            Contribution(f"{f}:{t['term']}", per["share"], {"term": t["term"], "field": f, **per})
            for t in terms
            for f, per in t["fields"].items()
        )
        summary = [{k: v for k, v in t.items() if k != "fields"} for t in terms]
        detail = {"k1": self._k1, "num_docs": len(self), "terms": summary}
        return Explanation("bm25f", id, total, parts, detail, _legacy=old)

    # ----- persistence

    def save(self, path: str | os.PathLike) -> None:
        """Writes every field's index into one file at ``path``, atomically."""
        path = Path(os.fspath(path))
        sections = {}
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".bm25f-") as tmp:
            for i, part in enumerate(self._parts.values()):
                part.save(Path(tmp) / f"{i}.bm25")
                sections[f"field{i}"] = np.frombuffer((Path(tmp) / f"{i}.bm25").read_bytes(), dtype=np.uint8)
            header = {
                "fields": self._weights,
                "field_b": self._b,
                "k1": self._k1,
                "analyzer": self._analyzer.config(),
            }
            write_sectioned(path, FIELDS_MAGIC, _VERSION, header, sections)

    @classmethod
    @old_spellings(positional=("mmap", "analyzer"))
    def load(
        cls, path: str | os.PathLike, *, mmap: bool = True, verify: bool = True, analyzer: Any = None
    ) -> BM25FIndex:
        """Loads a file written by :meth:`save` (IndexFileError for a bad one). ``mmap`` is
        accepted as by every index; the fields' postings are read into memory either way.
        The header's CRC-32 is always checked, each field's section CRC-32 with ``verify``
        (and each field's BM25 loader checks its own checksums in any case)."""
        if not isinstance(mmap, (bool, np.bool_)):  # analyzer was the second parameter before mmap
            raise TypeError(f"mmap: expected a bool, got {type(mmap).__name__}; pass analyzer= by keyword")
        path = Path(os.fspath(path))
        sf = SectionedFile(path, FIELDS_MAGIC, _VERSION, "BM25F index")
        try:
            weights = dict(sf.header["fields"])
            field_b = dict(sf.header["field_b"])
            k1 = float(sf.header["k1"])
            config = sf.header["analyzer"]
        except (KeyError, TypeError, ValueError) as exc:
            raise IndexFileError(f"{str(path)!r} is not a valid ragfind BM25F index: bad header") from exc
        if analyzer is None:
            try:
                analyzer = Analyzer.from_config(config)
            except (KeyError, TypeError, ValueError) as exc:
                raise IndexFileError(f"{str(path)!r}: bad analyzer settings") from exc
        obj = cls(weights, field_b, k1=k1, analyzer=resolve_analyzer(analyzer))
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".bm25f-") as tmp:
            for i, f in enumerate(list(obj._parts)):
                n = sf.shape_of(f"field{i}", 1)[0]
                data = sf.array(f"field{i}", np.uint8, (n,), mmap=False, verify=bool(verify))
                (Path(tmp) / f"{i}.bm25").write_bytes(data.tobytes())
                obj._parts[f] = BM25Index.load(Path(tmp) / f"{i}.bm25", mmap=False, analyzer=obj._analyzer)
        lens = {len(p) for p in obj._parts.values()}
        if len(lens) != 1 or any(
            not np.array_equal(p.ids, next(iter(obj._parts.values())).ids) for p in obj._parts.values()
        ):
            raise IndexFileError(f"{str(path)!r}: the fields hold different documents")
        return obj

    # ----- introspection

    def _ids_array(self) -> np.ndarray:
        return np.asarray(next(iter(self._parts.values())).ids)

    def __len__(self) -> int:
        return len(next(iter(self._parts.values())))

    @property
    def ids(self) -> np.ndarray:
        return next(iter(self._parts.values())).ids

    @property
    def fields(self) -> dict[str, float]:
        """Field name -> weight."""
        return dict(self._weights)

    @property
    def field_b(self) -> dict[str, float]:
        return dict(self._b)

    @property
    def k1(self) -> float:
        return self._k1

    @property
    def analyzer(self) -> Any:
        return self._analyzer

    def stats(self) -> dict:
        return {
            "num_docs": len(self),
            "fields": {f: p.stats() for f, p in self._parts.items()},
            "k1": self._k1,
            "field_b": dict(self._b),
        }

    def __repr__(self) -> str:
        return f"BM25FIndex(fields={self._weights}, field_b={self._b}, k1={self._k1}, num_docs={len(self)})"


register_fielded(BM25FIndex, FIELDS_MAGIC)
