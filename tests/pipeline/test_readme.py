"""The README's quick tour runs as written (so the README cannot drift from the API)."""

from __future__ import annotations

import re

from conftest import REPO_ROOT


def test_readme_tour_runs(tmp_path, monkeypatch, model_home):
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks, "README has no python block"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
    assert list(namespace["bm25_ids"]) == ["a"]
    assert namespace["dense_ids"][0] == "a"
    assert namespace["result"].passages[0].doc_id == "reset"
    assert namespace["top"].ranks == {"bm25": 1, "dense": 1} and "fused" in namespace["top"].scores
    assert "XJ-2000" in str(namespace["prompt"])
