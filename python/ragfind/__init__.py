"""ragfind: fast, exact retrieval for retrieval-augmented generation.

The heavy lifting happens in the C++ module ``ragfind._core``; this package is the thin,
typed Python API around it.
"""

from __future__ import annotations

from ragfind._capabilities import capabilities, set_simd_level
from ragfind.errors import DuplicateIdError, IdKindError, UnknownIdError
from ragfind.ids import IdFilter
from ragfind.index import Contribution, Explanation, Index

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "capabilities",
    "Contribution",
    "DuplicateIdError",
    "Explanation",
    "IdFilter",
    "IdKindError",
    "Index",
    "UnknownIdError",
    "DenseIndex",
    "dense",
    "set_simd_level",
]

# --- sparse: BM25 ---
from ragfind.sparse import RM3, Analyzer, BM25Index, IndexFileError  # noqa: E402

__all__ += [
    "Analyzer",
    "BM25Index",
    "IndexFileError",
    "RM3",
]

# --- dense: vectors, kernels, HNSW ---
from ragfind import dense  # noqa: E402
from ragfind.dense import DenseIndex  # noqa: E402

# --- models: ONNX encoders and cross-encoders ---
from ragfind.models import (  # noqa: E402
    CrossEncoder,
    Encoder,
    ModelFolderError,
    ModelMismatchError,
    StaticEncoder,
    check_fingerprint,
    distill_static,
    export,
    fit_query_encoder,
    load_model,
)

__all__ += [
    "CrossEncoder",
    "Encoder",
    "ModelFolderError",
    "ModelMismatchError",
    "StaticEncoder",
    "check_fingerprint",
    "distill_static",
    "export",
    "fit_query_encoder",
    "load_model",
]

# --- pipeline: fusion, chunking, retriever, context, eval ---
from ragfind.fusion import convex, fit_convex_weight, fuse_scores, rrf  # noqa: E402
from ragfind.pipeline.cache import LRUCache  # noqa: E402
from ragfind.pipeline.chunking import Chunk, chunk, chunk_documents, default_context  # noqa: E402
from ragfind.pipeline.context import AssembledContext, assemble_context  # noqa: E402
from ragfind.pipeline.retriever import Passage, Retriever, RetrieverFolderError, SearchResult  # noqa: E402
from ragfind.pipeline.stages import BM25Stage, DenseStage, LateInteractionStage, SpladeStage  # noqa: E402

__all__ += [
    "rrf",
    "fuse_scores",
    "convex",
    "fit_convex_weight",
    "Chunk",
    "chunk",
    "chunk_documents",
    "default_context",
    "assemble_context",
    "AssembledContext",
    "LRUCache",
    "Retriever",
    "Passage",
    "SearchResult",
    "RetrieverFolderError",
    "BM25Stage",
    "DenseStage",
    "SpladeStage",
    "LateInteractionStage",
]

# --- late interaction and learned sparse ---
from ragfind.late import LateInteractionIndex, MaxSimExplanation, maxsim  # noqa: E402
from ragfind.models.colbert import ColbertEncoder, export_colbert  # noqa: E402
from ragfind.models.splade import SpladeEncoder  # noqa: E402
from ragfind.sparse import SparseEmbeddings, SparseVectorIndex  # noqa: E402

__all__ += [
    "maxsim",
    "LateInteractionIndex",
    "MaxSimExplanation",
    "ColbertEncoder",
    "export_colbert",
    "SpladeEncoder",
    "SparseEmbeddings",
    "SparseVectorIndex",
]
