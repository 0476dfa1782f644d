"""bm25s 0.3.16's tokenization (``bm25s.tokenize``, ``bm25s.tokenization.Tokenizer``), the same
splitting, stopwords, stemming and vocabulary ids, so that token ids built here equal bm25s's.

Stopwords by name: ``"english"`` / ``"en"`` / True (bm25s's 33 words) only; for another
language pass the list of words (bm25s's other lists are not copied here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, Union

__all__ = [
    "STOPWORDS_EN",
    "Tokenized",
    "Tokenizer",
    "convert_tokenized_to_string_list",
    "tokenize",
]

#: bm25s's default English stopwords.
STOPWORDS_EN = (
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
)  # fmt: skip

_DEFAULT_PATTERN = r"(?u)\b\w\w+\b"


class Tokenized(NamedTuple):
    """``ids``: one list of token ids per text; ``vocab``: token -> id (as bm25s's)."""

    ids: list
    vocab: dict


def _infer_stopwords(stopwords: Any) -> Any:
    if stopwords in ("english", "en", True):
        return STOPWORDS_EN
    if stopwords is None or stopwords is False:
        return []
    if isinstance(stopwords, str):
        raise NotImplementedError(
            f"stopwords = {stopwords!r}: ragfind.compat.bm25s names only 'english'; "
            "pass that language's stopwords as a list of words instead"
        )
    return stopwords


def _progress(it: Iterable, show: bool, **kw: Any) -> Iterable:
    if not show:
        return it
    from tqdm.auto import tqdm  # import cost: only a progress bar needs it

    return tqdm(it, **kw)


def convert_tokenized_to_string_list(tokenized: Tokenized) -> list:
    """The token strings of each text of ``tokenized``."""
    reverse = {v: k for k, v in tokenized.vocab.items()}
    return [[reverse[t] for t in doc] for doc in tokenized.ids]


def tokenize(
    texts: Union[str, list],  # noqa: UP007 - the signature mirrors bm25s
    lower: bool = True,
    token_pattern: str = _DEFAULT_PATTERN,
    stopwords: Any = "english",
    stemmer: Callable | None = None,
    return_ids: bool = True,
    show_progress: bool = True,
    leave: bool = False,
    allow_empty: bool = True,
) -> Any:
    """bm25s's ``tokenize``: a :class:`Tokenized` (``return_ids=True``) or token lists.

    Splits with ``token_pattern`` (scikit-learn's), lower-cases, drops ``stopwords`` and
    stems with ``stemmer`` (an object with ``stemWords``, e.g. PyStemmer, or a callable on a
    list of words); ids are numbered as bm25s numbers them.
    """
    if isinstance(texts, str):
        texts = [texts]
    split_fn = re.compile(token_pattern).findall
    stopwords_set = set(_infer_stopwords(stopwords))
    corpus_ids: list = []
    token_to_index: dict = {}
    for text in _progress(texts, show_progress, desc="Split strings", leave=leave):
        if lower:
            text = text.lower()
        splitted = split_fn(text)
        # bm25s pads with "" when allow_empty is False (sic), and so do we.
        if allow_empty is False and len(splitted) == 0:
            splitted = [""]
        doc_ids = []
        for token in splitted:
            if token in stopwords_set:
                continue
            tid = token_to_index.get(token)
            if tid is None:
                tid = token_to_index[token] = len(token_to_index)
            doc_ids.append(tid)
        corpus_ids.append(doc_ids)
    unique_tokens = list(token_to_index)
    if stemmer is not None:
        if hasattr(stemmer, "stemWords"):
            stemmer_fn = stemmer.stemWords
        elif callable(stemmer):
            stemmer_fn = stemmer
        else:
            raise ValueError("stemmer must have a `stemWords` method, or be callable (e.g. PyStemmer)")
        stems = stemmer_fn(unique_tokens)
        # A set's order, as bm25s numbers its stems (same process, same order).
        vocab_dict = {token: i for i, token in enumerate(set(stems))}
        to_stem = [vocab_dict[s] for s in stems]
        corpus_ids = [[to_stem[t] for t in doc] for doc in corpus_ids]
    else:
        vocab_dict = token_to_index
    if return_ids:
        return Tokenized(ids=corpus_ids, vocab=vocab_dict)
    reverse = list(vocab_dict) if stemmer is None else {v: k for k, v in vocab_dict.items()}
    return [[reverse[t] for t in doc] for doc in corpus_ids]


class Tokenizer:
    """bm25s's ``Tokenizer``: a vocabulary kept across calls (``tokenize``, ``streaming_tokenize``,
    ``decode``, ``get_vocab_dict``, ``save_vocab``/``load_vocab``, ``save_stopwords``/``load_stopwords``).

    Args:
        lower: lower-case texts first.
        splitter: a regex (findall) or a callable text -> words.
        stopwords: ``"english"`` or a list of words (None/False: none).
        stemmer: a callable word -> stem, or an object with ``stemWord`` (PyStemmer).
    """

    def __init__(
        self,
        lower: bool = True,
        splitter: Union[str, Callable] = _DEFAULT_PATTERN,  # noqa: UP007
        stopwords: Any = "english",
        stemmer: Any = None,
    ) -> None:
        self.lower = lower
        if isinstance(splitter, str):
            splitter = re.compile(splitter).findall
        if not callable(splitter):
            raise ValueError("splitter must be a callable or a regex pattern.")
        if hasattr(stemmer, "stemWord"):
            stemmer = stemmer.stemWord
        if stemmer is not None and not callable(stemmer):
            raise ValueError("stemmer must be callable or have a `stemWord` method.")
        self.stopwords = _infer_stopwords(stopwords)
        self.splitter = splitter
        self.stemmer = stemmer
        self.reset_vocab()

    def reset_vocab(self) -> None:
        """Forgets the vocabulary."""
        self.word_to_stem: dict = {}
        self.stem_to_sid: dict = {}
        self.word_to_id: dict = {}

    def save_vocab(self, save_dir: Any, vocab_name: str = "vocab.tokenizer.json") -> None:
        path = Path(save_dir) / vocab_name
        path.parent.mkdir(parents=True, exist_ok=True)
        d = {
            "word_to_stem": self.word_to_stem,
            "stem_to_sid": self.stem_to_sid,
            "word_to_id": self.word_to_id,
        }
        path.write_text(json.dumps(d, ensure_ascii=False), encoding="utf-8")

    def load_vocab(self, save_dir: Any, vocab_name: str = "vocab.tokenizer.json") -> None:
        d = json.loads((Path(save_dir) / vocab_name).read_text(encoding="utf-8"))
        self.word_to_stem = d["word_to_stem"]
        self.stem_to_sid = d["stem_to_sid"]
        self.word_to_id = d["word_to_id"]

    def save_stopwords(self, save_dir: Any, stopwords_name: str = "stopwords.tokenizer.json") -> None:
        path = Path(save_dir) / stopwords_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(list(self.stopwords)), encoding="utf-8")

    def load_stopwords(self, save_dir: Any, stopwords_name: str = "stopwords.tokenizer.json") -> None:
        self.stopwords = json.loads((Path(save_dir) / stopwords_name).read_text(encoding="utf-8"))

    def streaming_tokenize(
        self,
        texts: Iterable[str],
        update_vocab: Union[bool, str] = True,  # noqa: UP007
        allow_empty: bool = True,
    ) -> Iterator[list]:
        """Yields the token ids of each text (``update_vocab``: True, False or ``"never"``)."""
        stopwords_set = set(self.stopwords) if self.stopwords is not None else None
        stemmer = self.stemmer
        if allow_empty is True and update_vocab is True and "" not in self.word_to_id:
            idx = max(self.word_to_id.values(), default=-1) + 1
            self.word_to_id[""] = idx
            if stemmer is not None:
                self.word_to_stem.setdefault("", "")
                self.stem_to_sid.setdefault("", idx)
        for text in texts:
            if self.lower:
                text = text.lower()
            words = list(self.splitter(text))
            if allow_empty is True and not words:
                words = [""]
            doc_ids = []
            for word in words:
                wid = self.word_to_id.get(word)
                if wid is not None:
                    doc_ids.append(wid)
                    continue
                if stopwords_set is not None and word in stopwords_set:
                    continue
                if stemmer is not None:
                    stem = self.word_to_stem.get(word)
                    if stem is None:
                        stem = self.word_to_stem[word] = stemmer(word)
                    if update_vocab != "never" and stem in self.stem_to_sid:
                        sid = self.stem_to_sid[stem]
                        self.word_to_id[word] = sid
                        doc_ids.append(sid)
                    elif update_vocab is True:
                        sid = len(self.stem_to_sid)
                        self.stem_to_sid[stem] = sid
                        self.word_to_id[word] = sid
                        doc_ids.append(sid)
                elif update_vocab is True:
                    wid = self.word_to_id[word] = len(self.word_to_id)
                    doc_ids.append(wid)
            if not doc_ids and allow_empty is True and "" in self.word_to_id:
                doc_ids = [self.word_to_id[""]]
            yield doc_ids

    def tokenize(
        self,
        texts: list,
        update_vocab: Union[bool, str] = "if_empty",  # noqa: UP007
        leave_progress: bool = False,
        show_progress: bool = True,
        length: int | None = None,
        return_as: str = "ids",
        allow_empty: bool = True,
    ) -> Any:
        """Token ids (``return_as="ids"``), strings (``"string"``), a :class:`Tokenized`
        (``"tuple"``) or a generator (``"stream"``); ``update_vocab`` also ``"if_empty"``."""
        if return_as not in ("tuple", "string", "ids", "stream"):
            raise ValueError("return_as must be either 'tuple', 'string', 'ids', or 'stream'.")
        if update_vocab not in (True, False, "if_empty", "never"):
            raise ValueError("update_vocab must be either True, False, 'if_empty', or 'never'.")
        if update_vocab == "if_empty":
            update_vocab = len(self.word_to_id) == 0
        stream = self.streaming_tokenize(texts=texts, update_vocab=update_vocab, allow_empty=allow_empty)
        if return_as == "stream":
            return stream
        total = len(texts) if length is None else length
        ids = list(_progress(stream, show_progress, desc="Tokenize texts", leave=leave_progress, total=total))
        if return_as == "ids":
            return ids
        if return_as == "string":
            return self.decode(ids)
        return self.to_tokenized_tuple(ids)

    def get_vocab_dict(self) -> dict:
        """stem -> id with a stemmer, word -> id without."""
        return self.word_to_id if self.stemmer is None else self.stem_to_sid

    def to_tokenized_tuple(self, docs: list) -> Tokenized:
        return Tokenized(ids=docs, vocab=self.get_vocab_dict())

    def decode(self, docs: list) -> list:
        """Token ids back to (stemmed) words."""
        reverse = {v: k for k, v in self.get_vocab_dict().items()}
        return [[reverse[t] for t in doc] for doc in docs]
