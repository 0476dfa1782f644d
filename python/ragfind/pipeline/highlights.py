"""Why a passage matched: character offsets of the query's terms and phrases in its text, and a
:func:`snippet` that marks them.

A token of the text is highlighted when its analyzed form (the index term it becomes) equals an
analyzed query term, so the surface form is marked ("Defibrillators" for the query
"defibrillator"; the ``user`` of ``getUserById`` for "user"). A quoted phrase marks the span
from its first to its last word for each place it matches (with its slop, the same matching as
:meth:`ragfind.BM25Index.search`); its words elsewhere are not marked.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from ragfind.sparse.analyzer import resolve_analyzer
from ragfind.sparse.query import parse_query, phrase_terms, positioned_terms  # the last two re-exported

__all__ = [
    "LazyHighlighter",
    "highlight",
    "match_terms",
    "phrase_matches",
    "phrase_terms",
    "positioned_terms",
    "query_terms",
    "snippet",
]


def phrase_matches(terms: Sequence[str], positions: dict, slop: int) -> list[tuple[int, list[int]]]:
    """The matches of a phrase in one text: per position ``a`` of its first term with a match,
    ``(cost, chosen positions)`` of the cheapest one.

    ``positions`` maps a term to its sorted positions. A match picks a distinct position
    ``p_i`` per phrase word ``i`` (the first at ``a``); its cost is
    ``max(p_i - i) - min(p_i - i)`` (Lucene's sloppy match length: a gap of one word costs 1,
    a swap of two words 2) and it counts when the cost is at most ``slop``.
    """
    n = len(terms)
    lists = [positions.get(t, []) for t in terms]
    if n == 0 or any(not lst for lst in lists):
        return []
    out = []
    for a in lists[0]:
        cands = {a}
        for i in range(1, n):
            lst = lists[i]
            for p in lst[bisect.bisect_left(lst, a - slop + i) : bisect.bisect_right(lst, a + i)]:
                cands.add(p - i)
        best = None
        for lo in sorted(cands):
            used: dict[str, set] = {terms[0]: {a}}
            chosen = [a]
            hi = a
            ok = True
            for i in range(1, n):
                lst = lists[i]
                taken = used.setdefault(terms[i], set())
                j = bisect.bisect_left(lst, lo + i)
                while j < len(lst) and lst[j] in taken:
                    j += 1
                if j == len(lst) or lst[j] - i > lo + slop:
                    ok = False
                    break
                taken.add(lst[j])
                chosen.append(lst[j])
                hi = max(hi, lst[j] - i)
            if ok and hi - lo <= slop and (best is None or hi - lo < best[0]):
                best = (hi - lo, chosen)
        if best is not None:
            out.append(best)
    return out


def highlight(text: str, query: str | Sequence[str], analyzer: Any = None) -> list[tuple[int, int]]:
    """Sorted, non-overlapping ``(start, end)`` character offsets in ``text`` where ``query``
    (a query string, or several phrasings) matched, by ``analyzer`` (default: ``Analyzer()``)."""
    analyzer = resolve_analyzer(analyzer)
    words, phrases = query_terms(query, analyzer)
    return match_terms(text, words, phrases, analyzer)


def query_terms(query: str | Sequence[str], analyzer: Any) -> tuple[set[str], list[tuple[list[str], int]]]:
    """``(words, phrases)`` of a query (or several phrasings) as index terms: the words to mark
    anywhere, and each quoted phrase of two or more words with its slop."""
    queries = [query] if isinstance(query, str) else list(query)
    words: set[str] = set()
    phrases: list[tuple[list[str], int]] = []
    for q in queries:
        parsed = parse_query(q)
        words.update(analyzer.analyze(parsed.text))
        for ph in parsed.phrases:
            terms = phrase_terms(analyzer, ph.text)
            if len(terms) == 1:
                words.add(terms[0])
            elif terms:
                phrases.append((terms, ph.slop))
    return words, phrases


def match_terms(text: str, words: set, phrases: list, analyzer: Any) -> list[tuple[int, int]]:
    """:func:`highlight` for query terms already analyzed by :func:`query_terms`."""
    if not words and not phrases:
        return []
    if not phrases and _native(analyzer):
        return _match_native(analyzer, [text], words)[0]
    toks = positioned_terms(analyzer, text)
    spans = [(b, e) for t, b, e, _ in toks if t in words]
    if phrases:
        positions: dict[str, list[int]] = {}
        where: dict[tuple[str, int], tuple[int, int]] = {}
        for t, b, e, p in toks:
            if (t, p) not in where:
                positions.setdefault(t, []).append(p)
                where[(t, p)] = (b, e)
        for terms, slop in phrases:
            for _, chosen in phrase_matches(terms, positions, slop):
                locs = [where[(t, p)] for t, p in zip(terms, chosen)]
                spans.append((min(b for b, _ in locs), max(e for _, e in locs)))
    return _merge(spans)


class LazyHighlighter:
    """The highlights of one result list, computed when first asked for: the query is analyzed
    once for the whole list, and without phrases every text of ``texts`` is matched in one
    native call on the first request."""

    __slots__ = ("queries", "analyzer", "texts", "_terms", "_done")

    #: A passage's ``highlights`` may hold the highlighter itself: called with the passage's
    #: text on first read (one object for a whole list, none per passage).
    of_passage_text = True

    def __init__(self, queries: Sequence[str], analyzer: Any, texts: Sequence[str] = ()) -> None:
        self.queries = queries
        self.analyzer = analyzer
        self.texts = list(texts) if texts else []
        self._terms: tuple | None = None
        self._done: dict | None = None

    def __call__(self, text: str) -> list[tuple[int, int]]:
        terms = self._terms
        if terms is None:
            terms = self._terms = query_terms(list(self.queries), self.analyzer)
        words, phrases = terms
        if words and not phrases and _native(self.analyzer):
            if self._done is None or text not in self._done:
                batch = list(dict.fromkeys([*self.texts, text]))
                found = _match_native(self.analyzer, batch, words)
                self._done = {**(self._done or {}), **dict(zip(batch, found))}
                self.texts = []
            return list(self._done[text])
        return match_terms(text, words, phrases, self.analyzer)


def _native(analyzer: Any) -> bool:
    """Whether the core analyzer matches terms itself (a custom Python tokenizer does not)."""
    return getattr(analyzer, "_tokenizer", None) is None


def _match_native(analyzer: Any, texts: list, words: set) -> list[list[tuple[int, int]]]:
    """Per text, the merged spans of its tokens whose term is in ``words``, in one native call."""
    return [_merge(spans) for spans in analyzer._core.match_offsets(texts, sorted(words))]


def _merge(spans: list) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for b, e in sorted(spans):
        if out and b <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((b, e))
    return out


def snippet(
    passage: Any,
    width: int = 200,
    *,
    before: str = "**",
    after: str = "**",
    ellipsis: str = "…",
) -> str:
    """A window of about ``width`` characters of ``passage.text`` around its densest run of
    ``passage.highlights``, each highlight wrapped in ``before`` / ``after``; ``ellipsis``
    marks a cut. The window starts at a word boundary where it can and never cuts a highlight
    (a highlight longer than ``width`` is shown whole). ``passage`` is a
    :class:`~ragfind.pipeline.results.Passage` or any object with ``text`` and ``highlights``.

    Raises:
        ValueError: ``width`` < 1.
    """
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width: expected an int >= 1, got {width!r}")
    text: str = passage.text
    spans = sorted((int(b), int(e)) for b, e in getattr(passage, "highlights", ()) or ())
    spans = [(b, e) for b, e in spans if 0 <= b < e <= len(text)]
    if len(text) <= width:
        lo, hi = 0, len(text)
    elif not spans:
        lo, hi = 0, width
    else:
        # The window [s, s + width) starting at a highlight that holds the most highlights.
        best_i, best_n = 0, 0
        for i, (b, _) in enumerate(spans):
            n = bisect.bisect_right([e for _, e in spans], b + width) - i
            if n > best_n:
                best_i, best_n = i, n
        first = spans[best_i][0]
        last = max(e for b, e in spans[best_i : best_i + best_n])
        slack = max(0, width - (last - first))
        lo = max(0, first - slack // 2)
        hi = min(len(text), max(last, lo + width))
        lo = max(0, min(lo, hi - width)) if hi - lo < width else lo
        # Move the start back to a word boundary (not past the first highlight).
        while 0 < lo < first and not text[lo - 1].isspace():
            lo -= 1
            if first - lo > width:
                break
    parts = [ellipsis] if lo > 0 else []
    cur = lo
    for b, e in spans:
        if e <= lo or b >= hi:
            continue
        b, e = max(b, lo), min(e, hi)
        if b < cur:
            continue
        parts += [text[cur:b], before, text[b:e], after]
        cur = e
    parts.append(text[cur:hi])
    if hi < len(text):
        parts.append(ellipsis)
    return "".join(parts)
