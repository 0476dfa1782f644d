"""Late interaction (ColBERT-style MaxSim): the functional kernel and a packed token index."""

from ragfind.late.index import LateInteractionIndex
from ragfind.late.maxsim import MaxSimExplanation, TokenMatch, maxsim

__all__ = ["maxsim", "LateInteractionIndex", "MaxSimExplanation", "TokenMatch"]
