"""Recipe configuration: typed dataclasses, ``key=value`` overrides, YAML files, presets."""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import sys
import typing
from pathlib import Path
from typing import Any, ClassVar, Literal

from vlmrb_torchrl.envs.family import families, family_of

__all__ = ["RecipeConfig", "DQNConfig", "SACConfig", "ConfigError", "RENAMED_KEYS", "upgrade_keys",
           "apply_overrides", "config_help", "load_config_file", "QUICK_PRESETS", "quick_preset", "code_loading_values",
           "not_utf8"]

REPLAY_MODES = ("uniform", "per", "vlm", "vlm_td")
#: Clips one scorer call packs in the recipes (the scoring worker's batch): each holds its frames at once.
SCORER_CLIPS_PER_CALL = 32


def available_memory() -> int | None:
    """Bytes of memory the system can give a new process now (Linux's ``MemAvailable``; else the physical memory);
    ``None`` where neither can be read.

    Examples:
        >>> available_memory() > 0
        True
    """
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None

#: Keys renamed to the library's names (old -> new): the sampler's ``unscored_priority``, ``eps``, ``warmup``,
#: ``beta`` and ``spread``. The old names keep working (command line, config files, the ``config.json`` of
#: runs resumed), with a one-line message naming the new key.
RENAMED_KEYS: dict[str, str] = {"default_priority": "unscored_priority", "vlm_eps": "eps", "vlm_warmup": "warmup",
                                "vlm_beta": "beta", "vlm_spread": "spread"}
_TOLD: set[str] = set()  # renamed keys already reported in this process

#: The config keys that make the :class:`~vlmrb_torchrl.ClipSpec` (config key -> ``ClipSpec`` argument).
CLIP_SPEC_KEYS = {"clip_len": "clip_len", "clip_stride": "stride", "clip_frames": "frames", "clip_assign": "assign"}


class ConfigError(ValueError):
    """A bad configuration key or value; the message lists what is accepted."""


def _field(default: Any, help: str, **kwargs: Any) -> Any:
    return dataclasses.field(default=default, metadata={"help": help, **kwargs})


@dataclasses.dataclass
class RecipeConfig:
    """Fields every recipe shares (run, collection, replay, scoring, evaluation, outputs)."""

    # run
    env: str = _field("MiniGrid-DoorKey-5x5-v0", "environment id: any MiniGrid id (MiniGrid-DoorKey-6x6-v0, ...) "
                      "or an Atari id ALE/<Game>-v5")
    replay: Literal["uniform", "per", "vlm", "vlm_td"] = _field(
        "vlm", "replay mode: uniform | per (TD-error PER, TorchRL's sampler) | vlm (VLM-RB) | vlm_td (TD-boosted VLM-RB)")
    seed: int = _field(0, "seeds the envs, torch, numpy and the replay buffer's generator")
    total_frames: int = _field(150_000, "environment steps to collect (all envs together)")
    output_dir: str | None = _field(None, "run directory; default runs/<recipe>__<env>__<replay>__seed<seed>__<time> "
                                          "(recipe dqn or sac, '/' in env as '-'), e.g. "
                                          "runs/dqn__MiniGrid-DoorKey-5x5-v0__vlm__seed0__20250101-120000")
    resume: str | None = _field(None, "a run directory or checkpoint directory to continue from (its newest intact "
                                      "checkpoint; the config may change only in the keys listed in docs/recipes.md)")
    overwrite: bool = _field(False, "reuse a non-empty output_dir: delete the old run's files (config, metrics, "
                                    "checkpoints, tensorboard, gallery, summary) first; without it such a dir is refused")
    trust_checkpoint: bool = _field(False, "resume= a checkpoint that needs more than weights-only loading (one of "
                                           "an older version: pickled Python objects, which can run code) or has no "
                                           "MANIFEST.json to verify it; only for checkpoints whose source you trust")
    stop_at: int | None = _field(None, "stop (with a checkpoint) once this many frames are collected; schedules "
                                       "still follow total_frames, so resume=<run dir> continues exactly")
    device: str = _field("auto", "learner device: auto (cuda if available) | cpu | cuda")
    torch_threads: int = _field(1, "torch intra-op threads for the learner (small networks: 1 is fastest, and "
                                   "more threads stall when envs, scorers or other runs share the cores)")
    # collection
    max_episode_steps: int | None = _field(None, "episode time limit (None = the env's own: MiniGrid's max_steps, "
                                                 "27k for Atari)")
    num_envs: int = _field(8, "parallel environments (stepped in one process)")
    frames_per_batch: int = _field(128, "frames per collector batch (all envs together)")
    # learning
    lr: float = _field(5e-4, "Adam learning rate (tuned on uniform replay, DoorKey-5x5)")
    gamma: float = _field(0.99, "discount")
    batch_size: int = _field(64, "learner batch size")
    buffer_size: int = _field(100_000, "replay capacity")
    learning_starts: int = _field(5_000, "frames collected before the first update")
    train_every: int = _field(4, "frames per gradient update")
    hidden: int = _field(256, "MLP width (2 layers) for vector observations")
    # replay
    per_alpha: float = _field(0.6, "PER / vlm_td priority exponent (the sampler's alpha)")
    per_beta: float = _field(0.4, "PER importance-sampling exponent")
    scorer: str = _field("oracle:minigrid", "scorer spec for vlm modes (oracle:minigrid, python:mod:fn, hf:<id or dir>, ...)")
    prompt: str | None = _field(None, "override the scorer's prompt (VLM scorers)")
    scorer_kwargs: dict[str, Any] | None = _field(
        None, "extra keyword arguments for the scorer factory, a JSON object on the command line "
              "(scorer_kwargs='{\"p\": 0.3}') or a mapping in a config file")
    clip_len: int = _field(16, "steps per scored clip")
    clip_stride: int = _field(1, "distance between clip starts")
    clip_frames: int | None = _field(None, "frames sent to the scorer per clip (None = all)")
    clip_assign: Literal["start", "cover_max"] = _field("start", "how a clip score maps to transitions")
    lambda_max: float = _field(0.5, "final weight of the VLM-prioritized component (paper: 0.5)")
    warmup: int | None = _field(None, "vlm modes: sample calls over which lambda rises 0 -> lambda_max (None = the "
                                      "sampler's default for a run of known length: half of its gradient updates)")
    threshold: float | Literal["auto"] | None = _field(
        "auto", "score binarisation threshold: auto (the scorer's own decision threshold: 0.95 for builtin:scene and "
                "0.01 for builtin:lift with their own checks, tuned on episodes other than the held-out ones; 0.5 for "
                "every other scorer) | a number in [0, 1] | None (continuous scores)")
    eps: float = _field(0.01, "vlm modes: priority floor of the VLM scores (not exploration: eps_start, eps_end)")
    beta: float = _field(0.0, "vlm modes: importance-sampling exponent (paper: 0; PER's is per_beta)")
    max_oversampling: float | None = _field(
        4.0, "vlm modes: ceiling on how many times as often as under uniform replay any transition is drawn; lambda "
             "is lowered while it would be exceeded (rare positives: robosuite Lift). None = the paper's sampler "
             "(docs/sampler.md); each recipe sets its own default (docs/recipes.md)")
    spread: float | None = _field(
        None, "vlm modes: episode credit (this package's option, not the paper's): a transition d steps before a "
              "positive one in its episode gets priority spread**d (until it falls to eps), so a goal-only label "
              "marks the path to the goal; e.g. 0.99 (the discount). None = the paper's sampler (docs/sampler.md)")
    unscored_priority: str = _field("mean", "vlm modes: priority of unscored transitions: mean | max | <float>")
    label_noise: float = _field(0.0, "flip scorer outputs with this probability (NoisyScorer): an imperfect VLM")
    distill: bool = _field(False, "score with a DistilledScorer: a small student on the frames, trained online from "
                                  "the scorer (the teacher), which then scores only teacher_fraction of the clips")
    teacher_fraction: float = _field(0.1, "distill: share of the clips the teacher scores once the student is trusted")
    min_agreement: float = _field(0.9, "distill: the teacher scores every clip while the student's F1 vs the teacher "
                                       "on audited clips is below this (trusted again at halfway to 1)")
    async_scoring: bool = _field(True, "score in a background thread; false = wait for scores every batch "
                                       "(fully deterministic runs)")
    scorer_drain_timeout: float = _field(60.0, "seconds a checkpoint (and the end of the run) waits for the scorer's "
                                               "queued clips; clips still queued then are saved unscored (counted in "
                                               "summary.json's scorer_unscored_at_checkpoint)")
    on_scorer_error: Literal["raise", "skip"] = _field(
        "raise", "a failing scorer call: raise (end the run) | skip (its clips keep the unscored priority; "
                 "counted in metrics.csv's scorer_errors, a warning every 10)")
    max_consecutive_scorer_errors: int = _field(10, "with on_scorer_error=skip: this many failed scorer calls in a "
                                                    "row end the run")
    scorer_backend: Literal["thread", "process", "ray"] = _field(
        "thread", "where clips are scored: thread (a background thread) | process (a spawned child process) | ray "
                  "(scorer_workers Ray actors, each building its own scorer; pip install 'vlmrb-torchrl[ray]')")
    scorer_workers: int = _field(1, "Ray scorer actors (scorer_backend=ray)")
    scorer_gpus: float = _field(0.0, "GPUs per Ray scorer actor (scorer_backend=ray; a fraction shares a GPU)")
    ray_address: str = _field("", "Ray cluster for scorer_backend=ray: empty = start a local one, auto = join the "
                                  "running one (ray start --head), or host:port / ray://host:port")
    frames_from_state: bool = _field(True, "envs that can (MiniGrid, robosuite, OGBench Scene) store a few bytes of "
                                           "state per step, and the "
                                           "scorer's thread/process/actor renders the frames its clips show from them "
                                           "(the same pixels); false = the envs render and pass frames")
    # evaluation and outputs
    eval_every: int = _field(10_000, "frames between evaluations")
    eval_episodes: int = _field(50, "episodes per evaluation")
    eval_envs: int = _field(10, "env copies stepped together during evaluation (batched policy calls)")
    checkpoint_every: int = _field(50_000, "frames between checkpoints (and at the end)")
    gallery_clips: int = _field(4, "top and bottom scored clips saved as GIFs at the end (0 = none)")
    gallery_steps: int = _field(2_000, "env steps the gallery plays at most (a few evaluation episodes, the last one "
                                       "cut when the budget is spent)")
    tensorboard: bool = _field(True, "write TensorBoard events")
    progress: bool = _field(True, "show a progress bar")

    #: The recipe this config is for (``vlmrb train <RECIPE>``): the env families it takes.
    RECIPE: ClassVar[str | None] = None

    # validation of the recipe's own keys: (ints >= 1, ints >= 0, numbers in [0, 1], numbers > 0, numbers >= 0);
    # subclasses extend. The library's keys (clip_*, the sampler's) are checked by the library (_library_checks).
    _POSITIVE_INTS = ("total_frames", "num_envs", "frames_per_batch", "batch_size", "buffer_size", "train_every",
                      "hidden", "eval_episodes", "eval_envs", "eval_every", "checkpoint_every", "gallery_steps",
                      "torch_threads", "max_consecutive_scorer_errors")
    _NON_NEGATIVE_INTS = ("learning_starts", "gallery_clips")
    _UNIT_NUMBERS = ("label_noise", "gamma", "min_agreement")
    _POSITIVE_NUMBERS = ("lr",)
    _NON_NEGATIVE_NUMBERS = ("per_beta", "scorer_drain_timeout")

    def _checks(self) -> list[tuple[str, bool, str]]:
        """(name, ok, allowed) triples; a subclass adds its own and calls ``super()._checks()``."""
        return []

    def _resolve(self) -> None:
        """Replaces "the env's default" values (``None``, ``scorer="auto"``) by the env family's
        (:meth:`~vlmrb_torchrl.envs.EnvFamily.recipe_defaults`, :meth:`~vlmrb_torchrl.envs.EnvFamily.default_scorer`),
        before the checks: the values land in ``config.json``."""
        family = family_of(self.env) if isinstance(self.env, str) else None
        if family is None or family.id_problem(self.env) is not None:  # the env check says what is wrong
            return
        for key, value in family.recipe_defaults(self.env).items():
            if getattr(self, key, "absent") is None:
                setattr(self, key, value)
        if self.scorer == "auto":
            spec, line = family.auto_scorer(self.env, seed=self.seed if isinstance(self.seed, int) else 0)
            if spec is not None and line is not None and self.replay in ("vlm", "vlm_td"):
                print(line, flush=True)  # once: config.json records the oracle, a resumed run is not told again
            self.scorer = spec or "auto"
        self.scorer = family.resolve_scorer(self.scorer, self.env)

    def clip_spec(self):
        """The :class:`~vlmrb_torchrl.ClipSpec` of the run (``clip_len``, ``clip_stride``, ``clip_frames``,
        ``clip_assign``): the one the replay cuts, the SAC envs render for and the gallery shows.

        Examples:
            >>> DQNConfig(clip_len=8, clip_stride=4).clip_spec()
            ClipSpec(clip_len=8, stride=4, frames=None, assign='start', final_frame=True)
        """
        from vlmrb_torchrl.scoring.clips import ClipSpec

        return ClipSpec(**{arg: getattr(self, key) for key, arg in CLIP_SPEC_KEYS.items()})

    def sampler_kwargs(self, updates: int) -> dict[str, Any]:
        """The :class:`~vlmrb_torchrl.VLMPrioritizedSampler` keyword arguments of the VLM modes, the keys named as
        the sampler names them (``per_alpha`` is its ``alpha``; ``td_boost`` is ``replay=vlm_td``; the warm-up
        ``None`` is the sampler's default for a run of ``updates`` gradient updates; ``threshold=auto`` the
        scorer's decision threshold).

        Examples:
            >>> kwargs = DQNConfig(scorer="oracle:minigrid", unscored_priority="0.5").sampler_kwargs(updates=1000)
            >>> kwargs["warmup"], kwargs["unscored_priority"], kwargs["td_boost"], kwargs["threshold"]
            (500, 0.5, False, 0.5)
        """
        from vlmrb_torchrl.replay._sampler_args import default_warmup

        unscored = self.unscored_priority
        return {"lambda_max": self.lambda_max, "warmup": default_warmup(updates) if self.warmup is None else self.warmup,
                "threshold": self.decision_threshold() if self.threshold == "auto" else self.threshold,
                "eps": self.eps, "beta": self.beta,
                "unscored_priority": unscored if unscored in ("mean", "max") else float(unscored),
                "max_oversampling": self.max_oversampling, "spread": self.spread,
                "td_boost": self.replay == "vlm_td", "alpha": self.per_alpha}

    def _library_checks(self) -> list[tuple[str, str]]:
        """``(key, the library's message)`` for each clip and sampler key the library refuses (its own checks:
        the ranges are written once, there)."""
        from vlmrb_torchrl.replay.sampler import VLMPrioritizedSampler
        from vlmrb_torchrl.scoring.clips import ClipSpec

        problems = []
        given: dict[str, Any] = {}
        for key, arg in CLIP_SPEC_KEYS.items():  # one key at a time, so that the message names it
            try:
                ClipSpec(**given, **{arg: getattr(self, key)})
                given[arg] = getattr(self, key)
            except (TypeError, ValueError) as err:
                problems.append((key, str(err)))
        try:
            unscored = self.unscored_priority if self.unscored_priority in ("mean", "max") else float(self.unscored_priority)
        except ValueError:
            unscored = self.unscored_priority  # refused below, with the sampler's message
        names = {"lambda_max": self.lambda_max, "warmup": self.warmup, "unscored_priority": unscored,
                 "threshold": self.threshold, "eps": self.eps, "beta": self.beta, "alpha": self.per_alpha,
                 "max_oversampling": self.max_oversampling, "spread": self.spread}
        config_key = {"alpha": "per_alpha"}
        for arg, value in names.items():
            if arg == "warmup" and value is None:
                continue
            try:
                VLMPrioritizedSampler.check_arguments(**{arg: value})
            except (TypeError, ValueError) as err:
                key = config_key.get(arg, arg)
                problems.append((key, str(err) if key == arg else f"(the sampler's {arg}) {err}"))
        if not problems:
            try:
                VLMPrioritizedSampler.check_arguments(eps=self.eps, beta=self.beta, lambda_max=self.lambda_max)
            except ValueError as err:
                problems.append(("eps", str(err)))
        return problems

    def scorer_frame_bytes(self) -> int:
        """Bytes of one frame the scorer reads: 64-px RGB (MiniGrid's and Atari's scorer frames); SAC: its
        ``frame_size``, one square per camera panel.

        Examples:
            >>> DQNConfig().scorer_frame_bytes(), SACConfig().validate().scorer_frame_bytes()
            (12288, 24576)
        """
        return 64 * 64 * 3

    def _clip_memory_check(self) -> list[tuple[str, bool, str]]:
        """``clip_len`` (or ``clip_frames``) bounded by the memory available: a scorer call packs
        :data:`SCORER_CLIPS_PER_CALL` clips of their shown frames at once (``clip_len=100000`` died mid-run
        allocating 34 GB). Only in VLM modes, for scorers that read frames (not the oracles)."""
        memory = available_memory()
        if self.replay not in ("vlm", "vlm_td") or str(self.scorer).startswith("oracle:") or memory is None:
            return []
        name = "clip_frames" if self.clip_frames is not None else "clip_len"
        shown = min(getattr(self, name), self.clip_len) + 1  # and the outcome frame
        frame = self.scorer_frame_bytes()
        per_call = SCORER_CLIPS_PER_CALL * shown * frame
        most = max(0, (memory // 2) // (SCORER_CLIPS_PER_CALL * frame) - 1)
        return [(name, per_call <= memory // 2,
                 f"at most {most} here: a scorer call packs {SCORER_CLIPS_PER_CALL} clips of {name} + 1 frames of "
                 f"{frame} bytes, {per_call / 1e9:.1f} GB, more than half the {memory / 1e9:.1f} GB of memory "
                 "available" + ("; set clip_frames, the frames sent per clip" if name == "clip_len" else ""))]

    def updates_for(self, frames: int) -> int:
        """Gradient updates for a collector batch of ``frames`` frames once learning started.

        Examples:
            >>> DQNConfig(train_every=4).updates_for(128), SACConfig(utd_ratio=0.5, train_every=1).updates_for(200)
            (32, 100)
        """
        return frames // self.train_every

    def decision_threshold(self) -> float:
        """What ``threshold=auto`` resolves to: the built-in scorer's decision threshold
        (:data:`~vlmrb_torchrl.scorers.builtin.BUILTIN_DECISION_THRESHOLDS`) when it scores with its own
        checks, else 0.5.

        Examples:
            >>> SACConfig(scorer="builtin:scene").decision_threshold()
            0.95
            >>> SACConfig(scorer="builtin:scene", scorer_kwargs={"prompt_set": []}).decision_threshold()
            0.5
            >>> DQNConfig(scorer="builtin:minigrid").validate().threshold, SACConfig().validate().threshold
            (0.5, 0.01)
        """
        from vlmrb_torchrl.scorers.builtin import builtin_decision_threshold

        own_checks = self.prompt is None and not any(k in (self.scorer_kwargs or {}) for k in ("prompt", "prompt_set"))
        return builtin_decision_threshold(self.scorer) if own_checks else 0.5

    def validate(self):
        """Checks every value (types first, converting what converts losslessly: ``3e5`` for an int key, ``1``
        for a float key); raises :class:`ConfigError` naming the key and what it accepts.

        Examples:
            >>> DQNConfig(total_frames=3e5).validate().total_frames
            300000
            >>> DQNConfig(seed=1.5).validate()
            Traceback (most recent call last):
            ...
            vlmrb_torchrl.recipes.config.ConfigError: seed=1.5 is invalid: expected int.
        """
        hints = _type_hints(type(self))
        for f in dataclasses.fields(self):
            setattr(self, f.name, _coerce(f.name, getattr(self, f.name), hints[f.name]))
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):  # lr=inf, a timeout of nan: never meant
                raise ConfigError(f"{f.name}={value!r} is invalid: expected a finite number.")
            if not_utf8(value):  # a path of non-UTF-8 bytes: config.json, TensorBoard and the logs cannot hold it
                raise ConfigError(f"{f.name}: {not_utf8(value)} (config.json, TensorBoard and the logs write UTF-8).")
        self._resolve()
        if self.threshold == "auto":  # after _resolve: the scorer is the one the run uses (scorer=auto resolved)
            self.threshold = self.decision_threshold()
        checks = [
            ("replay", self.replay in REPLAY_MODES, f"one of {REPLAY_MODES}"),
            ("clip_assign", self.clip_assign in ("start", "cover_max"), "'start' or 'cover_max'"),
            ("on_scorer_error", self.on_scorer_error in ("raise", "skip"), "'raise' or 'skip'"),
            ("device", self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
             "auto, cpu, cuda or cuda:N"),
        ]
        for name in self._POSITIVE_INTS:
            checks.append((name, getattr(self, name) >= 1, "an integer >= 1"))
        for name in self._NON_NEGATIVE_INTS:
            checks.append((name, getattr(self, name) >= 0, "an integer >= 0"))
        for name in self._UNIT_NUMBERS:
            checks.append((name, 0.0 <= getattr(self, name) <= 1.0, "a number in [0, 1]"))
        for name in self._POSITIVE_NUMBERS:
            checks.append((name, getattr(self, name) > 0, "a number > 0"))
        for name in self._NON_NEGATIVE_NUMBERS:
            checks.append((name, getattr(self, name) >= 0, "a number >= 0"))
        checks.append(("frames_per_batch", self.frames_per_batch % self.num_envs == 0,
                       f"a multiple of num_envs={self.num_envs}"))
        checks.append(("seed", 0 <= self.seed < 2**32, "an integer in [0, 2**32) (NumPy's seed range)"))
        smallest = max(self.batch_size, self.frames_per_batch,
                       self.clip_len if self.replay in ("vlm", "vlm_td") and isinstance(self.clip_len, int) else 0)
        checks.append(("buffer_size", self.buffer_size >= smallest,
                       f"at least batch_size={self.batch_size}, frames_per_batch={self.frames_per_batch}"
                       + (f" and clip_len={self.clip_len}" if self.replay in ("vlm", "vlm_td") else "")
                       + " (a smaller buffer overwrites a batch, or a clip, before it is used)"))
        checks.append(("teacher_fraction", 0.0 < self.teacher_fraction <= 1.0, "a number in (0, 1]"))
        if self.max_episode_steps is not None:
            checks.append(("max_episode_steps", self.max_episode_steps >= 1, "None or an integer >= 1"))
        if self.stop_at is not None:
            checks.append(("stop_at", self.stop_at >= 1, "None or an integer >= 1"))
        if self.scorer_kwargs is not None:
            checks.append(("scorer_kwargs", isinstance(self.scorer_kwargs, dict)
                           and all(isinstance(k, str) for k in self.scorer_kwargs)
                           and not (self.prompt is not None and "prompt" in self.scorer_kwargs),
                           "None or a mapping of keyword names to values (give the prompt once: "
                           "prompt= or scorer_kwargs, not both)"))
        checks += [("scorer_backend", self.scorer_backend in ("thread", "process", "ray"), "thread, process or ray"),
                   ("scorer_workers", self.scorer_workers >= 1 and (self.scorer_workers == 1 or self.scorer_backend == "ray"),
                    "an integer >= 1, above 1 only with scorer_backend=ray"),
                   ("scorer_gpus", self.scorer_gpus >= 0 and (self.scorer_gpus == 0 or self.scorer_backend == "ray"),
                    "a number >= 0, above 0 only with scorer_backend=ray (the thread and process backends use "
                    "the scorer's own device)"),
                   ("distill", not (self.distill and self.scorer_backend != "thread"),
                    "false with scorer_backend=process or ray (the student would learn where the scorer runs, out of "
                    "reach of the run's checkpoints): use scorer_backend=thread")]
        for name, ok, allowed in checks + self._family_checks() + self._checks() + self._clip_memory_check():
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} is invalid: expected {allowed}.")
        for name, message in self._library_checks():
            raise ConfigError(f"{name}={getattr(self, name)!r} is invalid: {message}")
        return self

    def _family_checks(self) -> list[tuple[str, bool, str]]:
        """The env: one of this recipe's families; the keys other families own at their neutral values; a
        ``builtin:`` / ``oracle:`` scorer of the env's family; then the family's own checks."""
        family = family_of(self.env)
        takes = families(self.RECIPE) if self.RECIPE else families()
        checks = [("env", family is not None and family in takes, " or ".join(f.id_help for f in takes))]
        problem = family.id_problem(self.env) if family is not None and family in takes else None
        checks.append(("env", problem is None, problem or ""))  # before the scorer checks: a typo is the env's
        for other in families():
            if other is not family:
                for key, neutral in other.owned_keys.items():
                    if hasattr(self, key):
                        checks.append((key, getattr(self, key) in neutral,
                                       " or ".join(repr(v) for v in neutral) + f" (the others are for {other.title} ids)"))
        if family is None or family not in takes:
            return checks
        vlm = self.replay in ("vlm", "vlm_td")
        kind = str(self.scorer).partition(":")[0]
        own = ", ".join(family.specs()) or "none"
        checks.append(("scorer", not vlm or self.scorer != "auto",
                       f"a scorer: {self.env} has no built-in one and its family no oracle; pass hf:<dir>, clip:<dir>, "
                       "openai:<url>#<model> or python:<module>:<callable>"))
        checks.append(("scorer", not vlm or kind not in ("builtin", "oracle") or self.scorer == "auto"
                       or family.scores_with(self.scorer),
                       f"a scorer for {family.title} envs ({own}, hf:<dir>, clip:<dir>, openai:<url>#<model> or "
                       f"python:<module>:<callable>): {self.scorer} reads another family's frames or flags"))
        if hasattr(self, "frame_view"):
            views = family.frame_views or ("grid",)
            checks.append(("frame_view", self.frame_view in ("auto", *views),
                           f"auto or {' or '.join(views)} on {family.title} envs"))
            # a built-in or built model reads the frames it was trained on, whatever its family
            trained_on = family.scorer_frame_view(self.scorer)
            checks.append(("frame_view", not vlm or trained_on is None or self.frame_view in ("auto", trained_on),
                           f"{trained_on} with scorer={self.scorer} (the frames it was trained on), or auto"))
        return checks + family.config_checks(self)


@dataclasses.dataclass
class DQNConfig(RecipeConfig):
    """Double DQN with uniform, PER or VLM-guided replay (MiniGrid and Atari)."""

    RECIPE: ClassVar[str] = "dqn"

    # env
    actions: str = _field("auto", "MiniGrid action subset: auto (DoorKey ids: left,right,forward,pickup,toggle; "
                                  "other ids: all) | all | comma-separated action names")
    observation: Literal["indices", "onehot"] = _field(
        "indices", "MiniGrid observation encoding: indices (the positions of the one-hot view's ones, int16, read by "
                   "a OneHotLinear first layer) | onehot (the float one-hot vector, an nn.Linear first layer); the "
                   "same network either way, indices is faster and stores 13x less")
    view: Literal["partial", "full", "both"] = _field(
        "partial", "what the MiniGrid agent observes: partial (MiniGrid's egocentric 7x7 view) | full (the whole grid, "
                   "the agent's cell, direction and carried object: the fully observed state the VLM-RB paper's DoorKey "
                   "agents see; learns DoorKey-12x12/16x16, where the partial view's memoryless MLP does not)")
    frame_view: Literal["auto", "grid", "agent", "screen", "score"] = _field(
        "auto", "what the frames the scorer reads show: auto (the scorer's: on MiniGrid agent for "
                "builtin:minigrid_agent and clip:<dir> models built on the agent-centred view, else grid; on Atari "
                "score for builtin:atari, else screen) | MiniGrid: grid (the whole grid) or agent (the agent-centred "
                "7x7 view, MiniGridEnv(frame_view='agent')) | Atari: screen (the whole screen) or score (the box of "
                "the agent's score, Pong and Breakout: AtariEnv(frame_view='score'))")
    # replay
    scorer: str = _field("auto", "scorer spec for vlm modes: auto (the env's built-in scorer: on MiniGrid "
                                 "builtin:minigrid when the mission is about reaching the goal, else "
                                 "builtin:minigrid_agent; builtin:atari on ALE/Pong-v5 and ALE/Breakout-v5; on other "
                                 "games oracle:atari, with a printed line saying so), "
                                 "builtin:minigrid, builtin:minigrid_agent or "
                                 "builtin:atari (small CLIPs shipped with the package, scoring rendered frames), "
                                 "oracle:minigrid (privileged event flags), oracle:atari (privileged: a positive "
                                 "reward on a step of the clip), python:mod:fn, clip:<id or dir>, hf:<id or dir>, ...")
    # No ceiling for DQN (issue 30): where VLM-RB is meant to help, goal clips are 0.4-2% of a DoorKey-12x12/16x16
    # buffer, and a ceiling of 4 lowers lambda from 0.5 to 0.04-0.1, i.e. switches the method off.
    max_oversampling: float | None = _field(
        None, "vlm modes: ceiling on how many times as often as under uniform replay any transition is drawn (lambda "
              "is lowered while it would be exceeded). None (the default, the paper's sampler): on DoorKey-12x12/16x16, "
              "where goal clips are 0.4-2% of the buffer, a ceiling of 4 lowers lambda from 0.5 to 0.04-0.1 "
              "(docs/recipes.md)")
    # collection
    eps_start: float = _field(1.0, "initial exploration epsilon")
    eps_end: float = _field(0.05, "final exploration epsilon")
    eps_fraction: float = _field(0.4, "fraction of total_frames over which epsilon decays linearly")
    # learning
    n_steps: int = _field(3, "n-step returns (1 = one-step TD)")
    target_update: int = _field(250, "gradient updates between hard target-network copies")
    max_grad_norm: float = _field(10.0, "gradient-norm clip")
    # evaluation
    eval_eps: float = _field(0.01, "epsilon during evaluation (greedy policies loop in partially observed MiniGrid)")
    eval_max_episode_steps: int | None = _field(
        None, "evaluation episodes end (as failures, unless solved; Atari: with the score so far) after this many "
              "steps (None = the training limit: max_episode_steps or the env's own, e.g. 2,560 on DoorKey-16x16, "
              "27,000 on Atari, so a policy that never solves plays eval_episodes x that many steps per evaluation: "
              "one evaluation plays at most eval_episodes x this many steps)")
    eval_full_every: int | None = _field(
        None, "with eval_max_episode_steps below the training limit: frames between extra evaluations at the env's "
              "own limit (metrics.csv's eval_full_success, eval_full_return, eval_full_episode_len), which show a "
              "policy that solves the task too slowly for the cap; None = at every checkpoint and at the end; 0 = never")

    _POSITIVE_INTS = (*RecipeConfig._POSITIVE_INTS, "target_update", "n_steps")
    _UNIT_NUMBERS = ("eps_start", "eps_end", "eps_fraction", *RecipeConfig._UNIT_NUMBERS, "eval_eps")
    _POSITIVE_NUMBERS = (*RecipeConfig._POSITIVE_NUMBERS, "max_grad_norm")

    def _checks(self) -> list[tuple[str, bool, str]]:
        return [*super()._checks(),
                ("observation", self.observation in ("indices", "onehot"), "'indices' or 'onehot'"),
                ("eval_max_episode_steps", self.eval_max_episode_steps is None or self.eval_max_episode_steps >= 1,
                 "None or an integer >= 1"),
                ("eval_full_every", self.eval_full_every is None or self.eval_full_every >= 0, "None or an integer >= 0")]

    def validate(self) -> DQNConfig:
        """:meth:`RecipeConfig.validate`, with ``scorer=auto`` resolved to the env's built-in scorer and
        ``frame_view=auto`` to the frames that scorer was trained on (what ``config.json`` records).

        Examples:
            >>> DQNConfig(env="ALE/Pong-v5").validate().scorer, DQNConfig().validate().scorer
            ('builtin:atari', 'builtin:minigrid')
        """
        family = family_of(self.env) if isinstance(self.env, str) else None
        if family is not None and family.frame_views and self.frame_view == "grid" and "grid" not in family.frame_views:
            # "grid" is what frame_view=auto became on every family but MiniGrid before families had views of their
            # own (config.json of older Atari runs): there it meant the one view there was, the family's default
            self.frame_view = family.frame_views[0]
        validated = super().validate()
        if self.frame_view == "auto":
            self.frame_view = family.frame_view(self.scorer) if family is not None else "grid"
        return validated


@dataclasses.dataclass
class SACConfig(RecipeConfig):
    """SAC (twin Q, automatic entropy tuning) with uniform, PER or VLM-guided replay (robosuite, OGBench Scene)."""

    RECIPE: ClassVar[str] = "sac"

    # run (SAC defaults differ from the shared ones)
    env: str = _field("robosuite/Lift", "robosuite/<Task> (any robosuite task: Lift, Stack, Door, ...) or "
                                        "ogbench/scene-task1 ... ogbench/scene-task5 (OGBench Scene)")
    replay: Literal["uniform", "per", "vlm", "vlm_td"] = _field(
        "vlm_td", "replay mode: uniform | per | vlm | vlm_td (TD-boosted VLM-RB, the paper's continuous variant)")
    total_frames: int = _field(200_000, "environment steps to collect (all envs together)")
    max_episode_steps: int | None = _field(None, "episode time limit (None = the env's: robosuite 200, the "
                                                 "recipe's horizon; OGBench Scene 750, OGBench's)")
    num_envs: int = _field(2, "environments stepped in parallel (see env_backend)")
    frames_per_batch: int = _field(200, "frames per collector batch (all envs together)")
    env_backend: Literal["serial", "parallel"] = _field(
        "serial", "serial: the envs stepped one after the other | parallel: ParallelEnv, one process per env")
    async_collection: bool = _field(True, "collect in a child process, one batch ahead of the learner (the envs and "
                                          "their frames on one core, the learner on the other; reproducible for a "
                                          "seed); False = collect, then learn, in one process")
    # env
    camera: str | None = _field(None, "offscreen camera rendered for the VLM (None = the env's: robosuite/Lift "
                                      "front_close, a close front view where a lift is plain; other robosuite "
                                      "tasks agentview; OGBench Scene front_pixels)")
    frame_size: int = _field(64, "VLM frame width/height in pixels")
    reward_shaping: bool | None = _field(
        None, "a dense reward instead of sparse success (robosuite: its shaped reward; OGBench Scene: the number "
              "of satisfied subgoals minus 5, OGBench's own reward; false: 0 when solved, else -1); None = the "
              "env's own: robosuite sparse, Scene the subgoal count")
    render_clip_frames_only: bool = _field(True, "render only the steps whose frames some clip sends to the scorer")
    fast_render: bool = _field(True, "render VLM frames without reflections, shadows and multisampling (~4x cheaper "
                                     "on a CPU; False = robosuite's default image)")
    # Off here, unlike DQN: a MuJoCo frame costs ~10-20 ms to draw, and drawn in the scorer's thread (the learner's
    # core) the scorer fell behind at the default clip geometry (54% of clips scored after 3k Lift frames against
    # 99% with frames drawn by the collecting child, on 2 cores; studies/benchmarks.md, issue 61)
    frames_from_state: bool = _field(False, "robosuite and OGBench Scene store their positions per step, and the "
                                            "scorer's thread/process/actor draws the frames its clips show from them "
                                            "(the same pixels): worth it where the scorer has a core or GPU of its own; "
                                            "false (the default) = the collecting envs draw and pass frames")
    # learning
    lr: float = _field(3e-4, "Adam learning rate of the actor, the critics and the temperature unless policy_lr / "
                             "q_lr say otherwise")
    policy_lr: float | None = _field(None, "Adam learning rate of the actor (CleanRL's policy_lr; None = lr)")
    q_lr: float | None = _field(None, "Adam learning rate of the critics and the entropy temperature (CleanRL's q_lr; "
                                      "None = lr)")
    policy_frequency: int = _field(1, "critic updates per actor update: every policy_frequency-th update also updates "
                                      "the actor and temperature, policy_frequency times on its sample (CleanRL's "
                                      "delayed policy update; 1 = every update, as TorchRL's SAC)")
    batch_size: int = _field(256, "learner batch size")
    buffer_size: int = _field(1_000_000, "replay capacity")
    learning_starts: int = _field(5_000, "random-action frames collected before the first update")
    train_every: int = _field(1, "frames per gradient update (1 = one update per frame); or set utd_ratio")
    utd_ratio: float | None = _field(None, "gradient updates per env step (CleanRL/TorchRL's update-to-data ratio: 2 = "
                                           "two updates per frame, 0.5 = one per two frames); None = 1 / train_every. "
                                           "utd_ratio * frames_per_batch must be a whole number")
    tau: float = _field(0.005, "target-network soft-update rate (Q' <- (1 - tau) Q' + tau Q)")
    alpha_init: float = _field(1.0, "initial entropy temperature (tuned automatically)")
    # replay
    scorer: str = _field(
        "auto", "scorer spec for vlm modes: auto (the env's built-in scorer: builtin:lift on robosuite/Lift, "
                "builtin:scene on OGBench Scene; on other robosuite tasks oracle:robosuite, with a printed line saying "
                "so), builtin:lift (the small CLIP shipped with the package, scoring front_close "
                "frames of Lift), builtin:scene (the one for OGBench Scene, with the task's prompt set: "
                "builtin:scene-task<N>), oracle:robosuite / oracle:ogbench (privileged event flags), python:mod:fn, "
                "clip:<id or dir>, hf:<id or dir>, ...")
    # evaluation
    eval_every: int = _field(20_000, "frames between evaluations")
    eval_episodes: int = _field(10, "episodes per evaluation (deterministic actor)")
    eval_envs: int = _field(1, "env copies stepped together during evaluation (robosuite copies are heavy)")

    _POSITIVE_INTS = (*RecipeConfig._POSITIVE_INTS, "frame_size", "policy_frequency")
    _UNIT_NUMBERS = (*RecipeConfig._UNIT_NUMBERS, "tau")
    _POSITIVE_NUMBERS = (*RecipeConfig._POSITIVE_NUMBERS, "alpha_init")

    def _checks(self) -> list[tuple[str, bool, str]]:
        return [*super()._checks(),
                ("env_backend", self.env_backend in ("serial", "parallel"), "'serial' or 'parallel'"),
                ("async_collection", not (self.async_collection and self.env_backend == "parallel"),
                 "false with env_backend=parallel (the collector process steps the envs itself)"),
                ("policy_lr", self.policy_lr is None or self.policy_lr > 0, "None or a number > 0"),
                ("q_lr", self.q_lr is None or self.q_lr > 0, "None or a number > 0"),
                ("utd_ratio", self.utd_ratio is None or (self.utd_ratio > 0 and self.train_every == 1
                                                         and float(self.utd_ratio * self.frames_per_batch).is_integer()),
                 f"None or a number > 0 with train_every=1 (give one of the two) such that utd_ratio * "
                 f"frames_per_batch={self.frames_per_batch} is a whole number of updates")]

    def validate(self) -> SACConfig:
        return super().validate()

    def scorer_frame_bytes(self) -> int:
        return self.frame_size * self.frame_size * 3 * len(str(self.camera or "").split("+"))

    def updates_for(self, frames: int) -> int:
        if self.utd_ratio is None:
            return super().updates_for(frames)
        return round(frames * self.utd_ratio)


QUICK_PRESETS: dict[str, dict[str, Any]] = {
    # the whole pipeline on DoorKey-5x5 in ~1 min on 2 CPU cores; solving it in 30k frames is seed-dependent.
    # Evaluated at the learning study's epsilon (0.05): at 0.01 a near-greedy DoorKey policy loops
    "dqn": {"total_frames": 30_000, "num_envs": 4, "frames_per_batch": 128, "learning_starts": 2_000,
            "eval_every": 10_000, "eval_episodes": 20, "eval_eps": 0.05, "checkpoint_every": 30_000},
    # a complete small SAC run on robosuite Lift (a few minutes on 2 CPU cores; too short to learn Lift)
    "sac": {"total_frames": 3_000, "num_envs": 2, "frames_per_batch": 100, "learning_starts": 1_000,
            "max_episode_steps": 100, "batch_size": 128, "train_every": 2, "hidden": 128, "eval_every": 3_000,
            "eval_episodes": 2, "checkpoint_every": 3_000, "gallery_clips": 2},
}


def quick_preset(recipe: str, env: str) -> dict[str, Any]:
    """The ``--quick`` keys of ``recipe`` for ``env``: its family's own preset where it has one (Atari's,
    :attr:`~vlmrb_torchrl.envs.EnvFamily.quick_preset`), else :data:`QUICK_PRESETS`' for the recipe.

    Examples:
        >>> quick_preset("dqn", "ALE/Pong-v5")["eval_max_episode_steps"]
        500
        >>> quick_preset("dqn", "MiniGrid-Empty-5x5-v0")["total_frames"]
        30000
    """
    family = family_of(env) if isinstance(env, str) else None
    if family is not None and family.recipe == recipe and family.quick_preset is not None:
        return dict(family.quick_preset)
    return QUICK_PRESETS[recipe]


def _convert(name: str, text: str, annotation: Any) -> Any:
    """Converts a command-line string to the field's type (int, float, bool, str, Literal, X | None)."""
    args = typing.get_args(annotation)
    if args and type(None) in args and text.lower() in ("none", "null", ""):
        return None
    inner = [a for a in args if a is not type(None)] if args else [annotation]
    if typing.get_origin(annotation) is Literal:
        if text not in args:
            raise ConfigError(f"{name}={text!r} is invalid: expected one of {list(args)}.")
        return text
    for option in inner:  # a word a Literal member allows (threshold=auto) before a number
        if typing.get_origin(option) is Literal and text in typing.get_args(option):
            return text
    target = inner[0]
    if typing.get_origin(target) is Literal:
        return _convert(name, text, target)
    if target is dict or typing.get_origin(target) is dict:
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as err:  # RecursionError: nested deeper than Python recurses
            why = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deep"
            raise ConfigError(f"{name}={text[:80]!r}{'...' if len(text) > 80 else ''} is invalid: expected a JSON "
                              f"object such as '{{\"p\": 0.3}}' ({why}).") from None
        if not isinstance(value, dict):
            raise ConfigError(f"{name}={text!r} is invalid: expected a JSON object, got {type(value).__name__}.")
        return value
    try:
        if target is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if target is int:
            return int(float(text)) if float(text).is_integer() else int(text)
        if target is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is invalid: expected {target.__name__}.") from None
    return text


def _coerce(name: str, value: Any, annotation: Any) -> Any:
    """Checks a value given as a Python object (a config file, ``config.json``, the Python API) against the field's
    type, converting losslessly (``3e5`` -> ``300000`` for an int, ``1`` -> ``1.0`` for a float, a number -> its text
    for a str such as ``unscored_priority``); strings go through the command line's :func:`_convert`.

    Examples:
        >>> _coerce("total_frames", 3e5, int), _coerce("lr", 1, float), _coerce("stop_at", None, int | None)
        (300000, 1.0, None)
        >>> _coerce("seed", 1.5, int)
        Traceback (most recent call last):
        ...
        vlmrb_torchrl.recipes.config.ConfigError: seed=1.5 is invalid: expected int.
    """
    if isinstance(value, str):
        return _convert(name, value, annotation)
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        if value not in args:
            raise ConfigError(f"{name}={value!r} is invalid: expected one of {list(args)}.")
        return value
    optional = bool(args) and type(None) in args
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{name}=None is invalid: expected {getattr(annotation, '__name__', annotation)}.")
    target = [a for a in args if a is not type(None)][0] if optional else annotation
    if typing.get_origin(target) is Literal:
        return _coerce(name, value, target)
    if target is dict or typing.get_origin(target) is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}={value!r} is invalid: expected a mapping, got {type(value).__name__}.")
        return value
    if target is bool:
        ok = isinstance(value, bool)
    elif target is int:
        ok = not isinstance(value, bool) and (isinstance(value, int) or (isinstance(value, float) and value.is_integer()))
        value = int(value) if ok else value
    elif target is float:
        ok = not isinstance(value, bool) and isinstance(value, (int, float))
        value = float(value) if ok else value
    elif target is str:
        ok = not isinstance(value, bool) and isinstance(value, (str, int, float))
        value = str(value) if ok else value
    else:  # pragma: no cover - every field has one of the types above
        ok = True
    if not ok:
        raise ConfigError(f"{name}={value!r} is invalid: expected {target.__name__}.")
    return value


def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def upgrade_keys(values: dict[str, Any], *, quiet: bool = False) -> dict[str, Any]:
    """``values`` with the keys of :data:`RENAMED_KEYS` under their new names; each old name is reported once
    per process on stderr (one line naming the new key) unless ``quiet``. Both names at once are refused.

    Examples:
        >>> upgrade_keys({"vlm_eps": 0.02, "seed": 1}, quiet=True)
        {'eps': 0.02, 'seed': 1}
    """
    out = {}
    for key, value in values.items():
        new = RENAMED_KEYS.get(key)
        if new is None:
            out[key] = value
            continue
        if new in values:
            raise ConfigError(f"{key} and {new} are the same key ({key} is its old name): give {new} only.")
        if not quiet and key not in _TOLD:
            _TOLD.add(key)
            print(f"vlmrb: {key} is now called {new} (the sampler's name); {key}={value} is read as {new}={value}.",
                  file=sys.stderr)
        out[new] = value
    return out


def apply_overrides(cfg: Any, overrides: dict[str, Any] | list[str]) -> Any:
    """Returns a copy of ``cfg`` with ``key=value`` overrides applied (strings are converted; old key names,
    :data:`RENAMED_KEYS`, are read as the new ones)."""
    names = {f.name for f in dataclasses.fields(cfg)}
    hints = _type_hints(type(cfg))
    if isinstance(overrides, list):
        pairs = {}
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"expected key=value, got {item!r}. Valid keys: {', '.join(sorted(names))}.")
            key, value = item.split("=", 1)
            pairs[key.strip()] = value
        overrides = pairs
    overrides = upgrade_keys(dict(overrides))
    values = {}
    for key, value in overrides.items():
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown key {key!r}{hint} Valid keys: {', '.join(sorted(names))}.")
        values[key] = _coerce(key, value, hints[key])
    return dataclasses.replace(cfg, **values)


def not_utf8(value: Any) -> str:
    """``""`` when ``value`` (text, or anything else) can be written as UTF-8; else why not, in words. A path
    given as bytes that are not UTF-8 (``sys.argv`` carries them as lone surrogates) cannot go into
    ``config.json``, TensorBoard's events or a log line.

    Examples:
        >>> not_utf8("runs/exp-é"), not_utf8(None)
        ('', '')
        >>> not_utf8("runs/exp-\\udcff")
        "'runs/exp-\\\\udcff' is not valid UTF-8 (byte 0xff at position 9): rename it or choose a UTF-8 name"
    """
    if not isinstance(value, str):
        return ""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raw = bytes(ord(c) - 0xDC00 for c in value[err.start:err.end] if 0xDC80 <= ord(c) <= 0xDCFF)
        what = f"byte 0x{raw.hex()}" if len(raw) == 1 else f"bytes 0x{raw.hex()}" if raw else "a lone surrogate"
        return f"{value!r} is not valid UTF-8 ({what} at position {err.start}): rename it or choose a UTF-8 name"
    return ""


def code_loading_values(values: dict[str, Any]) -> dict[str, str]:
    """The keys of a config mapping whose values make a run load and run code, each with why: a ``python:``
    scorer spec (:func:`~vlmrb_torchrl.scorers.spec_loads_code`, in ``scorer`` or anywhere in ``scorer_kwargs``),
    ``trust_remote_code`` in ``scorer_kwargs`` (a model's own Python files), a Ray cluster to join
    (``ray_address``: objects from the cluster are unpickled in the run). ``vlmrb train ... resume=`` refuses
    such a value read back from a run directory's ``config.json`` unless it is given again or
    ``trust_checkpoint=true``.

    Examples:
        >>> code_loading_values({"scorer": "python:my_scorers:RewardScorer", "seed": 0})
        {'scorer': 'is a python: spec (it imports and runs that module)'}
        >>> code_loading_values({"scorer": "builtin:minigrid", "scorer_kwargs": {"trust_remote_code": True},
        ...                      "ray_address": "auto"})
        {'scorer_kwargs': "sets trust_remote_code (it runs the model's own Python files)"}
    """
    from vlmrb_torchrl.scorers.base import spec_loads_code

    def strings(value: Any) -> list[str]:
        if isinstance(value, str):
            return [value]
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
        return [s for item in items for s in strings(item)]

    def remote_code(value: Any) -> bool:
        if isinstance(value, dict):
            return bool(value.get("trust_remote_code")) or any(remote_code(v) for v in value.values())
        return isinstance(value, (list, tuple)) and any(remote_code(v) for v in value)

    found = {}
    if spec_loads_code(values.get("scorer")):
        found["scorer"] = "is a python: spec (it imports and runs that module)"
    kwargs = values.get("scorer_kwargs")
    if any(spec_loads_code(s) for s in strings(kwargs)):
        found["scorer_kwargs"] = "holds a python: spec (it imports and runs that module)"
    elif remote_code(kwargs):
        found["scorer_kwargs"] = "sets trust_remote_code (it runs the model's own Python files)"
    if values.get("ray_address") not in (None, "", "auto"):
        found["ray_address"] = "joins that Ray cluster (objects it sends are unpickled in the run)"
    return found


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Reads a YAML (or JSON) file of ``key: value`` pairs; a missing or unparsable file raises
    :class:`ConfigError` naming it."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"--config {path}: cannot read the file ({err.strerror or err}).") from None
    try:
        if str(path).endswith(".json"):
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text) or {}
    except Exception as err:  # yaml.YAMLError, json.JSONDecodeError
        raise ConfigError(f"--config {path}: not valid {'JSON' if str(path).endswith('.json') else 'YAML'}: "
                          f"{str(err).strip()}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of key: value pairs, got {type(data).__name__}.")
    return data


def config_help(cls: type) -> str:
    """One line per key: name, type, default and help, for ``--help``."""
    hints = _type_hints(cls)
    lines = []
    for f in dataclasses.fields(cls):
        kind = str(hints[f.name]).replace("typing.", "")
        lines.append(f"  {f.name}={f.default!r}\n      {f.metadata.get('help', '')} [{kind}]")
    return "\n".join(lines)
