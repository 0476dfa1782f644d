"""(Imported by the test modules; a conftest.py here would shadow tests/conftest.py.)
A small in-memory Retriever (BM25 only, no model) for the framework retriever tests."""

from __future__ import annotations

import pytest

import ragfind

DOCS = [
    {
        "id": "cats",
        "title": "Cats",
        "text": "Cats purr and hunt mice.",
        "metadata": {"lang": "en", "year": 2020},
    },
    {"id": "dogs", "title": "Dogs", "text": "Dogs bark and fetch sticks.", "metadata": {"lang": "en"}},
    {
        "id": "chats",
        "title": "Chats",
        "text": "Les chats ronronnent et chassent.",
        "metadata": {"lang": "fr"},
    },
    {"id": "mice", "title": "Mice", "text": "Mice fear cats that hunt mice.", "metadata": {"lang": "en"}},
]


@pytest.fixture(scope="module", name="retriever")
def retriever_fixture():
    r = ragfind.Retriever(encoder=None, chunk_size=None)
    r.add_documents(DOCS)
    yield r
    r.close()
