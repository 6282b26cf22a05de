"""Contrastive scorer: CLIP / SigLIP / SigLIP2 similarity of a clip's frames to a goal text.

``make_scorer("clip:<hub id or local dir>")`` builds an :class:`HFContrastiveScorer`. transformers
and Pillow are imported when a scorer is built, never when this module is imported.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import numbers
import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from vlmrb_torchrl._keys import FRAME_ROW_KEY
from vlmrb_torchrl.scorers import _hf
from vlmrb_torchrl.scorers._frames import frames_to_numpy
from vlmrb_torchrl.scorers._hashing import prompt_hash
from vlmrb_torchrl.scorers.base import check_clips, register_scorer, validate_scores
from vlmrb_torchrl.scorers.prompts import (
    AGGREGATIONS,
    PromptCheck,
    aggregate_checks,
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
        lazy (bool, optional): load on first use instead of now: the constructor checks the options
            and finds the model; transformers, the weights, the processor and the prompts'
            embeddings load at the first :meth:`score` (in an :class:`~vlmrb_torchrl.AsyncScorer`,
            in its scoring thread), :meth:`frame_probabilities`, :meth:`with_prompt_set` or
            :meth:`load`, or when ``model``, ``processor``, ``text_embeds`` or ``logit_scale`` is
            read. For a local directory whose ``model.safetensors`` holds ``logit_scale`` (or with
            ``logit_scale=`` given), so that the provenance is known without loading; it is checked
            against the loaded model's. Other models load now. The scores are the same. A model
            that fails to load then fails that first call (a :class:`RuntimeError` naming the model,
            from the load's error). Defaults to ``False``.

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
        lazy: bool = False,
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
        self.aggregation = aggregation
        _hf.set_scorer_attributes(
            self, model, frame_key=frame_key, mask_key=mask_key, max_frames=max_frames, batch_size=batch_size
        )
        self._specific = {}  # the provenance entries of this scorer's options
        if prompt_set is not None:
            self._specific["prompt_set"] = [c.record() for c in self.prompt_set]
        if task is not None:
            self._specific["task"] = task
        self._load_error: BaseException | None = None
        if lazy:
            _hf.require(owner, "transformers", "PIL")
            where = _hf.resolve_model(model, owner=owner, revision=revision, local_files_only=local_files_only,
                                      cache_dir=cache_dir, hub_timeout=hub_timeout)
            known = _unloaded_model_info(where, self.dtype, logit_scale)
            if known is not None:  # loads on first use (load())
                model_info, transformers_info, scale = known
                self.provenance = self._provenance(where, model_info, transformers_info, logit_scale=scale)
                return
        self._load_now()

    #: what :meth:`load` sets; reading one of them before loads the model (``lazy=True``)
    _LOADED = frozenset({"processor", "model", "logit_scale", "text_embeds", "_check_rows", "_padding", "_pil"})

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes not set yet: a lazy scorer's model and what comes with it
        if name in HFContrastiveScorer._LOADED and "_init_kwargs" in self.__dict__:
            self.load()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded (``False`` until first use with ``lazy=True``)."""
        return "model" in self.__dict__

    def load(self) -> None:
        """Loads the model, processor and prompt embeddings now, if not loaded yet (``lazy=True``; thread-safe).

        Raises:
            RuntimeError: the model failed to load (here, or at an earlier attempt), from that error.
        """
        if self.loaded:
            return
        with self._lock:
            if self.loaded:
                return
            if self._load_error is not None:
                raise RuntimeError(f"{type(self).__name__}: loading {self.model_name!r} failed on first use "
                                   f"(lazy=True): {self._load_error}") from self._load_error
            known = self.provenance
            try:
                self._load_now()
            except Exception as err:
                self._load_error = err
                raise RuntimeError(f"{type(self).__name__}: loading {self.model_name!r} failed on first use "
                                   f"(lazy=True): {err}") from err
            if self.provenance != known:  # what checkpoints recorded before loading must be what was loaded
                changed = sorted(k for k in {*known, *self.provenance} if known.get(k) != self.provenance.get(k))
                for name in HFContrastiveScorer._LOADED:
                    self.__dict__.pop(name, None)
                self._load_error = RuntimeError(f"the loaded model's provenance differs from the one read without "
                                                f"loading in {changed}; build it with lazy=False")
                self.provenance = known
                raise RuntimeError(f"{type(self).__name__}: {self.model_name!r}: {self._load_error}")

    def _load_now(self) -> None:
        owner, kwargs = type(self).__name__, self._init_kwargs
        transformers, where, load = self.source.locate(owner)
        processor = transformers.AutoProcessor.from_pretrained(where["path"], **load)
        model = self.source.load(transformers.AutoModel, transformers, where, load, device=self.device,
                                 dtype=self.dtype, owner=self.name)
        model_type = getattr(model.config, "model_type", None)
        if not (hasattr(model, "get_image_features") and hasattr(model, "get_text_features")):
            raise ValueError(
                f"{owner}: {self.model_name!r} (model_type={model_type!r}) is not a contrastive image-text model "
                f"(no get_image_features/get_text_features). For generative VLMs use "
                f"make_scorer('hf:{self.model_name}')."
            )
        if kwargs["logit_scale"] is None:
            raw = getattr(model, "logit_scale", None)
            scale = float(raw.detach().float().exp().reshape(-1)[0]) if isinstance(raw, torch.Tensor) else 100.0
        else:
            scale = float(kwargs["logit_scale"])
        self.processor, self.logit_scale = processor, scale
        self._padding = "max_length" if model_type in _MAX_LENGTH_PADDING else True
        self._pil = importlib.import_module("PIL.Image")
        self.model = model  # last: `loaded` reads it
        try:
            self._embed_checks()
        except BaseException:
            del self.model
            raise
        provenance = self._provenance(where, model, transformers, logit_scale=scale)
        extra = {k: v for k, v in getattr(self, "provenance", {}).items() if k not in provenance}
        self.provenance = {**provenance, **extra}  # entries added by the builder (builtin: task, checks_from)

    def _provenance(self, where: dict, model: Any, transformers: Any, *, logit_scale: float) -> dict:
        """:func:`~vlmrb_torchrl.scorers._hf.provenance` with this scorer's entries; ``model`` and ``transformers``
        need only ``config._commit_hash``, ``config.model_type`` and ``__version__``."""
        return _hf.provenance(
            "clip", self.model_name, where, model, prompt=self.prompt, dtype=self.dtype, max_frames=self.max_frames,
            transformers=transformers, negatives=list(self.negatives),
            negatives_hash=prompt_hash("\n".join(self.negatives)), aggregation=self.aggregation,
            logit_scale=logit_scale, **self._specific,
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
        self.load()  # the new scorer shares the loaded model
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
            prompt_set=[c.record() for c in new.prompt_set],
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
        keys = _frame_digests(frames)
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
        indices = self.inputs.indices(clips)
        array = frames_to_numpy(clips.get(self.inputs.frame_key))
        frame_rows = clips.get(FRAME_ROW_KEY, None) if self.embedding_cache else None
        with self._lock, torch.inference_mode():
            if frame_rows is None:
                image_embeds = self._embed_frames([array[b, t] for b, keep in enumerate(indices) for t in keep])
            else:
                image_embeds = self._embed_pooled(array, indices, frame_rows)
            image_embeds = image_embeds.to(self.text_embeds.device)
            probs = torch.stack(
                [(self.logit_scale * image_embeds @ self.text_embeds[rows].T).softmax(-1)[:, 0]
                 for rows in self._check_rows], -1,
            ).cpu()
        return list(probs.split([len(keep) for keep in indices]))

    def _embed_pooled(self, array: np.ndarray, indices: list[np.ndarray], rows: torch.Tensor) -> torch.Tensor:
        """:meth:`_embed_frames` of the shown frames of pooled clips (``rows``: ``("clip", "frame_row")``, the
        pool row of each frame, from :func:`~vlmrb_torchrl.scoring.transform.pack_frames`): each row's frame
        digested and looked up once, not once per clip that shows it (overlapping clips show each frame up to
        ``clip_len + 1`` times). The distinct frames go in the order they first appear, so the frames embedded
        and their batches are those of the per-frame path, and the embeddings bit for bit the same."""
        b_index = np.repeat(np.arange(len(indices)), [len(keep) for keep in indices])
        t_index = np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64)
        ids = rows.cpu().numpy()[b_index, t_index]
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        order = np.argsort(first)
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        shown = first[order]
        distinct = self._embed_frames([array[b, t] for b, t in zip(b_index[shown], t_index[shown])])
        self._cache_hits += ids.size - shown.size  # the repeats are reused frames, as on the per-frame path
        return distinct[torch.from_numpy(rank[inverse.reshape(-1)])]

    def frame_probabilities(self, clips: TensorDictBase) -> list[torch.Tensor]:
        """Per clip, P(positive) of each shown real frame (float32, in frame order).

        ``[T_b]`` per clip for a single prompt; ``[T_b, num_checks]`` with a prompt set.
        """
        per_clip = self._check_probabilities(clips)
        return [p[:, 0] for p in per_clip] if len(self.prompt_set) == 1 else per_clip

    def check_scores(self, clips: TensorDictBase) -> torch.Tensor:
        """Each check's aggregated score of each clip: float32 ``[B, num_checks]`` in ``[0, 1]``, in the
        order of ``prompt_set``. :meth:`score` is its max over checks; its argmax says which check decided
        a clip (``benchmarks/scorer_quality.py --by-check`` counts false positives by it)."""
        return aggregate_checks(self._check_probabilities(clips), self.prompt_set)

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """Aggregated per-frame P(positive), max over the prompt set's checks: float32 ``[B]`` in ``[0, 1]``."""
        per_check = self.check_scores(clips)  # checks the clips (_check_probabilities)
        return validate_scores(per_check.max(-1).values if len(per_check) else torch.zeros(0), clips.batch_size[0],
                               scorer=self)

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


def _unloaded_model_info(where: dict, dtype: torch.dtype, logit_scale: float | None) -> tuple | None:
    """What the provenance reads of the model and of transformers, without loading either:
    ``(model, transformers, logit_scale)`` stand-ins with ``config._commit_hash``,
    ``config.model_type`` and ``__version__``. For a float32 model in a local directory with a
    ``config.json`` naming its ``model_type`` and, unless ``logit_scale`` is given, a
    ``model.safetensors`` holding ``logit_scale``; ``None`` otherwise (the scorer then loads at once)."""
    import importlib.metadata
    import re
    from types import SimpleNamespace

    if where["source"] != "local" or dtype != torch.float32:
        return None
    path = where["path"]
    model_type = _hf.read_config(path).get("model_type")
    weights = os.path.join(path, "model.safetensors")
    if model_type is None or (logit_scale is None and not os.path.isfile(weights)):
        return None
    if logit_scale is None:
        try:
            from safetensors import safe_open

            with safe_open(weights, framework="pt") as f:
                if "logit_scale" not in f.keys():
                    return None
                raw = f.get_tensor("logit_scale")
        except Exception:  # noqa: BLE001 - unreadable here: loading now tells what is wrong
            return None
        logit_scale = float(raw.detach().float().exp().reshape(-1)[0])  # as read from the loaded model
    # transformers' own rule for a config inside a Hub cache snapshot (PretrainedConfig._commit_hash)
    snapshot = re.search(r"snapshots/([^/]+)/", path.replace(os.sep, "/") + "/")
    revision = snapshot.group(1) if snapshot and re.fullmatch(r"[0-9a-f]{40}", snapshot.group(1)) else None
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None
    model = SimpleNamespace(config=SimpleNamespace(_commit_hash=revision, model_type=model_type))
    return model, SimpleNamespace(__version__=version), float(logit_scale)


def _frame_digest(frame: np.ndarray) -> bytes:
    """Content key of a frame: its shape, dtype and a 128-bit BLAKE2 digest of its pixels."""
    frame = np.ascontiguousarray(frame)
    head = f"{frame.shape}{frame.dtype.str}".encode()
    return head + hashlib.blake2b(memoryview(frame).cast("B"), digest_size=16).digest()


def _frame_digests(frames: Sequence[np.ndarray]) -> list[bytes]:
    """``[_frame_digest(f) for f in frames]``, each distinct frame digested once.

    Clips overlap: a call's frames repeat each distinct frame up to ``clip_len + 1`` times, and
    digesting every copy was most of a scoring call's time. Equal frames are found by their bytes
    (a dict: hashing and comparing bytes costs a fraction of a digest).

    Examples:
        >>> a, b = np.zeros((4, 4, 3), np.uint8), np.ones((4, 4, 3), np.uint8)
        >>> _frame_digests([a, b, a.copy()]) == [_frame_digest(f) for f in (a, b, a)]
        True
    """
    seen: dict[tuple, bytes] = {}
    out = []
    for frame in frames:
        key = (frame.shape, frame.dtype.str, frame.tobytes())
        digest = seen.get(key)
        if digest is None:
            digest = seen[key] = _frame_digest(frame)
        out.append(digest)
    return out


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
                                  check.aggregation, check.hold))
    return tuple(checks)


def _make_clip(rest: str, **kwargs: Any) -> HFContrastiveScorer:
    if not rest:
        raise ValueError(
            "A contrastive scorer spec is 'clip:<hub id or local dir>', e.g. 'clip:openai/clip-vit-base-patch32'."
        )
    return HFContrastiveScorer(rest, **kwargs)


register_scorer("clip", _make_clip, form="clip:<hub id or local dir>", overwrite=True)
