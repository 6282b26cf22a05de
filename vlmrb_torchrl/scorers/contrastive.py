"""Contrastive scorer: CLIP / SigLIP / SigLIP2 similarity of a clip's frames to a goal text.

``make_scorer("clip:<hub id or local dir>")`` builds an :class:`HFContrastiveScorer`. transformers
and Pillow are imported when a scorer is built, never when this module is imported.
"""

from __future__ import annotations

import importlib
import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from vlmrb_torchrl.scorers import _hf
from vlmrb_torchrl.scorers._hashing import prompt_hash
from vlmrb_torchrl.scorers.base import check_clips, register_scorer, validate_scores
from vlmrb_torchrl.scorers.prompts import check_negatives, contrastive_prompts, format_prompt

__all__ = ["HFContrastiveScorer", "AGGREGATIONS"]

#: How per-frame probabilities become a clip score: the best frame, the average, or the gain
#: from the first to the last real frame (clamped at 0).
AGGREGATIONS = ("max", "mean", "progress")

#: Model types whose text tower was trained on max-length padded text (pad the prompts the same way).
_MAX_LENGTH_PADDING = frozenset({"siglip", "siglip2"})


def _features(output: Any) -> torch.Tensor:
    """``get_*_features`` return a tensor (transformers 4) or an output with ``pooler_output`` (5)."""
    if isinstance(output, torch.Tensor):
        return output
    pooled = getattr(output, "pooler_output", None)
    if pooled is None:
        raise TypeError(f"unexpected feature output {type(output).__name__}: no pooler_output")
    return pooled


class HFContrastiveScorer:
    """Scores clips by CLIP-style similarity between their frames and a positive text.

    Every real frame (``mask`` True) is embedded by the model's vision tower and compared with
    the positive prompt and one or more baseline (negative) prompts: the frame's probability is
    the softmax, over ``[positive, *negatives]``, of the cosine similarities times the model's
    logit scale (``exp(logit_scale)``; SigLIP's bias cancels in the softmax). The per-frame
    probabilities are aggregated over the clip with ``aggregation``:

    - ``"max"`` (default): the best frame, "does the goal appear anywhere in the clip";
    - ``"mean"``: the average over real frames;
    - ``"progress"``: last real frame minus first, clamped at 0 (no progress or regress → 0).

    Text embeddings are computed once at construction; frames are embedded in micro-batches of
    ``batch_size`` frames under :func:`torch.inference_mode`. Calls are serialised by a lock.

    Args:
        model (str): a Hub id (``"openai/clip-vit-base-patch32"``,
            ``"google/siglip-base-patch16-224"``, ...) or a local directory.

    Keyword Args:
        prompt (str, optional): the positive text; ``{task}`` is filled from ``task``. Defaults to
            :func:`~vlmrb_torchrl.scorers.prompts.contrastive_prompts` for ``env_family``.
        negatives (str or list of str, optional): baseline texts. Defaults to the env family's.
        env_family (str, optional): picks the default texts. Defaults to ``"generic"``.
        task (str, optional): the env's mission / task text inserted into the positive prompt.
        aggregation (str, optional): one of :data:`AGGREGATIONS`. Defaults to ``"max"``.
        logit_scale (float, optional): multiply the cosine similarities by this instead of the
            model's own ``exp(logit_scale)`` (a softmax temperature). Defaults to ``None``.
        frame_key, mask_key (NestedKey, optional): defaults ``"pixels"``, ``"mask"``.
        max_frames (int, optional): embed at most this many evenly spaced real frames per clip.
        batch_size (int, optional): frames per vision forward pass. Defaults to ``64``.
        device, dtype, revision, local_files_only, cache_dir, trust_remote_code, model_kwargs, hub_timeout:
            as for :class:`~vlmrb_torchrl.scorers.HFGenerativeScorer`.

    Attributes:
        prompt (str): the positive text; ``negatives`` (list of str): the baselines.
        in_keys (list): ``[frame_key, mask_key]``.
        provenance (dict): ``backend="clip"``, ``model``, ``source``, ``revision``,
            ``weights_hash``, ``model_type``, ``prompt_hash`` (of the positive prompt),
            ``negatives_hash``, ``aggregation``, ``logit_scale``, ``dtype``, ``max_frames``.

    Raises:
        FileNotFoundError: the model cannot be found (fails at construction).
        ImportError: transformers / Pillow are missing.
        ValueError: a bad option.

    Examples:
        >>> scorer = HFContrastiveScorer("openai/clip-vit-base-patch32",  # doctest: +SKIP
        ...                              prompt="a robot arm holding a red cube above the table",
        ...                              negatives=["a robot arm next to a red cube"], aggregation="max")
        >>> scorer.score(clips)  # doctest: +SKIP
        tensor([0.7311, 0.2689, ...])
    """

    def __init__(
        self,
        model: str,
        *,
        prompt: str | None = None,
        negatives: Sequence[str] | str | None = None,
        env_family: str = "generic",
        task: str | None = None,
        aggregation: str = "max",
        logit_scale: float | None = None,
        frame_key: NestedKey = "pixels",
        mask_key: NestedKey = "mask",
        max_frames: int | None = None,
        batch_size: int = 64,
        device: Any = None,
        dtype: Any = None,
        revision: str | None = None,
        local_files_only: bool | None = None,
        cache_dir: str | None = None,
        trust_remote_code: bool = False,
        model_kwargs: dict | None = None,
        hub_timeout: float = 5.0,
    ) -> None:
        self._init_kwargs = {k: v for k, v in locals().items() if k != "self"}  # for pickling: see __reduce__
        owner = type(self).__name__
        default_positive, default_negatives = contrastive_prompts(env_family, task=task)
        self.prompt = default_positive if prompt is None else format_prompt(prompt, task)
        self.negatives = check_negatives(default_negatives if negatives is None else negatives, owner=owner)
        self.negatives = [format_prompt(n, task) for n in self.negatives]
        if aggregation not in AGGREGATIONS:
            raise ValueError(
                f"{owner}.aggregation must be one of {list(AGGREGATIONS)}, got aggregation={aggregation!r}."
            )
        if logit_scale is not None and (
            isinstance(logit_scale, bool)
            or not isinstance(logit_scale, numbers.Real)
            or not math.isfinite(logit_scale)
            or logit_scale <= 0
        ):
            raise ValueError(
                f"{owner}.logit_scale must be a finite float > 0 or None, got logit_scale={logit_scale!r}."
            )
        _hf.check_sizes(owner, batch_size=batch_size, max_frames=max_frames)
        self.source = _hf.ModelSource(
            model, device=device, dtype=dtype, revision=revision, local_files_only=local_files_only,
            cache_dir=cache_dir, trust_remote_code=trust_remote_code, model_kwargs=model_kwargs,
            hub_timeout=hub_timeout,
        )
        self.device, self.dtype = self.source.device_dtype(owner)
        transformers, where, load = self.source.locate(owner)
        self.processor = transformers.AutoProcessor.from_pretrained(where["path"], **load)
        self.model = self.source.load(transformers.AutoModel, transformers, where, load, device=self.device,
                                      dtype=self.dtype)
        model_type = getattr(self.model.config, "model_type", None)
        if not (hasattr(self.model, "get_image_features") and hasattr(self.model, "get_text_features")):
            raise ValueError(
                f"{owner}: {model!r} (model_type={model_type!r}) is not a contrastive image-text model (no "
                f"get_image_features/get_text_features). For generative VLMs use make_scorer('hf:{model}')."
            )
        if logit_scale is None:
            raw = getattr(self.model, "logit_scale", None)
            scale = float(raw.detach().float().exp().reshape(-1)[0]) if isinstance(raw, torch.Tensor) else 100.0
        else:
            scale = float(logit_scale)
        self.logit_scale = scale
        self.aggregation = aggregation
        _hf.set_scorer_attributes(
            self, model, frame_key=frame_key, mask_key=mask_key, max_frames=max_frames, batch_size=batch_size
        )
        self._padding = "max_length" if model_type in _MAX_LENGTH_PADDING else True
        self._pil = importlib.import_module("PIL.Image")
        with torch.inference_mode():
            self.text_embeds = self._embed_text([self.prompt, *self.negatives])
        self.provenance = _hf.provenance(
            "clip", model, where, self.model, prompt=self.prompt, dtype=self.dtype, max_frames=max_frames,
            transformers=transformers,
            negatives=list(self.negatives),
            negatives_hash=prompt_hash("\n".join(self.negatives)),
            aggregation=aggregation,
            logit_scale=scale,
        )

    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        inputs = self.processor(text=texts, return_tensors="pt", padding=self._padding, truncation=True)
        inputs = {k: v.to(self.device) for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        return torch.nn.functional.normalize(_features(self.model.get_text_features(**inputs)).float(), dim=-1)

    def _embed_images(self, images: list) -> torch.Tensor:
        inputs = self.processor(images=images, return_tensors="pt")
        inputs = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        batch = _hf.to_device(inputs, self.device, self.dtype)
        return torch.nn.functional.normalize(_features(self.model.get_image_features(**batch)).float(), dim=-1)

    def frame_probabilities(self, clips: TensorDictBase) -> list[torch.Tensor]:
        """Per clip, P(positive) of each shown real frame (float32, in frame order)."""
        check_clips(clips, self.in_keys, scorer=self)
        frames = self.inputs.frames(clips)
        flat = [self._pil.fromarray(frame) for clip in frames for frame in clip]
        with self._lock, torch.inference_mode():
            embeds = [self._embed_images(flat[i : i + self.batch_size]) for i in range(0, len(flat), self.batch_size)]
            image_embeds = torch.cat(embeds) if embeds else torch.zeros(0, self.text_embeds.shape[-1])
            logits = self.logit_scale * image_embeds @ self.text_embeds.T
            probs = logits.softmax(-1)[:, 0].cpu()
        return list(probs.split([len(f) for f in frames]))

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """Aggregated per-frame P(positive): float32 ``[B]`` in ``[0, 1]``."""
        batch = check_clips(clips, self.in_keys, scorer=self)
        per_clip = self.frame_probabilities(clips)
        if self.aggregation == "max":
            out = [p.max() for p in per_clip]
        elif self.aggregation == "mean":
            out = [p.mean() for p in per_clip]
        else:
            out = [(p[-1] - p[0]).clamp(min=0.0) for p in per_clip]
        return validate_scores(torch.stack(out) if out else torch.zeros(0), batch, scorer=self)

    def __reduce__(self):
        # pickled as its arguments and reloaded from disk / the cache on unpickling (e.g. in
        # AsyncScorer's "process" backend), instead of shipping the weights through a pipe
        return (_hf.rebuild, (type(self), self._init_kwargs))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model_name!r}, aggregation={self.aggregation!r}, "
            f"negatives={len(self.negatives)}, dtype={_hf.dtype_name(self.dtype)}, device={str(self.device)!r})"
        )


def _make_clip(rest: str, **kwargs: Any) -> HFContrastiveScorer:
    if not rest:
        raise ValueError(
            "A contrastive scorer spec is 'clip:<hub id or local dir>', e.g. 'clip:openai/clip-vit-base-patch32'."
        )
    return HFContrastiveScorer(rest, **kwargs)


register_scorer("clip", _make_clip, form="clip:<hub id or local dir>", overwrite=True)
