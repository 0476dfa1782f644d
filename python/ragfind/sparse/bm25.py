"""BM25 over a C++ inverted index: :class:`Analyzer` and :class:`BM25Index`.

The analyzer (tokenization, lower-casing, stopwords, Snowball stemming) and the index
(postings, statistics, MaxScore top-k, persistence) run in C++ (``ragfind._core``); this module
validates arguments, documents the API and keeps the analyzer's configuration for saving.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from ragfind import _core
from ragfind.errors import check_k, unknown_ids
from ragfind.ids import as_id_filter, check_filter_kind
from ragfind.index import Contribution, Explanation, check_threads, old_spellings
from ragfind.sparse.analyzer import ENGLISH_STOPWORDS, Analyzer, resolve_analyzer
from ragfind.sparse.query import parse_query, phrase_terms

__all__ = ["ENGLISH_STOPWORDS", "Analyzer", "BM25Index", "IndexFileError", "METHODS"]

#: The BM25 variants (Kamphuis et al., "Which BM25 Do You Mean?", ECIR 2020).
METHODS: tuple[str, ...] = ("lucene", "robertson", "atire", "bm25l", "bm25+")

#: Default delta of the variants that use one (Lv and Zhai, CIKM 2011).
DEFAULT_DELTA = {"bm25l": 0.5, "bm25+": 1.0}

#: Raised for a missing, foreign, truncated or corrupt index file (a ValueError).
IndexFileError = _core.IndexFileError

IdList = Union[Sequence[str], Sequence[int], np.ndarray]


#: BM25F (:mod:`ragfind.sparse.fields`) is built on BM25Index, so this module does not import it:
#: it registers its class and file magic here on import (``ragfind.sparse`` imports it).
_FIELDED: dict = {}


def register_fielded(cls: type, magic: bytes) -> None:
    """Makes ``BM25Index(fields=...)`` build a ``cls`` and ``BM25Index.load`` open files that
    start with ``magic`` as one."""
    _FIELDED.update(cls=cls, magic=magic)


def _compile_filter(index: BM25Index, flt: Any) -> Any:
    """The native allowed-set of ``flt`` (None, an IdFilter or any iterable of ids) for ``index``:
    compiled once per write generation (a search with a stale one rebuilds it in C++)."""
    if flt is None:
        return None
    core = index._core

    def native(f: Any) -> Any:
        check_filter_kind(f, core.id_kind)
        bits = f.id_bits()  # a metadata filter's bitmap over chunk ids: no id array to read
        if bits is None:
            return core.compile_filter(f.ids)
        # After a write, the same filter compiled before is extended by the new documents.
        return core.compile_filter_bits(bits, f.previous_native(index))

    return as_id_filter(flt).compiled(index, core.generation, native)


def _check_texts(texts: Any, name: str) -> list:
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name}: expected a list of str, got a single {type(texts).__name__}")
    if not isinstance(texts, (list, tuple)):
        try:
            texts = list(texts)
        except TypeError:
            raise TypeError(f"{name}: expected a list of str, got {type(texts).__name__}") from None
    return texts


def _check_ids(ids: Any) -> Any:
    if ids is None:
        return None
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise ValueError(f"ids: expected a 1-D array, got shape {ids.shape}")
        return ids.tolist()
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"ids: expected a list of ids, got a single {type(ids).__name__}")
    return ids if isinstance(ids, (list, tuple)) else list(ids)


def _added_ids(index: Any, ids: Any, n: int) -> np.ndarray:
    """The ids ``add`` just gave ``n`` documents, as the index returns them from ``ids``."""
    if ids is None:
        all_ids = index.ids
        return all_ids[len(all_ids) - n :] if n else all_ids[:0]
    ids = list(ids)
    if ids and isinstance(ids[0], str):
        out = np.empty(len(ids), dtype=object)
        out[:] = ids
        return out
    return np.asarray(ids, dtype=np.int64)


def _positions_of(all_ids: np.ndarray, ids: Any) -> np.ndarray:
    """Where each of ``ids`` sits in ``all_ids`` (UnknownIdError naming the absent ones)."""
    if isinstance(ids, (str, bytes, int, np.integer)):
        ids = [ids]
    wanted = _check_ids(ids)
    at = {v: i for i, v in enumerate(all_ids.tolist())}
    missing = [i for i in wanted if at.get(i) is None]
    if missing:
        raise unknown_ids(missing)
    return np.asarray([at[i] for i in wanted], dtype=np.int64)


def _bm25_explanation(out: dict) -> Explanation:
    """The core's explain dict as an :class:`Explanation` (the dict stays reachable, deprecated)."""
    detail = {k: out[k] for k in ("method", "k1", "b", "delta", "num_docs", "doc_len", "avgdl")}
    parts = [
        Contribution(
            t["term"], t["contribution"], {k: v for k, v in t.items() if k not in ("term", "contribution")}
        )
        for t in out["terms"]
    ]
    if "phrases" in out:
        detail["phrases"] = out["phrases"]
        for ph in out["phrases"]:
            name = '"' + " ".join(ph["terms"]) + '"' + (f"~{ph['slop']}" if ph["slop"] else "")
            parts.append(
                Contribution(name, ph["contribution"], {k: ph[k] for k in ("terms", "slop", "phrase_freq")})
            )
    return Explanation("bm25", out["doc_id"], out["score"], tuple(parts), detail, _legacy=out)


class BM25Index:
    """A BM25 index over a C++ inverted index, searchable while documents are added or deleted.

    Variants (``method``), as named by Kamphuis et al., "Which BM25 Do You Mean? A Large-Scale
    Reproducibility Study of Scoring Variants" (ECIR 2020), with the formulas of bm25s:
    ``"lucene"`` (default), ``"robertson"``, ``"atire"``, ``"bm25l"`` and ``"bm25+"`` (Lv and
    Zhai, CIKM 2011; ``delta`` defaults to 0.5 and 1.0 respectively). Repeated query terms
    count once per occurrence.

    Statistics (N, df, avgdl) are global and current: after any :meth:`add` or :meth:`delete`
    every score equals that of a fresh index built over the same documents. :meth:`search` is
    exact top-k with MaxScore dynamic pruning; ties are broken by insertion order.

    Args:
        method: one of ``"lucene"``, ``"robertson"``, ``"atire"``, ``"bm25l"``, ``"bm25+"``.
        k1: term-frequency saturation (>= 0).
        b: length normalisation in [0, 1].
        delta: the lower bound of bm25l / bm25+ (``None``: the variant's default; ignored by
            the others).
        analyzer: an :class:`Analyzer` or the name of one (``"default"``, ``"cjk"``,
            ``"whitespace"``; see :meth:`Analyzer.named`). Default: ``Analyzer()``: English
            stopwords, English Snowball stemming, identifier splitting, one-letter capitals
            and Greek letters kept (``T cells``, ``vitamin D``).
        positions: also store every term's positions, for phrase queries (``"new york"``,
            ``"new york"~2``; see :meth:`search`). Off by default: saved, they are a varint
            term id per token, kept per document beside the postings (the file grows 1.37x
            on SciFact, 1.29x on the 1M synthetic corpus: bench/lexical.md); in memory a
            term-major copy for search about doubles that.

        fields: ``{"title": 2.0, "body": 1.0}`` makes a BM25F index over documents given as
            dicts (a :class:`~ragfind.sparse.fields.BM25FIndex`; Lucene idf and one ``k1``,
            ``method`` must be ``"lucene"``); ``field_b`` gives each field's ``b``.

    Raises:
        ValueError: unknown method or parameters out of range.
    """

    def __new__(cls, *args: Any, fields: Any = None, field_b: Any = None, **kwargs: Any) -> Any:
        if fields is None:
            if field_b is not None:
                raise ValueError("field_b: only with fields=")
            return super().__new__(cls)
        if args:
            raise TypeError("BM25Index(fields=...): pass k1, b and analyzer by keyword")
        method = kwargs.pop("method", "lucene")
        if method != "lucene" or kwargs.pop("delta", None) is not None or kwargs.pop("positions", False):
            raise ValueError("fields: BM25F supports method='lucene' only, without delta or positions")
        return _FIELDED["cls"](fields, field_b, **kwargs)

    def __init__(
        self,
        method: str = "lucene",
        k1: float = 1.2,
        b: float = 0.75,
        delta: float | None = None,
        analyzer: Analyzer | str | None = None,
        positions: bool = False,
        fields: Any = None,
        field_b: Any = None,
    ) -> None:
        if method not in METHODS and method != "bm25plus":
            raise ValueError(f"method: unknown BM25 variant {method!r}; expected one of {METHODS}")
        self._analyzer = Analyzer() if analyzer is None else resolve_analyzer(analyzer)
        self._delta_given = delta is not None
        if delta is None:
            delta = DEFAULT_DELTA.get("bm25+" if method == "bm25plus" else method, 0.0)
        self._core = _core.BM25Core(method, float(k1), float(b), float(delta), self._analyzer._core)
        self._writes = threading.Lock()
        if positions:
            self._core.enable_positions()

    @property
    def positions(self) -> bool:
        """Whether term positions are stored (phrase queries work)."""
        return bool(self._core.has_positions)

    def _phrases(self, query: str) -> tuple[str, list] | None:
        """``(plain text, [(terms, slop), ...])`` when ``query`` holds phrases and this index
        has positions, else None (the query is searched as plain text)."""
        if '"' not in query or not self._core.has_positions:
            return None
        parsed = parse_query(query)
        if not parsed.phrases:
            return None
        phrases = []
        for ph in parsed.phrases:
            terms = phrase_terms(self._analyzer, ph.text)
            if terms:
                phrases.append((terms, ph.slop))
        return parsed.text, phrases

    @classmethod
    def _wrap(cls, core, analyzer: Analyzer) -> BM25Index:
        obj = cls.__new__(cls)
        obj._analyzer = analyzer
        obj._core = core
        obj._delta_given = True
        obj._writes = threading.Lock()
        return obj

    # ----- building

    @old_spellings(renamed={"texts": "items"})
    def add(self, items: Sequence[str], ids: IdList | None = None) -> np.ndarray:
        """Adds documents, searchable as soon as this returns; returns their ids.

        Args:
            items: the documents' texts (str; bytes are rejected: decode them first).
            ids: one id per document, all int or all str, unique in the index. Default:
                consecutive ints after the largest int id so far (0, 1, 2, ... for a new index).

        Returns:
            the ids of the new documents (int64, or an object array of str).

        Raises:
            TypeError: an item is not str (the message names its position).
            ragfind.IdKindError (a TypeError): mixed id kinds, or the other kind than the index's.
            ragfind.DuplicateIdError (a ValueError): an id repeated or already in the index.
            ValueError: as many ids as texts was not given.
            Nothing is added when an error is raised.
        """
        texts = _check_texts(items, "texts")
        ids = _check_ids(ids)
        with self._writes:  # no other write between the add and reading its default ids back
            self._core.add(texts, ids)
            return _added_ids(self, ids, len(texts))

    def add_tokenized(self, token_lists: Sequence[Sequence[str]], ids: IdList | None = None) -> np.ndarray:
        """Adds pre-tokenized documents, bypassing the analyzer: each token is an index term.

        Use with :meth:`search_tokenized`. Same ``ids`` rules, result and errors as :meth:`add`.
        """
        token_lists = _check_texts(token_lists, "token_lists")
        ids = _check_ids(ids)
        with self._writes:
            self._core.add_tokenized(token_lists, ids)
            return _added_ids(self, ids, len(token_lists))

    def delete(self, ids: IdList) -> None:
        """Removes documents by id; statistics are updated as if they had never been added.

        A delete marks the documents dead and takes them out of N, avgdl and the document
        frequencies at once (cost: their postings, plus one pass over the per-document length
        codes); their ids are free again. A segment is rewritten without its dead documents once
        more than a quarter of it is dead, and :meth:`save` writes live documents only.

        Raises:
            ragfind.UnknownIdError (a KeyError): an id is not in the index (nothing is deleted).
        """
        ids = _check_ids(ids)
        with self._writes:
            self._core.delete(ids)

    # ----- searching

    def search(
        self,
        query: str,
        k: int = 10,
        filter: Any = None,
        *,
        threads: int | None = None,
        algorithm: str = "auto",  # noqa: A002
        stats: tuple | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best documents for ``query``, best first.

        Only documents that contain at least one query term are returned, so fewer than
        ``k`` come back when fewer match (an empty or stopword-only query returns nothing); a
        ``k`` past the number of documents is taken as that number.

        ``filter`` (None, an :class:`~ragfind.ids.IdFilter` or any iterable of ids) restricts
        the search to those ids (ids not in the index are ignored; ids of the other kind than
        the index's, int for str, are an ``IdKindError``): the result is the
        unfiltered ranking restricted to them, ``min(k, allowed matching documents)`` long.
        The filter is compiled once per index state into a mask over the internal document
        numbers (reuse one IdFilter across searches) and applied while scoring.

        ``algorithm`` (all exact, same results): ``"auto"`` (term-at-a-time for segments of up
        to 65,536 documents, MaxScore above; with a small allowed set, ``"direct"``),
        ``"maxscore"`` (MaxScore dynamic pruning: the essential lists merged a window of
        documents at a time, the other lists probed per candidate), ``"blockmax"``
        (MaxScore with per-block bounds of 128 postings, block-max MaxScore), ``"exhaustive"``
        (scores every posting) or ``"direct"`` (scores each allowed document by a search of
        each query term's postings). Without a filter, MaxScore and block-max MaxScore start
        pruning from a score k documents are known to reach: a query term's weight times the
        10th, 100th or 1000th largest document weight of its list (kept per list, computed
        with its score bound once per statistics change), for k up to 1000.

        ``stats`` = ``(num_docs, total_len, {term: df})``: score with the statistics of a larger
        collection this index is a shard of (:meth:`term_stats` of every shard, summed; ``df``
        for every analyzed query term, see :meth:`analyze_query`), so that the scores equal
        those of one index over the whole collection.

        ``threads`` is checked as everywhere (None or an int >= 0) and otherwise unused: one
        query runs on the calling thread.

        Returns:
            ``(ids, scores)``: ids as int64 (or an object array of str for str ids) and
            float32 scores, sorted by score descending, ties by insertion order.

        Phrases (with ``positions=True``; the syntax is in :mod:`ragfind.sparse.query`):
        ``"new york"`` matches the two words at adjacent positions, ``"new york"~1`` also
        "new big york", ``~2`` also "york new" (Lucene's slop: a swap costs 2). A phrase's
        words are analyzed like the rest (so stemmed; a removed stopword leaves no gap:
        ``"bank of america"`` is the phrase ``bank america``). Plain words and phrases mix
        as Lucene's OR: a document needs one of them and scores the sum of their parts. A
        phrase scores as one term with idf = the sum of its words' idfs and tf = its phrase
        frequency (exact matches, or for a slop the sum of 1 / (1 + match cost); the matching
        is defined in ``cpp/include/ragfind/bm25/phrase.hpp``); for bm25l / bm25+ a document
        without the phrase gets no part for it. Phrase queries are evaluated exactly over the
        intersection of the phrase words' position lists; a phrase alone skips only documents
        whose score bound cannot enter the top k (``algorithm`` does not apply). Without
        positions, quotes are ignored (the words are searched as plain terms).

        Raises:
            ValueError: ``k <= 0``, an unknown algorithm, ``stats`` without a query term's df.
            TypeError: ``query`` is not str, ``k`` is not an int. IdKindError (a TypeError):
            a filter of ids of the other kind.
        """
        k = check_k(k, len(self))
        check_threads(threads)
        if not isinstance(query, str):
            raise TypeError(f"query: expected str, got {type(query).__name__}")
        algo = _algorithm(algorithm)
        split = self._phrases(query)
        if stats is not None:
            if split is not None:
                raise ValueError(_PHRASE_STATS)
            n, total, df = _check_stats(stats)
            return self._core.search_batch_with_stats(
                [query], k, 1, False, algo, _compile_filter(self, filter), n, total, [df]
            )[0]
        if split is not None:
            text, phrases = split
            return self._core.search_phrases(text, phrases, k, _compile_filter(self, filter))
        return self._core.search(query, k, algo, _compile_filter(self, filter))

    def analyze_query(self, query: str) -> list:
        """The index terms of ``query`` as a search looks them up (repeats kept, in order)."""
        if not isinstance(query, str):
            raise TypeError(f"query: expected str, got {type(query).__name__}")
        return list(self._analyzer._core.analyze(query))

    def term_stats(self, terms: Sequence[str]) -> tuple[int, int, np.ndarray]:
        """``(live documents, their total length, df of each term)`` read together: the
        statistics a sharded collection sums over its shards for :meth:`search` ``stats``."""
        n, total, df = self._core.term_stats(_check_texts(terms, "terms"))
        return int(n), int(total), df

    def search_tokenized(
        self,
        tokens: Sequence[str],
        k: int = 10,
        filter: Any = None,
        *,
        threads: int | None = None,
        algorithm: str = "auto",  # noqa: A002
    ) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`search` for a pre-tokenized query (tokens are index terms as given)."""
        check_threads(threads)
        return self._core.search_tokenized(
            _check_texts(tokens, "tokens"),
            check_k(k, len(self)),
            _algorithm(algorithm),
            _compile_filter(self, filter),
        )

    @old_spellings(positional=("threads",))
    def search_batch(
        self,
        queries: Sequence[str],
        k: int = 10,
        filter: Any = None,  # noqa: A002
        *,
        threads: int | None = None,
        algorithm: str = "auto",
        stats: tuple | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search` for many queries on C++ threads (``threads``: None or 0, one per core).

        Queries are analyzed first, then searched with the GIL released, concurrently with
        other readers. ``filter`` applies to every query. Returns one ``(ids, scores)`` per
        query, in order. ``stats`` = ``(num_docs, total_len, [{term: df} per query])``: the
        collection statistics to score with (see :meth:`search`).

        Raises:
            ValueError: ``k <= 0`` or ``threads < 0``.  TypeError: a query is not str, or
            ``threads`` is not an int.
        """
        queries = _check_texts(queries, "queries")
        has_phrases = self._core.has_positions and any(isinstance(q, str) and '"' in q for q in queries)
        if stats is not None:
            if has_phrases and any(self._phrases(q) is not None for q in queries):
                raise ValueError(_PHRASE_STATS)
            n, total, dfs = _check_stats(stats, batch=True)
            return self._core.search_batch_with_stats(
                queries,
                check_k(k, len(self)),
                check_threads(threads),
                False,
                _algorithm(algorithm),
                _compile_filter(self, filter),
                n,
                total,
                dfs,
            )
        if has_phrases:
            check_k(k, len(self))
            check_threads(threads)
            return [self.search(q, k, filter, algorithm=algorithm) for q in queries]
        return self._core.search_batch(
            queries,
            check_k(k, len(self)),
            check_threads(threads),
            False,
            _algorithm(algorithm),
            _compile_filter(self, filter),
        )

    @old_spellings(positional=("threads",))
    def search_batch_tokenized(
        self,
        token_lists: Sequence[Sequence[str]],
        k: int = 10,
        filter: Any = None,  # noqa: A002
        *,
        threads: int | None = None,
        algorithm: str = "auto",
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search_batch` for pre-tokenized queries."""
        return self._core.search_batch(
            _check_texts(token_lists, "token_lists"),
            check_k(k, len(self)),
            check_threads(threads),
            True,
            _algorithm(algorithm),
            _compile_filter(self, filter),
        )

    def score(self, query: str | Sequence[str], ids: IdList | None = None) -> np.ndarray:
        """The score of the documents ``ids`` for ``query`` (default: every live document, in
        :attr:`ids` order), in that order.

        ``query`` is a string (analyzed) or a list of tokens (used as index terms). Documents
        with no query term get 0 (or, for bm25l / bm25+, the score of absent terms).
        Computed exhaustively in double precision; returns a float64 array. Quoted phrases
        are not evaluated here: their words count as plain terms.

        Raises:
            ragfind.UnknownIdError (a KeyError): an id is not in the index.
        """
        if not isinstance(query, (str, bytes)):
            query = _check_texts(query, "query")
        scores = self._core.get_scores(query)
        if ids is None:
            return scores
        return scores[_positions_of(self.ids, ids)]

    def get_scores(self, query: str | Sequence[str]) -> np.ndarray:
        """Deprecated name of :meth:`score` (``ragfind.compat.BM25Okapi`` keeps rank_bm25's)."""
        warnings.warn(
            "BM25Index.get_scores is deprecated and will be removed in the next release; use score()",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.score(query)

    @old_spellings(renamed={"doc_id": "id"})
    def explain(self, query: str | Sequence[str], id: int | str) -> Explanation:  # noqa: A002
        """Why ``id`` scores what it does for ``query``.

        Returns an :class:`~ragfind.index.Explanation` of kind ``"bm25"``: ``score``;
        ``detail`` with ``method``, ``k1``, ``b``, ``delta``, ``num_docs``, ``doc_len``,
        ``avgdl`` (and ``phrases`` for a phrase query: ``terms``, ``slop``, ``phrase_freq``,
        ``contribution`` each); one contribution per distinct query term (name the term,
        value ``query_tf * idf * tf_component``, ``detail`` with ``query_tf``,
        ``in_vocabulary``, ``tf``, ``df``, ``idf``, ``length_norm`` (1 - b + b dl/avgdl) and
        ``tf_component``), then one per phrase (``"new york"~1``). The values sum to
        ``score``. Change parameters with :meth:`set_params` and compare.

        Raises:
            ragfind.UnknownIdError (a KeyError): ``id`` is not in the index (or was deleted).
        """
        if not isinstance(query, (str, bytes)):
            query = _check_texts(query, "query")
        split = self._phrases(query) if isinstance(query, str) else None
        if split is None:
            return _bm25_explanation(self._core.explain(query, id))
        text, phrases = split
        out = self._core.explain(text, id)
        out["phrases"] = []
        for terms, slop in phrases:
            part, (pf,) = self._core.phrase_score("", [(terms, slop)], id)
            out["phrases"].append({"terms": terms, "slop": slop, "phrase_freq": pf, "contribution": part})
        out["score"] = self._core.phrase_score(text, phrases, id)[0]
        return _bm25_explanation(out)

    def set_params(
        self,
        method: str | None = None,
        k1: float | None = None,
        b: float | None = None,
        delta: float | None = None,
    ) -> None:
        """Changes the variant and/or its parameters; later scores use them (no rebuild)."""
        s = self._core.stats()
        method = s["method"] if method is None else method
        if delta is None:
            delta = s["delta"] if method == s["method"] else DEFAULT_DELTA.get(method, 0.0)
        self._core.set_params(
            method, float(s["k1"] if k1 is None else k1), float(s["b"] if b is None else b), float(delta)
        )

    # ----- persistence

    def save(self, path: str | os.PathLike) -> None:
        """Writes the index to ``path`` atomically (temporary file, fsync, rename).

        The analyzer's settings are stored with it; a custom tokenizer callable is not (pass it
        again to :meth:`load`).

        Raises:
            OSError: the file cannot be written (a previous file at ``path`` is left untouched).
        """
        meta: dict = {"analyzer": self._analyzer.config()}
        if self._core.has_positions:
            meta["positions"] = True
        self._core.save(os.fspath(path), json.dumps(meta))

    @classmethod
    @old_spellings(positional=("mmap", "analyzer"))
    def load(
        cls,
        path: str | os.PathLike,
        *,
        mmap: bool = True,
        verify: bool = True,
        analyzer: Analyzer | str | None = None,
    ) -> BM25Index:
        """Loads an index written by :meth:`save`.

        Args:
            path: the file.
            mmap: map the postings and lengths from the file instead of reading them into
                memory. The file is validated in full either way; with ``mmap`` the checked
                pages are released again, so only the postings queries touch stay resident.
            verify: accepted as by every index. The C++ loader always checks the CRC-32 of
                every section (it has no unchecked path), so ``verify=False`` checks them too.
            analyzer: the analyzer to use (required if the index was built with a custom
                tokenizer); default: rebuilt from the saved settings.

        Raises:
            ragfind.IndexFileError (a ValueError): missing, foreign, truncated or corrupt file
                (magic, version, sizes, CRC-32 checksums and every offset are checked).
        """
        path = os.fspath(path)
        if analyzer is not None:
            analyzer = resolve_analyzer(analyzer)
        try:
            with open(path, "rb") as f:
                if f.read(8) == _FIELDED["magic"]:
                    return _FIELDED["cls"].load(path, mmap=mmap, verify=verify, analyzer=analyzer)
        except OSError:
            pass  # the C++ loader reports it
        meta_text = _core.BM25Core.read_analyzer_json(path)
        try:
            meta = json.loads(meta_text)
            config = meta["analyzer"]
        except (ValueError, KeyError, TypeError) as exc:
            raise IndexFileError(
                f"{path!r} is not a valid ragfind BM25 index: bad analyzer settings"
            ) from exc
        if analyzer is None:
            if config.get("custom_tokenizer"):
                raise ValueError(
                    f"{path!r} was built with a custom tokenizer; pass analyzer=Analyzer(..., tokenizer=...)"
                )
            try:
                analyzer = Analyzer.from_config(config)
            except (KeyError, TypeError) as exc:
                raise IndexFileError(
                    f"{path!r} is not a valid ragfind BM25 index: bad analyzer settings"
                ) from exc
        core = _core.BM25Core.load(path, bool(mmap), analyzer._core)
        if meta.get("positions") and not core.has_positions:
            raise IndexFileError(f"{path!r} is not a valid ragfind BM25 index: its positions are missing")
        return cls._wrap(core, analyzer)

    # ----- introspection

    def __len__(self) -> int:
        return len(self._core)

    @property
    def ids(self) -> np.ndarray:
        """Document ids in insertion order (int64, or an object array of str)."""
        return self._core.ids()

    @property
    def analyzer(self) -> Analyzer:
        """The :class:`Analyzer` used for :meth:`add` and :meth:`search`."""
        return self._analyzer

    @property
    def method(self) -> str:
        """The BM25 variant (see :data:`METHODS`)."""
        return self._core.stats()["method"]

    @property
    def k1(self) -> float:
        """Term-frequency saturation parameter."""
        return self._core.stats()["k1"]

    @property
    def b(self) -> float:
        """Length-normalisation parameter."""
        return self._core.stats()["b"]

    @property
    def delta(self) -> float:
        """The bm25l / bm25+ lower bound (0 for the other variants)."""
        return self._core.stats()["delta"]

    def stats(self) -> dict:
        """Sizes and parameters: num_docs, num_terms, num_postings, num_segments, avgdl, memory_bytes,
        positions_bytes (0 without positions), ..."""
        s = self._core.stats()
        s["positions_bytes"] = self._core.positions_bytes()
        return s

    def __repr__(self) -> str:
        s = self._core.stats()
        return (
            f"BM25Index(method={s['method']!r}, k1={s['k1']}, b={s['b']}, delta={s['delta']}, "
            f"num_docs={s['num_docs']}, num_terms={s['num_terms']})"
        )


_ALGORITHMS = {"auto": 0, "maxscore": 1, "exhaustive": 2, "direct": 3, "blockmax": 4}


_PHRASE_STATS = (
    "phrase queries cannot be scored with external collection statistics (stats=) yet; "
    "search the phrase without stats, or its words without quotes"
)


def _check_stats(stats: Any, batch: bool = False) -> tuple:
    what = "[{term: df} per query]" if batch else "{term: df}"
    try:
        n, total, df = stats
    except (TypeError, ValueError):
        raise TypeError(f"stats: expected (num_docs, total_len, {what}), got {stats!r}") from None
    for name, v in (("num_docs", n), ("total_len", total)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"stats: {name} = {v!r}; expected an int >= 0")
    if batch:
        df = [dict(d) for d in df]
    else:
        df = dict(df)
    return int(n), int(total), df


def _algorithm(name: str) -> int:
    try:
        return _ALGORITHMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"algorithm: unknown {name!r}; expected one of {tuple(_ALGORITHMS)}") from None
