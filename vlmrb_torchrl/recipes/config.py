"""Recipe configuration: typed dataclasses, ``key=value`` overrides, YAML files, presets."""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import typing
from pathlib import Path
from typing import Any, Literal

__all__ = ["RecipeConfig", "DQNConfig", "SACConfig", "SAC_ENV_DEFAULTS", "SAC_TASK_DEFAULTS", "LIFT_SCORER_CAMERA",
           "LIFT_PANEL_CAMERAS", "sac_env_family", "sac_env_defaults", "ConfigError",
           "apply_overrides", "config_help", "load_config_file", "QUICK_PRESETS", "quick_preset"]

REPLAY_MODES = ("uniform", "per", "vlm", "vlm_td")


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
    per_alpha: float = _field(0.6, "PER / vlm_td priority exponent")
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
    vlm_warmup: int | None = _field(None, "sample calls over which lambda rises 0 -> lambda_max "
                                          "(None = half of the run's gradient updates)")
    threshold: float | Literal["auto"] | None = _field(
        "auto", "score binarisation threshold: auto (the scorer's own decision threshold: 0.95 for builtin:scene and "
                "0.01 for builtin:lift with their own checks, tuned on episodes other than the held-out ones; 0.5 for "
                "every other scorer) | a number in [0, 1] | None (continuous scores)")
    vlm_eps: float = _field(0.01, "priority floor for VLM scores")
    vlm_beta: float = _field(0.0, "importance-sampling exponent for vlm modes (paper: 0)")
    max_oversampling: float | None = _field(
        4.0, "vlm modes: ceiling on how many times as often as under uniform replay any transition is drawn; lambda "
             "is lowered while it would be exceeded (rare positives: robosuite Lift). None = the paper's sampler "
             "(docs/sampler.md); each recipe sets its own default (docs/recipes.md)")
    vlm_spread: float | None = _field(
        None, "vlm modes: episode credit (this package's option, not the paper's): a transition d steps before a "
              "positive one in its episode gets priority vlm_spread**d (until it falls to vlm_eps), so a goal-only label "
              "marks the path to the goal; e.g. 0.99 (the discount). None = the paper's sampler (docs/sampler.md)")
    default_priority: str = _field("mean", "priority of unscored transitions: mean | max | <float>")
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

    # validation: (ints >= 1, ints >= 0, numbers in [0, 1], numbers > 0, numbers >= 0); subclasses extend
    _POSITIVE_INTS = ("total_frames", "num_envs", "frames_per_batch", "batch_size", "buffer_size", "train_every",
                      "hidden", "clip_len", "clip_stride", "eval_episodes", "eval_envs", "eval_every", "checkpoint_every",
                      "gallery_steps",
                      "torch_threads", "max_consecutive_scorer_errors")
    _NON_NEGATIVE_INTS = ("learning_starts", "gallery_clips")
    _UNIT_NUMBERS = ("lambda_max", "label_noise", "gamma", "min_agreement")
    _POSITIVE_NUMBERS = ("lr",)
    _NON_NEGATIVE_NUMBERS = ("per_alpha", "per_beta", "vlm_eps", "vlm_beta", "scorer_drain_timeout")

    def _checks(self) -> list[tuple[str, bool, str]]:
        """(name, ok, allowed) triples; a subclass adds its own and calls ``super()._checks()``."""
        return []

    def _resolve(self) -> None:
        """Replaces "the env's default" values (``None``) by the env's own, before the checks; a subclass
        with such keys overrides it (the values land in ``config.json``)."""

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
        smallest = max(self.batch_size, self.frames_per_batch, self.clip_len if self.replay in ("vlm", "vlm_td") else 0)
        checks.append(("buffer_size", self.buffer_size >= smallest,
                       f"at least batch_size={self.batch_size}, frames_per_batch={self.frames_per_batch}"
                       + (f" and clip_len={self.clip_len}" if self.replay in ("vlm", "vlm_td") else "")
                       + " (a smaller buffer overwrites a batch, or a clip, before it is used)"))
        if self.threshold is not None:
            checks.append(("threshold", 0.0 <= self.threshold <= 1.0, "a number in [0, 1] or None"))
        checks.append(("vlm_eps", not (self.vlm_eps == 0 and self.vlm_beta > 0 and self.lambda_max == 1.0),
                       "a number > 0 when vlm_beta > 0 and lambda_max = 1 (slots of priority 0 would leave "
                       "the importance weights undefined)"))
        checks.append(("teacher_fraction", 0.0 < self.teacher_fraction <= 1.0, "a number in (0, 1]"))
        if self.clip_frames is not None:
            checks.append(("clip_frames", 1 <= self.clip_frames <= self.clip_len, f"None or 1..clip_len={self.clip_len}"))
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
        if self.vlm_warmup is not None:
            checks.append(("vlm_warmup", self.vlm_warmup >= 0, "None or an integer >= 0"))
        if self.vlm_spread is not None:
            checks.append(("vlm_spread", 0.0 < self.vlm_spread <= 1.0, "None or a number in (0, 1]"))
        if self.max_oversampling is not None:
            checks.append(("max_oversampling", math.isfinite(self.max_oversampling) and self.max_oversampling >= 1,
                           "None or a number >= 1 (1 = uniform replay)"))
        if self.default_priority not in ("mean", "max"):
            try:
                ok = 0 <= float(self.default_priority) < math.inf
            except ValueError:
                ok = False
            checks.append(("default_priority", ok, "mean, max or a number >= 0"))
        checks += [("scorer_backend", self.scorer_backend in ("thread", "process", "ray"), "thread, process or ray"),
                   ("scorer_workers", self.scorer_workers >= 1 and (self.scorer_workers == 1 or self.scorer_backend == "ray"),
                    "an integer >= 1, above 1 only with scorer_backend=ray"),
                   ("scorer_gpus", self.scorer_gpus >= 0 and (self.scorer_gpus == 0 or self.scorer_backend == "ray"),
                    "a number >= 0, above 0 only with scorer_backend=ray (the thread and process backends use "
                    "the scorer's own device)"),
                   ("distill", not (self.distill and self.scorer_backend != "thread"),
                    "false with scorer_backend=process or ray (the student would learn where the scorer runs, out of "
                    "reach of the run's checkpoints): use scorer_backend=thread")]
        for name, ok, allowed in checks + self._checks():
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} is invalid: expected {allowed}.")
        return self


@dataclasses.dataclass
class DQNConfig(RecipeConfig):
    """Double DQN with uniform, PER or VLM-guided replay (MiniGrid and Atari)."""

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
    frame_view: Literal["auto", "grid", "agent"] = _field(
        "auto", "what the MiniGrid frames the scorer reads show: auto (the scorer's: agent for "
                "builtin:minigrid_agent and clip:<dir> models built on the agent-centred view, else grid) | grid (the "
                "whole grid) | agent (the agent-centred 7x7 view, MiniGridEnv(frame_view='agent'))")
    # replay
    scorer: str = _field("auto", "scorer spec for vlm modes: auto (the env's built-in scorer: on MiniGrid "
                                 "builtin:minigrid when the mission is about reaching the goal, else "
                                 "builtin:minigrid_agent; builtin:atari on ALE/Pong-v5 and ALE/Breakout-v5), "
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
        minigrid = self.env.startswith(("MiniGrid-", "BabyAI-"))
        atari = self.env.startswith("ALE/")
        kind, _, name = self.scorer.partition(":")
        builtin_or_oracle = kind in ("builtin", "oracle")
        minigrid_scorer = builtin_or_oracle and name in ("minigrid", "minigrid_goal", "minigrid_agent")
        trained_on = scorer_frame_view(self.scorer)
        atari_scorer = builtin_or_oracle and name == "atari"
        vlm = self.replay in ("vlm", "vlm_td")
        return [*super()._checks(), ("env", minigrid or atari,
                                     "a MiniGrid or BabyAI id (MiniGrid-DoorKey-6x6-v0, ...) or an Atari id (ALE/Pong-v5, ...)"),
                ("actions", minigrid or self.actions in ("auto", "all"),
                                     "'auto' or 'all' (action subsets are for MiniGrid ids)"),
                ("observation", self.observation in ("indices", "onehot"), "'indices' or 'onehot'"),
                ("view", self.view in ("partial", "full", "both") and (minigrid or self.view == "partial"),
                 "'partial', 'full' or 'both' (full and both are for MiniGrid ids)"),
                ("frame_view", self.frame_view in ("auto", "grid", "agent") and (minigrid or self.frame_view != "agent"),
                 "'auto', 'grid' or 'agent' (agent is for MiniGrid ids)"),
                ("frame_view", not vlm or trained_on is None or self.frame_view in ("auto", trained_on),
                 f"{trained_on} with scorer={self.scorer} (the frames it was trained on), or auto"),
                ("eval_max_episode_steps", self.eval_max_episode_steps is None or self.eval_max_episode_steps >= 1,
                 "None or an integer >= 1"),
                ("eval_full_every", self.eval_full_every is None or self.eval_full_every >= 0, "None or an integer >= 0"),
                ("scorer", not vlm or self.scorer != "auto",
                 f"a scorer: {self.env} has no built-in one (built-in scorers: MiniGrid, ALE/Pong-v5, "
                 "ALE/Breakout-v5); pass scorer=oracle:atari (privileged reward events), hf:<dir>, clip:<dir>, "
                 "openai:<url>#<model> or python:<module>:<callable>"),
                ("scorer", minigrid or not minigrid_scorer or not vlm,
                 "a scorer for this env (builtin:minigrid and oracle:minigrid read MiniGrid frames and flags; for "
                 "Atari pass scorer=auto, builtin:atari, oracle:atari, hf:<dir>, clip:<dir>, openai:<url>#<model> "
                 "or python:<module>:<callable>)"),
                ("scorer", atari or not atari_scorer or not vlm,
                 "a scorer for this env (builtin:atari and oracle:atari read Atari frames and rewards)"),
                ("scorer", not (vlm and kind == "builtin" and name == "atari") or _atari_builtin_game(self.env),
                 "a scorer for this game (builtin:atari knows ALE/Pong-v5 and ALE/Breakout-v5; pass "
                 "scorer=oracle:atari or your own)")]

    def validate(self) -> DQNConfig:
        """:meth:`RecipeConfig.validate`, after resolving ``scorer=auto`` to the env's built-in scorer (the
        resolved spec is what ``config.json`` records).

        Examples:
            >>> DQNConfig(env="ALE/Pong-v5").validate().scorer, DQNConfig().validate().scorer
            ('builtin:atari', 'builtin:minigrid')
        """
        if self.scorer == "auto" and isinstance(self.env, str):
            if self.env.startswith(("MiniGrid-", "BabyAI-")):
                try:
                    self.scorer = minigrid_builtin_scorer(self.env, seed=self.seed if isinstance(self.seed, int) else 0)
                except (ValueError, ImportError):  # an unknown id (or no minigrid): the env check says so
                    self.scorer = "builtin:minigrid"
            elif _atari_builtin_game(self.env):
                self.scorer = "builtin:atari"
        validated = super().validate()
        if self.frame_view == "auto":
            self.frame_view = scorer_frame_view(self.scorer) or "grid"
        return validated


def minigrid_builtin_scorer(env_id: str, *, seed: int = 0) -> str:
    """The built-in scorer ``scorer=auto`` picks for a MiniGrid / BabyAI env, from its missions
    (:func:`~vlmrb_torchrl.envs.minigrid.env.minigrid_missions`): ``builtin:minigrid`` (frames of the whole grid) when a mission is
    about reaching the goal (DoorKey, LavaCrossing, MultiRoom, LockedRoom, ...: where the agent stands
    in the grid is what counts, and the agent-centred view does not show the cell the agent stands on),
    else ``builtin:minigrid_agent`` (frames of the agent-centred view: what the agent faces, holds and
    has next to it, which whole-grid frames of 64 px do not show; go to / pick up / open / put next to).
    Measured on the family (docs/builtin_scorer.md), the model it picks has the better mean F1 of random
    and mission play on every held-out env and every training env but GoToObject-8x8 and PutNear.

    Examples:
        >>> minigrid_builtin_scorer("MiniGrid-DoorKey-5x5-v0"), minigrid_builtin_scorer("BabyAI-GoToLocal-v0")
        ('builtin:minigrid', 'builtin:minigrid_agent')
    """
    import re

    from vlmrb_torchrl.envs.minigrid.env import minigrid_missions

    goal = any(re.search(r"\bgoal\b", mission) for mission in minigrid_missions(env_id, seed=seed))
    return "builtin:minigrid" if goal else "builtin:minigrid_agent"


def scorer_frame_view(scorer: str) -> str | None:
    """The MiniGrid frames a ``builtin:`` or ``clip:<dir>`` scorer's model was trained on: ``"agent"``
    (the agent-centred view) for ``builtin:minigrid_agent`` and for models whose ``training.json``
    says so (``vlmrb build-scorer minigrid_agent``), ``"grid"`` for the other MiniGrid models, ``None``
    when it cannot tell (another domain's model, a hub id).

    Examples:
        >>> scorer_frame_view("builtin:minigrid_agent"), scorer_frame_view("builtin:minigrid"), scorer_frame_view("builtin:atari")
        ('agent', 'grid', None)
    """
    kind, _, rest = scorer.partition(":")
    if kind == "builtin":
        return {"minigrid": "grid", "minigrid_goal": "grid", "minigrid_agent": "agent"}.get(rest or "minigrid")
    if kind != "clip":
        return None
    report = Path(rest) / "training.json"
    if not report.is_file():
        return None
    try:
        rendered = json.loads(report.read_text()).get("frames_rendered") or {}
    except (OSError, ValueError):
        return None
    return rendered.get("frame_view")


def _atari_builtin_game(env_id: str) -> bool:
    """Whether ``builtin:atari`` was trained on this ALE id's game (Pong, Breakout)."""
    return env_id.startswith("ALE/") and env_id.split("/", 1)[1].split("-", 1)[0] in ("Pong", "Breakout")


#: The frames ``builtin:lift`` reads and the SAC recipe's default camera on ``robosuite/Lift``: a
#: :class:`~vlmrb_torchrl.envs.robosuite.env.PanelView` (:data:`~vlmrb_torchrl.envs.robosuite.env.ROBOSUITE_VIEWS`) of the two
#: cameras its models were trained on, :data:`LIFT_PANEL_CAMERAS`, side by side.
LIFT_SCORER_CAMERA = "front_close+eye_in_hand"

#: The cameras of ``builtin:lift``'s two models, left to right: ``front_close`` (45 cm in front of the cube, where
#: a lift is plain; ``vlmrb build-scorer lift``) and ``robot0_eye_in_hand`` (the gripper's own camera, where the
#: cube sits between the finger pads or not; ``vlmrb build-scorer lift_hand``).
LIFT_PANEL_CAMERAS = ("front_close", "robot0_eye_in_hand")

#: The SAC recipe's per-env defaults (``None`` in :class:`SACConfig`, ``"auto"`` for the scorer): by env
#: family, the episode limit, the camera the scorer sees, whether the reward is shaped and the default scorer.
SAC_ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    # robosuite: a 200-step horizon, agentview frames (Lift: see SAC_TASK_DEFAULTS), the sparse success
    # reward, builtin:lift
    "robosuite/": {"max_episode_steps": 200, "camera": "agentview", "reward_shaping": False,
                   "scorer": "builtin:lift"},
    # OGBench Scene: OGBench's 750 steps, its pixel camera, its own reward (the subgoal count),
    # builtin:scene with the task's prompt set
    "ogbench/": {"max_episode_steps": 750, "camera": "front_pixels", "reward_shaping": True,
                 "scorer": "builtin:scene"},
}

#: Per-env exceptions to :data:`SAC_ENV_DEFAULTS`, by exact env name: Lift's scorer frames come from the
#: close front camera ``builtin:lift`` was trained on.
SAC_TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "robosuite/Lift": {"camera": LIFT_SCORER_CAMERA},
}


def sac_env_family(env: str) -> str | None:
    """The key of :data:`SAC_ENV_DEFAULTS` ``env`` belongs to (``None``: not a SAC env).

    Examples:
        >>> sac_env_family("robosuite/Lift"), sac_env_family("ogbench/scene-task3"), sac_env_family("ALE/Pong-v5")
        ('robosuite/', 'ogbench/', None)
    """
    return next((family for family in SAC_ENV_DEFAULTS if env.startswith(family)), None)


def sac_env_defaults(env: str) -> dict[str, Any]:
    """The SAC recipe's defaults for ``env``: its family's (:data:`SAC_ENV_DEFAULTS`) updated by its own
    (:data:`SAC_TASK_DEFAULTS`); empty for an env the recipe does not take.

    Examples:
        >>> sac_env_defaults("robosuite/Lift")["camera"], sac_env_defaults("robosuite/Stack")["camera"]
        ('front_close+eye_in_hand', 'agentview')
    """
    family = sac_env_family(env)
    return {**SAC_ENV_DEFAULTS[family], **SAC_TASK_DEFAULTS.get(env, {})} if family else {}


@dataclasses.dataclass
class SACConfig(RecipeConfig):
    """SAC (twin Q, automatic entropy tuning) with uniform, PER or VLM-guided replay (robosuite, OGBench Scene)."""

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
        "auto", "scorer spec for vlm modes: auto (the env's built-in scorer: builtin:lift on robosuite, builtin:scene "
                "on OGBench Scene), builtin:lift (the small CLIP shipped with the package, scoring front_close "
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

    def _resolve(self) -> None:
        for key, value in sac_env_defaults(self.env).items():  # empty for an env the check below refuses
            if getattr(self, key) in (None, "auto"):
                setattr(self, key, value)
        task = _scene_task(self.env)
        if task is not None and self.scorer == "builtin:scene":  # the task's prompt set
            self.scorer = f"builtin:scene-task{task}"

    def _checks(self) -> list[tuple[str, bool, str]]:
        family = sac_env_family(self.env)
        task = _scene_task(self.env)
        vlm, scorer = self.replay in ("vlm", "vlm_td"), self.scorer or ""
        lift_scorer = vlm and scorer == "builtin:lift"
        scene_scorer = vlm and scorer.startswith("builtin:scene")
        builtin = lift_scorer or scene_scorer
        trained_on = LIFT_SCORER_CAMERA if lift_scorer else "front_pixels"
        return [*super()._checks(),
                ("env", family == "robosuite/" or task is not None,
                 "robosuite/<Task> (e.g. robosuite/Lift) or ogbench/scene-task1 ... ogbench/scene-task5"),
                ("env_backend", self.env_backend in ("serial", "parallel"), "'serial' or 'parallel'"),
                ("async_collection", not (self.async_collection and self.env_backend == "parallel"),
                 "false with env_backend=parallel (the collector process steps the envs itself)"),
                ("scorer", not lift_scorer or self.env == "robosuite/Lift",
                 "a scorer for this task (builtin:lift knows Lift's scene only; pass scorer=oracle:robosuite, "
                 "clip:<dir>, hf:<dir>, openai:<url>#<model> or python:<module>:<callable>)"),
                ("scorer", not scene_scorer or scorer == f"builtin:scene-task{task}",
                 f"the scorer of this env's task (builtin:scene on ogbench/scene-task<N> is builtin:scene-task<N>; "
                 f"env={self.env!r}; pass scorer=oracle:ogbench, clip:<dir>, ... for another env)"),
                ("camera", not builtin or self.camera == trained_on,
                 f"{trained_on} with scorer={self.scorer} (the camera it was trained on)"),
                ("frame_size", not builtin or self.frame_size == 64,
                 f"64 with scorer={self.scorer} (the frame size it was trained on)"),
                ("policy_lr", self.policy_lr is None or self.policy_lr > 0, "None or a number > 0"),
                ("q_lr", self.q_lr is None or self.q_lr > 0, "None or a number > 0"),
                ("utd_ratio", self.utd_ratio is None or (self.utd_ratio > 0 and self.train_every == 1
                                                         and float(self.utd_ratio * self.frames_per_batch).is_integer()),
                 f"None or a number > 0 with train_every=1 (give one of the two) such that utd_ratio * "
                 f"frames_per_batch={self.frames_per_batch} is a whole number of updates")]

    def validate(self) -> SACConfig:
        return super().validate()

    def updates_for(self, frames: int) -> int:
        if self.utd_ratio is None:
            return super().updates_for(frames)
        return round(frames * self.utd_ratio)


def _scene_task(env: str) -> int | None:
    """The Scene task of an ``ogbench/scene-task<N>`` id, else ``None``."""
    from vlmrb_torchrl.envs.ogbench.env import scene_task

    try:
        return scene_task(env) if env.startswith("ogbench/") else None
    except ValueError:
        return None


QUICK_PRESETS: dict[str, dict[str, Any]] = {
    # the whole pipeline on DoorKey-5x5 in ~1 min on 2 CPU cores; solving it in 30k frames is seed-dependent.
    # Evaluated at the learning study's epsilon (0.05): at 0.01 a near-greedy DoorKey policy loops
    "dqn": {"total_frames": 30_000, "num_envs": 4, "frames_per_batch": 128, "learning_starts": 2_000,
            "eval_every": 10_000, "eval_episodes": 20, "eval_eps": 0.05, "checkpoint_every": 30_000},
    # env=ALE/...: the whole pipeline in a few minutes on 2 CPU cores (a Nature-CNN update costs ~50-100 ms of
    # CPU there), far too short to learn: one evaluation of 4 episodes cut at 500 steps (<= 2,000 steps), a
    # gallery of <= 1,000 steps
    "dqn:atari": {"total_frames": 6_400, "num_envs": 8, "frames_per_batch": 128, "learning_starts": 1_000,
                  "batch_size": 32, "buffer_size": 6_400, "eval_every": 6_400, "eval_episodes": 4, "eval_envs": 4,
                  "eval_max_episode_steps": 500, "checkpoint_every": 6_400, "gallery_steps": 1_000},
    # a complete small SAC run on robosuite Lift (a few minutes on 2 CPU cores; too short to learn Lift)
    "sac": {"total_frames": 3_000, "num_envs": 2, "frames_per_batch": 100, "learning_starts": 1_000,
            "max_episode_steps": 100, "batch_size": 128, "train_every": 2, "hidden": 128, "eval_every": 3_000,
            "eval_episodes": 2, "checkpoint_every": 3_000, "gallery_clips": 2},
}


def quick_preset(recipe: str, env: str) -> dict[str, Any]:
    """The ``--quick`` keys of ``recipe`` for ``env`` (``dqn`` on an ALE id: :data:`QUICK_PRESETS`'s ``dqn:atari``).

    Examples:
        >>> quick_preset("dqn", "ALE/Pong-v5")["eval_max_episode_steps"]
        500
        >>> quick_preset("dqn", "MiniGrid-Empty-5x5-v0")["total_frames"]
        30000
    """
    key = f"{recipe}:atari" if env.startswith("ALE/") and f"{recipe}:atari" in QUICK_PRESETS else recipe
    return QUICK_PRESETS[key]


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
        except json.JSONDecodeError as err:
            raise ConfigError(f"{name}={text!r} is invalid: expected a JSON object such as "
                              f"'{{\"p\": 0.3}}' ({err.msg}).") from None
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
    for a str such as ``default_priority``); strings go through the command line's :func:`_convert`.

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


def apply_overrides(cfg: Any, overrides: dict[str, Any] | list[str]) -> Any:
    """Returns a copy of ``cfg`` with ``key=value`` overrides applied (strings are converted)."""
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
    values = {}
    for key, value in overrides.items():
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown key {key!r}{hint} Valid keys: {', '.join(sorted(names))}.")
        values[key] = _coerce(key, value, hints[key])
    return dataclasses.replace(cfg, **values)


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
