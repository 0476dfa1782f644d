"""Static embeddings: one vector per vocabulary token, a text's embedding is the normalised mean.

The folder layout is model2vec's, so model2vec models load as they are and ragfind's own
load in model2vec::

    model.safetensors   an "embeddings" float tensor [vocab, dim] (rows follow tokenizer ids),
                        optionally a "weights" float tensor [vocab] multiplying each row
    tokenizer.json      a HuggingFace ``tokenizers`` file
    config.json         {"model_type": "model2vec", "normalize": bool, "hidden_dim": int, ...};
                        ragfind adds a "ragfind" object: "target_fingerprint" (the document
                        encoder whose space a fitted query encoder maps into), "source"

Query embedding is a tokenizer call, ``np.take`` of the rows and a mean: tens of microseconds,
no ONNX Runtime. ``distill_static`` builds a table from any ragfind bi-encoder (each vocabulary
token embedded alone, PCA, Zipf/SIF weights, as model2vec distils); ``fit_query_encoder``
fits one whose query vectors land in the document encoder's space.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.models.encoder import Encoder, pool
from ragfind.models.folder import ModelFolderError, new_staging_dir, publish_dir

SAFETENSORS_FILE = "model.safetensors"
STATIC_CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
STATIC_FORMAT_VERSION = 1
DEFAULT_STATIC_MAX_LENGTH = 512

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


# ---------------------------------------------------------------------------------- safetensors


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Reads a safetensors file into numpy arrays (F32, F16, BF16, F64, I32, I64; no torch).

    Raises:
        ModelFolderError: a truncated file, a malformed header, an unsupported dtype or a
            tensor whose byte range does not match its shape.
    """
    path = Path(path)
    data = path.read_bytes()
    if len(data) < 8:
        raise ModelFolderError(f"{path}: {len(data)} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ModelFolderError(f"{path}: header of {n} bytes runs past the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFolderError(f"{path}: corrupt safetensors header ({e})") from None
    body = memoryview(data)[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], [int(s) for s in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ModelFolderError(f"{path}: tensor {name!r} has a malformed header entry") from None
        count = int(np.prod(shape)) if shape else 1
        if dtype == "BF16":
            if end - begin != 2 * count or end > len(body):
                raise ModelFolderError(f"{path}: tensor {name!r} byte range does not match {shape}")
            raw = np.frombuffer(body[begin:end], dtype="<u2").astype(np.uint32) << 16
            out[name] = raw.view(np.float32).reshape(shape)
            continue
        if dtype not in _ST_DTYPES:
            raise ModelFolderError(
                f"{path}: tensor {name!r} has dtype {dtype!r}; expected one of {list(_ST_DTYPES)} or BF16"
            )
        dt = np.dtype(_ST_DTYPES[dtype]).newbyteorder("<")
        if end - begin != dt.itemsize * count or begin < 0 or end > len(body):
            raise ModelFolderError(
                f"{path}: tensor {name!r} byte range [{begin}, {end}) does not match {dtype}{shape}"
            )
        out[name] = np.frombuffer(body[begin:end], dtype=dt).reshape(shape).copy()
    return out


def write_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray]) -> None:
    """Writes float32 arrays as a safetensors file (readable by the ``safetensors`` package)."""
    header: dict[str, Any] = {}
    blobs = []
    offset = 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def is_static_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a static (model2vec layout) model: model.safetensors + config.json
    + tokenizer.json and no ragfind ONNX config."""
    p = Path(path)
    return (
        p.is_dir()
        and (p / SAFETENSORS_FILE).is_file()
        and (p / STATIC_CONFIG_FILE).is_file()
        and (p / TOKENIZER_FILE).is_file()
        and not (p / "ragfind_model.json").is_file()
    )


# ---------------------------------------------------------------------------------- the encoder


def _encode_plain(tokenizer, texts: list):
    """Tokenizes a batch without special tokens (and without offsets where ``tokenizers`` can)."""
    fast = getattr(tokenizer, "encode_batch_fast", None)
    if fast is not None:
        return fast(texts, add_special_tokens=False)
    return tokenizer.encode_batch(texts, add_special_tokens=False)


class StaticEncoder:
    """A static embedding model: texts in, float32 vectors out by token lookup and mean.

    Loads a model2vec folder or one written by :func:`distill_static` /
    :func:`fit_query_encoder` (``ragfind.load_model`` does this for such folders). Duck-types
    :class:`ragfind.Encoder` (``encode``, ``encode_query``, ``encode_queries``, ``dim``,
    ``fingerprint``, ``tokenizer``, ``max_length``), so it can be a Retriever's ``encoder``
    (documents and queries both static) or its ``query_encoder`` when it was fitted into the
    document encoder's space (``target_fingerprint``).

    Args:
        path: the model folder.
        max_text_chars: longer texts are refused (None: no limit).

    Raises:
        ModelFolderError: a missing or corrupt file, no "embeddings" tensor, a table with
            fewer rows than the tokenizer has ids, or a "weights" tensor of the wrong length.

    A text is tokenized without special tokens and truncated at ``max_length`` tokens
    (config ``max_length``, default 512). A text with no token at all (whitespace only) gets
    the zero vector; an empty string is refused, as :class:`ragfind.Encoder` refuses it.
    """

    def __init__(self, path: str | os.PathLike, *, max_text_chars: int | None = 100_000) -> None:
        path = Path(path)
        if not is_static_folder(path):
            raise ModelFolderError(
                f"{path}: not a static model folder (expected {SAFETENSORS_FILE}, "
                f"{STATIC_CONFIG_FILE} and {TOKENIZER_FILE})"
            )
        try:
            cfg = json.loads((path / STATIC_CONFIG_FILE).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelFolderError(f"{path / STATIC_CONFIG_FILE}: corrupt config ({e})") from None
        if not isinstance(cfg, dict):
            raise ModelFolderError(f"{path / STATIC_CONFIG_FILE}: expected a JSON object")
        tensors = read_safetensors(path / SAFETENSORS_FILE)
        if "embeddings" not in tensors or tensors["embeddings"].ndim != 2:
            raise ModelFolderError(
                f"{path / SAFETENSORS_FILE}: no 2-D 'embeddings' tensor (has {sorted(tensors)})"
            )
        table = tensors["embeddings"].astype(np.float32)
        if "weights" in tensors:
            w = tensors["weights"].astype(np.float32).reshape(-1)
            if w.shape[0] != table.shape[0]:
                raise ModelFolderError(
                    f"{path}: 'weights' has {w.shape[0]} entries for {table.shape[0]} embeddings"
                )
            table = table * w[:, None]
        self._init(table, (path / TOKENIZER_FILE).read_bytes(), cfg, path, max_text_chars)

    @classmethod
    def from_table(
        cls, table: np.ndarray, tokenizer_json: bytes, config: dict, *, max_text_chars: int | None = 100_000
    ) -> StaticEncoder:
        """A StaticEncoder held in memory (``path`` None) until :meth:`save`; same fingerprint
        as the folder it saves to."""
        obj = cls.__new__(cls)
        obj._init(np.asarray(table, np.float32), tokenizer_json, dict(config), None, max_text_chars)
        return obj

    def _init(self, table, tokenizer_json: bytes, cfg: dict, path, max_text_chars) -> None:
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
        except Exception as e:  # tokenizers raises a plain Exception on malformed JSON
            raise ModelFolderError(f"{path}: cannot load the tokenizer ({e})") from None
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
        if table.shape[0] < vocab:
            raise ModelFolderError(
                f"{path}: the table has {table.shape[0]} rows but the tokenizer has {vocab} ids"
            )
        if not np.isfinite(table).all():
            raise ModelFolderError(f"{path}: the table holds NaN or inf")
        self.path = path
        self.config = cfg
        self.table = np.ascontiguousarray(table, np.float32)
        self._tokenizer_json = tokenizer_json
        self.normalize = bool(cfg.get("normalize", True))
        self.max_length = int(cfg.get("max_length") or DEFAULT_STATIC_MAX_LENGTH)
        self.max_text_chars = max_text_chars
        extra = cfg.get("ragfind") if isinstance(cfg.get("ragfind"), dict) else {}
        #: Fingerprint of the document encoder whose space this model's query vectors live in
        #: (set by ``fit_query_encoder``), else None.
        self.target_fingerprint: str | None = extra.get("target_fingerprint")
        basis = {
            "kind": "static",
            "format_version": STATIC_FORMAT_VERSION,
            "table_sha256": hashlib.sha256(self.table.tobytes()).hexdigest(),
            "tokenizer_sha256": hashlib.sha256(tokenizer_json).hexdigest(),
            "normalize": self.normalize,
            "max_length": self.max_length,
            "target_fingerprint": self.target_fingerprint,
        }
        self._fingerprint = hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:32]

    def save(self, folder: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Writes the model as a folder (model2vec layout, the table with any weights applied),
        atomically; returns its path. A saved model has the same fingerprint."""
        extra = dict(self.config.get("ragfind") or {})
        config = {k: v for k, v in self.config.items() if k not in ("ragfind", "hidden_dim", "normalize")}
        return write_static_folder(
            folder,
            self.table,
            self._tokenizer_json,
            normalize=self.normalize,
            extra=extra,
            config=config,
            overwrite=overwrite,
        )

    @property
    def dim(self) -> int:
        """Embedding size (columns of the table)."""
        return int(self.table.shape[1])

    @property
    def fingerprint(self) -> str:
        """Stable hash of the table, the tokenizer and the settings: never equal to an ONNX
        encoder's, so an index refuses to mix this model's vectors with another model's."""
        return self._fingerprint

    def _check_text(self, text: Any, where: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"{where} must be a str, got {type(text).__name__}: {text!r:.80}")
        if not text:
            raise ValueError(f"{where} is an empty string; there is nothing to encode")
        if self.max_text_chars is not None and len(text) > self.max_text_chars:
            raise ValueError(
                f"{where} has {len(text):,} characters, more than max_text_chars={self.max_text_chars:,}"
            )

    def token_ids(self, text: str) -> np.ndarray:
        """The token ids a text is embedded from (no special tokens, at most ``max_length``)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return np.asarray(ids[: self.max_length], dtype=np.intp)

    def encode_query(self, text: str, normalize: bool | None = None) -> np.ndarray:
        """Embeds one text on the low-latency path (one tokenizer call, a gather, a mean).

        Returns:
            float32 vector (dim,); zeros for a text with no token.
        Raises:
            TypeError / ValueError: not a str, an empty string, longer than max_text_chars.
        """
        self._check_text(text, "text")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            return np.zeros(self.dim, np.float32)
        ids = ids[: self.max_length]
        vec = self.table[ids].sum(axis=0)  # fancy indexing of a list: faster than np.take here
        if self.normalize if normalize is None else normalize:
            n = float(np.sqrt(vec @ vec))
            return vec / n if n > 0 else vec
        return vec / np.float32(len(ids))

    def encode(
        self,
        texts: Any,
        batch_size: int = 1024,
        normalize: bool | None = None,
        show_progress: bool = False,
        *,
        is_query: bool = False,
        max_batch_tokens: int | None = None,
    ) -> np.ndarray:
        """Embeds texts (a list of str; a single str returns one vector).

        ``batch_size`` texts are tokenized per call; ``is_query`` and ``max_batch_tokens`` are
        accepted for :class:`ragfind.Encoder` compatibility and change nothing (a static model
        has no prefixes and no activations to bound). ``normalize`` None follows the config.

        Returns:
            float32 array (len(texts), dim); a row of zeros for a text with no token.
        Raises:
            TypeError: texts is not a str or a list of str.
            ValueError: an empty list or empty text, a bad batch_size.
        """
        if isinstance(texts, str):
            return self.encode([texts], batch_size, normalize, show_progress)[0]
        if not isinstance(texts, (list, tuple)):
            raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
        if len(texts) == 0:
            raise ValueError("texts is an empty list; pass at least one text")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: expected a positive int")
        for i, t in enumerate(texts):
            self._check_text(t, f"texts[{i}]")
        out = np.zeros((len(texts), self.dim), np.float32)
        starts = range(0, len(texts), batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="encode", unit="batch")
        for s in starts:
            encs = _encode_plain(self.tokenizer, list(texts[s : s + batch_size]))
            ids = [e.ids[: self.max_length] for e in encs]
            lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
            flat = np.fromiter((i for x in ids for i in x), np.intp, int(lengths.sum()))
            has = lengths > 0
            if not has.any():
                continue
            bounds = np.concatenate([[0], np.cumsum(lengths)[:-1]])[has]
            sums = np.add.reduceat(np.take(self.table, flat, axis=0), bounds, axis=0)
            out[s : s + len(ids)][has] = sums / lengths[has, None]
        if self.normalize if normalize is None else normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out /= np.where(norms > 0, norms, 1.0)
        return out

    def encode_queries(
        self, texts: Any, batch_size: int = 1024, normalize: bool | None = None, show_progress: bool = False
    ) -> np.ndarray:
        """``encode(texts, ...)``: a static model embeds queries and documents alike."""
        return self.encode(texts, batch_size, normalize, show_progress)

    def __repr__(self) -> str:
        target = f", target={self.target_fingerprint!r}" if self.target_fingerprint else ""
        where = str(self.path) if self.path is not None else "<in memory>"
        return f"StaticEncoder({where!r}, vocab={self.table.shape[0]}, dim={self.dim}{target})"


def write_static_folder(
    folder: str | os.PathLike,
    table: np.ndarray,
    tokenizer: str | os.PathLike | bytes,
    *,
    normalize: bool = True,
    extra: dict | None = None,
    config: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Writes a static model folder (model2vec layout) atomically and returns its path.

    Args:
        folder: the folder to create.
        table: float [vocab, dim] (rows follow the tokenizer's ids).
        tokenizer: the tokenizer.json to copy, or its bytes.
        normalize: whether vectors are L2-normalised.
        extra: written as config["ragfind"] (e.g. target_fingerprint, source).
        config: more model2vec config keys.
        overwrite: replace an existing folder (else FileExistsError).
    """
    table = np.asarray(table, dtype=np.float32)
    if table.ndim != 2 or not np.isfinite(table).all():
        raise ValueError(f"table has shape {table.shape}; expected a finite [vocab, dim] array")
    dst = Path(folder)
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} already exists (pass overwrite=True to replace it)")
    tmp = new_staging_dir(dst)
    try:
        write_safetensors(tmp / SAFETENSORS_FILE, {"embeddings": table})
        if isinstance(tokenizer, bytes):
            (tmp / TOKENIZER_FILE).write_bytes(tokenizer)
        else:
            shutil.copyfile(tokenizer, tmp / TOKENIZER_FILE)
        cfg = {
            "model_type": "model2vec",
            "architectures": ["StaticModel"],
            "hidden_dim": int(table.shape[1]),
            "normalize": bool(normalize),
            **(config or {}),
            "ragfind": {**(extra or {}), "format_version": STATIC_FORMAT_VERSION},
        }
        (tmp / STATIC_CONFIG_FILE).write_text(
            json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        return publish_dir(tmp, dst, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ---------------------------------------------------------------------------------- distillation


def zipf_sif_weights(vocab_size: int, sif_coefficient: float = 1e-4) -> np.ndarray:
    """model2vec's token weights: a Zipf probability from the vocabulary rank (id order),
    p = (1/(rank+2)) / sum, and the SIF weight a / (a + p): frequent tokens count less."""
    inv = 1.0 / np.arange(2, vocab_size + 2, dtype=np.float64)
    p = inv / inv.sum()
    return (sif_coefficient / (sif_coefficient + p)).astype(np.float32)


def token_embeddings(model: Any, batch_size: int = 1024, show_progress: bool = False) -> np.ndarray:
    """Every vocabulary token embedded alone by an ONNX bi-encoder (``[CLS] token [SEP]``,
    pooled as the model pools, not normalised): float32 [vocab, model.dim]."""
    tok = model.tokenizer
    vocab = tok.get_vocab_size(with_added_tokens=True)
    probe = tok.encode("a", add_special_tokens=True).ids
    inner = tok.encode("a", add_special_tokens=False).ids
    head = probe[: probe.index(inner[0])] if inner and inner[0] in probe else []
    tail = probe[len(head) + len(inner) :] if inner else []
    out = np.empty((vocab, model.dim), np.float32)
    starts = range(0, vocab, batch_size)
    if show_progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="distill", unit="batch")
    for s in starts:
        ids_ = np.arange(s, min(vocab, s + batch_size), dtype=np.int64)[:, None]
        n = ids_.shape[0]
        ids = np.concatenate(
            [
                np.full((n, len(head)), head, np.int64).reshape(n, -1),
                ids_,
                np.full((n, len(tail)), tail, np.int64).reshape(n, -1),
            ],
            axis=1,
        )
        mask = np.ones_like(ids)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        tokens = model._run({name: feeds[name] for name in model._input_names})
        out[s : s + n] = pool(tokens, mask, model.config.pooling or "mean")
    return out


def distill_static(
    model: Any,
    folder: str | os.PathLike,
    dim: int | None = 256,
    *,
    sif_coefficient: float = 1e-4,
    batch_size: int = 1024,
    show_progress: bool = True,
    overwrite: bool = False,
) -> Path:
    """Distils a static model from a ragfind bi-encoder, as model2vec does (no torch).

    Each vocabulary token is embedded alone through the ONNX encoder, the table is reduced to
    ``dim`` by PCA (centred, components by decreasing variance; ``None`` or ``dim`` >= the
    model's keeps the model's space, which :func:`fit_query_encoder` starts from), and each
    row is scaled by the Zipf/SIF weight of its vocabulary rank (:func:`zipf_sif_weights`).

    Args:
        model: an :class:`ragfind.Encoder`, a model folder or a default model name.
        folder: where to write the static model (model2vec layout).
        dim: output dimension (PCA), or None to keep the model's.
        sif_coefficient: the SIF constant ``a``; 0 turns the weighting off.
        batch_size: tokens per ONNX Runtime call.
        show_progress: tqdm bar over the batches.
        overwrite: replace an existing folder.
    Returns:
        the folder's path (load it with ``ragfind.load_model``).
    Raises:
        TypeError: model is not an Encoder, a folder or a name.
        ValueError: dim not a positive int or None.
        ModelFolderError: the folder is not a bi-encoder's.
        FileExistsError: the folder exists and overwrite is False.
    """
    if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or dim < 1):
        raise ValueError(f"dim={dim!r}: expected a positive int or None")
    if not isinstance(model, (Encoder, str, os.PathLike)):
        raise TypeError(
            f"model is a {type(model).__name__}; expected a ragfind.Encoder, a model folder or a "
            "default model name (distilling runs the ONNX model on every vocabulary token)"
        )
    enc = model if isinstance(model, Encoder) else Encoder(model)
    if Path(folder).exists() and not overwrite:
        raise FileExistsError(f"{folder} already exists (pass overwrite=True to replace it)")
    table = token_embeddings(enc, batch_size, show_progress).astype(np.float64)
    pca = dim is not None and dim < table.shape[1]
    if pca:
        centred = table - table.mean(axis=0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        table = centred @ vt[:dim].T
    if sif_coefficient:
        table = table * zipf_sif_weights(table.shape[0], sif_coefficient)[:, None]
    return write_static_folder(
        folder,
        table.astype(np.float32),
        enc.path / TOKENIZER_FILE,
        normalize=True,
        config={"apply_pca": dim if pca else None, "sif_coefficient": sif_coefficient},
        extra={"source": str(enc.path), "source_fingerprint": enc.fingerprint, "pca": bool(pca)},
        overwrite=overwrite,
    )
