"""The stages a Retriever runs: first-stage retrievers whose ranked lists are fused, and
re-rankers of the fused head. One file per stage; ``base.py`` holds the protocols."""

from ragfind.pipeline.stages.base import RerankStage, RetrievalStage
from ragfind.pipeline.stages.bm25 import BM25Stage
from ragfind.pipeline.stages.dense import DenseStage
from ragfind.pipeline.stages.late import LateInteractionStage
from ragfind.pipeline.stages.splade import SpladeStage

__all__ = ["RetrievalStage", "RerankStage", "BM25Stage", "DenseStage", "SpladeStage", "LateInteractionStage"]
