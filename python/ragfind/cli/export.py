"""``ragfind export``: convert a HuggingFace checkpoint folder into a ragfind model folder."""

from __future__ import annotations

import time

from ragfind.cli._common import positive_int
from ragfind.models import ModelFolderError, distill_static, export, load_model, read_model_folder


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="convert a HuggingFace checkpoint (config + safetensors + tokenizer) into an ONNX model folder",
        description="Converts a HuggingFace checkpoint folder of a bi-encoder, cross-encoder, SPLADE or "
        "ColBERT model into a ragfind model folder (model.onnx + tokenizer.json + ragfind_model.json). "
        "BERT checkpoints are converted without torch; other architectures need "
        "pip install 'ragfind[export]'.",
    )
    p.add_argument(
        "src",
        help="HuggingFace checkpoint folder (config.json, model.safetensors, tokenizer.json); with "
        "--static, a ragfind bi-encoder folder or default model name",
    )
    p.add_argument("dst", help="model folder to create")
    p.add_argument(
        "--role",
        default="bi-encoder",
        choices=["bi-encoder", "cross-encoder", "splade", "colbert"],
        help="what the model is (default bi-encoder)",
    )
    p.add_argument("--quantize", default=None, choices=["int8"], help="dynamic int8 quantization")
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "builder", "torch"],
        help="builder: torch-free BERT conversion; torch: any architecture (the export extra); "
        "auto: builder when it can",
    )
    p.add_argument("--unfused", action="store_true", help="builder: standard ONNX operators only")
    p.add_argument("--max-length", type=positive_int, default=None, help="truncation length in word pieces")
    p.add_argument(
        "--pooling",
        default=None,
        choices=["mean", "cls", "last", "max"],
        help="bi-encoder pooling (default: from the checkpoint's sentence-transformers config, else mean)",
    )
    p.add_argument(
        "--normalize",
        default=None,
        choices=["true", "false"],
        help="L2-normalise embeddings (default: from the checkpoint, else true)",
    )
    p.add_argument("--query-prefix", default=None, help="text put before every query (e.g. 'query: ')")
    p.add_argument(
        "--document-prefix", default=None, help="text put before every document (e.g. 'passage: ')"
    )
    p.add_argument(
        "--activation",
        default=None,
        choices=["sigmoid", "identity", "softmax"],
        help="cross-encoder score activation (default: from the checkpoint, else sigmoid / softmax)",
    )
    p.add_argument(
        "--static",
        action="store_true",
        help="distil a static model (one vector per vocabulary token, model2vec layout) from the "
        "bi-encoder src instead: a query costs a lookup, not a transformer pass",
    )
    p.add_argument("--dim", type=positive_int, default=256, help="--static: PCA dimension (default 256)")
    p.add_argument("--overwrite", action="store_true", help="replace dst if it exists")
    p.set_defaults(func=run)


def run(args) -> int:
    t0 = time.perf_counter()
    if args.static:
        return _run_static(args, t0)
    try:
        dst = export(
            args.src,
            args.dst,
            role=args.role,
            quantize=args.quantize,
            backend=args.backend,
            fused=not args.unfused,
            max_length=args.max_length,
            pooling=args.pooling,
            normalize=None if args.normalize is None else args.normalize == "true",
            query_prefix=args.query_prefix,
            document_prefix=args.document_prefix,
            activation=args.activation,
            overwrite=args.overwrite,
        )
    except (FileNotFoundError, FileExistsError, ValueError, ImportError) as e:
        raise SystemExit(f"ragfind export: {e}") from None
    cfg = read_model_folder(dst)
    print(
        f"wrote {dst} ({cfg.role}, {cfg.architecture}, dim {cfg.dim}, max_length {cfg.max_length}, "
        f"quantization {cfg.quantization or 'none'}, backend {cfg.backend}) "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    print(f"fingerprint {cfg.fingerprint}")
    return 0


def _run_static(args, t0: float) -> int:
    try:
        dst = distill_static(args.src, args.dst, dim=args.dim, overwrite=args.overwrite)
    except (FileNotFoundError, FileExistsError, ValueError, ModelFolderError) as e:
        raise SystemExit(f"ragfind export: {e}") from None
    model = load_model(dst)
    print(
        f"wrote {dst} (static, vocabulary {model.table.shape[0]}, dim {model.dim}) "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    print(f"fingerprint {model.fingerprint}")
    return 0
