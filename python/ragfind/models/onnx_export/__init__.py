"""HuggingFace checkpoint folder -> ragfind model folder: the torch-free BERT graph builder
(``bert_graph``), a safetensors reader, and ``export`` / ``quantize_int8`` (``convert``)."""

from ragfind.models.onnx_export.convert import export, quantize_int8

__all__ = ["export", "quantize_int8"]
