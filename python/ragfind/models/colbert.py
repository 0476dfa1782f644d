"""ColBERT-style token encoders on ONNX Runtime (queries and documents -> token matrices).

A ColBERT model folder (``ragfind.export(src, dst, role="colbert")``, or
:func:`export_colbert`, which also reads the ColBERT/PyLate settings) holds a BERT encoder
whose graph ends with the linear projection (e.g. 768 -> 128). Encoding follows ColBERT v2 and
PyLate:

* queries: ``[CLS] <query marker> tokens [SEP]``, then padded to ``query_length`` with
  ``[MASK]`` (query augmentation). The [MASK] positions are not attended to unless
  ``attend_to_expansion_tokens``, but their output vectors are kept: a query always has
  ``query_length`` vectors;
* documents: ``[CLS] <document marker> tokens [SEP]`` truncated at ``document_length``; the
  vectors of punctuation tokens are dropped (ColBERT's skiplist);
* every vector is L2-normalised.

The settings live in the folder's ``ragfind_model.json`` under ``"colbert"``: ``query_marker``,
``document_marker`` (token strings, e.g. "[unused0]"/"[unused1]" for ColBERT v2, "[Q] "/"[D] "
for PyLate; null for none), ``query_length`` (null: no augmentation), ``document_length``,
``attend_to_expansion_tokens`` and ``skip_punctuation``.

**Offline default.** Without a ColBERT checkpoint, ``ColbertEncoder()`` uses the bundled
all-MiniLM-L6-v2's L2-normalised token states (no markers, no augmentation, 384 dims). That is
*not a trained ColBERT*: MiniLM was trained for mean-pooled sentence vectors, so its MaxSim
ranking is a reasonable token-matching re-ranker but well below a real ColBERT's quality.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np

from ragfind.models.base import DEFAULT_MAX_TEXT_CHARS, _ModelBase
from ragfind.models.folder import ModelFolderError
from ragfind.models.onnx_export.convert import export

__all__ = ["ColbertEncoder", "export_colbert", "colbert_settings_from_checkpoint"]

DEFAULT_COLBERT = {
    "query_marker": "[unused0]",
    "document_marker": "[unused1]",
    "query_length": 32,
    "document_length": 180,
    "attend_to_expansion_tokens": False,
    "skip_punctuation": True,
}
# The MiniLM fallback: plain token states, no markers, no augmentation.
BI_ENCODER_FALLBACK = {
    "query_marker": None,
    "document_marker": None,
    "query_length": None,
    "document_length": 256,
    "attend_to_expansion_tokens": False,
    "skip_punctuation": True,
}


class ColbertEncoder(_ModelBase):
    """Texts in, one L2-normalised token matrix per text out (for MaxSim / LateInteractionIndex).

    Args:
        path_or_name: a model folder with role "colbert" (see :func:`export_colbert`), or a
            bi-encoder folder / default name whose L2-normalised token states are used. The
            default, "all-MiniLM-L6-v2", is NOT a trained ColBERT: it works offline and ranks
            sensibly, but export a real ColBERT/PyLate checkpoint for ColBERT quality.
        threads, graph_optimization, providers, max_text_chars, verify: as ``ragfind.Encoder``.
        query_length, document_length: override the folder's settings.
    Raises:
        ModelFolderError: missing/corrupt folder, a role other than colbert/bi-encoder, or a
            marker token the tokenizer does not know.
    """

    _expected_role = ("colbert", "bi-encoder")

    def __init__(
        self,
        path_or_name="all-MiniLM-L6-v2",
        threads: int | None = None,
        graph_optimization: str = "all",
        providers=None,
        *,
        max_text_chars: int | None = DEFAULT_MAX_TEXT_CHARS,
        verify: bool = True,
        query_length: int | None = None,
        document_length: int | None = None,
    ):
        super().__init__(
            path_or_name, threads, graph_optimization, providers, max_text_chars=max_text_chars, verify=verify
        )
        base = DEFAULT_COLBERT if self.config.role == "colbert" else BI_ENCODER_FALLBACK
        user = self.config.raw.get("colbert") or {}
        if not isinstance(user, dict):
            raise ModelFolderError(f"{self.path}: config key 'colbert' must be an object, got {user!r}")
        s = {**base, **user}
        if query_length is not None:
            s["query_length"] = query_length
        if document_length is not None:
            s["document_length"] = document_length
        for key in ("query_length", "document_length"):
            v = s[key]
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 3):
                raise ValueError(f"{key}={v!r}: expected an int >= 3 (or None for query_length)")
        self.settings = s
        self.tokenizer.no_truncation()
        tok = self.tokenizer

        def token_id(name, what):
            if name is None:
                return None
            tid = tok.token_to_id(name)
            if tid is None:
                tid = tok.token_to_id(name.strip())
            if tid is None:
                raise ModelFolderError(f"{self.path}: {what} {name!r} is not a token of the tokenizer")
            return tid

        self._q_marker = token_id(s["query_marker"], "query_marker")
        self._d_marker = token_id(s["document_marker"], "document_marker")
        self._mask_id = token_id("[MASK]", "mask token") if s["query_length"] is not None else None
        self._skip_ids = set()
        if s["skip_punctuation"]:
            for ch in string.punctuation:
                tid = tok.token_to_id(ch)
                if tid is not None:
                    self._skip_ids.add(tid)
        self._limit = self.config.max_length

    # ------------------------------------------------------------------ tokenization
    def _ids(self, text: str, marker, length: int | None) -> tuple[list[int], list[str]]:
        enc = self.tokenizer.encode(text)
        ids, toks, special = list(enc.ids), list(enc.tokens), list(enc.special_tokens_mask)
        head = [(i, t) for i, t, s in zip(ids[:1], toks[:1], special[:1]) if s]
        tail = [(i, t) for i, t, s in zip(ids[-1:], toks[-1:], special[-1:]) if s]
        body = [(i, t) for i, t, s in zip(ids, toks, special) if not s]
        front = head + ([(marker, self.tokenizer.id_to_token(marker))] if marker is not None else [])
        limit = min(self._limit, length) if length is not None else self._limit
        body = body[: max(0, limit - len(front) - len(tail))]
        pairs = front + body + tail
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def tokenize_query(self, text: str) -> list[str]:
        """The token strings matching the rows of ``encode_queries([text])[0]`` (for explain)."""
        self._check_text(text, "text")
        ids, toks = self._ids(text, self._q_marker, self.settings["query_length"])
        n = self.settings["query_length"]
        if n is not None and len(toks) < n:
            toks = toks + ["[MASK]"] * (n - len(toks))
        return toks

    def tokenize_document(self, text: str) -> list[str]:
        """The token strings matching the rows of ``encode_documents([text])[0]`` (for explain)."""
        self._check_text(text, "text")
        ids, toks = self._ids(text, self._d_marker, self.settings["document_length"])
        return [t for i, t in zip(ids, toks) if i not in self._skip_ids]

    # ------------------------------------------------------------------ encoding
    def _check_texts(self, texts) -> list[str]:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of str; wrap a single text in a list")
        if not isinstance(texts, (list, tuple)):
            raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
        if len(texts) == 0:
            raise ValueError("texts is an empty list; pass at least one text")
        for i, t in enumerate(texts):
            self._check_text(t, f"texts[{i}]")
        return list(texts)

    def _encode(self, rows: list[tuple[list[int], int]], batch_size: int, show_progress: bool, desc: str):
        """rows: (ids, attended prefix length) per text -> list of (len(ids), dim) float32 states."""
        self._check_batch_size(batch_size)
        lengths = np.array([len(r[0]) for r in rows])
        order = np.argsort(-lengths, kind="stable")
        out: list[np.ndarray | None] = [None] * len(rows)
        starts = range(0, len(order), batch_size)
        if show_progress:
            from tqdm.auto import tqdm  # import cost: only a progress bar needs it

            starts = tqdm(starts, total=len(starts), desc=desc, unit="batch")
        for start in starts:
            idx = order[start : start + batch_size]
            width = int(lengths[idx].max())
            ids = np.full((len(idx), width), self.config.pad_token_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for r, i in enumerate(idx):
                seq, attended = rows[i]
                ids[r, : len(seq)] = seq
                mask[r, :attended] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            states = self._run({n: feeds[n] for n in self._input_names})
            for r, i in enumerate(idx):
                v = states[r, : len(rows[i][0])].astype(np.float32)
                norms = np.linalg.norm(v, axis=1, keepdims=True)
                out[i] = np.ascontiguousarray(v / np.maximum(norms, 1e-12))
        return out

    def encode_queries(self, texts, batch_size: int = 32, show_progress: bool = False) -> list[np.ndarray]:
        """Query token matrices: a list of float32 (query_length, dim) arrays (unit rows).

        With query augmentation (``query_length`` set) every query has exactly
        ``query_length`` vectors; the [MASK] expansion tokens' vectors are included.
        Raises TypeError/ValueError for a non-list, empty list or empty/overlong text.
        """
        texts = self._check_texts(texts)
        n = self.settings["query_length"]
        attend_all = self.settings["attend_to_expansion_tokens"]
        rows = []
        for t in texts:
            ids, _ = self._ids(t, self._q_marker, n)
            real = len(ids)
            if n is not None and real < n:
                ids = ids + [self._mask_id] * (n - real)
            rows.append((ids, len(ids) if attend_all else real))
        return self._encode(rows, batch_size, show_progress, "encode queries")

    def encode_documents(self, texts, batch_size: int = 32, show_progress: bool = False) -> list[np.ndarray]:
        """Document token matrices: a list of float32 (tokens_i, dim) arrays (unit rows).

        Punctuation tokens are dropped when ``skip_punctuation`` (every document keeps at
        least its [CLS]/[SEP] vectors, so none is empty).
        """
        texts = self._check_texts(texts)
        rows, keep = [], []
        for t in texts:
            ids, _ = self._ids(t, self._d_marker, self.settings["document_length"])
            rows.append((ids, len(ids)))
            keep.append(np.array([i not in self._skip_ids for i in ids], dtype=bool))
        states = self._encode(rows, batch_size, show_progress, "encode documents")
        return [np.ascontiguousarray(s[k]) if k.any() else s for s, k in zip(states, keep)]

    def encode_query(self, text: str) -> np.ndarray:
        """One query's (query_length, dim) float32 token matrix."""
        return self.encode_queries([text])[0]


def colbert_settings_from_checkpoint(src) -> dict:
    """ColBERT settings read from a ColBERT (artifact.metadata) or PyLate
    (config_sentence_transformers.json) checkpoint folder, for ``extra_config={"colbert": ...}``."""
    src = Path(src)
    s = dict(DEFAULT_COLBERT)
    meta = src / "artifact.metadata"
    if meta.is_file():  # stanford-futuredata/ColBERT
        m = json.loads(meta.read_text(encoding="utf-8"))
        s["query_length"] = int(m.get("query_maxlen", s["query_length"]))
        s["document_length"] = int(m.get("doc_maxlen", s["document_length"]))
        s["attend_to_expansion_tokens"] = bool(m.get("attend_to_mask_tokens", False))
        s["skip_punctuation"] = bool(m.get("mask_punctuation", True))
        for key, mk in (("query_token_id", "query_marker"), ("doc_token_id", "document_marker")):
            if m.get(key):
                s[mk] = m[key]
    st = src / "config_sentence_transformers.json"
    if st.is_file():  # PyLate
        m = json.loads(st.read_text(encoding="utf-8"))
        for key, mk in (("query_prefix", "query_marker"), ("document_prefix", "document_marker")):
            if m.get(key):
                s[mk] = m[key]
        for key, mk in (("query_length", "query_length"), ("document_length", "document_length")):
            if m.get(key):
                s[mk] = int(m[key])
        if "attend_to_expansion_tokens" in m:
            s["attend_to_expansion_tokens"] = bool(m["attend_to_expansion_tokens"])
        if "skiplist_words" in m:
            s["skip_punctuation"] = bool(m["skiplist_words"])
    return s


def export_colbert(src, dst, quantize: str | None = None, *, overwrite: bool = False, **settings) -> Path:
    """``ragfind.export(src, dst, role="colbert")`` with the ColBERT settings filled in.

    Reads ``artifact.metadata`` (ColBERT) or ``config_sentence_transformers.json`` (PyLate)
    when present; keyword ``settings`` (query_marker, document_marker, query_length,
    document_length, attend_to_expansion_tokens, skip_punctuation) override them.
    Returns the model folder path. Raises as ``ragfind.export``, and ValueError on an unknown
    setting.
    """
    unknown = set(settings) - set(DEFAULT_COLBERT)
    if unknown:
        raise ValueError(
            f"unknown ColBERT settings {sorted(unknown)}; expected some of {sorted(DEFAULT_COLBERT)}"
        )
    s = colbert_settings_from_checkpoint(src)
    s.update(settings)
    return export(
        src,
        dst,
        role="colbert",
        quantize=quantize,
        normalize=True,
        extra_config={"colbert": s},
        overwrite=overwrite,
    )
