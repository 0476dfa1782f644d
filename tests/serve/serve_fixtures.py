"""Fixtures of the service tests: a small saved hybrid retriever (BM25 + a hashing encoder, so
no model is loaded) and a BM25-only one the ``ragfind serve`` subprocess can load by itself.

Each test module imports them (a conftest.py here would shadow tests/conftest.py for the
`from conftest import ...` of other test folders)."""

from __future__ import annotations

import pytest

import ragfind
from hash_encoders import HashEncoder

DOCS = [
    {
        "id": "cats",
        "title": "Cats",
        "text": "Cats are small domesticated felines. They purr and hunt mice. Cats sleep a lot.",
        "metadata": {"lang": "en", "year": 2020},
    },
    {
        "id": "dogs",
        "title": "Dogs",
        "text": "Dogs are loyal domesticated canines. They bark and fetch sticks for their owners.",
        "metadata": {"lang": "en", "year": 2021},
    },
    {
        "id": "chats",
        "title": "Chats",
        "text": "Les chats sont des felins domestiques. Ils ronronnent.",
        "metadata": {"lang": "fr", "year": 2019},
    },
    {
        "id": "rust",
        "title": "Rust",
        "text": "Rust is a systems programming language focused on memory safety and speed.",
        "metadata": {"lang": "en", "year": 2015},
    },
    {
        "id": "python",
        "title": "Python",
        "text": "Python is a programming language loved for readability. Python has many libraries.",
        "metadata": {"lang": "en", "year": 1991},
    },
    {
        "id": "mice",
        "title": "Mice",
        "text": "Mice are small rodents. Cats hunt mice, and mice avoid cats whenever they can.",
        "metadata": {"lang": "en", "year": 2022},
    },
]


@pytest.fixture(name="encoder")
def encoder_fixture():
    return HashEncoder()


@pytest.fixture(name="hybrid_folder")
def hybrid_folder_fixture(tmp_path, encoder):
    r = ragfind.Retriever(encoder=encoder, chunk_size=None, cache_size=64)
    r.add_documents(DOCS)
    path = tmp_path / "hybrid"
    r.save(path)
    r.close()
    return path


@pytest.fixture(name="bm25_folder")
def bm25_folder_fixture(tmp_path):
    r = ragfind.Retriever(encoder=None, chunk_size=None)
    r.add_documents(DOCS)
    path = tmp_path / "bm25"
    r.save(path)
    r.close()
    return path
