"""What Encoder and CrossEncoder share: the ONNX Runtime session, the tokenizer, input checks,
length-sorted batching with per-batch padding."""

from __future__ import annotations

import numpy as np

from ragfind.models.folder import (
    MODEL_FILE,
    TOKENIZER_FILE,
    ModelConfig,
    ModelFolderError,
    read_model_folder,
)
from ragfind.models.registry import resolve_model_path
from ragfind.models.session import GRAPH_OPTIMIZATION_LEVELS, default_threads, load_tokenizer, make_session  # noqa: F401

DEFAULT_MAX_TEXT_CHARS = 100_000
# Padded tokens per ONNX Runtime call when batching many texts. Past a few thousand tokens the
# activations (tokens x hidden x 4 bytes, 4x that in the feed-forward layer) fall out of the
# caches and the element-wise ops (LayerNorm, GELU, softmax) become memory-bound: MiniLM int8 on
# 240-token texts ran at 74 docs/s in batches of 32 and 95 in batches of 8 (bench/models.md).
DEFAULT_MAX_BATCH_TOKENS = 2048


def encode_batch_ids(tokenizer, items: list):
    """``tokenizer.encode_batch`` without character offsets where the installed ``tokenizers``
    has it (``encode_batch_fast``, 0.20+; about 20% less tokenizing time, same ids, type ids
    and masks): the models only need ids."""
    fast = getattr(tokenizer, "encode_batch_fast", None)
    return fast(items) if fast is not None else tokenizer.encode_batch(items)


def batch_slices(sorted_lengths, batch_size: int, max_batch_tokens: int) -> list[tuple[int, int]]:
    """[start, stop) ranges over texts sorted longest first: at most ``batch_size`` texts and, past
    the first one, at most ``max_batch_tokens`` padded tokens (count x the first text's length)."""
    out = []
    n = len(sorted_lengths)
    start = 0
    while start < n:
        per = max(1, min(batch_size, max_batch_tokens // max(1, int(sorted_lengths[start]))))
        stop = min(n, start + per)
        out.append((start, stop))
        start = stop
    return out


class _ModelBase:
    """Loads a folder, checks the session against the config, holds tokenizer + session."""

    _expected_role: tuple[str, ...] = ()

    def __init__(
        self,
        path_or_name,
        threads=None,
        graph_optimization="all",
        providers=None,
        *,
        max_text_chars: int | None = DEFAULT_MAX_TEXT_CHARS,
        verify: bool = True,
        allow_spinning: bool = False,
    ):
        self.path = resolve_model_path(path_or_name)
        self.config: ModelConfig = read_model_folder(self.path, verify=verify)
        if self._expected_role and self.config.role not in self._expected_role:
            raise ModelFolderError(
                f"{self.path}: role {self.config.role!r} cannot be loaded by {type(self).__name__} "
                f"(expected {' or '.join(self._expected_role)})"
            )
        if max_text_chars is not None and (not isinstance(max_text_chars, int) or max_text_chars < 1):
            raise ValueError(f"max_text_chars={max_text_chars!r}: expected a positive int or None")
        self.max_text_chars = max_text_chars
        self.tokenizer = load_tokenizer(self.path / TOKENIZER_FILE)
        self.tokenizer.enable_truncation(self.config.max_length, strategy="longest_first")
        self.session = make_session(
            self.path / MODEL_FILE, threads, graph_optimization, providers, allow_spinning
        )
        self.threads = threads or default_threads()
        self.graph_optimization = graph_optimization
        names_in = [i.name for i in self.session.get_inputs()]
        missing = [n for n in names_in if n not in self.config.inputs]
        if missing or "input_ids" not in names_in:
            raise ModelFolderError(
                f"{self.path}: model inputs {names_in} do not match the config inputs {self.config.inputs}"
            )
        self._input_names = names_in
        outs = {o.name: o for o in self.session.get_outputs()}
        if self.config.output not in outs:
            raise ModelFolderError(
                f"{self.path}: model outputs {sorted(outs)} lack the config's output {self.config.output!r}"
            )
        last = outs[self.config.output].shape[-1]
        if isinstance(last, int) and last != self.config.dim:
            raise ModelFolderError(
                f"{self.path}: model output {self.config.output!r} has last dimension {last}, "
                f"the config says dim={self.config.dim}"
            )

    # ---- properties shared by every model
    @property
    def dim(self) -> int:
        """Output dimension (embedding size; labels for a cross-encoder; vocabulary for SPLADE)."""
        return self.config.dim

    @property
    def max_length(self) -> int:
        """Truncation length in word pieces, special tokens included."""
        return self.config.max_length

    @property
    def fingerprint(self) -> str:
        """Stable hash of the model weights and of the pooling/normalisation/tokenizer config."""
        return self.config.fingerprint

    # ---- helpers
    def _check_text(self, text, where: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"{where} must be a str, got {type(text).__name__}: {text!r:.80}")
        if not text:
            # whitespace-only text is allowed: it encodes as [CLS] [SEP], as sentence-transformers does
            raise ValueError(f"{where} is an empty string; there is nothing to encode")
        if self.max_text_chars is not None and len(text) > self.max_text_chars:
            raise ValueError(
                f"{where} has {len(text):,} characters, more than max_text_chars={self.max_text_chars:,} "
                f"(the model reads only the first {self.max_length} word pieces); split long documents "
                "into chunks first, or raise max_text_chars / pass max_text_chars=None"
            )

    def _feeds(self, encodings) -> tuple[dict, np.ndarray]:
        """Pads a batch of tokenizers Encodings to its longest item (never to max_length)."""
        n = len(encodings)
        length = max(len(e.ids) for e in encodings)
        ids = np.full((n, length), self.config.pad_token_id, dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.int64)
        types = np.zeros((n, length), dtype=np.int64)
        for row, e in enumerate(encodings):
            k = len(e.ids)
            ids[row, :k] = e.ids
            mask[row, :k] = 1
            types[row, :k] = e.type_ids
        all_feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return {name: all_feeds[name] for name in self._input_names}, mask

    def _run_batches(
        self, items: list, batch_size: int, max_batch_tokens: int, show_progress: bool, desc: str
    ):
        """Tokenizes ``items`` (texts or pairs) and runs them longest first, in batches of at most
        ``batch_size`` items and ``max_batch_tokens`` padded tokens (``batch_slices``). Yields
        ``(idx, output, attention_mask)`` per batch; ``idx`` are the items' positions in ``items``."""
        encodings = encode_batch_ids(self.tokenizer, items)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")  # longest first: the arena peaks on the first call
        batches = batch_slices(lengths[order], batch_size, max_batch_tokens)
        if show_progress:
            from tqdm.auto import tqdm  # import cost: only a progress bar needs it

            batches = tqdm(batches, total=len(batches), desc=desc, unit="batch")
        for start, stop in batches:
            idx = order[start:stop]
            feeds, mask = self._feeds([encodings[i] for i in idx])
            yield idx, self._run(feeds), mask

    def _run(self, feeds: dict) -> np.ndarray:
        out = self.session.run([self.config.output], feeds)[0]
        n = feeds["input_ids"].shape[0]
        if out.shape[0] != n or out.shape[-1] != self.config.dim:
            raise ModelFolderError(
                f"{self.path}: model output {self.config.output!r} has shape {out.shape}, "
                f"expected ({n}, ..., {self.config.dim}) per the config"
            )
        return out

    @staticmethod
    def _check_batch_size(batch_size, max_batch_tokens=DEFAULT_MAX_BATCH_TOKENS) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: expected a positive int")
        tokens = max_batch_tokens
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise ValueError(f"max_batch_tokens={max_batch_tokens!r}: expected a positive int")

    def __repr__(self) -> str:
        c = self.config
        return (
            f"{type(self).__name__}({str(self.path)!r}, role={c.role!r}, dim={c.dim}, "
            f"max_length={c.max_length}, "
            f"quantization={c.quantization!r}, threads={self.threads})"
        )
