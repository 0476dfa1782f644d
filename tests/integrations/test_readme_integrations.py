"""The README's framework block (after the quick tour it builds on) and bm25s block run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_framework_block_runs(tmp_path, monkeypatch, model_home):
    for framework in ("langchain_core", "llama_index.core", "haystack"):
        pytest.importorskip(framework)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    frameworks = [b for b in blocks if "ragfind.integrations.langchain" in b]
    assert len(frameworks) == 1
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
    exec(compile(frameworks[0], "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["docs"][0].metadata["doc_id"] == "reset"
    assert namespace["docs"][0].metadata["ranks"] == {"bm25": 1, "dense": 1}
    assert namespace["nodes"][0].node.metadata["doc_id"] == "reset"
    assert len(namespace["docs"]) == 1  # k=2 at invoke time, one passage matches the filter
    assert namespace["hits"][0].id == "reset"
    assert namespace["found"][0].meta == {"product": "XJ-2000"}


def test_readme_bm25s_block_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    (block,) = [b for b in blocks if "ragfind.compat.bm25s" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["documents"].shape == (1, 2) and namespace["documents"][0, 0] == 0
