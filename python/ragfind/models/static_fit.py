"""Fitting a static query encoder into a document encoder's space (ridge regression, numpy CG).

A table E [vocab, dim] is fitted so that the mean of a text's token rows matches the document
encoder's embedding of that text, on the user's own chunks and on pseudo-queries cut from them
(random spans of a few words), with a ridge pull toward a prior table E0 (the distilled token
embeddings, already in that space) so tokens seen rarely or never keep a sensible vector:

    min_E  sum_t || mean_{j in t} E_j - s_t y_t ||^2  +  lam * || E - E0 ||^2

``s_t`` = the norm of the prior's mean for text t: the fit turns directions and leaves the
scales (which cosine ignores) where the prior has them. Only the columns of tokens that occur
are unknowns; the normal equations are solved by conjugate gradients on the sparse
bag-of-tokens matrix, one gather and one segment sum per product, all in numpy.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from ragfind.models.registry import cache_dir
from ragfind.models.static import StaticEncoder, _encode_plain, distill_static, is_static_folder

# Nonzeros per gather: the [nnz, dim] float32 temporary stays in cache (24 MB at dim 384);
# 100,000 (150 MB) ran 1.5-2.5x slower.
_CHUNK_NNZ = 16_384


class _Bag:
    """A row-normalised bag-of-tokens matrix over the occurring tokens, in CSR and CSC order."""

    def __init__(self, rows: list[np.ndarray], vocab: int) -> None:
        lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        flat = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)
        row_of = np.repeat(np.arange(len(rows)), lengths)
        # Merge repeated tokens of a row: key = row * vocab + token.
        keys, counts = np.unique(row_of * vocab + flat, return_counts=True)
        self.row = (keys // vocab).astype(np.int64)
        tok = keys % vocab
        self.tokens, self.col = np.unique(tok, return_inverse=True)
        self.val = (counts / lengths[self.row]).astype(np.float32)
        self.n_rows = len(rows)
        self.n_cols = len(self.tokens)
        self.indptr = np.searchsorted(self.row, np.arange(self.n_rows + 1))
        order = np.argsort(self.col, kind="stable")
        self.t_row = self.row[order]
        self.t_col = self.col[order]
        self.t_val = self.val[order]
        self.t_indptr = np.searchsorted(self.t_col, np.arange(self.n_cols + 1))

    @staticmethod
    def _segment_sum(idx, val, indptr, X, n_out):
        out = np.zeros((n_out, X.shape[1]), np.float32)
        nnz = len(idx)
        start = 0
        while start < nnz:
            # cut at a segment boundary at or past start + _CHUNK_NNZ
            seg0 = int(np.searchsorted(indptr, start, side="right")) - 1
            seg1 = int(np.searchsorted(indptr, min(nnz, start + _CHUNK_NNZ), side="left"))
            seg1 = max(seg1, seg0 + 1)
            stop = int(indptr[min(seg1, n_out)])
            g = np.take(X, idx[start:stop], axis=0)
            g *= val[start:stop, None]
            lo = indptr[seg0:seg1]
            nonempty = indptr[seg0 + 1 : seg1 + 1] > lo
            sums = np.add.reduceat(g, lo - start, axis=0) if len(lo) else g[:0]
            out[seg0:seg1][nonempty] = sums[nonempty]
            start = stop
        return out

    def matvec(self, X: np.ndarray) -> np.ndarray:
        """A @ X: [n_cols, d] -> [n_rows, d]."""
        return self._segment_sum(self.col, self.val, self.indptr, X, self.n_rows)

    def rmatvec(self, R: np.ndarray) -> np.ndarray:
        """A.T @ R: [n_rows, d] -> [n_cols, d]."""
        return self._segment_sum(self.t_row, self.t_val, self.t_indptr, R, self.n_cols)


def pseudo_queries(
    texts: list[str], per_text: int = 2, span: tuple[int, int] = (5, 12), seed: int = 0
) -> list[str]:
    """Random spans of ``span`` words (inclusive bounds) cut from each text, ``per_text`` each
    (a text shorter than the span gives itself once)."""
    rng = np.random.default_rng(seed)
    lo, hi = span
    out = []
    for t in texts:
        words = t.split()
        if not words:
            continue
        if len(words) <= lo:
            out.append(" ".join(words))
            continue
        for _ in range(per_text):
            n = int(rng.integers(lo, min(hi, len(words)) + 1))
            s = int(rng.integers(0, len(words) - n + 1))
            out.append(" ".join(words[s : s + n]))
    return out


def fit_table(
    prior: np.ndarray,
    token_rows: list[np.ndarray],
    targets: np.ndarray,
    *,
    l2: float = 0.02,
    iterations: int = 10,
    tol: float = 1e-3,
    show_progress: bool = False,
) -> np.ndarray:
    """The ridge solve: a new table whose row means over ``token_rows`` match ``targets``.

    Args:
        prior: float [vocab, d], the table to pull toward (its rows for unseen tokens are kept).
        token_rows: per text, the token ids it is embedded from.
        targets: float [len(token_rows), d], the embeddings to match (directions; each is
            rescaled to the prior's mean norm for its text).
        l2: ridge strength, relative to the mean diagonal of A.T A over occurring tokens.
        iterations: at most this many conjugate-gradient steps.
        tol: stop when every column's residual norm fell below tol times its start.
    Returns:
        float32 [vocab, d].
    """
    prior = np.asarray(prior, np.float32)
    targets = np.asarray(targets, np.float32)
    if targets.shape != (len(token_rows), prior.shape[1]):
        raise ValueError(
            f"targets have shape {targets.shape}; expected ({len(token_rows)}, {prior.shape[1]})"
        )
    keep = [i for i, r in enumerate(token_rows) if len(r)]
    bag = _Bag([np.asarray(token_rows[i]) for i in keep], prior.shape[0])
    table = prior.copy()
    if bag.n_cols == 0:
        return table
    Y = targets[keep]
    E0 = prior[bag.tokens]
    base = bag.matvec(E0)
    scale = np.linalg.norm(base, axis=1, keepdims=True)
    ynorm = np.linalg.norm(Y, axis=1, keepdims=True)
    Y = Y * (scale / np.where(ynorm > 0, ynorm, 1.0))
    diag = np.bincount(bag.col, weights=bag.val.astype(np.float64) ** 2, minlength=bag.n_cols)
    lam = np.float32(l2 * float(diag.mean()))
    # Solve (A.T A + lam I) D = A.T (Y - A E0) for D = E - E0, every column at once, by
    # conjugate gradients preconditioned with the diagonal: token frequencies span orders of
    # magnitude, and the diagonal alone brings the steps needed from dozens to a handful.
    inv_diag = (1.0 / (diag + lam)).astype(np.float32)[:, None]
    D = np.zeros_like(E0)
    R = bag.rmatvec(Y - base)
    Z = R * inv_diag
    P = Z.copy()
    rz = np.einsum("ij,ij->j", R, Z)
    rz0 = rz.copy()
    steps = range(iterations)
    if show_progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="fit query encoder", unit="step")
    for _ in steps:
        AP = bag.rmatvec(bag.matvec(P)) + lam * P
        alpha = rz / np.maximum(np.einsum("ij,ij->j", P, AP), 1e-30)
        D += P * alpha
        R -= AP * alpha
        Z = R * inv_diag
        rz_new = np.einsum("ij,ij->j", R, Z)
        if np.all(rz_new <= (tol * tol) * rz0):
            break
        P = Z + P * (rz_new / np.maximum(rz, 1e-30))
        rz = rz_new
    table[bag.tokens] = E0 + D
    return table


def fit_query_encoder(
    texts: list[str],
    embeddings: np.ndarray,
    document_encoder: Any,
    folder: str | os.PathLike | None = None,
    *,
    prior: Any = None,
    pseudo_per_text: int = 2,
    pseudo_span: tuple[int, int] = (5, 12),
    l2: float = 0.02,
    iterations: int = 10,
    seed: int = 0,
    show_progress: bool = False,
    overwrite: bool = False,
) -> Any:
    """Fits a static query encoder whose vectors land in ``document_encoder``'s space.

    Args:
        texts: the indexed chunk texts (as embedded).
        embeddings: their document-encoder vectors, float [len(texts), dim].
        document_encoder: the encoder that embedded them (embeds the pseudo-queries; its
            fingerprint becomes the model's ``target_fingerprint``).
        folder: where to write the fitted model (None: kept in memory; ``save`` it later).
        prior: the table to start from and pull toward: a :class:`StaticEncoder` in the
            document encoder's space (an earlier fit, or ``distill_static(encoder, dim=None)``),
            or None for the document encoder's distilled token table (built once, cached).
        pseudo_per_text: pseudo-queries cut from each text (0: none).
        pseudo_span: their length in words (inclusive bounds).
        l2: ridge strength (relative to the data; larger stays nearer the prior). 0.02 was
            chosen on SciFact's train queries: dense nDCG@10 0.626, against 0.620 at 0.1 and
            0.582 at 1.0 (bench/static.md).
        iterations: conjugate-gradient steps at most.
        seed: the pseudo-query sampler's seed.
        show_progress: progress bars (pseudo-query encoding, the solve).
        overwrite: replace an existing folder.
    Returns:
        the fitted :class:`StaticEncoder` (loaded back from ``folder`` when given);
        ``.fit_seconds`` holds the time taken.
    Raises:
        ValueError: mismatched texts and embeddings, a prior of another dimension or space.
    """
    t0 = time.perf_counter()
    embeddings = np.asarray(embeddings, np.float32)
    if embeddings.ndim != 2 or embeddings.shape[0] != len(texts):
        raise ValueError(f"embeddings have shape {embeddings.shape}; expected ({len(texts)}, dim)")
    if embeddings.shape[1] != document_encoder.dim:
        raise ValueError(
            f"embeddings have {embeddings.shape[1]} columns; "
            f"the document encoder's dim is {document_encoder.dim}"
        )
    if prior is None:
        prior = distilled_prior(document_encoder, show_progress=show_progress)
    extra = prior.config.get("ragfind") if isinstance(prior.config.get("ragfind"), dict) else {}
    # In the space: fitted into it, or distilled from the encoder without PCA.
    in_space = prior.target_fingerprint == document_encoder.fingerprint or (
        extra.get("source_fingerprint") == document_encoder.fingerprint and not extra.get("pca")
    )
    if prior.dim != document_encoder.dim or not in_space:
        raise ValueError(
            f"the prior {prior!r} is not in the space of the document encoder "
            f"({document_encoder.fingerprint}); pass one fitted into it or distilled from it "
            "with dim=None, or None for the distilled one"
        )
    queries = pseudo_queries(list(texts), pseudo_per_text, pseudo_span, seed) if pseudo_per_text else []
    all_texts = list(texts) + queries
    targets = embeddings
    if queries:
        q_vecs = document_encoder.encode(queries, batch_size=64, show_progress=show_progress)
        targets = np.concatenate([embeddings, q_vecs.astype(np.float32)])
    rows = []
    window = max(1, int(getattr(document_encoder, "max_length", 512)) - 2)
    for s in range(0, len(all_texts), 4096):
        encs = _encode_plain(prior.tokenizer, [t or " " for t in all_texts[s : s + 4096]])
        rows += [np.asarray(e.ids[:window], np.int64) for e in encs]
    table = fit_table(prior.table, rows, targets, l2=l2, iterations=iterations, show_progress=show_progress)
    config = {
        k: v for k, v in prior.config.items() if k not in ("ragfind", "hidden_dim", "normalize", "apply_pca")
    }
    config["max_length"] = prior.max_length
    extra = {
        "target_fingerprint": document_encoder.fingerprint,
        "fitted_on": {"texts": len(texts), "pseudo_queries": len(queries), "l2": l2},
    }
    enc = StaticEncoder.from_table(
        table, prior._tokenizer_json, {**config, "normalize": True, "ragfind": extra}
    )
    if folder is not None:
        enc.save(folder, overwrite=overwrite)
        enc = StaticEncoder(folder)
    enc.fit_seconds = time.perf_counter() - t0
    return enc


def distilled_prior(document_encoder: Any, show_progress: bool = False) -> Any:
    """The document encoder's token table in its own space (``distill_static(dim=None)``),
    built once into the model cache (beside the default models) and reused."""
    dst = cache_dir() / f"static-prior-{document_encoder.fingerprint}"
    if not is_static_folder(dst):
        try:
            distill_static(document_encoder, dst, dim=None, show_progress=show_progress)
        except FileExistsError:
            pass  # another process published it first
    return StaticEncoder(dst)
