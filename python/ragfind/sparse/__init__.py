"""Inverted-index retrieval: the analyzer, BM25 and learned sparse (SPLADE) vectors."""

from ragfind.sparse import fields as _fields  # noqa: F401 - registers BM25F with BM25Index
from ragfind.sparse.analyzer import ENGLISH_STOPWORDS, Analyzer
from ragfind.sparse.bm25 import METHODS, BM25Index, IndexFileError
from ragfind.sparse.feedback import RM3
from ragfind.sparse.splade_index import SparseVectorIndex
from ragfind.sparse.vectors import SparseEmbeddings

__all__ = [
    "ENGLISH_STOPWORDS",
    "METHODS",
    "Analyzer",
    "BM25Index",
    "IndexFileError",
    "RM3",
    "SparseEmbeddings",
    "SparseVectorIndex",
]
