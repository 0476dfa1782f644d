"""The ragfind model folder: config schema, validation, checksums, fingerprint, atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

FORMAT_NAME = "ragfind-model"
FORMAT_VERSION = 1
CONFIG_FILE = "ragfind_model.json"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"

ROLES = ("bi-encoder", "cross-encoder", "splade", "colbert")
ROLE_OUTPUT = {
    "bi-encoder": "token_embeddings",
    "cross-encoder": "logits",
    "splade": "sparse_embedding",
    "colbert": "token_embeddings",
}
POOLINGS = ("mean", "cls", "last", "max")
ACTIVATIONS = ("sigmoid", "identity", "softmax")
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class ModelFolderError(ValueError):
    """A model folder is missing a file, is corrupt, or its config is invalid or inconsistent."""


from ragfind.errors import ModelMismatchError  # noqa: E402,F401 - one class for every index and model


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file's bytes, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


@dataclass
class ModelConfig:
    """The parsed ``ragfind_model.json`` of a model folder (schema in ``ragfind.models``)."""

    role: str
    output: str
    dim: int
    max_length: int
    weights_sha256: str
    files: dict
    architecture: str = "bert"
    source: str = ""
    backend: str = "builder"
    quantization: str | None = None
    pooling: str | None = None
    normalize: bool = False
    query_prefix: str = ""
    document_prefix: str = ""
    num_labels: int | None = None
    activation: str | None = None
    pad_token_id: int = 0
    inputs: list = field(default_factory=lambda: list(MODEL_INPUTS))
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def fingerprint(self) -> str:
        """Stable 32-hex-digit hash of what determines the vectors: source weights, quantization,
        role, output, pooling, normalisation, max length, prefixes and the tokenizer file.

        It does not depend on the ONNX serialisation (a rebuild of the same weights by another
        onnx version keeps it), only on what changes the numbers.
        """
        basis = {
            "format_version": FORMAT_VERSION,
            "weights_sha256": self.weights_sha256,
            "quantization": self.quantization,
            "role": self.role,
            "output": self.output,
            "dim": self.dim,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "max_length": self.max_length,
            "query_prefix": self.query_prefix,
            "document_prefix": self.document_prefix,
            "tokenizer_sha256": self.files.get(TOKENIZER_FILE, {}).get("sha256"),
        }
        blob = json.dumps(basis, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:32]

    def to_json(self) -> dict:
        d = dict(self.raw)
        d.update(
            format=FORMAT_NAME,
            format_version=FORMAT_VERSION,
            role=self.role,
            architecture=self.architecture,
            source=self.source,
            backend=self.backend,
            quantization=self.quantization,
            inputs=list(self.inputs),
            output=self.output,
            dim=self.dim,
            max_length=self.max_length,
            pooling=self.pooling,
            normalize=self.normalize,
            query_prefix=self.query_prefix,
            document_prefix=self.document_prefix,
            num_labels=self.num_labels,
            activation=self.activation,
            pad_token_id=self.pad_token_id,
            weights_sha256=self.weights_sha256,
            files=self.files,
        )
        return d


def _need(d: dict, key: str, types, path: Path):
    if key not in d:
        raise ModelFolderError(f"{path}: config is missing the key {key!r}")
    v = d[key]
    if not isinstance(v, types) or (isinstance(v, bool) and types is int):
        raise ModelFolderError(f"{path}: config key {key!r} = {v!r} has the wrong type (expected {types})")
    return v


def parse_config(d: dict, path: Path) -> ModelConfig:
    """Validates a config dict (as read from ``ragfind_model.json``) and returns a ModelConfig."""
    if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
        raise ModelFolderError(
            f"{path}: not a ragfind model config "
            f"(format is {d.get('format') if isinstance(d, dict) else d!r}, "
            f"expected {FORMAT_NAME!r})"
        )
    version = d.get("format_version")
    if version != FORMAT_VERSION:
        raise ModelFolderError(
            f"{path}: format_version {version!r} is not supported (expected {FORMAT_VERSION}); "
            "re-export the model with this ragfind version"
        )
    role = _need(d, "role", str, path)
    if role not in ROLES:
        raise ModelFolderError(f"{path}: role {role!r} is not one of {ROLES}")
    pooling = d.get("pooling")
    if role == "bi-encoder" and pooling not in POOLINGS:
        raise ModelFolderError(f"{path}: bi-encoder pooling {pooling!r} is not one of {POOLINGS}")
    activation = d.get("activation")
    if role == "cross-encoder" and activation not in ACTIVATIONS:
        raise ModelFolderError(f"{path}: cross-encoder activation {activation!r} is not one of {ACTIVATIONS}")
    files = _need(d, "files", dict, path)
    for name in (MODEL_FILE, TOKENIZER_FILE):
        info = files.get(name)
        if (
            not isinstance(info, dict)
            or not isinstance(info.get("size"), int)
            or not isinstance(info.get("sha256"), str)
        ):
            raise ModelFolderError(f"{path}: config 'files' has no size/sha256 entry for {name!r}")
    max_length = _need(d, "max_length", int, path)
    dim = _need(d, "dim", int, path)
    if max_length < 2 or dim < 1:
        raise ModelFolderError(f"{path}: max_length={max_length} / dim={dim} out of range")
    inputs = d.get("inputs", list(MODEL_INPUTS))
    if not isinstance(inputs, list) or not set(inputs) <= set(MODEL_INPUTS) or "input_ids" not in inputs:
        raise ModelFolderError(f"{path}: inputs {inputs!r} must be a subset of {MODEL_INPUTS} with input_ids")
    return ModelConfig(
        role=role,
        output=_need(d, "output", str, path),
        dim=dim,
        max_length=max_length,
        weights_sha256=_need(d, "weights_sha256", str, path),
        files=files,
        architecture=str(d.get("architecture", "")),
        source=str(d.get("source", "")),
        backend=str(d.get("backend", "")),
        quantization=d.get("quantization"),
        pooling=pooling,
        normalize=bool(d.get("normalize", False)),
        query_prefix=str(d.get("query_prefix") or ""),
        document_prefix=str(d.get("document_prefix") or ""),
        num_labels=d.get("num_labels"),
        activation=activation,
        pad_token_id=int(d.get("pad_token_id", 0)),
        inputs=list(inputs),
        raw=d,
    )


def read_model_folder(path: str | os.PathLike, *, verify: bool = True) -> ModelConfig:
    """Reads and checks a model folder.

    Args:
        path: the folder holding ``ragfind_model.json``, ``model.onnx`` and ``tokenizer.json``.
        verify: also compare the SHA-256 of the files with the config (sizes are always checked).
    Returns:
        The validated ModelConfig.
    Raises:
        ModelFolderError: missing folder/file, unreadable or invalid config, size or checksum mismatch.
    """
    path = Path(path)
    if not path.is_dir():
        raise ModelFolderError(f"model folder {str(path)!r} does not exist or is not a directory")
    cfg_path = path / CONFIG_FILE
    if not cfg_path.is_file():
        raise ModelFolderError(
            f"{path}: {CONFIG_FILE} is missing (not a ragfind model folder; "
            "convert a HuggingFace checkpoint with `ragfind export`)"
        )
    try:
        d = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFolderError(f"{cfg_path}: corrupt config ({e})") from None
    cfg = parse_config(d, cfg_path)
    for name in (MODEL_FILE, TOKENIZER_FILE):
        f = path / name
        if not f.is_file():
            raise ModelFolderError(f"{path}: {name} is missing")
        expected = cfg.files[name]
        size = f.stat().st_size
        if size != expected["size"]:
            raise ModelFolderError(
                f"{f}: size {size} bytes, the config says {expected['size']} (truncated or replaced file)"
            )
        if verify:
            digest = sha256_file(f)
            if digest != expected["sha256"]:
                raise ModelFolderError(
                    f"{f}: SHA-256 {digest[:16]}... does not match the config's "
                    f"{expected['sha256'][:16]}... (corrupt or replaced file)"
                )
    return cfg


def file_entry(path: Path) -> dict:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def _fsync_tree(folder: Path) -> None:
    for p in folder.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())


def new_staging_dir(dst: Path) -> Path:
    """A fresh temporary folder next to ``dst`` (same filesystem, so the final rename is atomic)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))


def publish_dir(staging: Path, dst: Path, *, overwrite: bool) -> Path:
    """Atomically moves a fully written staging folder to ``dst``.

    If ``dst`` exists: with ``overwrite`` it is swapped out and deleted; without, FileExistsError.
    """
    _fsync_tree(staging)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it 0700
    if dst.exists():
        if not overwrite:
            shutil.rmtree(staging, ignore_errors=True)
            raise FileExistsError(f"{dst} already exists (pass overwrite=True / --overwrite to replace it)")
        old = dst.parent / f".{dst.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(dst, old)
        os.replace(staging, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, dst)
    try:
        fd = os.open(dst.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    return dst


def write_config(folder: Path, cfg: ModelConfig) -> None:
    (folder / CONFIG_FILE).write_text(
        json.dumps(cfg.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
