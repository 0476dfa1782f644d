"""``ragfind.export``: HuggingFace checkpoint folder -> ragfind model folder (optionally int8)."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import shutil
import warnings
from pathlib import Path

import numpy as np

from ragfind.models.folder import (
    MODEL_FILE,
    MODEL_INPUTS,
    POOLINGS,
    ROLE_OUTPUT,
    ROLES,
    TOKENIZER_FILE,
    ModelConfig,
    ModelFolderError,
    file_entry,
    new_staging_dir,
    publish_dir,
    sha256_file,
    write_config,
)
from ragfind.models.onnx_export.bert_graph import build_bert_onnx
from ragfind.models.onnx_export.safetensors import read_safetensors
from ragfind.models.session import make_session

QUANTIZATIONS = (None, "int8")
BACKENDS = ("auto", "builder", "torch")


def _read_json(path: Path) -> dict | list | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


def _weight_files(src: Path) -> list[Path]:
    files = sorted(src.glob("*.safetensors")) or sorted(src.glob("pytorch_model*.bin"))
    dense = sorted(src.glob("[0-9]*_Dense/*.safetensors"))
    return files + dense


def weights_digest(files: list[Path]) -> str:
    """SHA-256 over the SHA-256 of each weight file (name-independent, order as given)."""
    h = hashlib.sha256()
    for f in files:
        h.update(bytes.fromhex(sha256_file(f)))
    return h.hexdigest()


def _st_settings(src: Path, role: str, hf_config: dict) -> dict:
    """Defaults read from sentence-transformers / HF metadata next to the checkpoint."""
    out: dict = {}
    modules = _read_json(src / "modules.json") or []
    if role == "bi-encoder":
        out["pooling"], out["normalize"] = "mean", False
        for m in modules if isinstance(modules, list) else []:
            mtype = str(m.get("type", ""))
            if mtype.endswith("Pooling"):
                pc = _read_json(src / m.get("path", "") / "config.json") or {}
                if pc.get("pooling_mode_cls_token"):
                    out["pooling"] = "cls"
                elif pc.get("pooling_mode_lasttoken"):
                    out["pooling"] = "last"
                elif pc.get("pooling_mode_max_tokens"):
                    out["pooling"] = "max"
                elif pc.get("pooling_mode_mean_tokens"):
                    out["pooling"] = "mean"
                else:
                    raise ValueError(
                        f"{src}: pooling config {pc} is not supported (mean, cls, lasttoken, max)"
                    )
            elif mtype.endswith("Normalize"):
                out["normalize"] = True
            elif mtype.endswith("Dense"):
                raise ValueError(
                    f"{src}: sentence-transformers Dense modules after pooling are not supported yet"
                )
        st_cfg = _read_json(src / "config_sentence_transformers.json") or {}
        prompts = st_cfg.get("prompts") or {}
        out["query_prefix"] = prompts.get("query", "")
        out["document_prefix"] = prompts.get("document", prompts.get("passage", prompts.get("corpus", "")))
    sb = _read_json(src / "sentence_bert_config.json") or {}
    tok_cfg = _read_json(src / "tokenizer_config.json") or {}
    max_pos = int(hf_config.get("max_position_embeddings", 512))
    if hf_config.get("model_type") in ("roberta", "xlm-roberta", "camembert"):
        max_pos -= 2
    candidates = [max_pos]
    if sb.get("max_seq_length"):
        candidates.append(int(sb["max_seq_length"]))
    elif isinstance(tok_cfg.get("model_max_length"), int) and tok_cfg["model_max_length"] < 1_000_000:
        candidates.append(int(tok_cfg["model_max_length"]))
    out["max_length"] = min(candidates)
    if role == "cross-encoder":
        st = hf_config.get("sentence_transformers") or {}
        path = st.get("activation_fn") or hf_config.get("sbert_ce_default_activation_function") or ""
        out["activation"] = "identity" if "Identity" in path else "sigmoid" if "Sigmoid" in path else None
    if role == "colbert":
        out["normalize"] = True
    return out


def export(
    src,
    dst,
    role: str = "bi-encoder",
    quantize: str | None = None,
    *,
    backend: str = "auto",
    fused: bool = True,
    max_length: int | None = None,
    pooling: str | None = None,
    normalize: bool | None = None,
    query_prefix: str | None = None,
    document_prefix: str | None = None,
    activation: str | None = None,
    extra_config: dict | None = None,
    source_name: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Converts a HuggingFace checkpoint folder into a ragfind model folder.

    Args:
        src: folder with ``config.json``, weights (``model.safetensors``; ``pytorch_model.bin``
            needs the torch backend) and ``tokenizer.json``; sentence-transformers metadata
            (modules.json, 1_Pooling, sentence_bert_config.json, prompts) is read when present.
        dst: the folder to create (written in a temporary sibling, then renamed atomically).
        role: "bi-encoder", "cross-encoder" (BertForSequenceClassification), "splade"
            (BertForMaskedLM) or "colbert" (BERT + ``linear.weight`` projection).
        quantize: None (float32) or "int8" (ONNX Runtime dynamic quantization: int8 per-channel
            weights, activations quantized at run time, matmuls run as integer ops).
        backend: "builder" (torch-free BERT graph builder), "torch" (transformers + torch.onnx,
            any architecture transformers knows; needs ``pip install 'ragfind[export]'``) or
            "auto" (builder for BERT safetensors checkpoints, torch otherwise).
        fused: builder only: use ONNX Runtime's fused Attention/BiasGelu operators.
        max_length, pooling, normalize, query_prefix, document_prefix, activation: override the
            settings read from the checkpoint's metadata.
        extra_config: role-specific settings merged into the config JSON (e.g. {"colbert": {...}}).
        source_name: a human-readable origin recorded in the config.
        overwrite: replace ``dst`` if it exists.
    Returns:
        ``dst`` as a Path.
    Raises:
        FileNotFoundError: ``src`` or a required file is missing.
        FileExistsError: ``dst`` exists and ``overwrite`` is False.
        ValueError: bad role/quantize/backend/pooling, or an unsupported checkpoint.
        ImportError: the torch backend is needed but torch/transformers are not installed.
    """
    src, dst = Path(src), Path(dst)
    if role not in ROLES:
        raise ValueError(f"role={role!r}: expected one of {ROLES}")
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize={quantize!r}: expected None or 'int8'")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"pooling={pooling!r}: expected one of {POOLINGS}")
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"{src}: no config.json (expected a HuggingFace checkpoint folder)")
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} already exists (pass overwrite=True / --overwrite to replace it)")
    hf_config = _read_json(src / "config.json")
    weight_files = _weight_files(src)
    if not weight_files:
        raise FileNotFoundError(f"{src}: no model.safetensors or pytorch_model.bin")
    is_bert_st = hf_config.get("model_type") == "bert" and weight_files[0].suffix == ".safetensors"
    if backend == "auto":
        backend = "builder" if is_bert_st and (src / TOKENIZER_FILE).is_file() else "torch"
    if backend == "builder" and not (src / TOKENIZER_FILE).is_file():
        raise FileNotFoundError(
            f"{src}: tokenizer.json is missing (the builder needs a fast-tokenizer file; "
            "backend='torch' can create it from the slow tokenizer files)"
        )
    settings = _st_settings(src, role, hf_config)
    for key, value in (
        ("max_length", max_length),
        ("pooling", pooling),
        ("normalize", normalize),
        ("query_prefix", query_prefix),
        ("document_prefix", document_prefix),
        ("activation", activation),
    ):
        if value is not None:
            settings[key] = value

    staging = new_staging_dir(dst)
    try:
        fp32_path = staging / ("model.fp32.onnx" if quantize else MODEL_FILE)
        if backend == "builder":
            dim, inputs = _export_builder(src, weight_files, hf_config, role, fused, fp32_path)
        else:
            dim, inputs = _export_torch(src, hf_config, role, fp32_path, staging / TOKENIZER_FILE)
        if quantize == "int8":
            quantize_int8(fp32_path, staging / MODEL_FILE)
            fp32_path.unlink()
        if not (staging / TOKENIZER_FILE).exists():
            shutil.copyfile(src / TOKENIZER_FILE, staging / TOKENIZER_FILE)
        if role == "cross-encoder":
            num_labels = dim
            act = settings.get("activation") or ("sigmoid" if num_labels == 1 else "softmax")
        else:
            num_labels, act = None, None
        cfg = ModelConfig(
            role=role,
            output=ROLE_OUTPUT[role],
            dim=int(dim),
            max_length=int(settings["max_length"]),
            weights_sha256=weights_digest(weight_files),
            files={
                MODEL_FILE: file_entry(staging / MODEL_FILE),
                TOKENIZER_FILE: file_entry(staging / TOKENIZER_FILE),
            },
            architecture=str(hf_config.get("model_type", "")),
            source=source_name or str(hf_config.get("_name_or_path") or src.name),
            backend=backend,
            quantization=quantize,
            pooling=settings.get("pooling") if role == "bi-encoder" else None,
            normalize=bool(settings.get("normalize", False)),
            query_prefix=settings.get("query_prefix", "") or "",
            document_prefix=settings.get("document_prefix", "") or "",
            num_labels=num_labels,
            activation=act,
            pad_token_id=int(hf_config.get("pad_token_id") or 0),
            inputs=inputs,
            raw=dict(extra_config or {}),
        )
        write_config(staging, cfg)
        _smoke_test(staging, cfg)
        return publish_dir(staging, dst, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _export_builder(src, weight_files, hf_config, role, fused, out_path) -> tuple[int, list]:
    weights: dict[str, np.ndarray] = {}
    projection = None
    for f in weight_files:
        tensors = read_safetensors(f)
        if f.parent != src and role == "colbert":  # sentence-transformers / PyLate Dense module
            projection = (tensors["linear.weight"], tensors.get("linear.bias"))
        else:
            weights.update(tensors)
    model = build_bert_onnx(weights, hf_config, role, fused=fused, projection=projection)
    _save_onnx(model, out_path)
    out = model.graph.output[0]
    dim = out.type.tensor_type.shape.dim[-1].dim_value
    return int(dim), list(MODEL_INPUTS)


def _save_onnx(model, path: Path) -> None:
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
        f.flush()
        os.fsync(f.fileno())


def quantize_int8(src_path: Path, dst_path: Path) -> None:
    """Dynamic int8 quantization with ONNX Runtime.

    Weights: int8, per output channel (per-tensor scales lose too much on MiniLM: mean cosine to
    float32 0.93 vs 0.993). Activations: uint8, quantized at run time (DynamicQuantizeLinear),
    so the MatMuls run as MatMulInteger / DynamicQuantizeMatMul and the fused Attention as
    QAttention: real integer GEMMs (VNNI / AVX-512 / AVX2 kernels in MLAS), not dequantized
    weights. ``reduce_range`` (7-bit weights) avoids the int16 saturation of the AVX2/AVX-512
    (non-VNNI) u8s8 kernels. Embedding tables (Gather) stay float32: they are lookups, not math.
    """
    import onnx  # import cost: only building a model needs onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Only 2-D weight matmuls are quantized: products of two activations (attention written out
    # as MatMuls) and the per-head 3-D weights of a [CLS]-only layer, all small, stay float32.
    graph = onnx.load(str(src_path), load_external_data=False).graph
    weight_2d = {t.name for t in graph.initializer if len(t.dims) == 2}
    activation_matmuls = [
        n.name for n in graph.node if n.op_type == "MatMul" and not any(i in weight_2d for i in n.input)
    ]
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a pre-processing hint at WARNING
    try:
        quantize_dynamic(
            str(src_path),
            str(dst_path),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul", "Attention"],
            nodes_to_exclude=activation_matmuls,
            extra_options={"DefaultTensorType": 1},  # contrib-op outputs are float32
        )
    finally:
        root.setLevel(level)


def _smoke_test(folder: Path, cfg: ModelConfig) -> None:
    """Runs the fresh model once so that a broken export never gets published."""
    sess = make_session(folder / MODEL_FILE, 1, "all", None)
    feeds = {
        "input_ids": np.array([[101, 2023, 102]], np.int64),
        "attention_mask": np.ones((1, 3), np.int64),
        "token_type_ids": np.zeros((1, 3), np.int64),
    }
    names = [i.name for i in sess.get_inputs()]
    out = sess.run([cfg.output], {n: feeds[n] for n in names})[0]
    if out.shape[-1] != cfg.dim or not np.isfinite(out).all():
        raise ModelFolderError(
            f"export produced an output of shape {out.shape} (expected last dim {cfg.dim}) "
            "or non-finite values"
        )


def _export_torch(
    src: Path, hf_config: dict, role: str, out_path: Path, tokenizer_out: Path
) -> tuple[int, list]:
    """transformers + torch.onnx (TorchScript exporter) for any architecture transformers loads."""
    try:
        import torch  # the export extra
        import transformers
    except ImportError as e:
        raise ImportError(
            f"backend='torch' needs torch and transformers: pip install 'ragfind[export]' ({e})"
        ) from None
    auto = {
        "bi-encoder": transformers.AutoModel,
        "colbert": transformers.AutoModel,
        "cross-encoder": transformers.AutoModelForSequenceClassification,
        "splade": transformers.AutoModelForMaskedLM,
    }[role]
    try:  # eager attention traces to plain MatMul/Softmax (SDPA's mask code traces to advanced indexing)
        model = auto.from_pretrained(str(src), attn_implementation="eager").eval()
    except (TypeError, ValueError):
        model = auto.from_pretrained(str(src)).eval()
    if not (src / TOKENIZER_FILE).is_file():
        tok = transformers.AutoTokenizer.from_pretrained(str(src), use_fast=True)
        tok.backend_tokenizer.save(str(tokenizer_out))
    accepts_types = "token_type_ids" in inspect.signature(model.forward).parameters
    inputs = list(MODEL_INPUTS) if accepts_types else ["input_ids", "attention_mask"]
    proj = None
    if role == "colbert":
        tensors = {}
        for f in _weight_files(src):
            if f.suffix == ".safetensors":
                tensors.update(read_safetensors(f))
        if "linear.weight" not in tensors:
            raise ValueError(f"{src}: ColBERT projection 'linear.weight' not found")
        proj = torch.nn.Linear(
            tensors["linear.weight"].shape[1],
            tensors["linear.weight"].shape[0],
            bias="linear.bias" in tensors,
        )
        with torch.no_grad():
            proj.weight.copy_(torch.from_numpy(tensors["linear.weight"]))
            if "linear.bias" in tensors:
                proj.bias.copy_(torch.from_numpy(tensors["linear.bias"]))

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.proj = proj

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kw = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                kw["token_type_ids"] = token_type_ids
            out = self.model(**kw)
            if role == "cross-encoder":
                return out.logits
            if role == "splade":
                # max first (log1p and relu are monotone): same values, and the elementwise
                # work runs on (batch, vocab) rather than (batch, seq, vocab).
                pad = (attention_mask.unsqueeze(-1).to(out.logits.dtype) - 1.0) * 1e30
                return torch.log1p(torch.relu((out.logits + pad).max(dim=1).values))
            h = out.last_hidden_state
            return self.proj(h) if self.proj is not None else h

    n = 2
    example = [torch.ones((n, 8), dtype=torch.long), torch.ones((n, 8), dtype=torch.long)]
    if accepts_types:
        example.append(torch.zeros((n, 8), dtype=torch.long))
    dyn = {name: {0: "batch", 1: "sequence"} for name in inputs}
    output = ROLE_OUTPUT[role]
    dyn[output] = {0: "batch"} if role in ("cross-encoder", "splade") else {0: "batch", 1: "sequence"}
    with torch.no_grad(), warnings.catch_warnings():
        # the TorchScript exporter is deliberate: stable dynamic axes for HF encoders; torch >= 2.9 flags it
        warnings.filterwarnings(
            "ignore", message=".*legacy TorchScript-based ONNX export", category=DeprecationWarning
        )
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings(
            "ignore", message=".*aten::index operator of advanced indexing", category=UserWarning
        )
        torch.onnx.export(
            Wrapper().eval(),
            tuple(example),
            str(out_path),
            input_names=inputs,
            output_names=[output],
            dynamic_axes=dyn,
            opset_version=17,
            dynamo=False,
            do_constant_folding=True,
        )
        dim = Wrapper().eval()(*example).shape[-1]
    return int(dim), inputs
