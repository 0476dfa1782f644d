"""ONNX Runtime encoders, cross-encoders, the model folder format and the exporter.

Model folder format (version 1)
-------------------------------
A folder with three files::

    model.onnx           the network; inputs int64 [batch, sequence]: input_ids, attention_mask
                         and (for BERT) token_type_ids; one float32 output named per role
    tokenizer.json       a HuggingFace `tokenizers` file (padding/truncation are set at load)
    ragfind_model.json   the config below

``ragfind_model.json`` keys (unknown keys are kept, so roles can add their own sub-objects,
e.g. ``"colbert": {...}`` / ``"splade": {...}`` via ``export(..., extra_config=...)``):

================  ===========================================================================
format            "ragfind-model"
format_version    1
role              "bi-encoder" | "cross-encoder" | "splade" | "colbert"
architecture      HF model_type, e.g. "bert"
source            where the weights came from (free text)
backend           "builder" (torch-free BERT builder) | "torch" (transformers + torch.onnx)
quantization      null | "int8" (dynamic: int8 weights per channel, uint8 activations at run time)
inputs            subset of ["input_ids", "attention_mask", "token_type_ids"] the graph takes
output            "token_embeddings" [batch, seq, dim] (bi-encoder, colbert) |
                  "logits" [batch, num_labels] (cross-encoder) |
                  "sparse_embedding" [batch, vocab] = max_t log(1 + relu(MLM logits)) (splade)
dim               last dimension of the output (embedding size / num_labels / vocab size)
max_length        truncation length in word pieces, special tokens included
pooling           bi-encoder: "mean" | "cls" | "last" | "max"; null otherwise
normalize         whether the model's vectors are meant to be L2-normalised
query_prefix      prepended to queries (e5/bge style), "" if none
document_prefix   prepended to documents, "" if none
num_labels        cross-encoder: number of logits; null otherwise
activation        cross-encoder: "sigmoid" | "identity" | "softmax"; null otherwise
pad_token_id      id used for padding
weights_sha256    SHA-256 over the SHA-256 of the source weight files (fingerprint basis)
files             {"model.onnx": {"size", "sha256"}, "tokenizer.json": {"size", "sha256"}},
                  checked at load (size always, SHA-256 unless verify=False)
================  ===========================================================================

Other roles' encoders (SPLADE, ColBERT) subclass ``OnnxModel``: set ``_expected_role``, then use
``self.tokenizer`` (truncation at max_length already set), ``self._check_text(text, where)``,
``self._run_batches(items, batch_size, max_batch_tokens, show_progress, desc)`` (tokenizes, runs
length-sorted batches under the token budget, yields ``(idx, output, attention_mask)``), or its
parts ``self._feeds(encodings) -> (feeds, attention_mask)`` (pads a batch to its longest item)
and ``self._run(feeds)`` (runs the config's output and checks its shape); ``self.config.raw``
holds role-specific keys.

The fingerprint (``Encoder.fingerprint``) hashes weights_sha256, quantization, role, output,
dim, pooling, normalize, max_length, prefixes and the tokenizer's SHA-256: indexes store it and
``check_fingerprint`` refuses vectors from another model.
"""

from __future__ import annotations

from ragfind.models.base import _ModelBase as OnnxModel
from ragfind.models.cross_encoder import CrossEncoder
from ragfind.models.encoder import Encoder, l2_normalize, pool
from ragfind.models.folder import (
    CONFIG_FILE,
    FORMAT_VERSION,
    ModelConfig,
    ModelFolderError,
    ModelMismatchError,
    read_model_folder,
)
from ragfind.models.onnx_export.convert import export, quantize_int8
from ragfind.models.registry import cache_dir, clear_cache, default_model_names, resolve_model_path
from ragfind.models.static import StaticEncoder, distill_static, is_static_folder
from ragfind.models.static_fit import fit_query_encoder

__all__ = [
    "CONFIG_FILE",
    "FORMAT_VERSION",
    "CrossEncoder",
    "Encoder",
    "ModelConfig",
    "ModelFolderError",
    "ModelMismatchError",
    "OnnxModel",
    "StaticEncoder",
    "cache_dir",
    "check_fingerprint",
    "clear_cache",
    "default_model_names",
    "distill_static",
    "export",
    "fit_query_encoder",
    "l2_normalize",
    "load_model",
    "pool",
    "quantize_int8",
    "read_model_folder",
]


def load_model(path_or_name, **kwargs):
    """Loads a model folder or a default model by name, as the class its role calls for.

    Args:
        path_or_name: a folder from ``ragfind export``, or "all-MiniLM-L6-v2" /
            "all-MiniLM-L6-v2-int8" (built offline into the cache on first use).
        **kwargs: passed to the class (threads, graph_optimization, providers, ...).
    Returns:
        ``Encoder`` for bi-encoders, ``CrossEncoder`` for cross-encoders, ``StaticEncoder``
        for a static model folder (model2vec layout: model.safetensors + config.json +
        tokenizer.json, from model2vec, ``distill_static`` or ``fit_query_encoder``). SPLADE and ColBERT
        folders are loaded by their own classes (``ragfind.SpladeEncoder``, ``ragfind.ColbertEncoder``
        where available); here they raise.
    Raises:
        ModelFolderError: missing/corrupt folder, unknown name, or a role this function does not load.
    """
    path = resolve_model_path(path_or_name)
    if is_static_folder(path):
        return StaticEncoder(path, **kwargs)
    cfg = read_model_folder(path, verify=kwargs.get("verify", True))
    if cfg.role == "bi-encoder":
        return Encoder(path, **kwargs)
    if cfg.role == "cross-encoder":
        return CrossEncoder(path, **kwargs)
    raise ModelFolderError(f"{path}: role {cfg.role!r} is loaded by its own encoder class, not load_model")


def check_fingerprint(expected: str, actual: str, what: str = "index") -> None:
    """Raises ModelMismatchError unless two model fingerprints are equal.

    Args:
        expected: the fingerprint stored with the vectors (e.g. in an index).
        actual: the fingerprint of the model about to produce query vectors.
        what: names the thing holding ``expected`` in the message.
    """
    if expected != actual:
        raise ModelMismatchError(
            f"this {what} was built with embedding model {expected!r} but the query model is {actual!r}: "
            "a query vector from one model cannot be meaningfully compared to document vectors from a "
            f"different model; re-encode the documents or load the model the {what} was built with"
        )
