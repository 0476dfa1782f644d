"""Deterministic hashing encoders, stand-ins for a bi-encoder and a ColBERT model (no model
files, no torch), shared by the pipeline and service tests and the service test's subprocess."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from ragfind.pipeline.chunking import load_tokenizer


class HashEncoder:
    """Bag-of-words hashed into `dim` buckets, L2-normalised: similar words -> similar vectors."""

    def __init__(self, dim=64, salt="a"):
        self.dim = dim
        self.salt = salt
        self.fingerprint = f"hash-{dim}-{salt}"
        self.max_length = 128
        self.tokenizer = load_tokenizer()
        self.calls = 0

    def _vec(self, text):
        v = np.zeros(self.dim, np.float32)
        for w in re.findall(r"\w+", text.lower()):
            h = int(hashlib.md5((self.salt + w).encode()).hexdigest(), 16)
            v[h % self.dim] += 1.0 if (h >> 64) & 1 else -1.0
        if not v.any():
            v[0] = 1.0
        return v / np.linalg.norm(v)

    def encode(self, texts, batch_size=32, show_progress=False, normalize=True):
        self.calls += len(texts)
        return np.stack([self._vec(t) for t in texts])

    def encode_query(self, text):
        self.calls += 1
        return self._vec(text)


class WordColbert:
    """A stand-in ColBERT: one hashed unit vector per word (no model)."""

    dim = 16

    def _words(self, text):
        return re.findall(r"\w+", text.lower())

    def _mat(self, text):
        rows = []
        for w in self._words(text) or ["empty"]:
            seed = int(hashlib.md5(w.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows)

    def encode_documents(self, texts):
        return [self._mat(t) for t in texts]

    def encode_query(self, text):
        return self._mat(text)

    def tokenize_query(self, text):
        return self._words(text) or ["empty"]

    def tokenize_document(self, text):
        return self._words(text) or ["empty"]
