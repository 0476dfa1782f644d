"""The README's LangChain / LlamaIndex block runs as written, after the quick tour it builds on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_framework_block_runs(tmp_path, monkeypatch, model_home):
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
