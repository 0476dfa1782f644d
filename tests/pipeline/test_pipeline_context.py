"""ragfind.assemble_context and ragfind.LRUCache."""

from __future__ import annotations

import threading

import pytest

import ragfind
from ragfind.pipeline.cache import freeze
from ragfind.pipeline.chunking import load_tokenizer
from ragfind.pipeline.context import DEFAULT_INSTRUCTION

TOK = load_tokenizer()


def n_tokens(s):
    return len(TOK.encode(s, add_special_tokens=False).ids)


def passages(n=6, words=20):
    out = []
    for i in range(n):
        text = f"Passage {i} says " + " ".join(f"fact{i}_{w}" for w in range(words)) + "."
        out.append(
            {
                "id": i,
                "doc_id": f"doc{i}",
                "title": f"Title {i}",
                "source": f"https://x/{i}",
                "text": text,
                "score": 10.0 - i,
                "start": 0,
                "end": len(text),
            }
        )
    return out


def test_relevance_order_labels_and_instruction():
    res = passages(3)
    ctx = ragfind.assemble_context(res, budget_tokens=10_000, question="What?")
    assert [p.doc_id for p in ctx.passages] == ["doc0", "doc1", "doc2"]
    assert [p.n for p in ctx.passages] == [1, 2, 3]
    assert ctx.prompt.startswith(DEFAULT_INSTRUCTION)
    assert "only" in DEFAULT_INSTRUCTION and "does not contain the answer" in DEFAULT_INSTRUCTION
    assert "[1] Source: https://x/0 | Title 0\n" + res[0]["text"] in ctx.prompt
    assert ctx.prompt.index("[1]") < ctx.prompt.index("[2]") < ctx.prompt.index("[3]")
    assert ctx.prompt.rstrip().endswith("Question: What?\nAnswer:")
    assert ctx.n_tokens == n_tokens(ctx.prompt) and ctx.dropped == () and str(ctx) == ctx.prompt


def test_edges_order_puts_best_at_both_ends():
    ctx = ragfind.assemble_context(passages(5), budget_tokens=10_000, order="edges")
    assert [p.doc_id for p in ctx.passages] == ["doc0", "doc2", "doc4", "doc3", "doc1"]
    assert [p.n for p in ctx.passages] == [1, 2, 3, 4, 5]


def test_budget_drops_whole_passages():
    res = passages(6)
    full = ragfind.assemble_context(res, budget_tokens=10_000)
    budget = full.n_tokens - 30  # room for all but about one passage
    ctx = ragfind.assemble_context(res, budget_tokens=budget)
    assert ctx.n_tokens <= budget and ctx.n_tokens == n_tokens(ctx.prompt)
    assert len(ctx.passages) == 5 and ctx.dropped == (5,)
    for p in ctx.passages:  # never cut
        assert p.text == res[int(p.doc_id[3:])]["text"]


def test_big_passage_skipped_smaller_later_one_kept():
    res = passages(3, words=5)
    res[0] = dict(res[0], text="Huge. " + "word " * 400 + "end.", end=None)
    ctx = ragfind.assemble_context(res, budget_tokens=200)
    assert [p.doc_id for p in ctx.passages] == ["doc1", "doc2"] and ctx.dropped == (0,)


def test_budget_smaller_than_one_passage_is_an_error():
    res = passages(2, words=100)
    with pytest.raises(ValueError, match="fits no passage"):
        ragfind.assemble_context(res, budget_tokens=80)
    with pytest.raises(ValueError, match="below the .* tokens of the instruction"):
        ragfind.assemble_context(res, budget_tokens=5)


def test_overlapping_chunks_of_one_document_merge():
    doc = "Alpha one. Beta two. Gamma three. Delta four. Epsilon five."
    a = {"id": 10, "doc_id": "d", "text": doc[0:33], "start": 0, "end": 33, "score": 3.0}  # Alpha..Gamma
    b = {"id": 11, "doc_id": "d", "text": doc[21:46], "start": 21, "end": 46, "score": 2.0}  # Gamma..Delta
    c = {"id": 12, "doc_id": "d", "text": doc[11:20], "start": 11, "end": 20, "score": 1.5}  # inside a
    other = {"id": 13, "doc_id": "e", "text": doc[21:46], "start": 21, "end": 46, "score": 1.0}  # other doc
    ctx = ragfind.assemble_context([a, b, c, other], budget_tokens=10_000)
    assert len(ctx.passages) == 2
    merged = ctx.passages[0]
    assert merged.text == doc[0:46] and (merged.start, merged.end) == (0, 46)
    assert merged.ids == (10, 11) and set(ctx.merged) == {11, 12}
    assert ctx.passages[1].doc_id == "e"
    assert ctx.prompt.count("Gamma three.") == 2  # once per document, not once per chunk
    # Same without offsets: exact duplicates / contained text still fold.
    ctx = ragfind.assemble_context(
        [dict(a, start=None, end=None), dict(c, start=None, end=None)], budget_tokens=10_000
    )
    assert len(ctx.passages) == 1 and ctx.merged == (12,)
    ctx = ragfind.assemble_context([a, b], budget_tokens=10_000, dedupe=False)
    assert len(ctx.passages) == 2


def test_merged_passage_over_budget_falls_back_to_best_piece():
    doc = " ".join(f"Sentence {i} here." for i in range(60))
    a = {"id": 1, "doc_id": "d", "text": doc[:200], "start": 0, "end": 200, "score": 2.0}
    b = {"id": 2, "doc_id": "d", "text": doc[150:], "start": 150, "end": len(doc), "score": 1.0}
    budget = ragfind.assemble_context([a], budget_tokens=10_000).n_tokens + 5
    ctx = ragfind.assemble_context([a, b], budget_tokens=budget)
    assert [p.ids for p in ctx.passages] == [(1,)] and ctx.dropped == (2,)


def test_custom_templates():
    ctx = ragfind.assemble_context(
        passages(2),
        budget_tokens=10_000,
        template="Q: {question}\n{context}",
        passage_template="<{n}|{doc_id}> {text}",
        question="why",
    )
    assert ctx.prompt.startswith("Q: why\n<1|doc0> Passage 0")
    with pytest.raises(ValueError, match="lacks a {context} field"):
        ragfind.assemble_context(passages(1), budget_tokens=100, template="{question}")


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"budget_tokens": 0}, ValueError, "budget_tokens = 0"),
        ({"budget_tokens": 10.5}, ValueError, "budget_tokens = 10.5"),
        ({"budget_tokens": 100, "order": "middle"}, ValueError, "order = 'middle'"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ragfind.assemble_context(passages(1), **kwargs)


def test_bad_results():
    with pytest.raises(TypeError, match=r"results\[0\] has no str 'text'"):
        ragfind.assemble_context([{"id": 1}], budget_tokens=100)
    ctx = ragfind.assemble_context([], budget_tokens=100)  # nothing retrieved: instruction only
    assert ctx.passages == () and DEFAULT_INSTRUCTION in ctx.prompt


# --- LRUCache ---------------------------------------------------------------------------------


def test_lru_cache_eviction_and_counters():
    c = ragfind.LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1  # a is now most recent
    c.put("c", 3)  # evicts b
    assert c.get("b") is None and c.get("c") == 3 and "a" in c
    assert (c.hits, c.misses) == (2, 1)
    s = c.stats()
    assert s["entries"] == 2 and s["hit_rate"] == pytest.approx(2 / 3)
    c.clear()
    assert len(c) == 0 and c.stats()["invalidations"] == 1
    c.reset_stats()
    assert (c.hits, c.misses) == (0, 0)


def test_lru_cache_put_again_refreshes_the_entry():
    c = ragfind.LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)  # a again: its new value, and now the most recent
    c.put("c", 3)  # evicts b, the least recent
    assert c.get("a") == 10 and c.get("b") is None and c.get("c") == 3 and len(c) == 2


def test_lru_cache_get_or_compute_and_disabled():
    c = ragfind.LRUCache(4)
    calls = []
    v, hit = c.get_or_compute("k", lambda: calls.append(1) or 42)
    assert (v, hit) == (42, False)
    v, hit = c.get_or_compute("k", lambda: calls.append(1) or 0)
    assert (v, hit) == (42, True) and calls == [1]
    off = ragfind.LRUCache(0)
    off.put("k", 1)
    assert off.get("k") is None and len(off) == 0
    with pytest.raises(ValueError, match="max_entries = -1"):
        ragfind.LRUCache(-1)


def test_lru_cache_resize_keeps_the_most_recent():
    c = ragfind.LRUCache(4)
    for key in "abcd":
        c.put(key, key.upper())
    c.get("a")  # a is now the most recent: b, c go first
    c.resize(2)
    assert c.max_entries == 2 and len(c) == 2 and c.get("d") == "D" and c.get("a") == "A"
    c.resize(3)
    c.put("e", "E")
    assert len(c) == 3
    c.resize(0)  # empties and disables
    c.put("f", "F")
    assert len(c) == 0 and c.get("f") is None
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_entries"):
            c.resize(bad)
    assert c.max_entries == 0


def test_lru_cache_threads():
    c = ragfind.LRUCache(64)

    def work(t):
        for i in range(2000):
            k = (t * 7 + i) % 100
            if c.get(k) is None:
                c.put(k, k * 2)
            assert len(c) <= 64

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.hits + c.misses == 12_000 and len(c) <= 64
    assert all(c.get(k) in (None, k * 2) for k in range(100))


def test_freeze_filters_is_order_independent():
    assert freeze({"a": 1, "b": [1, 2]}) == freeze({"b": [1, 2], "a": 1})
    assert freeze({"a": 1}) != freeze({"a": "1"}) and freeze(None) is None
