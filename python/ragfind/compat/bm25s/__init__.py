"""A drop-in for bm25s 0.3.16's core API on ragfind's C++ index:
``import ragfind.compat.bm25s as bm25s``.

What matches bm25s: :func:`tokenize` / :class:`Tokenized` / :class:`tokenization.Tokenizer`
(same tokens and ids); :class:`BM25` with the methods ``"lucene"``, ``"robertson"``,
``"atire"``, ``"bm25l"`` and ``"bm25+"`` and its ``k1``, ``b``, ``delta``; ``index``,
``retrieve``, ``get_scores``, ``save`` and ``load``; :class:`Results`. Scores equal bm25s's
(float32, within float rounding), ``retrieve`` returns the same ``(n_queries, k)`` arrays
(documents int64, int32 with ``backend="numba"`` as bm25s), always ``k`` per query (documents
without a query term fill up with their score, as in bm25s).

What differs: among documents of equal score the lower index comes first (bm25s's order
among ties depends on its backend); ``n_threads=0`` is one thread and ``-1`` every core, like
bm25s, but ``backend`` and ``backend_selection`` only choose dtypes (the C++ index serves
all). bm25s's numba and CSC internals (``compile``, ``activate_numba_scorer``,
``load_scores``, the ``scores`` arrays) and its Hugging Face hub helpers (``bm25s.hf``)
raise NotImplementedError; ``save`` writes ragfind's index file beside bm25s's parameter,
vocabulary and corpus files, so ``load`` reads folders written here, not bm25s's own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ragfind.compat.bm25s import tokenization
from ragfind.compat.bm25s.tokenization import Tokenized, Tokenizer, tokenize
from ragfind.sparse.bm25 import BM25Index

__all__ = ["BM25", "Results", "Tokenized", "Tokenizer", "tokenization", "tokenize"]

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
_INDEX_FILE = "ragfind_bm25.index"
_NOT_HERE = {
    "hf": "bm25s.hf (Hugging Face hub): save() to a folder and upload it with huggingface_hub",
    "BM25HF": "bm25s.hf.BM25HF: use BM25 with save()/load() on a local folder",
    "high_level": "bm25s.high_level: use tokenize() and BM25 directly",
}


def __getattr__(name: str) -> Any:
    if name in _NOT_HERE:
        raise NotImplementedError(f"ragfind.compat.bm25s has no {_NOT_HERE[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Results(NamedTuple):
    """``documents`` (indices, or corpus entries) and ``scores``, both ``(n_queries, k)``."""

    documents: np.ndarray
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.documents)

    @classmethod
    def merge(cls, results: list) -> Results:
        """The results of several retrieve calls, stacked."""
        return cls(
            documents=np.concatenate([r.documents for r in results], axis=0),
            scores=np.concatenate([r.scores for r in results], axis=0),
        )


def _is_list_of_list_of(obj: Any, kind: type) -> bool:
    return (
        isinstance(obj, list)
        and len(obj) > 0
        and isinstance(obj[0], list)
        and len(obj[0]) > 0
        and isinstance(obj[0][0], kind)
    )


class _Scores(Mapping):
    """bm25s's ``scores`` dict: only ``num_docs`` exists here (no CSC score matrix)."""

    def __init__(self, num_docs: int) -> None:
        self._n = num_docs

    def __getitem__(self, key: str) -> Any:
        if key == "num_docs":
            return self._n
        if key in ("data", "indices", "indptr"):
            raise NotImplementedError(
                f"scores[{key!r}]: ragfind.compat.bm25s keeps no CSC score matrix; "
                "use BM25.get_scores(query_tokens) for every document's score"
            )
        raise KeyError(key)

    def __iter__(self):
        return iter(("num_docs",))

    def __len__(self) -> int:
        return 1


class BM25:
    """bm25s's ``BM25`` on ragfind's index (see the module docstring for what differs).

    Args:
        k1, b, delta: the BM25 parameters (``delta`` for bm25l / bm25+ only).
        method: ``"lucene"``, ``"robertson"``, ``"atire"``, ``"bm25l"`` or ``"bm25+"``.
        idf_method: None or equal to ``method`` (other idf/tf pairings: NotImplementedError).
        dtype: scores' dtype, ``"float32"`` (default) or ``"float64"``.
        int_dtype: the documents' dtype with ``backend="numba"``.
        corpus: entries returned by ``retrieve`` instead of indices, and saved by ``save``.
        backend: ``"numpy"``, ``"numba"`` or ``"auto"``: the documents' dtype only.
        csc_backend, auto_compile: accepted and ignored.

    Raises:
        ValueError: unknown method, dtype or backend.
    """

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        delta: float = 0.5,
        method: str = "lucene",
        idf_method: str | None = None,
        dtype: str = "float32",
        int_dtype: str = "int32",
        corpus: Iterable[Any] | None = None,
        backend: str = "numpy",
        csc_backend: str = "numpy",
        auto_compile: bool = True,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method = {method!r}; expected one of {METHODS}")
        if idf_method is not None and idf_method != method:
            raise NotImplementedError(
                f"idf_method = {idf_method!r} with method = {method!r}: ragfind scores each variant "
                "with its own idf; use bm25s itself for mixed pairings"
            )
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise ValueError(f"dtype = {dtype!r}; expected 'float32' or 'float64'")
        if backend not in ("numpy", "numba", "auto"):
            raise ValueError(f"backend = {backend!r}; expected 'numpy', 'numba' or 'auto'")
        self.k1 = k1
        self.b = b
        self.delta = delta
        self.method = method
        self.idf_method = method
        self.dtype = dtype
        self.int_dtype = int_dtype
        self.corpus = corpus
        self.backend = backend
        self.csc_backend = csc_backend
        self.methods_requiring_nonoccurrence = ("bm25l", "bm25+")
        self.vocab_dict: dict = {}
        self.unique_token_ids_set: set = set()
        self._index: Any = None
        self._terms: dict = {}  # vocabulary id -> index term

    # ----- indexing

    def _new_index(self) -> Any:
        return BM25Index(method=self.method, k1=self.k1, b=self.b, delta=self.delta, analyzer="whitespace")

    def index(
        self,
        corpus: Any,
        create_empty_token: bool = True,
        show_progress: bool = True,
        leave_progress: bool = False,
    ) -> None:
        """Indexes a corpus: token lists (str), a :class:`Tokenized` (or ``(ids, vocab)``), or
        lists of token ids; replaces any previous index.

        Raises:
            ValueError: a corpus of none of these forms, or an empty one.
        """
        if hasattr(corpus, "ids") and hasattr(corpus, "vocab"):
            ids, vocab = corpus.ids, corpus.vocab
        elif isinstance(corpus, tuple) and len(corpus) == 2 and isinstance(corpus[1], dict):
            ids, vocab = corpus
        elif isinstance(corpus, Iterable) and not isinstance(corpus, (str, bytes, tuple)):
            corpus = corpus if isinstance(corpus, list) else list(corpus)
            ids = vocab = None
        else:
            raise ValueError(
                "corpus: expected a list of token lists, a Tokenized (ids, vocab) or a tuple "
                f"(list of token-id lists, vocab dict); got a {type(corpus).__name__}"
            )
        by_ids = vocab is None and _is_list_of_list_of(corpus, int)
        if vocab is not None:
            reverse = {v: k for k, v in vocab.items()}
            docs = [[reverse[t] for t in doc] for doc in ids]
            vocab_dict = dict(vocab)
            terms = reverse
        elif by_ids:
            unique: set = set()
            for doc in corpus:
                unique.update(doc)
            if create_empty_token:
                unique.add(0 if 0 not in unique else max(unique) + 1)
            docs = [[str(t) for t in doc] for doc in corpus]
            vocab_dict = {t: i for i, t in enumerate(unique)}
            terms = {t: str(t) for t in unique}
        else:
            docs = corpus
            unique = set()
            for doc in docs:
                unique.update(doc)
            # A set's order, as bm25s numbers the vocabulary.
            vocab_dict = {t: i for i, t in enumerate(unique)}
            terms = {i: t for t, i in vocab_dict.items()}
        if not docs:
            raise ValueError("corpus: empty; expected at least one document")
        if create_empty_token and not by_ids and "" not in vocab_dict:
            vocab_dict[""] = max(vocab_dict.values(), default=-1) + 1
        index = self._new_index()
        index.add_tokenized(docs)
        self._index = index
        self.vocab_dict = vocab_dict
        self.unique_token_ids_set = set(vocab_dict.values())
        self._terms = terms

    def _check_indexed(self) -> Any:
        if self._index is None:
            raise ValueError("this BM25 has no index yet; call index(corpus_tokens) first")
        return self._index

    @property
    def scores(self) -> Mapping:
        """``{"num_docs": n}`` (bm25s's CSC arrays are not kept: NotImplementedError)."""
        return _Scores(len(self._check_indexed()))

    @property
    def nonoccurrence_array(self) -> Any:
        raise NotImplementedError(
            "nonoccurrence_array: ragfind adds the bm25l/bm25+ absent-term part inside its "
            "index; get_scores() includes it"
        )

    # ----- queries

    def get_tokens_ids(self, query_tokens: list) -> list:
        """The vocabulary ids of the known tokens of ``query_tokens``."""
        return [self.vocab_dict[t] for t in query_tokens if t in self.vocab_dict]

    def _terms_of(self, query: list) -> list:
        """The index terms of one query given as tokens or vocabulary ids (unknown ids dropped;
        unknown tokens score 0 in the index, as in bm25s)."""
        if query and isinstance(query[0], (int, np.integer)):
            out = [self._terms.get(int(t)) for t in query]
            return [t for t in out if t is not None]
        return list(query)

    def get_scores(self, query_tokens_single: list, weight_mask: np.ndarray | None = None) -> np.ndarray:
        """Every document's score for one query (tokens or ids), in ``dtype``.

        Raises:
            ValueError: the query is not a list.
        """
        if not isinstance(query_tokens_single, list):
            raise ValueError("The query_tokens must be a list of tokens.")
        index = self._check_indexed()
        terms = self._terms_of(query_tokens_single)
        if terms:
            scores = index.score(terms).astype(self.dtype)
        else:
            scores = np.zeros(len(index), dtype=self.dtype)
        if weight_mask is not None:
            scores *= self._check_mask(weight_mask)
        return scores

    def get_scores_from_ids(
        self, query_tokens_ids: list, weight_mask: np.ndarray | None = None
    ) -> np.ndarray:
        """:meth:`get_scores` for vocabulary ids."""
        return self.get_scores([int(t) for t in query_tokens_ids], weight_mask=weight_mask)

    def _check_mask(self, weight_mask: Any) -> np.ndarray:
        if not isinstance(weight_mask, np.ndarray):
            raise ValueError("weight_mask must be a numpy array.")
        if weight_mask.ndim != 1:
            raise ValueError("weight_mask must be a 1D array.")
        if len(weight_mask) != len(self._check_indexed()):
            raise ValueError("The length of the weight_mask must be the same as the length of the corpus.")
        return weight_mask

    def _queries(self, query_tokens: Any) -> list:
        if isinstance(query_tokens, tuple) and not (
            query_tokens and isinstance(query_tokens[0], list) and query_tokens[0]
            and isinstance(query_tokens[0][0], str)
        ):  # fmt: skip
            if len(query_tokens) != 2 or not isinstance(query_tokens[1], dict):
                raise ValueError(
                    "query_tokens: expected token lists, a Tokenized or a tuple (token-id lists, vocab dict)"
                )
            query_tokens = Tokenized(ids=query_tokens[0], vocab=query_tokens[1])
        if isinstance(query_tokens, Tokenized) or (
            hasattr(query_tokens, "ids") and hasattr(query_tokens, "vocab")
        ):
            query_tokens = tokenization.convert_tokenized_to_string_list(query_tokens)
        if isinstance(query_tokens, (str, bytes)) or not isinstance(query_tokens, Iterable):
            raise ValueError("query_tokens: expected a list of token lists (or a Tokenized)")
        out = []
        for q in query_tokens:
            if isinstance(q, (str, bytes)):
                raise ValueError("query_tokens: expected a list of token lists, got a list of str")
            out.append(self._terms_of(list(q)))
        return out

    def _exhaustive_top_k(self, terms: list, k: int, weight_mask: Any) -> tuple:
        n = len(self._index)
        scores = self._index.score(terms).astype(self.dtype) if terms else np.zeros(n, dtype=self.dtype)
        if weight_mask is not None:
            scores = scores * weight_mask.astype(self.dtype, copy=False)
        kth = np.partition(scores, n - k)[n - k]
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)[: k - len(above)]
        cand = np.concatenate([above, tied])
        order = cand[np.lexsort((cand, -scores[cand]))]
        return order, scores[order]

    def retrieve(
        self,
        query_tokens: Any,
        corpus: Any = None,
        k: int = 10,
        sorted: bool = True,  # noqa: A002 - bm25s's name
        return_as: str = "tuple",
        show_progress: bool = True,
        leave_progress: bool = False,
        n_threads: int = 0,
        chunksize: int = 50,
        backend_selection: str = "auto",
        weight_mask: np.ndarray | None = None,
    ) -> Any:
        """The ``k`` best documents of each query, as bm25s's ``retrieve``.

        Args:
            query_tokens: token lists, token-id lists, a :class:`Tokenized` (the query
                tokenizer's vocabulary) or ``(ids, vocab)``.
            corpus: entries to return instead of indices (default: the constructor's).
            k: documents per query, an int from 0 (empty ``(n_queries, 0)`` arrays, as bm25s)
                to the number indexed.
            sorted: accepted (results are always sorted).
            return_as: ``"tuple"`` (:class:`Results`) or ``"documents"``.
            n_threads: 0 one thread, -1 every core, else that many.
            weight_mask: per-document weights multiplying the scores (0 removes a document
                from the ranking, though it may still fill up the ``k``, as in bm25s).

        Returns:
            ``Results(documents, scores)`` of shape ``(n_queries, k)``, or the documents.

        Raises:
            ValueError: ``k`` negative or larger than the corpus, unknown ``return_as``, a bad
                mask. TypeError: ``k`` is not an int.
        """
        index = self._check_indexed()
        num_docs = len(index)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"k must be a non-negative integer, got {type(k).__name__} ({k!r})")
        if k < 0:  # bm25s's message (its numba backend fails in np.zeros instead)
            raise ValueError(f"k must be a non-negative integer, but got {k}.")
        k = int(k)
        if k > num_docs:
            raise ValueError(
                f"k of {k} is larger than the number of available scores, which is {num_docs} "
                "(corpus size should be larger than top-k). Please set with a smaller k or increase "
                "the size of corpus."
            )
        if return_as not in ("tuple", "documents"):
            raise ValueError("`return_as` must be either 'tuple' or 'documents'")
        if weight_mask is not None:
            self._check_mask(weight_mask)
        queries = self._queries(query_tokens)
        threads = (os.cpu_count() or 1) if n_threads == -1 else max(1, int(n_threads))
        int_dtype = np.dtype(self.int_dtype) if self.backend == "numba" else np.dtype(np.int64)
        docs = np.zeros((len(queries), k), dtype=int_dtype)
        scores = np.zeros((len(queries), k), dtype=self.dtype)
        if not k:
            hits = []  # nothing to rank: the empty (n_queries, 0) arrays bm25s returns
        elif weight_mask is None and queries:
            hits = index.search_batch_tokenized(queries, k=k, threads=threads)
        else:
            hits = [None] * len(queries)
        # Documents without a query term score 0 (bm25s returns them to fill up k), except
        # under bm25l / bm25+ (a part for absent terms) or a mask: those are scored in full.
        absent_zero = self.method not in self.methods_requiring_nonoccurrence and weight_mask is None
        for i, (terms, hit) in enumerate(zip(queries, hits)):
            if hit is not None and len(hit[0]) == k and (not len(hit[1]) or hit[1][-1] >= 0):
                docs[i], scores[i] = hit
            elif hit is not None and absent_zero and (not len(hit[1]) or hit[1][-1] >= 0):
                n = len(hit[0])
                docs[i, :n], scores[i, :n] = hit
                docs[i, n:] = _first_not_in(hit[0], k - n)
            else:
                docs[i], scores[i] = self._exhaustive_top_k(terms, k, weight_mask)
        corpus = corpus if corpus is not None else self.corpus
        if corpus is not None:
            if isinstance(corpus, np.ndarray) and corpus.ndim == 1:
                docs = corpus[docs]
            else:
                docs = np.array([corpus[i] for i in docs.ravel().tolist()]).reshape(docs.shape)
        if return_as == "documents":
            return docs
        return Results(documents=docs, scores=scores)

    # ----- persistence

    def save(
        self,
        save_dir: str | os.PathLike,
        corpus: Iterable[Any] | None = None,
        vocab_name: str = "vocab.index.json",
        params_name: str = "params.index.json",
        corpus_name: str = "corpus.jsonl",
        show_progress: bool = True,
        leave_progress: bool = False,
        **kwargs: Any,
    ) -> None:
        """Writes the index (ragfind's file), bm25s's parameter and vocabulary files and, with a
        corpus (here or the constructor's), ``corpus.jsonl`` as bm25s writes it.

        Raises:
            TypeError: a corpus entry that JSON cannot encode.
        """
        index = self._check_indexed()
        folder = Path(save_dir)
        folder.mkdir(parents=True, exist_ok=True)
        index.save(folder / _INDEX_FILE)
        vocab_kind = "ids" if any(isinstance(t, int) for t in self.vocab_dict) else "tokens"
        (folder / vocab_name).write_text(json.dumps(self.vocab_dict, ensure_ascii=False), encoding="utf-8")
        params = {
            "k1": self.k1,
            "b": self.b,
            "delta": self.delta,
            "method": self.method,
            "idf_method": self.idf_method,
            "dtype": self.dtype,
            "int_dtype": self.int_dtype,
            "num_docs": len(index),
            "backend": self.backend,
            "ragfind": {"index": _INDEX_FILE, "vocab_kind": vocab_kind, "terms": _terms_json(self._terms)},
        }
        (folder / params_name).write_text(json.dumps(params, indent=4), encoding="utf-8")
        corpus = corpus if corpus is not None else self.corpus
        if corpus is not None:
            with open(folder / corpus_name, "w", encoding="utf-8") as f:
                for i, doc in enumerate(corpus):
                    if isinstance(doc, str):
                        doc = {"id": i, "text": doc}
                    elif not isinstance(doc, (dict, list, tuple)):
                        raise TypeError(f"corpus[{i}] is a {type(doc).__name__}; expected str, dict or list")
                    f.write(json.dumps(doc, ensure_ascii=False) + "\n")

    @classmethod
    def load(
        cls,
        save_dir: str | os.PathLike,
        vocab_name: str = "vocab.index.json",
        params_name: str = "params.index.json",
        corpus_name: str = "corpus.jsonl",
        load_corpus: bool = False,
        mmap: bool = False,
        load_vocab: bool = True,
        override_params: dict | None = None,
        show_progress: bool = True,
        leave_progress: bool = False,
        **kwargs: Any,
    ) -> BM25:
        """Opens a folder written by :meth:`save` (``mmap`` maps the postings from the file).

        Raises:
            NotImplementedError: the folder was written by bm25s itself (re-index with this module).
            FileNotFoundError: no parameter file.
        """
        folder = Path(save_dir)
        params = json.loads((folder / params_name).read_text(encoding="utf-8"))
        own = params.pop("ragfind", None)
        if own is None:
            raise NotImplementedError(
                f"{str(folder)!r} holds a bm25s index (a CSC score matrix, without term frequencies); "
                "ragfind.compat.bm25s cannot read it: index the corpus again with this module and save()"
            )
        params.update(override_params or {})
        params.update(kwargs)
        num_docs = params.pop("num_docs", None)
        params.pop("version", None)
        obj = cls(**params)
        obj._index = BM25Index.load(folder / own["index"], mmap=bool(mmap))
        if num_docs is not None and len(obj._index) != num_docs:
            raise ValueError(
                f"{str(folder)!r}: the index holds {len(obj._index)} documents, params say {num_docs}"
            )
        vocab = json.loads((folder / vocab_name).read_text(encoding="utf-8"))
        if own["vocab_kind"] == "ids":
            vocab = {int(t): i for t, i in vocab.items()}
        obj.vocab_dict = vocab if load_vocab else {}
        obj.unique_token_ids_set = set(obj.vocab_dict.values())
        obj._terms = {int(i): t for i, t in own["terms"]}
        if load_corpus and (folder / corpus_name).exists():
            with open(folder / corpus_name, encoding="utf-8") as f:
                obj.corpus = [json.loads(line) for line in f]
        return obj

    # ----- bm25s internals that have no counterpart here

    def _no_numba(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "bm25s's numba/CSC internals have no counterpart in ragfind.compat.bm25s: its C++ index "
            "needs no compilation; call index() and retrieve()"
        )

    compile = activate_numba_scorer = activate_numba_csc = _no_numba
    warmup_numba_scorer = warmup_numba_csc = load_scores = _no_numba
    build_index_from_ids = build_index_from_tokens = _no_numba


def _terms_json(terms: dict) -> list:
    return [[int(i), t] for i, t in terms.items()]


def _first_not_in(ids: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` lowest document numbers not in ``ids``."""
    taken = set(ids.tolist())
    out = []
    d = 0
    while len(out) < m:
        if d not in taken:
            out.append(d)
        d += 1
    return np.asarray(out, dtype=np.int64)
