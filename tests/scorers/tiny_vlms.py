"""Tiny, randomly initialised VLMs built offline from configs, for tests and benchmarks.

Every builder writes a model *and* its processor (a locally built tokenizer, the family's image /
video processor, a chat template) with ``save_pretrained`` into a directory, so tests load them
back through ``AutoProcessor`` / ``AutoModel*`` ``.from_pretrained(dir)``: the path users take
with real weights. Models have 2 layers and hidden size 32 (well under a million parameters) and
run in milliseconds on a CPU. Nothing is downloaded.

Families:

- ``"clip"``, ``"siglip"``: contrastive (``HFContrastiveScorer``).
- ``"idefics3"``: image-only generative (the SmolVLM architecture without its video processor).
- ``"llava"``: single-image generative (``input_mode="auto"`` tiles clips into a grid).
- ``"qwen2_vl"``: video-capable generative; its video processor needs torchvision.
- ``"perception_lm"`` (the paper's model; vision tower from timm), ``"llava_onevision"``,
  ``"internvl"``: video-capable generative whose video processors stack a batch's videos (clips
  of different lengths must be scored in separate micro-batches).
- ``"smolvlm"`` (SmolVLM2: video, frame timestamps in the prompt, needs num2words),
  ``"qwen2_5_vl"``, ``"qwen3_vl"`` (video with frame timestamps in the prompt), ``"gemma3"``
  (image-only).

Each generative family's tokenizer is the shared vocabulary plus the family's own special tokens
appended at the end (:data:`FAMILY_TOKENS`), so the older families' ids never move.

The tokenizer is a word-level tokenizer over a fixed vocabulary (byte-level ``Ġ`` space markers,
like GPT-2/Qwen) in which ``yes``/``Yes``/`` yes``/`` Yes`` and ``no``/``No``/`` no``/`` No`` are
single tokens and ``YES``/``NO`` are not (they map to ``<unk>``), so yes/no discovery has a
known answer: :data:`YES_TOKENS`, :data:`NO_TOKENS`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_has_transformers = importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("PIL") is not None
_has_torchvision = importlib.util.find_spec("torchvision") is not None

GENERATIVE_FAMILIES = (
    "idefics3", "llava", "qwen2_vl", "perception_lm", "llava_onevision", "internvl", "smolvlm", "qwen2_5_vl",
    "qwen3_vl", "gemma3",
)
CONTRASTIVE_FAMILIES = ("clip", "siglip")
FAMILIES = CONTRASTIVE_FAMILIES + GENERATIVE_FAMILIES
#: generative families whose processor can show a clip as a video (``input_mode="video"``)
VIDEO_FAMILIES = frozenset({"qwen2_vl", "perception_lm", "llava_onevision", "internvl", "smolvlm", "qwen2_5_vl",
                            "qwen3_vl"})
#: families whose processor needs torchvision (transformers builds video processors with it)
NEEDS_TORCHVISION = VIDEO_FAMILIES
#: families that need another optional module (Perception-LM's vision tower is a timm model, SmolVLM2's
#: processor spells frame counts with num2words)
NEEDS_MODULE = {"perception_lm": "timm", "smolvlm": "num2words"}
#: special tokens a family adds after the shared vocabulary
FAMILY_TOKENS = {
    "perception_lm": ("<|image|>", "<|video|>"),
    "llava_onevision": ("<video>",),
    "internvl": ("<img>", "</img>", "<IMG_CONTEXT>", "<video>"),
    "smolvlm": ("<video>",),
    "gemma3": ("<start_of_image>", "<end_of_image>", "<image_soft_token>", "<bos>", "<eos>"),
    "qwen3_vl": tuple("0123456789"),  # the frame times Qwen3-VL writes into the prompt ("<0.5 seconds>")
}

YES_TOKENS = ("yes", "Yes", "Ġyes", "ĠYes")
NO_TOKENS = ("no", "No", "Ġno", "ĠNo")

_WORDS = """
Does this clip contain a clear instance of goal satisfaction anywhere in it ? Answer yes or no .
The images are consecutive frames of an agent acting in environment ; the is red triangle top - down
grid world : task mission Picking up key opening door and reaching green square all count , use to open
then get achieving its doing nothing useful that robot arm lifting object off table next objects on
Is bright dark user assistant system User Assistant
""".split()

SPECIALS = [
    "<unk>",
    "<pad>",
    "<|endoftext|>",
    "<|startoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<image>",
    "<fake_token_around_image>",
    "<global-img>",
    "<end_of_utterance>",
]


def _vocab() -> dict[str, int]:
    tokens = list(SPECIALS)
    for word in _WORDS:
        for token in (word, "Ġ" + word):
            if token not in tokens:
                tokens.append(token)
    for token in (*YES_TOKENS, *NO_TOKENS, "Ċ", "ĊĊ", "Ġ", ":", "Ġ:", "\u0120\u010a"):
        if token not in tokens:
            tokens.append(token)
    return {token: i for i, token in enumerate(tokens)}


def build_tokenizer(*, model_max_length: int = 512, extra: tuple[str, ...] = (), **special_tokens):
    """A fast tokenizer over :func:`_vocab` (word level, byte-level pre-tokenizer), with the
    special tokens ``extra`` appended after it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = _vocab()
    for token in extra:
        vocab.setdefault(token, len(vocab))
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens(SPECIALS + list(extra))
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", model_max_length=model_max_length, **special_tokens
    )


def build_metaspace_tokenizer():
    """A SentencePiece-style (``▁`` marker) word-level tokenizer, for answer-discovery tests."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<pad>", "▁yes", "▁Yes", "▁YES", "yes", "▁no", "▁No", "▁Does", "▁it", "▁?"]
    raw = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    raw.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", pad_token="<pad>")


_TINY_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
_TINY_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)

# chat templates in each family's style (the real checkpoints ship theirs)
_QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
_LLAVA_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | upper }}: "
    "{% for c in message['content'] %}{% if c['type'] == 'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}\n{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def build(family: str, directory: str | Path, *, seed: int = 0) -> Path:
    """Builds the tiny ``family`` model + processor and saves both into ``directory``."""
    import torch
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"unknown tiny family {family!r}; valid: {FAMILIES}")
    directory = Path(directory)
    torch.manual_seed(seed)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # transformers' own default sub-configs warn while we override them
    try:
        if family in ("clip", "siglip"):
            model, processor = _contrastive(family, transformers)
        elif family == "idefics3":
            model, processor = _idefics3(transformers)
        elif family == "llava":
            model, processor = _llava(transformers)
        elif family == "qwen2_vl":
            model, processor = _qwen2_vl(transformers)
        else:
            model, processor = globals()[f"_{family}"](transformers)
        model.eval()
        model.save_pretrained(directory)
        processor.save_pretrained(directory)
    finally:
        transformers.logging.set_verbosity(verbosity)
    return directory


def _contrastive(family, transformers):
    import torch

    tok = build_tokenizer(
        model_max_length=32, bos_token="<|startoftext|>", eos_token="<|endoftext|>", pad_token="<pad>"
    )
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    text = dict(vocab_size=len(tok), max_position_embeddings=32, **_TINY_TEXT, **ids)
    vision = dict(image_size=32, patch_size=8, **_TINY_VISION)
    if family == "clip":
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

        config = transformers.CLIPConfig(
            text_config={**text, "projection_dim": 16},
            vision_config={**vision, "projection_dim": 16},
            projection_dim=16,
        )
        model = transformers.CLIPModel(config)
        image_processor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
        processor = transformers.CLIPProcessor(image_processor=image_processor, tokenizer=tok)
    else:
        from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

        config = transformers.SiglipConfig(text_config=text, vision_config=vision)
        model = transformers.SiglipModel(config)
        with torch.no_grad():  # random init leaves exp(logit_scale) = 1: make the softmax less flat
            model.logit_scale.fill_(2.3)
        image_processor = SiglipImageProcessorPil(size={"height": 32, "width": 32})
        processor = transformers.SiglipProcessor(image_processor=image_processor, tokenizer=tok)
    return model, processor


def _lm(tok, **extra):
    return dict(
        model_type="llama",
        vocab_size=len(tok),
        max_position_embeddings=1024,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **_TINY_TEXT,
        num_key_value_heads=2,
        initializer_range=0.2,
        **extra,
    )


def _idefics3(transformers):
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tok = build_tokenizer(bos_token="<|im_start|>", eos_token="<end_of_utterance>", pad_token="<pad>")
    config = transformers.Idefics3Config(
        text_config=_lm(tok),
        vision_config=dict(image_size=32, patch_size=8, **_TINY_VISION),
        scale_factor=2,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        pad_token_id=tok.pad_token_id,
    )
    model = transformers.Idefics3ForConditionalGeneration(config)
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": 32}, max_image_size={"longest_edge": 32}, do_image_splitting=False
    )
    # (32 / 8)^2 patches / scale_factor^2 = 4 image tokens per image
    processor = transformers.Idefics3Processor(
        image_processor=image_processor, tokenizer=tok, image_seq_len=4, chat_template=_IDEFICS3_TEMPLATE
    )
    return model, processor


def _llava(transformers):
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tok = build_tokenizer(bos_token="<|startoftext|>", eos_token="<|endoftext|>", pad_token="<pad>")
    config = transformers.LlavaConfig(
        text_config=_lm(tok),
        vision_config=dict(
            model_type="clip_vision_model", image_size=32, patch_size=8, projection_dim=16, **_TINY_VISION
        ),
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        image_seq_length=16,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        pad_token_id=tok.pad_token_id,
    )
    model = transformers.LlavaForConditionalGeneration(config)
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = transformers.LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=_LLAVA_TEMPLATE,
    )
    return model, processor


def _qwen2_vl(transformers):
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor  # needs torchvision

    tok = build_tokenizer(eos_token="<|im_end|>", pad_token="<|endoftext|>")
    ids = {
        t: tok.convert_tokens_to_ids(t)
        for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    }
    config = transformers.Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tok),
            max_position_embeddings=1024,
            num_key_value_heads=2,
            initializer_range=0.2,
            **_TINY_TEXT,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]},
            bos_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        ),
        vision_config=dict(
            depth=2,
            embed_dim=32,
            hidden_size=32,
            num_heads=4,
            mlp_ratio=2,
            patch_size=8,
            spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    model = transformers.Qwen2VLForConditionalGeneration(config)
    return model, _qwen_processor(transformers.Qwen2VLProcessor, Qwen2VLVideoProcessor, tok)


def _video_template(image: str, video: str) -> str:
    """The Qwen-style template with the family's own image and video placeholders."""
    return (
        _QWEN_TEMPLATE.replace("<|vision_start|><|image_pad|><|vision_end|>", image)
        .replace("<|vision_start|><|video_pad|><|vision_end|>", video)
    )


def _perception_lm(transformers):
    from transformers.models.perception_lm.image_processing_perception_lm import PerceptionLMImageProcessor
    from transformers.models.perception_lm.video_processing_perception_lm import PerceptionLMVideoProcessor

    tok = build_tokenizer(
        model_max_length=4096, extra=FAMILY_TOKENS["perception_lm"], bos_token="<|startoftext|>",
        eos_token="<|endoftext|>", pad_token="<pad>", image_token="<|image|>", video_token="<|video|>",
    )
    config = transformers.PerceptionLMConfig(
        text_config=_lm(tok),
        # the real checkpoints' PE vision tower (a timm ViT) at toy size: 32 px tiles of 8 px patches
        vision_config=dict(
            model_type="timm_wrapper", architecture="vit_pe_core_large_patch14_336",
            model_args=dict(embed_dim=32, depth=2, num_heads=4, img_size=(32, 32), patch_size=8, global_pool="",
                            use_post_transformer_norm=False, init_values=0.1, ref_feat_shape=(4, 4)),
        ),
        vision_use_cls_token=True,
        projector_pooling_ratio=2,  # 16 patches -> 4 tokens per tile
        image_token_id=tok.image_token_id,
        video_token_id=tok.video_token_id,
    )
    model = transformers.PerceptionLMForConditionalGeneration(config)
    # the real default tiling ("thumb+tile", up to 36 tiles), scaled down: 32 px tiles, at most 4
    image_processor = PerceptionLMImageProcessor(tile_size=32, max_num_tiles=4, vision_input_type="thumb+tile")
    video_processor = PerceptionLMVideoProcessor(size={"height": 32, "width": 32})
    processor = transformers.PerceptionLMProcessor(
        video_processor=video_processor, image_processor=image_processor, tokenizer=tok, patch_size=8,
        pooling_ratio=2, chat_template=_video_template("<|image|>", "<|video|>"),
    )
    return model, processor


def _llava_onevision(transformers):
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor

    tok = build_tokenizer(model_max_length=4096, extra=FAMILY_TOKENS["llava_onevision"], eos_token="<|im_end|>",
                          pad_token="<pad>")
    pinpoints = [[32, 32], [32, 64], [64, 32], [64, 64]]
    config = transformers.LlavaOnevisionConfig(
        text_config=_lm(tok),
        vision_config=dict(model_type="siglip_vision_model", image_size=32, patch_size=8, **_TINY_VISION),
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        video_token_index=tok.convert_tokens_to_ids("<video>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        image_grid_pinpoints=pinpoints,
    )
    model = transformers.LlavaOnevisionForConditionalGeneration(config)
    size = {"height": 32, "width": 32}
    image_processor = LlavaOnevisionImageProcessorPil(size=size, image_grid_pinpoints=pinpoints)
    video_processor = LlavaOnevisionVideoProcessor(size=size)
    processor = transformers.LlavaOnevisionProcessor(
        image_processor=image_processor, tokenizer=tok, video_processor=video_processor, num_image_tokens=16,
        vision_feature_select_strategy="full", chat_template=_video_template("<image>", "<video>"),
    )
    return model, processor


def _internvl(transformers):
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

    tok = build_tokenizer(
        model_max_length=4096, extra=FAMILY_TOKENS["internvl"], eos_token="<|im_end|>", pad_token="<pad>",
        start_image_token="<img>", end_image_token="</img>", context_image_token="<IMG_CONTEXT>",
        video_token="<video>",
    )
    config = transformers.InternVLConfig(
        text_config=_lm(tok),
        vision_config=dict(image_size=[32, 32], patch_size=[8, 8], **_TINY_VISION),
        image_token_id=tok.convert_tokens_to_ids("<IMG_CONTEXT>"),
        image_seq_length=4,  # (32 / 8)^2 patches * downsample_ratio^2
        downsample_ratio=0.5,
    )
    model = transformers.InternVLForConditionalGeneration(config)
    size = {"height": 32, "width": 32}
    # the real default (crop_to_patches, up to 12 tiles) scaled down to at most 4
    image_processor = GotOcr2ImageProcessorPil(size=size, crop_to_patches=True, min_patches=1, max_patches=4)
    video_processor = InternVLVideoProcessor(size=size)
    processor = transformers.InternVLProcessor(
        image_processor=image_processor, tokenizer=tok, video_processor=video_processor, image_seq_length=4,
        chat_template=_video_template("<IMG_CONTEXT>", "<video>"),
    )
    return model, processor


def _smolvlm(transformers):
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    tok = build_tokenizer(extra=FAMILY_TOKENS["smolvlm"], model_max_length=4096, bos_token="<|im_start|>",
                          eos_token="<end_of_utterance>", pad_token="<pad>")
    config = transformers.SmolVLMConfig(
        text_config=_lm(tok),
        vision_config=dict(image_size=32, patch_size=8, **_TINY_VISION),
        scale_factor=2,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        pad_token_id=tok.pad_token_id,
    )
    model = transformers.SmolVLMForConditionalGeneration(config)
    # the real default splits a frame into tiles (do_image_splitting=True): kept, scaled down to 32 px
    image_processor = SmolVLMImageProcessorPil(
        size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=True
    )
    video_processor = SmolVLMVideoProcessor(size={"longest_edge": 32}, max_image_size={"longest_edge": 32})
    template = _IDEFICS3_TEMPLATE.replace(
        "{% elif line['type'] == 'image' %}{{ '<image>' }}",
        "{% elif line['type'] == 'image' %}{{ '<image>' }}{% elif line['type'] == 'video' %}{{ '<video>' }}",
    )
    processor = transformers.SmolVLMProcessor(
        image_processor=image_processor, tokenizer=tok, video_processor=video_processor, image_seq_len=4,
        chat_template=template,
    )
    return model, processor


def _qwen_vision(**extra):
    return dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, patch_size=8, spatial_merge_size=2,
                temporal_patch_size=2, **extra)


def _qwen_processor(processor_cls, video_processor_cls, tok):
    """The Qwen families' processor on 16-32 px inputs (8 px patches, 2x2 merge, 2-frame temporal patches)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    kwargs = dict(size={"shortest_edge": 16 * 16, "longest_edge": 32 * 32}, patch_size=8, merge_size=2,
                  temporal_patch_size=2)
    return processor_cls(image_processor=Qwen2VLImageProcessorPil(**kwargs), tokenizer=tok,
                         video_processor=video_processor_cls(**kwargs), chat_template=_QWEN_TEMPLATE)


def _qwen_tokens(tok):
    return {
        "image_token_id": tok.convert_tokens_to_ids("<|image_pad|>"),
        "video_token_id": tok.convert_tokens_to_ids("<|video_pad|>"),
        "vision_start_token_id": tok.convert_tokens_to_ids("<|vision_start|>"),
        "vision_end_token_id": tok.convert_tokens_to_ids("<|vision_end|>"),
    }


def _qwen_text(tok, **extra):
    return dict(
        vocab_size=len(tok), max_position_embeddings=1024, num_key_value_heads=2, initializer_range=0.2,
        **_TINY_TEXT, bos_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        **extra,
    )


def _qwen2_5_vl(transformers):
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tok = build_tokenizer(eos_token="<|im_end|>", pad_token="<|endoftext|>")
    config = transformers.Qwen2_5_VLConfig(
        text_config=_qwen_text(
            tok, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]}
        ),
        vision_config=_qwen_vision(out_hidden_size=32, window_size=16, fullatt_block_indexes=[1]),
        **_qwen_tokens(tok),
    )
    model = transformers.Qwen2_5_VLForConditionalGeneration(config)
    return model, _qwen_processor(transformers.Qwen2_5_VLProcessor, Qwen2VLVideoProcessor, tok)


def _qwen3_vl(transformers):
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tok = build_tokenizer(extra=FAMILY_TOKENS["qwen3_vl"], eos_token="<|im_end|>", pad_token="<|endoftext|>")
    config = transformers.Qwen3VLConfig(
        text_config=_qwen_text(
            tok, head_dim=8,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2],
                             "mrope_interleaved": True},
        ),
        vision_config=_qwen_vision(out_hidden_size=32, num_position_embeddings=16, deepstack_visual_indexes=[1]),
        **_qwen_tokens(tok),
    )
    model = transformers.Qwen3VLForConditionalGeneration(config)
    return model, _qwen_processor(transformers.Qwen3VLProcessor, Qwen3VLVideoProcessor, tok)


def _gemma3(transformers):
    import torch
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    tok = build_tokenizer(
        extra=FAMILY_TOKENS["gemma3"], model_max_length=4096, bos_token="<bos>", eos_token="<eos>",
        pad_token="<pad>", boi_token="<start_of_image>", eoi_token="<end_of_image>", image_token="<image_soft_token>",
    )
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<start_of_image>", "<end_of_image>", "<image_soft_token>")}
    config = transformers.Gemma3Config(
        text_config=dict(
            vocab_size=len(tok), max_position_embeddings=1024, num_key_value_heads=2, head_dim=8,
            initializer_range=0.2, **_TINY_TEXT, sliding_window=64, pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        ),
        vision_config=dict(model_type="siglip_vision_model", image_size=32, patch_size=8, **_TINY_VISION),
        mm_tokens_per_image=4,  # 4x4 patches pooled to 2x2
        boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
    )
    model = transformers.Gemma3ForConditionalGeneration(config)
    with torch.no_grad():  # Gemma 3 initialises its vision projection to zeros: every image would look alike
        model.model.multi_modal_projector.mm_input_projection_weight.normal_(0.0, 0.2)
    image_processor = Gemma3ImageProcessorPil(size={"height": 32, "width": 32})
    template = (
        "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
        "{% for c in message['content'] %}{% if c['type'] == 'image' %}<start_of_image>"
        "{% else %}{{ c['text'] }}{% endif %}{% endfor %}<end_of_turn>\n{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
    )
    processor = transformers.Gemma3Processor(
        image_processor=image_processor, tokenizer=tok, image_seq_length=4, chat_template=template
    )
    return model, processor


def noise_clips(batch: int = 4, steps: int = 3, size: int = 12, seed: int = 0):
    """Clips of random RGB frames (TensorDict ``[batch, steps]`` with ``"pixels"`` and ``"mask"``)."""
    import torch
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (batch, steps, size, size, 3), generator=g, dtype=torch.uint8)
    return TensorDict(pixels=pixels, mask=torch.ones(batch, steps, dtype=torch.bool), batch_size=[batch, steps])
