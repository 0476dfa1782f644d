"""ragfind: fast, exact retrieval for retrieval-augmented generation.

The heavy lifting happens in the C++ module ``ragfind._core``; this package is the thin,
typed Python API around it.
"""

from __future__ import annotations

from ragfind._capabilities import capabilities, set_simd_level

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "capabilities",
    "set_simd_level",
]

# --- sparse: BM25 (issue 2) ---

# --- dense: vectors, kernels, HNSW (issue 3) ---

# --- models: ONNX encoders and cross-encoders (issue 4) ---

# --- pipeline: fusion, chunking, retriever, context, eval (issue 5) ---
from ragfind.cache import LRUCache  # noqa: E402
from ragfind.chunking import Chunk, chunk, chunk_documents, default_context  # noqa: E402
from ragfind.context import AssembledContext, assemble_context  # noqa: E402
from ragfind.fusion import fuse_scores, rrf  # noqa: E402

__all__ += [
    "rrf",
    "fuse_scores",
    "Chunk",
    "chunk",
    "chunk_documents",
    "default_context",
    "assemble_context",
    "AssembledContext",
    "LRUCache",
]

# --- late interaction and learned sparse (issue 6) ---
