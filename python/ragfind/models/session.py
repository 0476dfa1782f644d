"""ONNX Runtime sessions and tokenizers for a model folder (no model registry here: callers
resolve names to folders first)."""

from __future__ import annotations

import os
from pathlib import Path

from ragfind.models.folder import ModelFolderError

GRAPH_OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")


def default_threads() -> int:
    """Physical-core-ish default for intra-op threads: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def make_session(
    model_path: Path, threads: int | None, graph_optimization: str, providers, allow_spinning: bool = False
):
    """One InferenceSession (thread-safe for concurrent ``run`` calls), with clear errors."""
    import onnxruntime as ort  # import cost: loaded with the first model

    if graph_optimization not in GRAPH_OPTIMIZATION_LEVELS:
        raise ValueError(
            f"graph_optimization={graph_optimization!r}: expected one of {GRAPH_OPTIMIZATION_LEVELS}"
        )
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f"threads={threads!r}: expected a positive int or None (all available cores)")
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or default_threads()
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[graph_optimization]
    so.log_severity_level = 3
    # Pool threads sleep as soon as their work is done unless allow_spinning: ONNX Runtime's
    # spin-waiting default saves a wake-up per operator on dedicated idle cores, but on a shared
    # or oversubscribed CPU it made a short query 2-5x slower (bench/pipeline.md) and it burns
    # CPU after every call.
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    try:
        return ort.InferenceSession(
            str(model_path),
            so,
            providers=providers or ["CPUExecutionProvider"],
            # its fused kernel is slower than Add + LayerNormalization (onnx_export/bert_graph.py add_norm)
            disabled_optimizers=["SkipLayerNormFusion"],
        )
    except Exception as e:  # onnxruntime raises its own exception types (InvalidProtobuf, Fail, ...)
        raise ModelFolderError(
            f"{model_path}: ONNX Runtime cannot load the model ({type(e).__name__}: {e})"
        ) from None


def load_tokenizer(path: Path):
    from tokenizers import Tokenizer  # import cost: loaded with the first tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a plain Exception on malformed JSON
        raise ModelFolderError(f"{path}: cannot load the tokenizer ({e})") from None
    tok.no_padding()
    return tok
