"""Context assembly: retrieved passages -> the prompt a generator reads, under a token budget.

What the literature and practice agree on: label every passage with its source so answers can
cite; tell the model to answer only from the context and to say so when the answer is missing;
put the best passage first, or best passages at both ends because models attend least to the
middle of long contexts (Liu et al. 2023, "Lost in the Middle"); never cut a passage (a cut
mid-sentence invites confabulation) but drop whole ones past the budget; and do not spend the
budget twice on overlapping chunks of one document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragfind.pipeline.chunking import load_tokenizer

__all__ = [
    "assemble_context",
    "AssembledContext",
    "DEFAULT_INSTRUCTION",
    "DEFAULT_TEMPLATE",
    "DEFAULT_PASSAGE_TEMPLATE",
]

DEFAULT_INSTRUCTION = (
    "Answer the question using only the provided context. If the context does not contain the "
    "answer, say that you don't know. Cite the sources you use by their numbers, like [1]."
)

DEFAULT_TEMPLATE = "{instruction}\n\nContext:\n\n{context}\n\nQuestion: {question}\nAnswer:"
DEFAULT_PASSAGE_TEMPLATE = "[{n}] Source: {source}{title_part}\n{text}"
_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class ContextPassage:
    """A passage as placed in the prompt (possibly several overlapping chunks merged)."""

    n: int  # its label, 1-based, in prompt order
    doc_id: str
    source: str
    title: str
    text: str
    score: float
    start: int | None
    end: int | None
    ids: tuple  # the chunk ids merged into it, best first
    n_tokens: int


@dataclass(frozen=True)
class AssembledContext:
    """The assembled prompt.

    Attributes:
        prompt: the full text for the generator (instruction, labelled passages, question).
        passages: the passages in prompt order (their ``n`` is their label).
        dropped: ids of the input passages left out (over budget), in relevance order.
        merged: ids of the input passages folded into an overlapping one of the same document.
        n_tokens: tokens in ``prompt`` under the counting tokenizer.
        budget_tokens: the budget it was assembled under.
    """

    prompt: str
    passages: tuple
    dropped: tuple
    merged: tuple
    n_tokens: int
    budget_tokens: int

    def __str__(self) -> str:
        return self.prompt


@dataclass
class _Item:
    ids: list
    doc_id: str
    source: str
    title: str
    text: str
    score: float
    start: int | None
    end: int | None
    parts: list = field(default_factory=list)  # (ids, text, start, end) of the original pieces


def _get(p: Any, name: str, default: Any = None) -> Any:
    if isinstance(p, Mapping):
        return p.get(name, default)
    return getattr(p, name, default)


def _normalise(results: Sequence[Any]) -> list[_Item]:
    items = []
    for i, p in enumerate(results):
        text = _get(p, "text")
        if not isinstance(text, str):
            raise TypeError(
                f"results[{i}] has no str 'text' (got {type(text).__name__}); expected passages "
                "from Retriever.search or dicts with 'text'"
            )
        doc_id = _get(p, "doc_id")
        pid = _get(p, "id", i)
        doc_id = str(doc_id) if doc_id is not None else f"#{pid}"
        source = _get(p, "source") or doc_id
        start, end = _get(p, "start"), _get(p, "end")
        if start is not None and end is not None and end - start != len(text):
            start = end = None  # offsets that do not describe this text cannot be used to merge
        score = _get(p, "score", 0.0)
        items.append(
            _Item(
                [pid],
                doc_id,
                str(source),
                _get(p, "title") or "",
                text,
                float(score) if score is not None else 0.0,
                start,
                end,
                [([pid], text, start, end)],
            )
        )
    return items


def _dedupe(items: list[_Item]) -> tuple[list[_Item], list]:
    """Fold each passage into an earlier (better) one of the same document when they overlap."""
    kept: list[_Item] = []
    merged_ids: list = []
    for it in items:
        host = None
        for k in kept:
            if k.doc_id != it.doc_id:
                continue
            if it.start is not None and k.start is not None and it.start <= k.end and k.start <= it.end:
                host = k
                break
            if it.text == k.text or it.text in k.text:
                host = k
                break
        if host is None:
            kept.append(it)
            continue
        merged_ids.extend(it.ids)
        if host.start is not None and it.start is not None:
            if it.start >= host.start and it.end <= host.end:
                continue  # contained: nothing new
            # Union of two touching/overlapping spans of one document text.
            if it.start < host.start:
                host.text = it.text[: host.start - it.start] + host.text
                host.start = it.start
            if it.end > host.end:
                host.text = host.text + it.text[len(it.text) - (it.end - host.end) :]
                host.end = it.end
            host.ids.extend(it.ids)
            host.parts.append((list(it.ids), it.text, it.start, it.end))
    return kept, merged_ids


def _order(items: list, order: str) -> list:
    if order == "relevance":
        return list(items)
    # "edges": ranks 1, 3, 5, ... from the front and 2, 4, 6, ... from the back, so the best two
    # passages sit at the two ends and the weakest in the middle.
    front = items[0::2]
    back = items[1::2]
    return front + back[::-1]


def _render_passage(template: str, n: int, it: _Item) -> str:
    return template.format(
        n=n,
        source=it.source,
        title=it.title,
        doc_id=it.doc_id,
        text=it.text,
        score=it.score,
        title_part=f" | {it.title}" if it.title else "",
    )


def assemble_context(
    results: Sequence[Any],
    budget_tokens: int,
    order: str = "relevance",
    template: str = DEFAULT_TEMPLATE,
    passage_template: str = DEFAULT_PASSAGE_TEMPLATE,
    question: str = "",
    instruction: str = DEFAULT_INSTRUCTION,
    tokenizer: Any = None,
    dedupe: bool = True,
) -> AssembledContext:
    """Assemble retrieved passages into a prompt that fits ``budget_tokens``.

    Args:
        results: passages best first: :class:`ragfind.Passage` objects (``Retriever.search``)
            or dicts with ``text`` and optionally ``id``, ``doc_id``, ``title``, ``source``,
            ``score``, ``start``/``end`` (character offsets in the document).
        budget_tokens: the most tokens the whole prompt may use, counted with ``tokenizer``.
        order: ``"relevance"`` (best first) or ``"edges"`` (best at both ends, weakest in the
            middle, against "lost in the middle").
        template: the prompt, with ``{instruction}``, ``{context}`` and ``{question}`` fields.
        passage_template: one passage, with ``{n}`` (its label), ``{source}``, ``{title}``,
            ``{title_part}``, ``{doc_id}``, ``{text}``, ``{score}``.
        question: the question, placed in ``{question}``.
        instruction: the instruction (by default: answer only from the context, say so when it
            does not hold the answer, cite sources).
        tokenizer: what counts tokens (see :func:`ragfind.pipeline.chunking.load_tokenizer`; use your
            generator's tokenizer for exact budgets). Default: the MiniLM WordPiece tokenizer.
        dedupe: fold overlapping chunks of the same document (by offsets, or text containment)
            into the better-ranked one, merging their text.

    Returns:
        An :class:`AssembledContext`. Passages are never cut: those that do not fit are dropped
        whole (a smaller later passage may still fit).

    Raises:
        ValueError: ``budget_tokens`` not a positive int, an unknown ``order``, a template
            missing ``{context}``, a budget below the prompt without passages, or a budget that
            no single passage fits into.
        TypeError: a result without a str ``text``.
    """
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens <= 0:
        raise ValueError(f"budget_tokens = {budget_tokens!r}; expected a positive int")
    if order not in ("relevance", "edges"):
        raise ValueError(f"order = {order!r}; expected 'relevance' or 'edges'")
    if "{context}" not in template:
        raise ValueError(
            "template lacks a {context} field; expected one (and optionally {instruction}, {question})"
        )
    tok = load_tokenizer(tokenizer)

    def count(s: str) -> int:
        return len(tok.encode(s, add_special_tokens=False).ids)

    def count_many(texts: list) -> list:
        return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)] if texts else []

    def render(chosen: list[_Item]) -> str:
        blocks = [_render_passage(passage_template, n, it) for n, it in enumerate(chosen, 1)]
        return template.format(instruction=instruction, context=_SEPARATOR.join(blocks), question=question)

    items = _normalise(results)
    merged: list = []
    if dedupe:
        items, merged = _dedupe(items)
    overhead = count(render([]))
    if overhead > budget_tokens:
        raise ValueError(
            f"budget_tokens = {budget_tokens} is below the {overhead} tokens of the instruction, "
            "template and question alone; raise the budget or shorten the template"
        )
    # Greedy in relevance order: take each passage whole if it still fits, else drop it whole.
    # A passage costs its rendered block plus a separator (labels are at most a few digits).
    # All blocks are counted in one batch, labelled with their relevance rank: the label of the
    # final position has at most as many digits, and the +1 slack covers the separator join.
    separator = count(_SEPARATOR)
    block_tokens = count_many([_render_passage(passage_template, n, it) for n, it in enumerate(items, 1)])
    chosen: list[_Item] = []
    dropped: list = []
    used = overhead
    for it, tokens in zip(items, block_tokens):
        cost = tokens + separator + 1
        if used + cost <= budget_tokens:
            chosen.append(it)
            used += cost
            continue
        # A merged passage that no longer fits: its best original piece alone may.
        if len(it.parts) > 1:
            ids, text, start, end = it.parts[0]
            alone = _Item(
                list(ids), it.doc_id, it.source, it.title, text, it.score, start, end, [it.parts[0]]
            )
            cost = count(_render_passage(passage_template, len(chosen) + 1, alone)) + separator + 1
            if used + cost <= budget_tokens:
                chosen.append(alone)
                used += cost
                dropped.extend(x for p in it.parts[1:] for x in p[0])
                continue
        dropped.extend(it.ids)
    if items and not chosen:
        smallest = min(block_tokens)
        raise ValueError(
            f"budget_tokens = {budget_tokens} fits no passage: the prompt needs {overhead} tokens "
            f"and the smallest passage {smallest} more; raise the budget or chunk smaller"
        )
    placed = _order(chosen, order)
    prompt = render(placed)
    n_tokens = count(prompt)
    # Tokenizers that merge across the joins may count a little differently from the sum of the
    # parts: drop the weakest passage until the real count fits.
    while n_tokens > budget_tokens and len(chosen) > 1:
        weakest = chosen.pop()
        dropped.extend(weakest.ids)
        placed = _order(chosen, order)
        prompt = render(placed)
        n_tokens = count(prompt)
    text_tokens = count_many([it.text for it in placed])
    out = tuple(
        ContextPassage(
            n, it.doc_id, it.source, it.title, it.text, it.score, it.start, it.end, tuple(it.ids), tokens
        )
        for n, (it, tokens) in enumerate(zip(placed, text_tokens), 1)
    )
    return AssembledContext(prompt, out, tuple(dropped), tuple(merged), n_tokens, budget_tokens)
