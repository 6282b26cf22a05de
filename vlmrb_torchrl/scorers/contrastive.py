"""Contrastive scorer: CLIP / SigLIP / SigLIP2 similarity of a clip's frames to a goal text.

``make_scorer("clip:<hub id or local dir>")`` builds an :class:`HFContrastiveScorer`. transformers
and Pillow are imported when a scorer is built, never when this module is imported.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import numbers
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from vlmrb_torchrl.scorers import _hf
from vlmrb_torchrl.scorers._hashing import prompt_hash
from vlmrb_torchrl.scorers.base import check_clips, register_scorer, validate_scores
from vlmrb_torchrl.scorers.prompts import (
    AGGREGATIONS,
    PromptCheck,
    aggregate,
    check_negatives,
    contrastive_prompts,
    format_prompt,
    prompt_set_text,
)

__all__ = ["HFContrastiveScorer", "AGGREGATIONS"]

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
    - ``"progress"``: last real frame minus first, clamped at 0 (no progress or regress → 0);
    - ``"rise"``: the largest gain from a real frame to a later one (an event undone before
      the clip ends still counts); see :func:`~vlmrb_torchrl.scorers.prompts.aggregate`.

    **Prompt sets.** One positive text detects one kind of event; ``prompt_set=`` takes several
    :class:`~vlmrb_torchrl.scorers.PromptCheck` ``(positive, negatives, aggregation)``. Each
    check scores the clip on its own, as a single-prompt scorer with those texts would, and
    the clip's score is the **max over the checks** ("any check fires"). Each frame is
    embedded once per call whatever the number of checks; all texts are embedded once, at
    construction. ``prompt`` is then the set's canonical text
    (:func:`~vlmrb_torchrl.scorers.prompts.prompt_set_text`) and the provenance's
    ``prompt_hash`` its hash.

    **Frame embeddings are reused.** Overlapping clips (stride 1: every frame is in
    ``clip_len + 1`` clips) would embed the same frame again and again. The scorer keeps the
    embeddings of the last ``embedding_cache`` distinct frames, keyed by their content (a
    BLAKE2 digest of the pixels the model is shown, shape and dtype included), so a frame
    already seen is not embedded again, whichever clip, trajectory or replay slot it comes
    from. Scores are those of embedding every clip from scratch (up to float rounding across
    batch compositions, ~1e-7); ``embedding_cache=0`` turns the reuse off.
    :meth:`stats` counts frames embedded and cache hits.

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
        prompt_set (sequence of PromptCheck or (positive, negatives, aggregation), optional):
            several checks scored at once, the clip's score being the max over them (see
            above). Replaces ``prompt``, ``negatives`` and ``aggregation`` (passing those too
            is an error); ``{task}`` in its texts is filled from ``task``. Defaults to ``None``.
        embedding_cache (int, optional): frame embeddings kept for reuse (LRU, by content);
            ``0`` embeds every frame of every clip. Defaults to ``4096``.
        logit_scale (float, optional): multiply the cosine similarities by this instead of the
            model's own ``exp(logit_scale)`` (a softmax temperature). Defaults to ``None``.
        frame_key, mask_key (NestedKey, optional): defaults ``"pixels"``, ``"mask"``.
        max_frames (int, optional): embed at most this many evenly spaced real frames per clip.
        batch_size (int, optional): frames per vision forward pass. Defaults to ``64``.
        device, dtype, revision, local_files_only, cache_dir, trust_remote_code, model_kwargs, hub_timeout:
            as for :class:`~vlmrb_torchrl.scorers.HFGenerativeScorer`.

    Attributes:
        prompt (str): the positive text (with a prompt set: the set's canonical text);
            ``negatives`` (list of str): the baselines (with a set: all of them, in order).
        prompt_set (tuple of PromptCheck): the checks scored; one for a single prompt.
        in_keys (list): ``[frame_key, mask_key]``.
        provenance (dict): ``backend="clip"``, ``model``, ``source``, ``revision``,
            ``weights_hash``, ``model_type``, ``prompt_hash`` (of ``prompt``),
            ``negatives_hash``, ``aggregation`` (``"max of checks"`` for a set, whose checks
            are listed under ``prompt_set``), ``logit_scale``, ``dtype``, ``max_frames``.

    Raises:
        FileNotFoundError: the model cannot be found (fails at construction).
        ImportError: transformers / Pillow are missing.
        ValueError: a bad option.

    Examples:
        The small CLIP shipped with the package (``builtin:minigrid``) on two clips of MiniGrid frames:

        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.envs import make_minigrid_env
        >>> from vlmrb_torchrl.scorers import builtin_model_dir
        >>> scorer = HFContrastiveScorer(str(builtin_model_dir("minigrid")), prompt="the door is open",
        ...                              negatives=["the door is locked"], aggregation="max")
        >>> frames = make_minigrid_env("MiniGrid-DoorKey-5x5-v0", seed=0).rollout(8)["pixels"]
        >>> clips = TensorDict(pixels=frames.reshape(2, 4, *frames.shape[1:]),
        ...                    mask=torch.ones(2, 4, dtype=torch.bool), batch_size=[2, 4])
        >>> scores = scorer.score(clips)
        >>> scores.shape, bool(((scores >= 0) & (scores <= 1)).all())
        (torch.Size([2]), True)

        A Hub model (its weights in the Hugging Face cache, or a local directory):

        >>> scorer = HFContrastiveScorer("openai/clip-vit-base-patch32",  # doctest: +SKIP
        ...                              prompt="a robot arm holding a red cube above the table",
        ...                              negatives=["a robot arm next to a red cube"], aggregation="max")
        >>> scorer.score(clips)  # doctest: +SKIP
        tensor([0.7311, 0.2689, ...])

        DoorKey progress is "key picked up" or "door opened" or "goal reached":

        >>> from vlmrb_torchrl.scorers.prompts import PromptCheck
        >>> scorer = HFContrastiveScorer("path/to/minigrid-clip", prompt_set=[  # doctest: +SKIP
        ...     PromptCheck("the agent holds the yellow key", ["the key is on the floor"], "progress"),
        ...     PromptCheck("the door is open", ["the door is locked", "the door is closed"], "progress"),
        ...     PromptCheck("the agent faces the green goal", ["the agent is far from the goal"], "max")])
    """

    def __init__(
        self,
        model: str,
        *,
        prompt: str | None = None,
        negatives: Sequence[str] | str | None = None,
        env_family: str = "generic",
        task: str | None = None,
        aggregation: str | None = None,
        prompt_set: Sequence[PromptCheck | tuple[str, Sequence[str], str]] | None = None,
        embedding_cache: int = 4096,
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
        if prompt_set is None:
            default_positive, default_negatives = contrastive_prompts(env_family, task=task)
            self.prompt = default_positive if prompt is None else format_prompt(prompt, task)
            self.negatives = check_negatives(default_negatives if negatives is None else negatives, owner=owner)
            self.negatives = [format_prompt(n, task) for n in self.negatives]
            aggregation = "max" if aggregation is None else aggregation
            if aggregation not in AGGREGATIONS:
                raise ValueError(
                    f"{owner}.aggregation must be one of {list(AGGREGATIONS)}, got aggregation={aggregation!r}."
                )
            self.prompt_set = (PromptCheck(self.prompt, self.negatives, aggregation),)
        else:
            given = [name for name, value in (("prompt", prompt), ("negatives", negatives),
                                              ("aggregation", aggregation)) if value is not None]
            if given:
                raise ValueError(
                    f"{owner}: pass either prompt_set= or {'/'.join(given)}=, not both (each check of a "
                    "prompt set has its own positive, negatives and aggregation)."
                )
            self.prompt_set = _check_prompt_set(prompt_set, task, owner=owner)
            self.prompt = prompt_set_text(self.prompt_set)
            self.negatives = list(dict.fromkeys(n for check in self.prompt_set for n in check.negatives))
            aggregation = "max of checks"
        if isinstance(embedding_cache, bool) or not isinstance(embedding_cache, int) or embedding_cache < 0:
            raise ValueError(f"{owner}.embedding_cache must be an int >= 0, got embedding_cache={embedding_cache!r}.")
        self.embedding_cache = embedding_cache
        self._cache: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._frames_embedded = self._cache_hits = 0
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
        self._embed_checks()
        specific = {}
        if prompt_set is not None:
            specific["prompt_set"] = [[c.positive, list(c.negatives), c.aggregation] for c in self.prompt_set]
        if task is not None:
            specific["task"] = task
        self.provenance = _hf.provenance(
            "clip", model, where, self.model, prompt=self.prompt, dtype=self.dtype, max_frames=max_frames,
            transformers=transformers,
            negatives=list(self.negatives),
            negatives_hash=prompt_hash("\n".join(self.negatives)),
            aggregation=aggregation,
            logit_scale=scale,
            **specific,
        )

    def _embed_checks(self) -> None:
        with torch.inference_mode():
            # each check's texts embedded together, as a single-prompt scorer of that check does
            per_check = [self._embed_text([c.positive, *c.negatives]) for c in self.prompt_set]
        self.text_embeds = torch.cat(per_check)
        sizes = [len(e) for e in per_check]
        starts = np.cumsum([0, *sizes[:-1]]).tolist()
        self._check_rows = [slice(a, a + n) for a, n in zip(starts, sizes)]

    def with_prompt_set(
        self, prompt_set: Sequence[PromptCheck | tuple[str, Sequence[str], str]], *, task: str | None = None
    ) -> HFContrastiveScorer:
        """The same model scoring other checks: a new scorer that shares this one's weights,
        processor, lock and frame-embedding cache (a frame embedded by either is not embedded
        again), with ``prompt_set``'s texts embedded. Building it costs the text embeddings only,
        not a model load: what a per-episode task (MiniGrid missions) needs.

        Args:
            prompt_set (sequence of PromptCheck or (positive, negatives, aggregation)): the checks.

        Keyword Args:
            task (str, optional): fills ``{task}`` placeholders; recorded in the provenance.

        Examples:
            >>> from vlmrb_torchrl.scorers import PromptCheck, make_scorer
            >>> scorer = make_scorer("builtin:minigrid")
            >>> other = scorer.with_prompt_set([PromptCheck("the agent holds the red ball",
            ...                                             ["the red ball is on the floor"], "progress")])
            >>> other.model is scorer.model, len(other.prompt_set), other.provenance["prompt_hash"] != scorer.provenance["prompt_hash"]
            (True, 1, True)
        """
        owner = type(self).__name__
        new = object.__new__(type(self))  # not copy.copy: __reduce__ pickles as arguments and reloads the weights
        new.__dict__.update(self.__dict__)
        new.prompt_set = _check_prompt_set(prompt_set, task, owner=owner)
        new.prompt = prompt_set_text(new.prompt_set)
        new.negatives = list(dict.fromkeys(n for check in new.prompt_set for n in check.negatives))
        new.aggregation = "max of checks"
        new._init_kwargs = {**self._init_kwargs, "prompt": None, "negatives": None, "aggregation": None,
                            "prompt_set": list(new.prompt_set), "task": task}
        new._embed_checks()
        new.provenance = {k: v for k, v in self.provenance.items() if k != "task"}
        new.provenance.update(
            prompt=new.prompt, prompt_hash=prompt_hash(new.prompt), negatives=list(new.negatives),
            negatives_hash=prompt_hash("\n".join(new.negatives)), aggregation=new.aggregation,
            prompt_set=[[c.positive, list(c.negatives), c.aggregation] for c in new.prompt_set],
            **({} if task is None else {"task": task}))
        return new

    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        inputs = self.processor(text=texts, return_tensors="pt", padding=self._padding, truncation=True)
        inputs = {k: v.to(self.device) for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        return torch.nn.functional.normalize(_features(self.model.get_text_features(**inputs)).float(), dim=-1)

    def _embed_images(self, images: list) -> torch.Tensor:
        inputs = self.processor(images=images, return_tensors="pt")
        inputs = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        batch = _hf.to_device(inputs, self.device, self.dtype)
        return torch.nn.functional.normalize(_features(self.model.get_image_features(**batch)).float(), dim=-1)

    def _embed_frames(self, frames: list[np.ndarray]) -> torch.Tensor:
        """``[N, D]`` normalised embeddings of ``N`` frames, each distinct frame embedded at most
        once (reused from the cache when seen before). Call under ``self._lock``."""
        dim = self.text_embeds.shape[-1]
        if self.embedding_cache == 0:  # every frame of every clip, from scratch
            embeds = [self._embed_images([self._pil.fromarray(f) for f in frames[i : i + self.batch_size]])
                      for i in range(0, len(frames), self.batch_size)]
            self._frames_embedded += len(frames)
            return torch.cat(embeds) if embeds else torch.zeros(0, dim)
        keys = [_frame_digest(f) for f in frames]
        found: dict[bytes, torch.Tensor] = {}
        todo: dict[bytes, np.ndarray] = {}
        for key, frame in zip(keys, frames):
            if key in found or key in todo:
                continue
            hit = self._cache.get(key)
            if hit is None:
                todo[key] = frame
            else:
                found[key] = hit
                self._cache.move_to_end(key)
        self._cache_hits += len(frames) - len(todo)
        new_keys, new_frames = list(todo), list(todo.values())
        for i in range(0, len(new_frames), self.batch_size):
            embeds = self._embed_images([self._pil.fromarray(f) for f in new_frames[i : i + self.batch_size]]).cpu()
            for key, embed in zip(new_keys[i : i + self.batch_size], embeds):
                found[key] = self._cache[key] = embed
        self._frames_embedded += len(new_frames)
        while len(self._cache) > self.embedding_cache:
            self._cache.popitem(last=False)
        return torch.stack([found[k] for k in keys]) if keys else torch.zeros(0, dim)

    def _check_probabilities(self, clips: TensorDictBase) -> list[torch.Tensor]:
        """Per clip, ``[T_b, num_checks]``: each check's P(positive) of each shown real frame."""
        check_clips(clips, self.in_keys, scorer=self)
        frames = self.inputs.frames(clips)
        flat = [frame for clip in frames for frame in clip]
        with self._lock, torch.inference_mode():
            image_embeds = self._embed_frames(flat).to(self.text_embeds.device)
            probs = torch.stack(
                [(self.logit_scale * image_embeds @ self.text_embeds[rows].T).softmax(-1)[:, 0]
                 for rows in self._check_rows], -1,
            ).cpu()
        return list(probs.split([len(f) for f in frames]))

    def frame_probabilities(self, clips: TensorDictBase) -> list[torch.Tensor]:
        """Per clip, P(positive) of each shown real frame (float32, in frame order).

        ``[T_b]`` per clip for a single prompt; ``[T_b, num_checks]`` with a prompt set.
        """
        per_clip = self._check_probabilities(clips)
        return [p[:, 0] for p in per_clip] if len(self.prompt_set) == 1 else per_clip

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """Aggregated per-frame P(positive), max over the prompt set's checks: float32 ``[B]`` in ``[0, 1]``."""
        batch = check_clips(clips, self.in_keys, scorer=self)
        per_clip = self._check_probabilities(clips)
        out = []
        for p in per_clip:
            per_check = []
            for c, check in enumerate(self.prompt_set):
                per_check.append(aggregate(p[:, c], check.aggregation))
            out.append(torch.stack(per_check).max())
        return validate_scores(torch.stack(out) if out else torch.zeros(0), batch, scorer=self)

    def stats(self) -> dict[str, int]:
        """``frames_embedded`` (by the vision tower), ``embedding_cache_hits`` (frames reused),
        ``embedding_cache_size`` and ``embedding_cache_max`` (``embedding_cache``), since construction."""
        with self._lock:
            return {
                "frames_embedded": self._frames_embedded,
                "embedding_cache_hits": self._cache_hits,
                "embedding_cache_size": len(self._cache),
                "embedding_cache_max": self.embedding_cache,
            }

    def __reduce__(self):
        # pickled as its arguments and reloaded from disk / the cache on unpickling (e.g. in
        # AsyncScorer's "process" backend), instead of shipping the weights through a pipe
        return (_hf.rebuild, (type(self), self._init_kwargs))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model_name!r}, aggregation={self.aggregation!r}, "
            f"checks={len(self.prompt_set)}, negatives={len(self.negatives)}, dtype={_hf.dtype_name(self.dtype)}, "
            f"device={str(self.device)!r})"
        )


def _frame_digest(frame: np.ndarray) -> bytes:
    """Content key of a frame: its shape, dtype and a 128-bit BLAKE2 digest of its pixels."""
    frame = np.ascontiguousarray(frame)
    head = f"{frame.shape}{frame.dtype.str}".encode()
    return head + hashlib.blake2b(memoryview(frame).cast("B"), digest_size=16).digest()


def _check_prompt_set(prompt_set, task: str | None, *, owner: str) -> tuple[PromptCheck, ...]:
    if isinstance(prompt_set, (str, PromptCheck)) or not isinstance(prompt_set, Sequence):
        raise TypeError(
            f"{owner}.prompt_set must be a sequence of PromptCheck or (positive, negatives, aggregation) "
            f"tuples, got {type(prompt_set).__name__}."
        )
    if not prompt_set:
        raise ValueError(f"{owner}.prompt_set must hold at least one check, got an empty sequence.")
    checks = []
    for check in prompt_set:
        check = PromptCheck.coerce(check)
        checks.append(PromptCheck(format_prompt(check.positive, task), [format_prompt(n, task) for n in check.negatives],
                                  check.aggregation))
    return tuple(checks)


def _make_clip(rest: str, **kwargs: Any) -> HFContrastiveScorer:
    if not rest:
        raise ValueError(
            "A contrastive scorer spec is 'clip:<hub id or local dir>', e.g. 'clip:openai/clip-vit-base-patch32'."
        )
    return HFContrastiveScorer(rest, **kwargs)


register_scorer("clip", _make_clip, form="clip:<hub id or local dir>", overwrite=True)
