"""ragfind.Encoder: a bi-encoder (sentence embedding model) on ONNX Runtime."""

from __future__ import annotations

import numpy as np

from ragfind.models.base import DEFAULT_MAX_BATCH_TOKENS, _ModelBase


def pool(token_embeddings: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """Pools [batch, seq, dim] token vectors to [batch, dim] ("mean", "cls", "last", "max").

    Padding positions (mask 0) never contribute; "last" takes the last non-padding token.
    """
    if mode == "mean":
        m = mask[:, :, None].astype(np.float32)
        summed = np.einsum("bsd,bs->bd", token_embeddings, mask.astype(np.float32))
        return summed / np.maximum(m.sum(axis=1), 1e-9)
    if mode == "cls":
        return token_embeddings[:, 0, :]
    if mode == "last":
        last = np.maximum(mask.sum(axis=1) - 1, 0)
        return token_embeddings[np.arange(token_embeddings.shape[0]), last, :]
    if mode == "max":
        masked = np.where(mask[:, :, None] > 0, token_embeddings, -np.inf)
        return masked.max(axis=1)
    raise ValueError(f"pooling={mode!r}: expected 'mean', 'cls', 'last' or 'max'")


def l2_normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


class Encoder(_ModelBase):
    """A bi-encoder: texts in, float32 embeddings out, on one reused ONNX Runtime session.

    Args:
        path_or_name: a model folder (``ragfind export`` output) or a default model name
            (``"all-MiniLM-L6-v2"``, ``"all-MiniLM-L6-v2-int8"``; built offline on first use).
        threads: ONNX Runtime intra-op threads (None: every core this process may use).
        graph_optimization: "disable", "basic", "extended" or "all".
        providers: ONNX Runtime execution providers (default CPU).
        max_text_chars: texts longer than this are refused (None: no limit; the model only reads
            the first ``max_length`` word pieces anyway).
        verify: check the SHA-256 of the folder's files against its config at load.
        allow_spinning: let idle ONNX Runtime pool threads spin-wait between calls (ONNX
            Runtime's own default, which can save a thread wake-up per operator on dedicated idle
            cores). The default, False, makes them sleep: 2-5x faster for a short query when the
            CPU is shared or oversubscribed, and no CPU burnt after each call.
    Raises:
        ModelFolderError: missing/corrupt files, invalid config, or a model whose inputs/outputs
            do not match the config; also when the folder is not a bi-encoder.

    The session is shared by every call and ONNX Runtime's ``run`` is thread-safe, so one Encoder
    can serve concurrent requests.
    """

    _expected_role = ("bi-encoder",)

    @property
    def pooling(self) -> str:
        return self.config.pooling

    def encode(
        self,
        texts,
        batch_size: int = 32,
        normalize: bool = True,
        show_progress: bool = False,
        *,
        is_query: bool = False,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> np.ndarray:
        """Embeds texts.

        Texts are tokenized (truncated at ``max_length`` word pieces), sorted by length, cut into
        batches of at most ``batch_size`` texts and ``max_batch_tokens`` padded tokens (long texts
        go in smaller batches, which keep the activations in cache), padded to their longest
        item, run, pooled per the config, and returned in the input order.

        Args:
            texts: a list (or tuple) of non-empty str; a single str returns a 1-D vector.
            batch_size: at most this many texts per ONNX Runtime call.
            normalize: L2-normalise the vectors (the default model was trained for cosine).
            show_progress: tqdm progress bar over batches.
            is_query: prepend the config's query prefix instead of its document prefix (e5/bge).
            max_batch_tokens: at most this many padded tokens per call (a single text longer
                than it still runs alone).
        Returns:
            float32 array (len(texts), dim), or (dim,) for a single str.
        Raises:
            TypeError: texts is not a list of str (the message names the offending index).
            ValueError: empty list, empty text, a text over max_text_chars, bad batch_size.
        """
        if isinstance(texts, str):
            one = self.encode(
                [texts],
                batch_size,
                normalize,
                show_progress,
                is_query=is_query,
                max_batch_tokens=max_batch_tokens,
            )
            return one[0]
        if not isinstance(texts, (list, tuple)):
            raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
        if len(texts) == 0:
            raise ValueError("texts is an empty list; pass at least one text")
        self._check_batch_size(batch_size, max_batch_tokens)
        for i, t in enumerate(texts):
            self._check_text(t, f"texts[{i}]")
        prefix = self.config.query_prefix if is_query else self.config.document_prefix
        if prefix:
            texts = [prefix + t for t in texts]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for idx, tokens, mask in self._run_batches(
            list(texts), batch_size, max_batch_tokens, show_progress, "encode"
        ):
            out[idx] = pool(tokens, mask, self.config.pooling)
        return l2_normalize(out) if normalize else out

    def encode_queries(
        self, texts, batch_size: int = 32, normalize: bool = True, show_progress: bool = False
    ) -> np.ndarray:
        """``encode(texts, ..., is_query=True)``: embeds queries with the query prefix."""
        return self.encode(texts, batch_size, normalize, show_progress, is_query=True)

    def encode_query(self, text: str, normalize: bool = True) -> np.ndarray:
        """Embeds one query (query prefix applied) on the low-latency path: no sorting or batching.

        Returns:
            float32 vector (dim,).
        Raises:
            TypeError / ValueError: as ``encode`` for a bad text.
        """
        self._check_text(text, "text")
        enc = self.tokenizer.encode(self.config.query_prefix + text)
        ids = np.asarray(enc.ids, dtype=np.int64)[None, :]
        mask = np.ones_like(ids)
        all_feeds = {
            "input_ids": ids,
            "attention_mask": mask,
            "token_type_ids": np.asarray(enc.type_ids, dtype=np.int64)[None, :],
        }
        tokens = self._run({name: all_feeds[name] for name in self._input_names})
        vec = pool(tokens, mask, self.config.pooling)[0]
        return l2_normalize(vec) if normalize else vec
