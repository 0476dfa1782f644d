"""The BM25 query string: plain words and quoted phrases, with Lucene's slop.

Grammar (never raises; every string is a query):

- ``"new york"`` is a phrase: its words must occur at adjacent positions, in order;
- ``"new york"~N`` (``N`` decimal digits right after the closing quote) is a sloppy phrase
  (Lucene's slop: a match may need up to ``N`` position moves; a swap of two words costs 2);
  slop is capped at :data:`MAX_SLOP`; a ``~`` not followed by digits is an ordinary character;
- everything outside quotes is plain text, analyzed as usual; phrases and plain words mix
  (``"new york" pizza``: documents with the phrase or the word, both scoring);
- ``\\"`` is a literal quote and ``\\\\`` a literal backslash (inside or outside phrases);
- an opening quote with no closing quote is literal: the rest of the string is plain text.

:func:`phrase_terms` turns a phrase's words into the index terms BM25 matches by position
(the highlighter marks matches with the same positions: :func:`positioned_terms`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_SLOP", "ParsedQuery", "Phrase", "parse_query", "phrase_terms", "positioned_terms"]

#: Slops above this are read as this (no document is longer than 2^31 positions).
MAX_SLOP = 2**31 - 1


@dataclass(frozen=True)
class Phrase:
    """A quoted phrase: its raw text (escapes resolved) and its slop."""

    text: str
    slop: int = 0


@dataclass(frozen=True)
class ParsedQuery:
    """Plain text (everything outside phrases, escapes resolved) and the phrases in order."""

    text: str
    phrases: tuple[Phrase, ...] = ()


# The commonest query with a phrase: the phrase alone, no escapes, at most 10 slop digits.
_ONE_PHRASE = re.compile(r'"([^"\\]*)"(?:~([0-9]{1,10}))?')


def parse_query(query: str) -> ParsedQuery:
    """Splits ``query`` into plain text and phrases (see the module docstring).

    Raises:
        TypeError: ``query`` is not str.
    """
    if not isinstance(query, str):
        raise TypeError(f"query: expected str, got {type(query).__name__}")
    if '"' not in query:
        return ParsedQuery(query)
    m = _ONE_PHRASE.fullmatch(query)
    if m is not None:  # what _parse gives for it, without the loop
        digits = m.group(2)
        return ParsedQuery(" ", (Phrase(m.group(1), min(int(digits), MAX_SLOP) if digits else 0),))
    return _parse(query)


def _parse(query: str) -> ParsedQuery:
    """parse_query of a str holding a quote: the general loop."""
    plain: list[str] = []
    phrases: list[Phrase] = []
    n = len(query)
    i = 0
    while i < n:
        c = query[i]
        if c == "\\" and i + 1 < n and query[i + 1] in '"\\':
            plain.append(query[i + 1])
            i += 2
            continue
        if c != '"':
            plain.append(c)
            i += 1
            continue
        # A phrase: find the closing quote (skipping escapes).
        j = i + 1
        buf: list[str] = []
        while j < n and query[j] != '"':
            if query[j] == "\\" and j + 1 < n and query[j + 1] in '"\\':
                buf.append(query[j + 1])
                j += 2
            else:
                buf.append(query[j])
                j += 1
        if j >= n:  # unbalanced: the quote and the rest are plain text
            plain.append(" ")
            plain.extend(buf)
            break
        j += 1
        slop = 0
        if j + 1 < n and query[j] == "~" and query[j + 1].isascii() and query[j + 1].isdigit():
            k = j + 1
            while k < n and query[k].isascii() and query[k].isdigit():
                k += 1
            digits = query[j + 1 : k]
            slop = MAX_SLOP if len(digits) > 10 else min(int(digits), MAX_SLOP)
            j = k
        phrases.append(Phrase("".join(buf), slop))
        plain.append(" ")  # a phrase separates the words around it
        i = j
    return ParsedQuery("".join(plain), tuple(phrases))


def positioned_terms(analyzer: Any, text: str) -> list[tuple[str, int, int, int]]:
    """``(term, start, end, position)`` per index term of ``text``: positions count the words
    (stopwords removed leave no gap); identifier parts and compounds share the position of the
    word they come from."""
    core = analyzer._core
    if getattr(analyzer, "_tokenizer", None) is None:
        located = core.analyze_offsets(text)
    else:
        located = [(t, b, e, True) for t, b, e in analyzer.analyze_with_offsets(text)]
    out = []
    pos = -1
    for term, b, e, counted in located:
        if counted or pos < 0:
            pos += 1
        out.append((term, b, e, pos))
    return out


def phrase_terms(analyzer: Any, text: str) -> list[str]:
    """The words of a phrase as index terms, one per position (identifier parts dropped: the
    document side keeps them at their word's position, so they still match there)."""
    if getattr(analyzer, "_tokenizer", None) is None:
        located = analyzer._core.analyze_offsets(text)
        if all(counted for *_, counted in located):  # one position per term: all of them
            return [term for term, *_ in located]
    seen: dict[int, str] = {}
    for term, _, _, pos in positioned_terms(analyzer, text):
        seen.setdefault(pos, term)
    return [seen[p] for p in sorted(seen)]
