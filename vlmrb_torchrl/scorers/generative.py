"""Generative VLM scorer: P(yes) from any transformers image-text-to-text model.

``make_scorer("hf:<hub id or local dir>")`` builds an :class:`HFGenerativeScorer`. transformers
and Pillow are imported when a scorer is built, never when this module is imported.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from vlmrb_torchrl.scorers import _hf
from vlmrb_torchrl.scorers._frames import grid_image
from vlmrb_torchrl.scorers._hashing import prompt_hash
from vlmrb_torchrl.scorers.base import check_clips, register_scorer, validate_scores
from vlmrb_torchrl.scorers.prompts import default_prompt, format_prompt

__all__ = ["HFGenerativeScorer", "answer_token_ids", "micro_batches", "INPUT_MODES", "FAMILY_IMAGE_DEFAULTS"]

#: How a clip is shown to a generative model; ``"auto"`` picks ``"video"`` when the processor has a
#: video processor and its chat template a video entry, ``"grid"`` for known single-image
#: families, else ``"images"``.
INPUT_MODES = ("auto", "video", "images", "grid")

#: Model types trained on one image per prompt: ``input_mode="auto"`` tiles the clip into a grid.
SINGLE_IMAGE_MODEL_TYPES = frozenset({"llava", "llava_next", "paligemma", "mllama", "blip-2", "instructblip"})

#: Image-processor settings for frames of RL size (64-256 px), by ``config.json`` model type: one tile
#: per frame instead of the tiling meant for documents and photos (Perception-LM's default turns a
#: 64x64 frame into 37 tiles of 448 px, ~9.5k tokens; SmolVLM's into 17). They apply to the
#: ``images`` and ``grid`` modes; ``processor_kwargs`` overrides any of them, ``family_defaults=False``
#: drops them all.
FAMILY_IMAGE_DEFAULTS: dict[str, dict[str, Any]] = {
    "perception_lm": {"vision_input_type": "vanilla"},
    "idefics3": {"do_image_splitting": False},
    "smolvlm": {"do_image_splitting": False},
    "internvl": {"crop_to_patches": False},
    "gemma3": {"do_pan_and_scan": False},
}

#: Dependencies some families' processors or vision towers import lazily (the ``vlm`` extra has them).
_FAMILY_IMPORTS = ("timm", "num2words")

#: A generation prompt that ends inside an opened reasoning block (thinking-only templates, e.g.
#: Qwen3-VL-Thinking) is closed with this, so the next token is the answer.
_THINK_OPEN, _THINK_CLOSE = "<think>", "\n\n</think>\n\n"


def answer_token_ids(tokenizer: Any, word: str) -> list[int]:
    """Token ids of the single-token spellings of an answer word in a tokenizer's vocabulary.

    Looks for ``word`` in lower, capitalized and upper case, with and without a leading space
    (``"yes"``, ``" yes"``, ``"Yes"``, ``" Yes"``, ``"YES"``, ``" YES"``): each spelling the
    tokenizer encodes as exactly one token, plus the vocabulary entries written with the
    byte-level (``"Ġ"``) or SentencePiece (``"▁"``) space marker. Spellings that need several
    tokens are skipped, so the probability of an answer is the sum over its one-token variants.

    Args:
        tokenizer: a transformers tokenizer (``encode``, ``convert_tokens_to_ids``).
        word (str): the answer, e.g. ``"yes"``.

    Returns:
        list of int: sorted, de-duplicated ids (empty when no spelling is a single token).

    Examples:
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> vocab = {"[UNK]": 0, "yes": 1, "Yes": 2, "YES": 3, "no": 4}  # a tiny word-level tokenizer
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")),
        ...                               unk_token="[UNK]")
        >>> answer_token_ids(tok, "yes"), answer_token_ids(tok, "no")
        ([1, 2, 3], [4])

        With a real VLM's tokenizer (Qwen2-VL's, from its weights' directory):

        >>> tok = PreTrainedTokenizerFast.from_pretrained("Qwen/Qwen2-VL-2B-Instruct")  # doctest: +SKIP
        >>> [tok.decode([i]) for i in answer_token_ids(tok, "yes")]  # doctest: +SKIP
        [' YES', ' Yes', ' yes', 'YES', 'Yes', 'yes']
    """
    if not isinstance(word, str) or not word.strip():
        raise ValueError(f"answer words must be non-empty str, got {word!r}.")
    word = word.strip()
    spellings = {word, word.lower(), word.capitalize(), word.upper()}
    ids: set[int] = set()
    unk = getattr(tokenizer, "unk_token_id", None)
    for spelling in spellings:
        for text in (spelling, " " + spelling):
            encoded = tokenizer.encode(text, add_special_tokens=False)
            if len(encoded) == 1 and encoded[0] != unk:
                ids.add(int(encoded[0]))
        for token in (spelling, "Ġ" + spelling, "▁" + spelling):
            token_id = tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id >= 0 and token_id != unk:
                ids.add(token_id)
    return sorted(ids)


class HFGenerativeScorer:
    """Scores clips with a generative VLM: ``P(yes) / (P(yes) + P(no))`` for a yes/no question.

    Works with any transformers image-text-to-text model loaded through ``AutoProcessor`` and
    ``AutoModelForImageTextToText`` (Perception-LM, Qwen2/2.5/3-VL, SmolVLM / Idefics3,
    LLaVA(-OneVision), Gemma 3, InternVL, ...), from the Hub or a local directory. Each clip's
    real frames (``mask`` True) are shown to the model, according to ``input_mode``:

    - ``"video"``: one video (needs a processor with a video processor and a chat template
      with a video entry, e.g. Perception-LM, Qwen2/2.5/3-VL, SmolVLM2, LLaVA-OneVision,
      InternVL; transformers' video processors need torchvision);
    - ``"images"``: one image per frame, in order;
    - ``"grid"``: the frames tiled row-major into one image, for single-image models;
    - ``"auto"`` (default): ``"video"`` when possible, ``"grid"`` for single-image families
      (:data:`SINGLE_IMAGE_MODEL_TYPES`), else ``"images"``.

    The prompt goes through the model's own chat template with the generation prompt appended,
    and one forward pass gives the next-token distribution. The score sums the probability of
    every single-token spelling of each answer (:func:`answer_token_ids`: ``"Yes"``,
    ``" yes"``, ``"YES"``, ...) and renormalises over the two answers, so it lies in ``[0, 1]``
    whatever mass the model puts on other tokens. Clips are scored in micro-batches of
    ``batch_size`` (right-padded; each row's logits are read at its last real token; in
    ``"video"`` mode clips with the same number of frames, see :func:`micro_batches`) under
    :func:`torch.inference_mode`. Calls are serialised by a lock, so one scorer can be shared by
    threads (e.g. :class:`~vlmrb_torchrl.AsyncScorer`'s worker).

    Args:
        model (str): a Hub id (``"HuggingFaceTB/SmolVLM-256M-Instruct"``) or a local directory
            written by ``save_pretrained`` / ``hf download``.

    Keyword Args:
        prompt (str, optional): the question; ``{task}`` is filled from ``task``. Defaults to
            :func:`~vlmrb_torchrl.scorers.prompts.default_prompt` for ``env_family``.
        env_family (str, optional): picks the default prompt (``"generic"``, ``"minigrid"``,
            ``"atari"``, ``"robosuite"``). Defaults to ``"generic"``.
        task (str, optional): the env's mission / task text inserted into the prompt.
        frame_key (NestedKey, optional): the frames entry, uint8 ``[B, T, H, W, C]``. Defaults to
            ``"pixels"``.
        mask_key (NestedKey, optional): the validity mask, bool ``[B, T]``. Defaults to ``"mask"``.
        input_mode (str, optional): one of :data:`INPUT_MODES`. Defaults to ``"auto"``.
        max_frames (int, optional): show at most this many evenly spaced real frames per clip;
            ``None`` shows all. Defaults to ``None``.
        batch_size (int, optional): clips per forward pass. Defaults to ``8``.
        device (str or torch.device, optional): defaults to CUDA when available, else CPU.
        dtype (torch.dtype or str, optional): defaults to bfloat16 on CUDA, float32 on CPU.
        revision (str, optional): Hub revision (branch, tag or commit).
        local_files_only (bool, optional): never download; ``None`` (default) loads from the
            cache when the model is cached or ``HF_HUB_OFFLINE=1``, else downloads.
        cache_dir (str, optional): the Hugging Face cache directory (default: ``HF_HUB_CACHE``).
        answers (tuple of str, optional): the positive and negative answer words. Defaults to
            ``("yes", "no")``.
        system_prompt (str, optional): a system message put before the question.
        chat_template (str, optional): a Jinja chat template replacing the processor's.
        processor_kwargs (dict, optional): extra kwargs for every processor call, e.g.
            ``{"size": {"longest_edge": 384}}``; they override :data:`FAMILY_IMAGE_DEFAULTS`.
        family_defaults (bool, optional): apply the model type's small-frame image settings
            (:data:`FAMILY_IMAGE_DEFAULTS`: one tile per frame). Defaults to ``True``.
        video_fps (float, optional): frames per second of the clips (env steps per second).
            In ``"video"`` mode the video processor gets each clip's frame positions and this rate
            (``video_metadata``), so families that write frame times into the prompt (Qwen3-VL,
            SmolVLM2) or use them for positions (Qwen2.5-VL) see real times. ``None`` (default)
            passes nothing: the processor's own assumption (e.g. Qwen3-VL's 24 fps).
        enable_thinking (bool, optional): passed to the chat template (Qwen3-style templates read
            it). ``False`` (default) also closes a reasoning block that a thinking-only template
            opens in the generation prompt (``<think>``), so the next token is the answer;
            ``None`` passes nothing and leaves the prompt as the template writes it.
        trust_remote_code (bool, optional): passed to ``from_pretrained``. Defaults to ``False``.
        model_kwargs (dict, optional): extra ``from_pretrained`` kwargs for the model (e.g.
            ``{"attn_implementation": "sdpa"}``).
        hub_timeout (float, optional): seconds to wait for the Hub when a model is not cached
            before failing. Defaults to ``5.0``.

    Attributes:
        prompt (str): the question asked.
        in_keys (list): ``[frame_key, mask_key]``.
        input_mode (str): the resolved mode (never ``"auto"``).
        yes_token_ids, no_token_ids (list of int): the answer variants summed.
        provenance (dict): ``backend="hf"``, ``model``, ``source`` (``"local"``/``"hub"``),
            ``revision`` (Hub commit), ``weights_hash`` (local directories), ``model_type``,
            ``prompt_hash``, ``dtype``, ``input_mode``, ``max_frames``, answer ids, versions.

    Raises:
        FileNotFoundError: the model is neither a local directory nor available from the Hub
            cache / network (raised at construction, in about a second when offline).
        ImportError: transformers / Pillow (or torchvision for video processors) are missing.
        ValueError: a bad option, a model without a chat template, or a tokenizer with no
            single-token spelling of an answer.

    Examples:
        A model that is not there fails at construction, before anything is loaded:

        >>> HFGenerativeScorer("/no/such/model")
        Traceback (most recent call last):
        ...
        FileNotFoundError: HFGenerativeScorer: model '/no/such/model' is not a directory. ...

        With a VLM's weights (the tests run every supported family on tiny random models):

        >>> scorer = HFGenerativeScorer("HuggingFaceTB/SmolVLM-256M-Instruct",  # doctest: +SKIP
        ...                             env_family="minigrid", task=env.mission, max_frames=8)
        >>> scorer.score(clips)  # clips: TensorDict [B, T] with "pixels" and "mask"  # doctest: +SKIP
        tensor([0.8123, 0.1042, ...])
        >>> from vlmrb_torchrl.scorers import make_scorer
        >>> make_scorer("hf:./my-local-qwen2-vl", dtype="bfloat16")  # doctest: +SKIP
    """

    def __init__(
        self,
        model: str,
        *,
        prompt: str | None = None,
        env_family: str = "generic",
        task: str | None = None,
        frame_key: NestedKey = "pixels",
        mask_key: NestedKey = "mask",
        input_mode: str = "auto",
        max_frames: int | None = None,
        batch_size: int = 8,
        device: Any = None,
        dtype: Any = None,
        revision: str | None = None,
        local_files_only: bool | None = None,
        cache_dir: str | None = None,
        answers: Sequence[str] = ("yes", "no"),
        system_prompt: str | None = None,
        chat_template: str | None = None,
        processor_kwargs: dict | None = None,
        trust_remote_code: bool = False,
        model_kwargs: dict | None = None,
        hub_timeout: float = 5.0,
        family_defaults: bool = True,
        video_fps: float | None = None,
        enable_thinking: bool | None = False,
    ) -> None:
        self._init_kwargs = {k: v for k, v in locals().items() if k != "self"}  # for pickling: see __reduce__
        owner = type(self).__name__
        # cheap checks first: a typo fails before anything is loaded
        self.prompt = default_prompt(env_family, task=task) if prompt is None else format_prompt(prompt, task)
        if input_mode not in INPUT_MODES:
            raise ValueError(f"{owner}.input_mode must be one of {list(INPUT_MODES)}, got input_mode={input_mode!r}.")
        _hf.check_sizes(owner, batch_size=batch_size, max_frames=max_frames)
        if isinstance(answers, str) or len(answers) != 2:
            raise ValueError(f"{owner}.answers must be a pair (positive, negative) of words, got answers={answers!r}.")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"{owner}.system_prompt must be a str or None, got {type(system_prompt).__name__}.")
        _hf.check_dicts(owner, processor_kwargs=processor_kwargs)
        if video_fps is not None and (
            isinstance(video_fps, bool) or not isinstance(video_fps, (int, float)) or not video_fps > 0
        ):
            raise ValueError(f"{owner}.video_fps must be a float > 0 or None, got video_fps={video_fps!r}.")
        if enable_thinking is not None and not isinstance(enable_thinking, bool):
            raise TypeError(f"{owner}.enable_thinking must be a bool or None, got {enable_thinking!r}.")
        self.source = _hf.ModelSource(
            model, device=device, dtype=dtype, revision=revision, local_files_only=local_files_only,
            cache_dir=cache_dir, trust_remote_code=trust_remote_code, model_kwargs=model_kwargs,
            hub_timeout=hub_timeout,
        )
        self.device, self.dtype = self.source.device_dtype(owner)
        transformers, where, load = self.source.locate(owner)
        config = transformers.AutoConfig.from_pretrained(where["path"], **load)
        if getattr(config, "model_type", None) in _hf.CONTRASTIVE_MODEL_TYPES:
            raise ValueError(
                f"{owner}: {model!r} is a {config.model_type} model, not an image-text-to-text model. For "
                f"CLIP/SigLIP use make_scorer('clip:{model}')."
            )
        self.processor = _load_processor(transformers, where["path"], load, owner=owner, model=model)
        tokenizer = getattr(self.processor, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(f"{owner}: the processor of {model!r} has no tokenizer; it is not a text-generating VLM.")
        if chat_template is not None:
            self.processor.chat_template = chat_template
        template = getattr(self.processor, "chat_template", None)
        if not template:
            raise ValueError(
                f"{owner}: the processor of {model!r} has no chat template; pass chat_template='...' (Jinja)."
            )
        try:
            with _extra_hint(owner, model):
                self.model = self.source.load(
                    transformers.AutoModelForImageTextToText, transformers, where, load, device=self.device,
                    dtype=self.dtype, owner=f"{owner}({model})",
                )
        except ValueError as err:
            if "Unrecognized configuration class" not in str(err):
                raise
            raise ValueError(
                f"{owner}: {model!r} is not an image-text-to-text model (AutoModelForImageTextToText cannot load "
                f"it). For CLIP/SigLIP use make_scorer('clip:{model}')."
            ) from err
        self._keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters

        tokenizer.padding_side = "right"  # each row's next-token logits are read at its last real token
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer = tokenizer
        self.answers = (str(answers[0]), str(answers[1]))
        self.yes_token_ids = answer_token_ids(tokenizer, self.answers[0])
        self.no_token_ids = answer_token_ids(tokenizer, self.answers[1])
        for word, ids in zip(self.answers, (self.yes_token_ids, self.no_token_ids), strict=True):
            if not ids:
                raise ValueError(
                    f"{owner}: the tokenizer of {model!r} has no single-token spelling of {word!r}; pass "
                    "answers=(positive, negative) with words it encodes as one token."
                )
        if set(self.yes_token_ids) & set(self.no_token_ids):
            raise ValueError(f"{owner}: answers {self.answers} share tokens; pick two distinct words.")

        model_type = getattr(self.model.config, "model_type", None)
        # a video needs a video processor *and* a chat template that can place one
        has_video = getattr(self.processor, "video_processor", None) is not None and "video" in str(template)
        if input_mode == "auto":
            input_mode = "video" if has_video else ("grid" if model_type in SINGLE_IMAGE_MODEL_TYPES else "images")
        elif input_mode == "video" and not has_video:
            raise ValueError(
                f"{owner}: input_mode='video' but the processor of {model!r} has no video processor (or its chat "
                "template has no video entry); use input_mode='images' or 'grid'."
            )
        self.input_mode = input_mode
        # Qwen3-VL's video processor refuses fewer frames than one temporal patch (2); Qwen2-VL's pads
        # them with the last frame itself: a short clip is padded the same way before it is sent
        video_processor = getattr(self.processor, "video_processor", None)
        self._min_video_frames = max(int(getattr(video_processor, "temporal_patch_size", None) or 1), 1)
        self.processor_kwargs = dict(processor_kwargs or {})
        # the family's small-frame settings the user did not set (processors refuse a key given twice)
        own = {*self.processor_kwargs, *self.processor_kwargs.get("images_kwargs", {})}
        defaults = FAMILY_IMAGE_DEFAULTS.get(model_type, {}) if family_defaults else {}
        self.image_defaults = {k: v for k, v in defaults.items() if k not in own}
        self.video_fps = None if video_fps is None else float(video_fps)
        self.enable_thinking = enable_thinking
        self.system_prompt = system_prompt
        _hf.set_scorer_attributes(
            self, model, frame_key=frame_key, mask_key=mask_key, max_frames=max_frames, batch_size=batch_size
        )
        self._texts: dict[int | str, str] = {}
        self._image_module = importlib.import_module("PIL.Image")
        self.provenance = _hf.provenance(
            "hf", model, where, self.model, prompt=self.prompt, dtype=self.dtype, max_frames=max_frames,
            transformers=transformers,
            system_prompt_hash=None if system_prompt is None else prompt_hash(system_prompt),
            input_mode=self.input_mode,
            processor_kwargs=dict(self.processor_kwargs),
            image_defaults=dict(self.image_defaults),
            video_fps=self.video_fps,
            enable_thinking=enable_thinking,
            answers=list(self.answers),
            yes_token_ids=list(self.yes_token_ids),
            no_token_ids=list(self.no_token_ids),
        )

    # ----------------------------------------------------------------------------------- text
    def _text(self, n_images: int | None) -> str:
        """The chat-templated prompt for a clip shown as a video (``None``) or ``n_images`` images."""
        key = "video" if n_images is None else n_images
        text = self._texts.get(key)
        if text is None:
            visual = [{"type": "video"}] if n_images is None else [{"type": "image"}] * n_images
            messages = [{"role": "user", "content": [*visual, {"type": "text", "text": self.prompt}]}]
            if self.system_prompt:
                messages.insert(0, {"role": "system", "content": [{"type": "text", "text": self.system_prompt}]})
            # only a template that reads the variable gets it (transformers warns about the others)
            reads = self.enable_thinking is not None and "enable_thinking" in str(self.processor.chat_template)
            thinking = {"enable_thinking": self.enable_thinking} if reads else {}
            text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **thinking)
            if self.enable_thinking is False and text.rstrip().endswith(_THINK_OPEN):
                text = text.rstrip() + _THINK_CLOSE  # a thinking-only template: answer after an empty block
            self._texts[key] = text
        return text

    def _inputs(self, frames: list, indices: list) -> Any:
        to_pil = self._image_module.fromarray
        # right padding whatever the processor's default (InternVL's is left): see _score_batch
        common = {"return_tensors": "pt", "padding": True, "padding_side": "right"}
        if self.input_mode == "video":
            texts = [self._text(None)] * len(frames)
            videos = [[to_pil(f) for f in clip] for clip in frames]
            if self.video_fps is not None:
                common["video_metadata"] = [
                    {"total_num_frames": int(idx[-1]) + 1, "fps": self.video_fps, "frames_indices": idx.tolist(),
                     "height": clip.shape[1], "width": clip.shape[2]}
                    for clip, idx in zip(frames, indices, strict=True)
                ]
            return self.processor(text=texts, videos=videos, do_sample_frames=False, **common, **self.processor_kwargs)
        if self.input_mode == "grid":
            texts = [self._text(1)] * len(frames)
            images = [[to_pil(grid_image(clip))] for clip in frames]
        else:
            texts = [self._text(len(clip)) for clip in frames]
            images = [[to_pil(f) for f in clip] for clip in frames]
        kwargs = dict(self.processor_kwargs)
        if self.image_defaults:
            kwargs["images_kwargs"] = {**self.image_defaults, **kwargs.get("images_kwargs", {})}
        return self.processor(text=texts, images=images, **common, **kwargs)

    # --------------------------------------------------------------------------------- scoring
    def _score_batch(self, frames: list, indices: list) -> torch.Tensor:
        inputs = self._inputs(frames, indices)
        mask = inputs["attention_mask"]
        last = mask.shape[1] - 1 - mask.flip(1).to(torch.long).argmax(1)  # last real token of every row
        batch = _hf.to_device(inputs, self.device, self.dtype)
        keep = torch.unique(last)
        if self._keeps_logits:
            logits = self.model(**batch, logits_to_keep=keep.to(self.device)).logits
            column = torch.searchsorted(keep, last)
        else:
            logits = self.model(**batch).logits
            column = last
        rows = torch.arange(len(frames), device=logits.device)
        logits = logits[rows, column.to(logits.device)].float()
        yes = torch.logsumexp(logits[:, self.yes_token_ids], dim=-1)
        no = torch.logsumexp(logits[:, self.no_token_ids], dim=-1)
        return torch.sigmoid(yes - no).cpu()

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """P(yes) per clip, renormalised over yes/no: float32 ``[B]`` in ``[0, 1]``."""
        batch = check_clips(clips, self.in_keys, scorer=self)
        frames = self.inputs.frames(clips)
        indices = self.inputs.indices(clips)
        if self.input_mode == "video":
            short = [i for i, f in enumerate(frames) if len(f) < self._min_video_frames]
            for i in short:  # repeat the last frame up to one temporal patch
                take = np.minimum(np.arange(self._min_video_frames), len(frames[i]) - 1)
                frames[i], indices[i] = frames[i][take], indices[i][take]
        out = torch.zeros(batch)
        groups = micro_batches([len(f) for f in frames], self.batch_size, by_length=self.input_mode == "video")
        with self._lock, torch.inference_mode():
            for rows in groups:
                out[rows] = self._score_batch([frames[i] for i in rows], [indices[i] for i in rows])
        return validate_scores(out, batch, scorer=self)

    def __reduce__(self):
        # pickled as its arguments and reloaded from disk / the cache on unpickling (e.g. in
        # AsyncScorer's "process" backend), instead of shipping the weights through a pipe
        return (_hf.rebuild, (type(self), self._init_kwargs))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model_name!r}, input_mode={self.input_mode!r}, "
            f"max_frames={self.max_frames}, dtype={_hf.dtype_name(self.dtype)}, device={str(self.device)!r})"
        )


def micro_batches(lengths: Sequence[int], batch_size: int, *, by_length: bool) -> list[list[int]]:
    """The clips (by position) scored together, at most ``batch_size`` per forward pass.

    With ``by_length`` (the ``"video"`` mode) a micro-batch only holds clips with the same number
    of frames: video processors such as Perception-LM's, LLaVA-OneVision's and InternVL's stack a
    batch's videos into one tensor. Otherwise clips are taken in order.

    Examples:
        >>> micro_batches([3, 1, 3, 3, 1], 2, by_length=True)
        [[0, 2], [3], [1, 4]]
        >>> micro_batches([3, 1, 3], 2, by_length=False)
        [[0, 1], [2]]
    """
    if by_length:
        groups: dict[int, list[int]] = {}
        for i, length in enumerate(lengths):
            groups.setdefault(int(length), []).append(i)
        order = list(groups.values())
    else:
        order = [list(range(len(lengths)))]
    return [group[start : start + batch_size] for group in order for start in range(0, len(group), batch_size)]


@contextlib.contextmanager
def _extra_hint(owner: str, model: str):
    """Re-raises a missing family dependency (:data:`_FAMILY_IMPORTS`: Perception-LM's vision tower
    needs timm, SmolVLM2's processor num2words) as an ImportError with the extra to install."""
    try:
        yield
    except ImportError as err:
        text = str(err)
        missing = [name for name in _FAMILY_IMPORTS if name in text and importlib.util.find_spec(name) is None]
        if not missing:
            raise
        raise ImportError(
            f"{owner}: {model!r} needs {' and '.join(missing)}, which transformers imports for this model family: "
            f"{_hf.VLM_EXTRA_HINT}."
        ) from err


def _load_processor(transformers: Any, path: str, load: dict, *, owner: str, model: str) -> Any:
    try:
        with _extra_hint(owner, model):
            return transformers.AutoProcessor.from_pretrained(path, **load)
    except (AttributeError, ImportError, ValueError) as err:
        if "vlmrb-torchrl[vlm]" in str(err):
            raise
        text = str(err)
        if importlib.util.find_spec("torchvision") is None and (
            "VIDEO_PROCESSOR" in text or "torchvision" in text.lower() or "BaseVideoProcessor" in text
        ):
            raise ImportError(
                f"{owner}: the processor of {model!r} includes a video processor, which transformers builds with "
                f"torchvision: pip install torchvision (a version matching torch {torch.__version__.split('+')[0]})."
            ) from err
        raise


def _make_hf(rest: str, **kwargs: Any) -> HFGenerativeScorer:
    if not rest:
        raise ValueError(
            "A generative scorer spec is 'hf:<hub id or local dir>', e.g. 'hf:HuggingFaceTB/SmolVLM-256M-Instruct'."
        )
    return HFGenerativeScorer(rest, **kwargs)


register_scorer("hf", _make_hf, form="hf:<hub id or local dir>", overwrite=True)
