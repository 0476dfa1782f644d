"""ragfind.CrossEncoder: a re-ranker scoring (query, passage) pairs on ONNX Runtime."""

from __future__ import annotations

import numpy as np

from ragfind.models.base import DEFAULT_MAX_BATCH_TOKENS, _ModelBase
from ragfind.models.folder import ACTIVATIONS

_RAW = ("raw", "identity", None)


def apply_activation(logits: np.ndarray, activation: str) -> np.ndarray:
    """sigmoid / softmax (over the last axis) / identity on float32 logits."""
    if activation == "sigmoid":
        return (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
    if activation == "softmax":
        z = logits - logits.max(axis=-1, keepdims=True)
        e = np.exp(z.astype(np.float64))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    if activation in ("identity", "raw"):
        return logits
    raise ValueError(f"activation={activation!r}: expected 'sigmoid', 'softmax', 'identity' or 'raw'")


class CrossEncoder(_ModelBase):
    """A cross-encoder (re-ranker) with sentence-transformers' CrossEncoder semantics.

    Pairs are encoded as ``[CLS] query [SEP] passage [SEP]`` with token type ids, truncated
    longest-first to ``max_length``, sorted by length and batched with per-batch padding.
    1-logit heads return one score per pair (sigmoid, or raw logits when the config says
    "identity"); heads with 2+ labels return softmax probabilities (n, num_labels).

    Args: as ``Encoder`` (the folder's role must be "cross-encoder").
    """

    _expected_role = ("cross-encoder",)

    @property
    def num_labels(self) -> int:
        return self.config.dim

    @property
    def activation(self) -> str:
        return self.config.activation

    def predict(
        self,
        pairs,
        batch_size: int = 32,
        activation: str | None = "config",
        show_progress: bool = False,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> np.ndarray:
        """Scores (query, passage) pairs.

        Args:
            pairs: list of 2-item tuples/lists of non-empty str; one pair alone returns a scalar row.
            batch_size: at most this many pairs per ONNX Runtime call.
            activation: "config" (the model's: sigmoid for 1 logit unless the config says
                identity, softmax for 2+ labels), "sigmoid", "softmax", or "raw" (logits).
            show_progress: tqdm progress bar over batches.
            max_batch_tokens: at most this many padded tokens per call (long pairs go in smaller
                batches, which keep the activations in cache; a longer pair runs alone).
        Returns:
            float32 array (n,) for 1-label models, (n, num_labels) otherwise.
        Raises:
            TypeError: pairs is not a list of (str, str).
            ValueError: empty list, empty or over-long text, bad batch_size or activation.
        """
        single = isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(p, str) for p in pairs)
        if single:
            pairs = [pairs]
        if not isinstance(pairs, (list, tuple)):
            raise TypeError(f"pairs must be a list of (query, passage) tuples, got {type(pairs).__name__}")
        if len(pairs) == 0:
            raise ValueError("pairs is an empty list; pass at least one (query, passage) pair")
        self._check_batch_size(batch_size, max_batch_tokens)
        act = self.config.activation if activation == "config" else activation
        if act not in ACTIVATIONS + ("raw",):
            raise ValueError(
                f"activation={activation!r}: expected 'config', 'sigmoid', 'softmax', 'identity' or 'raw'"
            )
        for i, p in enumerate(pairs):
            if not isinstance(p, (list, tuple)) or len(p) != 2:
                raise TypeError(f"pairs[{i}] must be a (query, passage) pair of str, got {p!r:.80}")
            self._check_text(p[0], f"pairs[{i}][0]")
            self._check_text(p[1], f"pairs[{i}][1]")
        logits = np.empty((len(pairs), self.dim), dtype=np.float32)
        for idx, out, _ in self._run_batches(
            [(q, d) for q, d in pairs], batch_size, max_batch_tokens, show_progress, "rerank"
        ):
            logits[idx] = out
        scores = apply_activation(logits, act)
        if self.dim == 1:
            scores = scores[:, 0]
        return scores[0] if single else scores

    def rank(
        self,
        query: str,
        texts,
        top_k: int | None = None,
        batch_size: int = 32,
        return_documents: bool = False,
        activation: str | None = "config",
    ) -> list[dict]:
        """Re-ranks ``texts`` for ``query``, best first (sentence-transformers' ``CrossEncoder.rank``).

        Args:
            query: the query.
            texts: candidate passages (list of str).
            top_k: keep only the best k (None: all).
            return_documents: add the passage under "text".
            activation: as ``predict``; for 2+-label models the score is the last label's
                probability (the "relevant" class of the usual binary re-rankers).
        Returns:
            list of {"corpus_id": index into texts, "score": float[, "text": str]}, sorted by
            descending score (ties keep input order).
        Raises:
            ValueError / TypeError: as ``predict``; top_k not a positive int.
        """
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
            raise ValueError(f"top_k={top_k!r}: expected a positive int or None")
        if not isinstance(texts, (list, tuple)):
            raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
        self._check_text(query, "query")
        scores = self.predict([(query, t) for t in texts], batch_size=batch_size, activation=activation)
        if scores.ndim == 2:
            scores = scores[:, -1]
        order = np.argsort(-scores, kind="stable")
        if top_k is not None:
            order = order[:top_k]
        out = []
        for i in order:
            row = {"corpus_id": int(i), "score": float(scores[i])}
            if return_documents:
                row["text"] = texts[i]
            out.append(row)
        return out
