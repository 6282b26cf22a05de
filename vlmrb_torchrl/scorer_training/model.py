"""The small CLIP model, its word-level tokenizer and its processor, built locally (no download).

The tokenizer is a ``tokenizers`` word-level model over the caption vocabulary that lowercases,
splits on whitespace and punctuation and appends begin/end-of-text tokens: transformers' CLIP
text tower pools the hidden state at the first end-of-text token (``text_config.eos_token_id``),
so a tokenizer that does not append it would silently pool the wrong position. The processor
resizes any frame to ``image_size`` x ``image_size`` without cropping (MiniGrid frames of
non-square grids keep all their cells).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["SPECIAL_TOKENS", "build_tokenizer", "build_processor", "build_model", "MODEL_SIZES"]

#: ``(pad, unknown, begin, end)``; ids 0..3. The end-of-text id must not be 2: transformers'
#: CLIP treats ``eos_token_id == 2`` as a legacy config and pools at the largest token id.
SPECIAL_TOKENS = ("<pad>", "<unk>", "<|startoftext|>", "<|endoftext|>")

#: Model sizes: ``small`` sees 64 px frames in 8 px patches (an 8x8 grid of patches), ``atari`` in 16 px ones,
#: ``fine`` in 4 px ones (a 16x16 grid, 32 channels: 79,937 parameters, ~2.5x ``small``'s cost per frame).
MODEL_SIZES: dict[str, dict[str, Any]] = {
    "small": {"image_size": 64, "patch_size": 8, "hidden": 64, "vision_layers": 3, "text_layers": 2, "heads": 4,
              "mlp": 256, "projection_dim": 64, "max_text_len": 32},
    # Atari: the cues (the score's digits) are a few pixels of a fixed place in the frame; with 16 px
    # patches (a 4x4 grid) the class token averages 16 patches, not 64, at initialisation, and the
    # 8-px model stayed at constant predictions for 250-400 steps
    "atari": {"image_size": 64, "patch_size": 16, "hidden": 64, "vision_layers": 3, "text_layers": 2, "heads": 4,
              "mlp": 256, "projection_dim": 64, "max_text_len": 32},
    # robosuite Lift: the cube is ~9 px wide, a finger 1-2 px, so an 8 px patch holds the whole contact and its
    # embedding (192 values -> 64) blurs it; 4 px patches (a 16x16 grid), narrower to keep the cost at ~2.5x small's
    "fine": {"image_size": 64, "patch_size": 4, "hidden": 32, "vision_layers": 3, "text_layers": 2, "heads": 4,
             "mlp": 128, "projection_dim": 64, "max_text_len": 32},
    "micro": {"image_size": 32, "patch_size": 8, "hidden": 16, "vision_layers": 1, "text_layers": 1, "heads": 2,
              "mlp": 32, "projection_dim": 16, "max_text_len": 32},
}


def build_tokenizer(words: Sequence[str], *, max_length: int = 32):
    """A transformers fast tokenizer over ``words`` that appends ``<|startoftext|>`` / ``<|endoftext|>``.

    Examples:
        >>> tok = build_tokenizer(["the", "agent", "holds", "key"])
        >>> tok("The agent holds the red key")["input_ids"]
        [2, 7, 4, 5, 7, 1, 6, 3]
    """
    import transformers
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for word in sorted(set(words)):
        vocab.setdefault(word, len(vocab))
    pad, unk, bos, eos = SPECIAL_TOKENS
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=[(bos, vocab[bos]), (eos, vocab[eos])]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=bos, eos_token=eos, pad_token=pad, unk_token=unk,
        model_max_length=max_length,
    )


def build_processor(tokenizer, *, image_size: int = 64):
    """A ``CLIPProcessor``: the tokenizer, and frames resized to ``image_size`` squared, no crop."""
    import transformers

    image_processor = transformers.CLIPImageProcessor(
        size={"height": image_size, "width": image_size},
        do_center_crop=False,
        crop_size={"height": image_size, "width": image_size},
    )
    return transformers.CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)


def build_model(vocab_size: int, *, size: str = "small", seed: int = 0):
    """A randomly initialised transformers ``CLIPModel`` of the given ``size`` (see :data:`MODEL_SIZES`).

    Examples:
        >>> model = build_model(100, size="micro")
        >>> model.config.text_config.eos_token_id, model.config.vision_config.image_size
        (3, 32)
    """
    import torch
    import transformers

    s = MODEL_SIZES[size]
    config = transformers.CLIPConfig(
        text_config={
            "vocab_size": vocab_size, "hidden_size": s["hidden"], "intermediate_size": s["mlp"],
            "num_hidden_layers": s["text_layers"], "num_attention_heads": s["heads"],
            "max_position_embeddings": s["max_text_len"], "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3,
            "projection_dim": s["projection_dim"],
        },
        vision_config={
            "image_size": s["image_size"], "patch_size": s["patch_size"], "hidden_size": s["hidden"],
            "intermediate_size": s["mlp"], "num_hidden_layers": s["vision_layers"], "num_attention_heads": s["heads"],
            "projection_dim": s["projection_dim"],
        },
        projection_dim=s["projection_dim"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.CLIPModel(config)
