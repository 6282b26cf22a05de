"""Replay modes behind one interface: the only part of a recipe that differs between them.

``make_replay(cfg, ...)`` returns a :class:`Replay` for ``cfg.replay``:

| ``replay=`` | class | TorchRL buffer |
|---|---|---|
| ``uniform`` | :class:`UniformReplay` | ``TensorDictReplayBuffer`` + ``RandomSampler`` |
| ``per`` | :class:`PrioritizedReplay` | ``TensorDictReplayBuffer`` + ``PrioritizedSampler`` (TD errors) |
| ``vlm``, ``vlm_td`` | :class:`VLMReplay` | :class:`~vlmrb_torchrl.VLMReplayBuffer` (clip scoring, VLM priorities) |

A recipe stores each collector batch with ``replay.store(stored, batch)``, samples with
``replay.sample()``, hands the learner's TD errors back with ``replay.update_priority(sample)``,
calls ``replay.before_checkpoint()`` before saving ``replay.buffer``, adds ``replay.stats(counters)``
to its metric rows and closes the replay at the end (``with replay:``).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey, expand_as_right, unravel_key
from torchrl.data import LazyTensorStorage, PrioritizedSampler, RandomSampler, TensorDictReplayBuffer

from vlmrb_torchrl.scoring.clip_scoring import reads_frames
from vlmrb_torchrl.scorers.base import scorer_stats

__all__ = ["FRAME_KEY", "VLM_MODES", "Replay", "UniformReplay", "PrioritizedReplay", "VLMReplay", "make_replay",
           "make_scorer_from_config", "uses_scorer", "importance_weighted", "needs_frames", "sample_tensordict",
           "scorer_task_kwargs", "scorer_checks"]

#: Where the recipe envs write rendered frames (when the scorer reads them).
FRAME_KEY = "pixels"
#: The replay modes that score clips with a scorer.
VLM_MODES = ("vlm", "vlm_td")


def uses_scorer(replay: str) -> bool:
    """Whether the replay mode ``replay`` scores clips (and so needs a scorer).

    Examples:
        >>> uses_scorer("vlm_td"), uses_scorer("per")
        (True, False)
    """
    return replay in VLM_MODES


def importance_weighted(cfg) -> bool:
    """Whether the replay's samples carry importance weights that can differ from 1: PER, and VLM-RB with
    ``beta > 0``. VLM-RB with ``beta=0`` (the default, the paper's setting) weights every draw by 1, so
    the recipes' losses take plain means (the same numbers, bit for bit, without the weighting's operations).

    Examples:
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> importance_weighted(DQNConfig(replay="vlm")), importance_weighted(DQNConfig(replay="vlm", beta=0.4))
        (False, True)
        >>> importance_weighted(DQNConfig(replay="per"))
        True
    """
    return not (uses_scorer(cfg.replay) and cfg.beta == 0)


def needs_frames(scorer) -> bool:
    """Whether ``scorer`` reads rendered frames (:data:`FRAME_KEY`), so the training envs must render.

    Examples:
        >>> from vlmrb_torchrl.scorers import make_scorer
        >>> needs_frames(make_scorer("oracle:minigrid")), needs_frames(None)
        (False, False)
    """
    return scorer is not None and reads_frames(scorer, FRAME_KEY)


def scorer_task_kwargs(cfg: Any) -> dict[str, Any]:
    """What the recipe tells its scorer about the task of ``cfg.env``: the env family's
    (:meth:`~vlmrb_torchrl.envs.EnvFamily.scorer_task_kwargs`; MiniGrid tells ``builtin:minigrid`` the mission),
    nothing for an env of no family.

    Examples:
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> scorer_task_kwargs(DQNConfig(env="MiniGrid-DoorKey-5x5-v0").validate())  # scorer=auto: builtin:minigrid
        {'task': 'use the key to open the door and then get to the goal'}
        >>> scorer_task_kwargs(DQNConfig(env="BabyAI-GoToLocal-v0").validate())  # builtin:minigrid_agent
        {'mission_key': 'mission', 'doors': False}
        >>> scorer_task_kwargs(DQNConfig(env="BabyAI-GoToLocal-v0", scorer="oracle:minigrid"))
        {}
    """
    from vlmrb_torchrl.envs.family import family_of

    family = family_of(cfg.env)
    return {} if family is None else family.scorer_task_kwargs(cfg)


def resolved_threshold(cfg: Any) -> float | None:
    """``cfg.threshold``, with ``"auto"`` (a config not through ``validate()`` yet) resolved for its scorer
    (:meth:`~vlmrb_torchrl.recipes.config.RecipeConfig.decision_threshold`; a ``scorer=auto`` that
    ``validate()`` has not resolved yet names no built-in model: 0.5).

    Examples:
        >>> from vlmrb_torchrl.recipes.config import SACConfig
        >>> resolved_threshold(SACConfig(scorer="builtin:scene")), resolved_threshold(SACConfig(threshold=None))
        (0.95, None)
    """
    return cfg.decision_threshold() if cfg.threshold == "auto" else cfg.threshold


def scorer_checks(scorer: Any) -> dict[str, Any] | None:
    """What the run's config and log show of a prompt-set scorer: where its checks come from, the task,
    and the checks (``aggregation(positive vs negatives)``); ``None`` for scorers without checks."""
    provenance = dict(getattr(scorer, "provenance", None) or {})
    inner = getattr(scorer, "scorer", None)  # NoisyScorer / DistilledScorer: the wrapped one's checks
    checks = getattr(scorer, "prompt_set", None) or getattr(inner, "prompt_set", None)
    if "checks_from" not in provenance and inner is not None:
        provenance = dict(getattr(inner, "provenance", None) or {})
    if checks is None and "checks_from" not in provenance:
        return None
    from vlmrb_torchrl.scorers.prompts import prompt_set_text

    out = {"checks_from": provenance.get("checks_from", "given"), "task": provenance.get("task"),
           "checks": [prompt_set_text([c])[len("max of "):] for c in checks] if checks else []}
    if provenance.get("doors") is False:  # MissionScorer: no layout door, no implied door checks
        out["doors"] = False
    return out


def make_scorer_from_config(cfg: Any):
    """``make_scorer(cfg.scorer, prompt=cfg.prompt, **cfg.scorer_kwargs)`` (``builtin:minigrid`` also
    gets the task, :func:`scorer_task_kwargs`), wrapped in a :class:`~vlmrb_torchrl.scorers.NoisyScorer`
    when ``cfg.label_noise > 0``, then (the noisy one is the teacher) in a
    :class:`~vlmrb_torchrl.scorers.DistilledScorer` when ``cfg.distill``.

    Contrastive models (``builtin:``, ``clip:``) are built with ``lazy=True`` unless
    ``cfg.scorer_kwargs`` says otherwise: the model is found and its provenance read now, and it
    loads (transformers, weights, prompt embeddings: seconds) in the scoring thread at the first
    clips, while the envs start stepping.

    Examples:
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> scorer = make_scorer_from_config(DQNConfig(replay="vlm").validate())  # builtin:minigrid
        >>> scorer.loaded, scorer.provenance["checks_from"], scorer.in_keys
        (False, 'mission', ['pixels', 'mask'])
    """
    from vlmrb_torchrl.scorers import NoisyScorer, make_scorer

    kwargs = dict(cfg.scorer_kwargs or {})
    if isinstance(cfg.scorer, str) and cfg.scorer.startswith(("builtin:", "clip:")):
        kwargs.setdefault("lazy", True)
    if cfg.prompt is not None:
        kwargs["prompt"] = cfg.prompt
    kwargs.update(scorer_task_kwargs(cfg))
    scorer = make_scorer(cfg.scorer, **kwargs)
    if cfg.label_noise > 0:
        scorer = NoisyScorer(scorer, flip_prob=cfg.label_noise, seed=cfg.seed)
    if getattr(cfg, "distill", False):
        from vlmrb_torchrl.scorers import DistilledScorer

        scorer = DistilledScorer(scorer, teacher_fraction=cfg.teacher_fraction, min_agreement=cfg.min_agreement,
                                 threshold=0.5 if cfg.threshold is None else resolved_threshold(cfg), frame_key=FRAME_KEY,
                                 seed=cfg.seed)
    return scorer


class Replay:
    """A replay mode as the recipes see it: a TorchRL buffer and what a training loop does with it.

    Subclasses implement :meth:`store`; the other hooks default to nothing. A context manager:
    leaving it calls :meth:`close`, on errors too.

    Attributes:
        buffer (TensorDictReplayBuffer): the TorchRL buffer (sampled, and saved in checkpoints
            with :func:`~vlmrb_torchrl.recipes.replay_checkpoint.save_replay`).
        closed (bool): whether :meth:`close` ran.
    """

    def __init__(self, buffer: TensorDictReplayBuffer) -> None:
        self.buffer = buffer
        self.closed = False

    def store(self, stored: TensorDictBase, batch: TensorDictBase) -> None:
        """Writes a collector batch ``[envs, time]``.

        Args:
            stored (TensorDictBase): what the learner samples (e.g. with n-step returns).
            batch (TensorDictBase): the raw collector batch ``stored`` was computed from (same
                layout): clips are cut from its 1-step data and frames.
        """
        raise NotImplementedError

    def sample(self) -> TensorDictBase:
        """A learner batch: what ``buffer.sample()`` returns (:func:`sample_tensordict`)."""
        return sample_tensordict(self.buffer)

    def update_priority(self, sample: TensorDictBase) -> None:
        """Hands the learner's TD errors (``sample["td_error"]``) back to the sampler; nothing for uniform replay."""

    def sync(self) -> None:
        """Waits for what the replay still computes for stored data when the run asked for synchronous
        scoring; :meth:`store` calls it."""

    def before_checkpoint(self) -> int:
        """Brings the buffer to a state worth saving (e.g. every pending score written), waiting a bounded
        time; returns how many queued items it could not finish (0: nothing left behind)."""
        return 0

    def backlog(self) -> int:
        """Items still being computed for stored data (the VLM modes' clips waiting for scores)."""
        return 0

    def stats(self, counters: dict[str, Any]) -> dict[str, Any]:
        """The replay columns of a metrics row (none for uniform/PER)."""
        return {}

    def logged(self, row: dict[str, Any], counters: dict[str, Any]) -> None:
        """Called after ``row`` (with :meth:`stats`) was logged; interval statistics restart here."""

    def close(self) -> None:
        """Stops what runs in the background; the buffer stays readable."""
        self.closed = True

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except RuntimeError:  # e.g. the scorer's own failure: do not mask the body's exception
            pass


class UniformReplay(Replay):
    """Uniform replay: TorchRL's ``RandomSampler``.

    Args:
        buffer (TensorDictReplayBuffer): the buffer to store into.
        frame_key (NestedKey): rendered frames, dropped before storing (the learner never reads
            them). Defaults to :data:`FRAME_KEY`.

    Examples:
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> cfg = DQNConfig(replay="uniform", buffer_size=100, batch_size=4)
        >>> with make_replay(cfg, generator=torch.Generator().manual_seed(0), updates=10) as replay:
        ...     batch = TensorDict({"observation": torch.zeros(2, 8, 3)}, [2, 8])  # [envs, time]
        ...     replay.store(batch, batch)
        ...     len(replay.buffer), replay.sample().batch_size, replay.stats({})
        (16, torch.Size([4]), {})
    """

    def __init__(self, buffer: TensorDictReplayBuffer, *, frame_key: NestedKey = FRAME_KEY) -> None:
        super().__init__(buffer)
        self._drop = (frame_key, unravel_key(("next", frame_key)))

    def store(self, stored: TensorDictBase, batch: TensorDictBase) -> None:
        self.buffer.extend(stored.reshape(-1).exclude(*self._drop))


class PrioritizedReplay(UniformReplay):
    """Prioritized replay on TD errors: TorchRL's ``PrioritizedSampler``."""

    def update_priority(self, sample: TensorDictBase) -> None:
        self.buffer.update_tensordict_priority(sample)


class VLMReplay(Replay):
    """VLM-RB: a :class:`~vlmrb_torchrl.VLMReplayBuffer` scoring clips of the stored data.

    Args:
        buffer (VLMReplayBuffer): from :func:`~vlmrb_torchrl.make_vlm_replay_buffer`.
        sync (bool): wait for every queued score after each :meth:`store` (fully deterministic
            runs) instead of letting them land in the background. This wait has no time limit.
        drain_timeout (float, optional): seconds :meth:`before_checkpoint` waits for the queued
            scores, and :meth:`close` for the scorer to stop (``AsyncScorer.close(timeout=)``: a
            hung scorer call is abandoned with a warning). ``None``: no limit.

    A scorer that fails follows the buffer's ``on_scorer_error`` (``"raise"``: the error ends
    the run at the next store or checkpoint; ``"skip"``: the batch keeps the unscored priority
    and is counted in :meth:`stats`' ``scorer_errors``), in both scoring modes.

    Examples:
        >>> import time
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl import ClipSpec, make_vlm_replay_buffer
        >>> from vlmrb_torchrl.scorers import CallableScorer
        >>> def slow_scores(clips):
        ...     time.sleep(1.0)
        ...     return torch.zeros(clips.shape[0])
        >>> slow = CallableScorer(slow_scores, in_keys=["observation"])
        >>> buffer = make_vlm_replay_buffer(100, slow, clip_spec=ClipSpec(clip_len=2))
        >>> replay = VLMReplay(buffer, drain_timeout=0.1)
        >>> batch = TensorDict({"observation": torch.zeros(1, 4, 3),
        ...                     ("collector", "traj_ids"): torch.zeros(1, 4, dtype=torch.long),
        ...                     ("next", "done"): torch.zeros(1, 4, 1, dtype=torch.bool)}, [1, 4])
        >>> replay.store(batch, batch)
        >>> replay.before_checkpoint() > 0  # the clips still queued after 0.1 s
        True
        >>> replay.close()
    """

    def __init__(self, buffer, *, sync: bool = False, drain_timeout: float | None = None) -> None:
        super().__init__(buffer)
        self._sync = sync
        self.drain_timeout = drain_timeout

    def store(self, stored: TensorDictBase, batch: TensorDictBase) -> None:
        self.buffer.extend(stored, clips_from=batch)  # clips see the raw 1-step data and frames
        self.sync()

    def update_priority(self, sample: TensorDictBase) -> None:
        # the vlm_td boost; the plain vlm sampler's sampling ignores TD errors, and a run's replay mode cannot
        # change on resume, so they are not stored there (~8% of a small DQN's update)
        if self.buffer.sampler.td_boost:
            self.buffer.update_tensordict_priority(sample)

    def sync(self) -> None:
        if self._sync:
            self.buffer.async_scorer.drain()

    def before_checkpoint(self) -> int:
        # the clips of unfinished episodes too: the checkpoint then holds every transition's score
        self.buffer.flush_clips()
        if self.buffer.async_scorer.drain(self.drain_timeout):
            return 0
        return self.backlog()

    def backlog(self) -> int:
        return self.buffer.async_scorer.backlog

    def stats(self, counters: dict[str, Any]) -> dict[str, Any]:
        """Sampler and scorer statistics.

        ``sampled_positive_fraction`` is the share of positives among the transitions sampled
        since the last logged row (``counters["drawn_logged"]``, set by :meth:`logged` and
        checkpointed with the counters, so resumed runs log the same intervals). The scorer's own
        :func:`~vlmrb_torchrl.scorers.scorer_stats` (requests, retries, cache hits, a distilled
        scorer's routing, ...) come as ``scorer_<name>``; the worker's columns win a name clash.
        """
        stats = self.buffer.vlm_stats()
        drawn_before, positive_before = counters.get("drawn_logged", (0, 0))
        drawn = stats["drawn"] - drawn_before
        return {**{f"scorer_{k}": v for k, v in scorer_stats(self.buffer.scorer).items()},
                "lambda": stats["lambda"], "lambda_effective": stats["lambda_effective"],
                "max_oversampling_ratio": stats["max_oversampling_ratio"], "fraction_scored": stats["fraction_scored"],
                "positive_fraction": stats["positive_fraction"], "credited_fraction": stats.get("credited_fraction"),
                "sampled_positive_fraction": (stats["drawn_positive"] - positive_before) / drawn if drawn
                else float("nan"),
                "stale_drops": stats["stale_drops"],
                "scorer_clips_per_s": stats["scorer/clips_per_s"], "scorer_backlog": stats["scorer/backlog"],
                "scorer_dropped": stats["scorer/dropped"], "scorer_errors": stats["scorer/errors"],
                "scorer_consecutive_errors": stats["scorer/consecutive_errors"], "drawn": stats["drawn"],
                "drawn_positive": stats["drawn_positive"]}

    def logged(self, row: dict[str, Any], counters: dict[str, Any]) -> None:
        counters["drawn_logged"] = (row["drawn"], row["drawn_positive"])

    def close(self) -> None:
        """Stops the scorer without scoring what is still queued (the run is over), waiting at most
        ``drain_timeout`` for a scorer call under way; the scorer's own failure is raised."""
        if self.closed:
            return
        try:
            self.buffer.close(flush=False, timeout=self.drain_timeout)
        finally:
            super().close()


def sample_tensordict(buffer: TensorDictReplayBuffer) -> TensorDictBase:
    """``buffer.sample()`` for a buffer of TensorDicts in a 1-D tensor storage, without its per-call overhead.

    The same sampler call (so the same random draws), the same entries gathered at the same
    indices, the sampler's info (``"index"``, importance weights) set as ``TensorDictReplayBuffer``
    sets it; ~5x faster for a DQN batch, where TorchRL's ``sample`` costs ~10% of a gradient step
    (its TensorDict indexing, locks and checks). Buffers with transforms, prefetching, a non-default
    collate function, sample units or generation tracking take ``buffer.sample()``.

    Examples:
        >>> from tensordict import TensorDict
        >>> def make():
        ...     rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4,
        ...                                 generator=torch.Generator().manual_seed(0))
        ...     rb.extend(TensorDict({"obs": torch.arange(6.0), ("next", "obs"): torch.arange(1.0, 7.0)}, [6]))
        ...     return rb
        >>> fast, slow = sample_tensordict(make()), make().sample()
        >>> all(torch.equal(fast[k], slow[k]) for k in slow.keys(True, True)), fast["index"].tolist()
        (True, [2, 3, 5, 0])
    """
    storage = buffer._storage
    from torchrl.data.replay_buffers.storages import TensorStorage
    from torchrl.data.replay_buffers.storages.utils import _collate_id

    data = getattr(storage, "_storage", None)
    plain = (type(buffer).sample is TensorDictReplayBuffer.sample and isinstance(storage, TensorStorage)
             and storage.ndim == 1 and storage.initialized and isinstance(data, TensorDictBase)
             and not buffer._transform and not buffer._prefetch and buffer._sample_unit is None
             and not buffer._writer.tracks_generations and buffer._collate_fn is _collate_id
             and buffer._batch_size is not None and buffer._sample_dependency is None
             and not buffer._service_shutdown and len(storage) > 0)
    if not plain:
        return buffer.sample()
    with buffer._replay_lock, buffer._write_lock:
        index, info = buffer._sampler.sample(storage, buffer._batch_size)
        gathered: dict = {}
        for key, value in data.items(True, True):
            if isinstance(key, tuple):
                node = gathered
                for part in key[:-1]:
                    node = node.setdefault(part, {})
                node[key[-1]] = value[index]
            else:
                gathered[key] = value[index]
    out = TensorDict(gathered, batch_size=index.shape, device=data.device)
    info["index"] = index
    for key, value in info.items():
        value = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
        if value.ndim < out.ndim:
            value = expand_as_right(value, out)
        out.set(key, value)
    return out


def make_replay(cfg: Any, *, generator: torch.Generator, updates: int, scorer=None, renderer=None) -> Replay:
    """The :class:`Replay` for ``cfg.replay``; everything but the sampler is identical across modes.

    Args:
        cfg: a recipe config (replay, buffer, clip and sampler keys).

    Keyword Args:
        generator (torch.Generator): the buffer's sampling generator.
        updates (int): gradient updates of the whole run (the sampler's default warm-up is half of them:
            :meth:`~vlmrb_torchrl.recipes.config.RecipeConfig.sampler_kwargs`).
        scorer: the VLM modes' scorer (see :func:`make_scorer_from_config`).
        renderer (StateRenderer, optional): ψ, when the training envs write states in place of frames
            (:func:`~vlmrb_torchrl.make_vlm_replay_buffer`'s ``renderer=``).
    """
    storage = LazyTensorStorage(cfg.buffer_size)  # CPU: TorchRL's PyPI wheel has no CUDA trees
    if cfg.replay == "uniform":
        return UniformReplay(TensorDictReplayBuffer(storage=storage, sampler=RandomSampler(),
                                                    batch_size=cfg.batch_size, generator=generator))
    if cfg.replay == "per":
        sampler = PrioritizedSampler(cfg.buffer_size, alpha=cfg.per_alpha, beta=cfg.per_beta)
        return PrioritizedReplay(TensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=cfg.batch_size,
                                                        generator=generator))
    if cfg.replay not in VLM_MODES:
        raise ValueError(f"replay={cfg.replay!r} is not a replay mode: use uniform, per, {' or '.join(VLM_MODES)}.")
    from vlmrb_torchrl.replay.buffer import make_vlm_replay_buffer

    buffer = make_vlm_replay_buffer(
        cfg.buffer_size, scorer, on_scorer_error=cfg.on_scorer_error,
        max_consecutive_scorer_errors=cfg.max_consecutive_scorer_errors, clip_spec=cfg.clip_spec(),
        storage=storage, batch_size=cfg.batch_size, generator=generator, frame_key=FRAME_KEY,
        backend=cfg.scorer_backend, scorer_options=_ray_options(cfg) if cfg.scorer_backend == "ray" else None,
        sampler_kwargs=cfg.sampler_kwargs(updates), renderer=renderer,
    )
    return VLMReplay(buffer, sync=not cfg.async_scoring, drain_timeout=cfg.scorer_drain_timeout)


def _ray_options(cfg: Any) -> dict[str, Any]:
    """The Ray pool's arguments: ``cfg.scorer_workers`` actors, each building its own scorer from the config
    (so a GPU model loads on the actor's GPU, not in the learner)."""
    from functools import partial

    return {"num_workers": cfg.scorer_workers, "worker_options": {"num_gpus": cfg.scorer_gpus} if cfg.scorer_gpus else {},
            "scorer_factory": partial(make_scorer_from_config, cfg), "ray_address": cfg.ray_address}
