"""Scorer quality: precision, recall, F1 and AUROC of a scorer against the MiniGrid, robosuite, Atari, OGBench oracle.

Rolls out ``--episodes`` episodes of a MiniGrid env (:class:`~vlmrb_torchrl.envs.MiniGridEnv`),
of robosuite Lift (``--env robosuite/Lift``: :class:`~vlmrb_torchrl.envs.RobosuiteEnv` as the
SAC recipe builds it, the recipe's ``front_close+eye_in_hand`` frames, what ``builtin:lift`` reads
(``--camera front_close`` for its front model alone, ``--camera agentview`` for another camera),
episodes ending on success or after ``--max-steps``, default 200), of an Atari game (``--env ALE/Pong-v5``: :class:`~vlmrb_torchrl.envs.AtariEnv`
in evaluation mode, whole games cut at ``--max-steps``, default 2,500; its ``"pixels"`` are those
of the DQN recipe's :class:`~vlmrb_torchrl.envs.BatchedAtariEnv`, and the scripted agent reads
the RAM, which only ``AtariEnv`` exposes) or of an OGBench Scene task (``--env ogbench/scene-task3``:
:class:`~vlmrb_torchrl.envs.SceneEnv` as the SAC recipe builds it, ``front_pixels`` frames,
episodes ending when the task is solved or after ``--max-steps``, default OGBench's 750),
rendering frames only when the scorer reads them, cuts them into clips with the
stream and transform :func:`~vlmrb_torchrl.make_clip_scoring` builds for the scorer (what the
recipes and the gallery use), scores every clip with ``transform.score_clips`` (what the async
worker calls) and labels the same clips with the privileged oracle (``oracle:minigrid`` /
``oracle:robosuite`` / ``oracle:atari`` / ``oracle:ogbench``, which read the env's event flags, not frames).

Labels. A clip is *positive* when one of its real (``mask`` True) steps has a progress event
(``("next", "progress_event")``: on MiniGrid / BabyAI a sub-goal of the episode's mission
reached for the first time, or task success: the mission's own go to / pick up / open / put
next to / reach the goal, in its order, and the sub-goals its layout implies, the doors on the
way and the keys of locked ones; on DoorKey that is the first key pickup, the first door
opening and the goal, as before missions were read; a mission outside the grammar keeps those
generic events; Lift's cube grasped, lifted or task success; Atari: a positive reward, the player
scores; Scene: one of the task's subgoals becomes satisfied, or the task is solved). Per event type
(MiniGrid, Lift, Scene), the env writes
one flag each (``("next", "key_picked_up")``, ``"door_opened"``, ``"goal_reached"``,
``"success"``, ``"subgoal"``; Lift: ``"grasping"``, ``"lifted"``, ``"success"``; Scene:
``"cube_achieved"``, ``"button_0_achieved"``, ..., ``"success"``) and the oracle reads that flag
instead.
A per-type row compares the clips showing that event (positives) with the clips showing *no*
event at all (negatives); clips showing only other events are left out of it, so a scorer that
detects every kind of progress is not charged with false positives for detecting the others.
On MiniGrid a last row, "goal only", scores the goal clips against *every* other clip, key
pickups and door openings included: the VLM-RB paper's labels (``oracle:minigrid_goal``), the
row to read for a goal-only scorer such as ``builtin:minigrid_goal``.

Metrics. A clip is predicted positive when ``score > threshold`` (the sampler's binarisation
rule); the threshold is ``--threshold``, else the scorer's own ``threshold`` attribute if it
has one (a ``ThresholdScorer``), else its ``decision_threshold`` (a built-in model's tuned one,
``builtin:scene`` 0.95, ``builtin:lift`` 0.8; what the recipes' ``threshold=auto`` uses), else 0.5. Precision = TP / (TP + FP) (NaN when nothing is predicted positive),
recall = TP / (TP + FN) (NaN without positives), F1 = 2 TP / (2 TP + FP + FN) (NaN only when
there are neither positives nor predicted positives), AUROC = the Mann-Whitney probability that
a positive clip outscores a negative one, ties counting one half (NaN when a class is empty).
"F1 if all positive" = 2 P / (2 P + N), the F1 of a scorer calling every clip positive: on
rows where most clips are positive, an F1 near it measures the positive rate, not the scorer.
Clips/s counts the time spent in ``transform.score_clips`` only (packing + the scorer).

Policies: ``random`` (uniform over the env's actions; DoorKey envs get the recipes' default
action subset, see ``--actions``), ``scripted`` (``DoorKeyPolicy`` of
:mod:`vlmrb_torchrl.envs.minigrid.policies`: BFS to the key, the door, the goal, with
``--epsilon`` random actions and ``--burst-prob`` random bursts, defaults 0.2 and 0.05, so that
episodes hold the near misses a learning agent makes: without them a scripted DoorKey episode
is shorter than two clips and every clip of it shows an event; layouts with a goal tile only,
an error says so otherwise),
``mixed`` (alternating episodes, scripted first), ``mixed-mission`` (alternating mission and
random episodes, mission first), ``subgoal`` (``SubgoalPolicy``: walks
between random objects of any layout and interacts with them) and ``mission``
(``MissionPolicy``: follows the episode's mission, any MiniGrid / BabyAI mission the parser
reads, with the same ``--epsilon`` and ``--burst-prob`` noise). ``--policy random,mission`` runs
each in turn.

Tasks. ``builtin:minigrid`` is told each episode's mission (``--task auto``, the default for it:
its checks are derived from the mission, :mod:`vlmrb_torchrl.envs.minigrid.prompts`); other
scorers get no task unless ``--task mission``.

Families. ``--env`` takes several ids separated by commas, or a family set: ``family-train``
(envs the model and the mission parser were built and tuned on), ``family-held-out`` (envs never
used for either), ``family`` (both), ``family-large`` (19-25-cell grids); the run then prints one
row per env and policy, and ``--json`` writes every run. On robosuite Lift, ``random`` is
uniform random actions (SAC's first frames) and ``scripted`` the noisy pick-and-lift
:class:`~vlmrb_torchrl.envs.robosuite.policies.LiftPolicy` (no random-motion episodes; a fifth of
its episodes aim beside the cube). On Atari (Pong, Breakout), ``scripted`` is
:class:`~vlmrb_torchrl.envs.atari.policies.AtariPolicy` (Pong: the paddle follows the ball;
Breakout: serve, then keep the paddle under the ball) with ``--epsilon`` random actions and its own
random bursts, no random episodes. On Scene, ``random`` is uniform random actions and ``scripted``
:class:`~vlmrb_torchrl.envs.ogbench.policies.ScenePolicy` without random-motion episodes: subtasks
toward the task's goal or at random, run by OGBench's scripted oracles, with noise. Episode ``i``
resets the env with seed ``--seed + i``: the same command gives the same numbers.

Usage:

    python benchmarks/scorer_quality.py --scorer oracle:minigrid --env MiniGrid-DoorKey-5x5-v0 \\
        --episodes 50 --policy random --seed 1000
    python benchmarks/scorer_quality.py --scorer oracle:minigrid --label-noise 0.1 \\
        --env MiniGrid-DoorKey-8x8-v0 --episodes 50 --policy mixed --seed 1000 --json out.json
    python benchmarks/scorer_quality.py --scorer builtin:lift --env robosuite/Lift --episodes 30 \\
        --policy mixed --seed 1000
    python benchmarks/scorer_quality.py --scorer builtin:atari --env ALE/Pong-v5 --episodes 20 \\
        --policy mixed --epsilon 0.05 --seed 1000
    python benchmarks/scorer_quality.py --scorer builtin:minigrid --env family --episodes 20 \\
        --policy mixed-mission --seed 1000 --threads 1 --json family.json
    python benchmarks/scorer_quality.py --scorer builtin:scene --env ogbench/scene-task3 --episodes 20 \\
        --policy mixed --seed 1000 --max-steps 400
    python benchmarks/scorer_quality.py --scorer builtin:minigrid_agent --env MiniGrid-BlockedUnlockPickup-v0 \\
        --episodes 10 --policy mission --seed 1000 --by-check

Prints a Markdown table (one row for all progress events, one per event type) and, with
``--json``, writes the same numbers plus the run's settings and the scorer's provenance. With
``--scores clips.npz`` (one env and policy) it also writes every clip's score, its oracle labels
(``label_<flag>``), episode index and policy, and the threshold used: enough to recompute every
number of the table, or to pick a decision threshold on tuning episodes with
:func:`best_threshold` and read the held-out F1 at it (``studies/builtin_scorer_builds.md`` does so for
``builtin:lift``). With ``--by-check`` (a scorer with a prompt set: ``builtin:*``) it also counts every
clip above the threshold under the check that gave it its score (:class:`DecidingChecks`): which
statement the false positives come from.
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlmrb_torchrl.envs.minigrid.missions import COLORS
from vlmrb_torchrl.envs.minigrid.prompts import MISSION_MODELS

#: the row of all progress events: the oracle's own flag.
PROGRESS = "progress_event"
#: row names of the per-type event flags of :class:`~vlmrb_torchrl.envs.MiniGridEnv` (other flags: their key).
EVENT_TYPES = {
    "key_picked_up": "key picked up",
    "door_opened": "door opened",
    "goal_reached": "goal reached",
    "success": "task success",
    "grasping": "cube grasped",
    "lifted": "cube lifted",
    "cube_achieved": "cube on its target",
    "button_0_achieved": "drawer lock (button 0) set",
    "button_1_achieved": "window lock (button 1) set",
    "drawer_achieved": "drawer at its goal",
    "window_achieved": "window at its goal",
}
#: --max-steps' default on Atari: a scripted Pong game lasts ~2,600 steps
ATARI_MAX_STEPS = 2_500
POLICIES = ("random", "scripted", "mixed", "subgoal", "mission", "mixed-mission")
#: The policies that alternate episodes: the scripted one (even episodes) and random (odd ones).
MIXED = {"mixed": "scripted", "mixed-mission": "mission"}
#: ``--task``: what the scorer is told per episode.
TASK_MODES = ("auto", "mission", "none")
#: missions (and the checks derived from them) recorded in the results, at most.
MAX_TASKS_RECORDED = 50


def _family_sets() -> dict[str, tuple[str, ...]]:
    from vlmrb_torchrl.envs.minigrid.training import BENCHMARK_TRAIN_ENVS, HELD_OUT_LAYOUTS, LARGE_GRID_ENVS

    return {"family-train": BENCHMARK_TRAIN_ENVS, "family-held-out": HELD_OUT_LAYOUTS,
            "family": BENCHMARK_TRAIN_ENVS + HELD_OUT_LAYOUTS, "family-large": LARGE_GRID_ENVS}


#: The scorers told each episode's mission by ``--task auto`` (their checks derive from it).
MISSION_SCORERS = tuple(f"builtin:{name}" for name in MISSION_MODELS)

#: ``--env`` names of env sets: the MiniGrid / BabyAI envs of the builtin:minigrid benchmark
#: (``family-train``: envs its model and mission parser were built and tuned on;
#: ``family-held-out``: envs never used for either; ``family``: both; ``family-large``: grids
#: of 19-25 cells, where 64-pixel frames show 3-pixel tiles).
FAMILY_SETS = _family_sets()
FRAME_KEY = "pixels"  # the recipes' frame key (recipes.replay.FRAME_KEY)
#: MiniGrid's goal flag, and the row that scores it against every other clip (``oracle:minigrid_goal``'s labels)
GOAL, GOAL_ONLY = "goal_reached", "goal_only"


# ----------------------------------------------------------------------------- metrics
def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, tied values sharing the mean of their ranks.

    Examples:
        >>> average_ranks(np.array([0.5, 0.1, 0.5, 0.9])).tolist()
        [2.5, 1.0, 2.5, 4.0]
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    # runs of equal values: [start, end) in sorted order
    boundaries = np.flatnonzero(np.diff(sorted_values)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [values.size]])
    run_ranks = (starts + ends + 1) / 2.0  # mean of ranks start+1 .. end
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(run_ranks, ends - starts)
    return ranks


def auroc(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties count 1/2.

    Computed from average ranks (the Mann-Whitney U statistic), so tied scores are handled
    exactly: a constant scorer gets 0.5.

    Args:
        scores: ``[N]`` scores.
        labels: ``[N]`` bools (or 0/1), True for positives.

    Returns:
        the AUROC in ``[0, 1]``, or NaN when there are no positives or no negatives (it is
        undefined then; no warning is raised, callers report the missing class).

    Examples:
        >>> auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
        0.75
        >>> auroc([0.5, 0.5, 0.5], [0, 1, 1])
        0.5
        >>> auroc([0.2, 0.3], [1, 1])
        nan
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels).astype(bool).ravel()
    if scores.shape != labels.shape:
        raise ValueError(f"auroc needs one label per score, got {scores.shape[0]} scores and {labels.shape[0]} labels.")
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = average_ranks(scores)
    u = ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def binary_metrics(
    scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray, threshold: float = 0.5
) -> dict[str, float]:
    """Confusion counts, precision, recall, F1 (``score > threshold`` is a positive) and AUROC.

    Undefined ratios are NaN: precision without predicted positives, recall without positives,
    F1 without either, AUROC without both classes. ``f1_all_positive`` is the F1 of a scorer
    that calls every clip positive, ``2 P / (2 P + N)``: where most clips are positive, an F1
    near it says nothing about the scorer (read the AUROC).

    Examples:
        >>> m = binary_metrics([0.9, 0.8, 0.2, 0.6, 0.1], [1, 1, 1, 0, 0])
        >>> m["tp"], m["fp"], m["fn"], m["tn"]
        (2, 1, 1, 1)
        >>> round(m["precision"], 4), round(m["recall"], 4), round(m["f1"], 4), round(m["auroc"], 4)
        (0.6667, 0.6667, 0.6667, 0.8333)
        >>> round(m["f1_all_positive"], 4)  # 3 positives, 2 negatives
        0.75
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels).astype(bool).ravel()
    if scores.shape != labels.shape:
        raise ValueError(
            f"binary_metrics needs one label per score, got {scores.shape[0]} scores and {labels.shape[0]} labels."
        )
    predicted = scores > threshold
    tp = int((predicted & labels).sum())
    fp = int((predicted & ~labels).sum())
    fn = int((~predicted & labels).sum())
    tn = int((~predicted & ~labels).sum())
    return {
        "clips": int(labels.size),
        "positives": tp + fn,
        "negatives": fp + tn,
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "precision": tp / (tp + fp) if tp + fp else math.nan,
        "recall": tp / (tp + fn) if tp + fn else math.nan,
        "f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else math.nan,
        "auroc": auroc(scores, labels),
        "f1_all_positive": 2 * (tp + fn) / (2 * (tp + fn) + fp + tn) if labels.size else math.nan,
    }


def quality_report(scores: np.ndarray, labels: dict[str, np.ndarray], threshold: float) -> dict[str, dict]:
    """Metrics of all progress events (``labels[PROGRESS]``) and of each event type.

    A type's row keeps the clips with that event (positives) and the clips with no event at all
    (negatives), see the module docstring. A type no clip shows has NaN metrics (its counts stay).

    Args:
        scores: ``[N]`` clip scores.
        labels: ``[N]`` bool labels by flag name: :data:`PROGRESS` and one per event type.
        threshold: the decision threshold.
    """
    any_event = labels[PROGRESS]
    report = {PROGRESS: binary_metrics(scores, any_event, threshold)}
    for name in (k for k in labels if k != PROGRESS):
        keep = labels[name] | ~any_event
        row = binary_metrics(scores[keep], labels[name][keep], threshold)
        if row["positives"] == 0:  # an event these episodes never showed: nothing to measure
            row.update(precision=math.nan, recall=math.nan, f1=math.nan, auroc=math.nan, f1_all_positive=math.nan)
        report[name] = row
    if GOAL in labels:  # the VLM-RB paper's labels (oracle:minigrid_goal): key and door clips are negatives too
        report[GOAL_ONLY] = binary_metrics(scores, labels[GOAL], threshold)
    return report


def best_threshold(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray,
                   thresholds: Sequence[float] | np.ndarray | None = None) -> tuple[float, float]:
    """The threshold of ``thresholds`` (default 0.05, 0.10, ..., 0.95) with the highest F1, and that F1.

    Pick it on tuning episodes (``--scores`` of a run with other seeds) and report the held-out
    episodes' F1 at it: the held-out maximum would flatter the scorer. Ties go to the lowest
    threshold (more recall).

    Examples:
        >>> best_threshold([0.9, 0.8, 0.6, 0.3, 0.1], [1, 1, 0, 1, 0], thresholds=[0.2, 0.5, 0.7])
        (0.2, 0.8571428571428571)
        >>> best_threshold([0.9, 0.7, 0.6, 0.3], [1, 1, 0, 0], thresholds=[0.5, 0.65])
        (0.65, 1.0)
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels).astype(bool).ravel()
    grid = np.round(np.arange(0.05, 0.951, 0.05), 2) if thresholds is None else np.sort(np.asarray(thresholds, np.float64))
    if grid.size == 0:
        raise ValueError("best_threshold needs at least one threshold.")
    f1s = [binary_metrics(scores, labels, float(t))["f1"] for t in grid]
    f1s = [-1.0 if math.isnan(f) else f for f in f1s]
    i = int(np.argmax(f1s))
    return float(grid[i]), float(f1s[i])


# ----------------------------------------------------------------------------- policies
class RandomPolicy:
    """Uniform random actions from a seeded NumPy generator (a TorchRL policy: td -> td).

    Discrete action specs get a uniform action index, continuous (bounded) ones a uniform vector
    within the bounds.
    """

    def __init__(self, env, seed: int) -> None:
        space = env.action_spec.space
        self.n = int(space.n) if hasattr(space, "n") else None
        if self.n is None:
            self.low, self.high = space.low.numpy(), space.high.numpy()
        self.rng = np.random.default_rng(seed)

    def __call__(self, td):
        if self.n is None:
            action = torch.as_tensor(self.rng.uniform(self.low, self.high), dtype=torch.float32)
        else:
            action = torch.tensor(int(self.rng.integers(self.n)), dtype=torch.int64)
        td.set("action", action)
        return td


def make_policy(name: str, env, seed: int, *, epsilon: float = 0.0, burst_prob: float = 0.0) -> Callable:
    """The ``random``, ``scripted``, ``subgoal`` or ``mission`` policy acting in ``env`` (``mixed`` picks one per
    episode).

    ``scripted`` is :class:`~vlmrb_torchrl.envs.minigrid.policies.DoorKeyPolicy` (BFS to the
    key, the door, the goal): it plays layouts with a goal tile (DoorKey of every size, and
    goal-reaching tasks such as Empty, MultiRoom, LockedRoom); on a layout without a goal
    (UnlockPickup, KeyCorridor, Fetch, ...) it has no task to solve, and this raises instead of
    quietly acting at random. ``subgoal`` is
    :class:`~vlmrb_torchrl.envs.minigrid.policies.SubgoalPolicy` (walks between random objects
    and interacts with them), for any layout. ``mission`` is
    :class:`~vlmrb_torchrl.envs.minigrid.policies.MissionPolicy` (follows the episode's mission:
    any MiniGrid / BabyAI mission the parser reads). ``epsilon`` / ``burst_prob`` go to all three.

    On robosuite Lift ``scripted`` is :class:`~vlmrb_torchrl.envs.robosuite.policies.LiftPolicy`
    without random-motion episodes, on OGBench Scene
    :class:`~vlmrb_torchrl.envs.ogbench.policies.ScenePolicy` without them (``subgoal`` is refused).

    Raises:
        ValueError: ``scripted`` on a layout without a goal tile (the message names policy and env).
    """
    if name == "random":
        return RandomPolicy(env, seed)
    if name not in ("scripted", "subgoal", "mission"):
        raise ValueError(f"unknown policy {name!r}: use one of {POLICIES}.")
    return env_family(env).scripted_policy(env, name, seed=seed, epsilon=epsilon, burst_prob=burst_prob)


def env_family(env):
    """The env family (:class:`~vlmrb_torchrl.envs.EnvFamily`) of ``env``: the one that owns the id
    :func:`_make_env` built it from, else its ``env_id``."""
    from vlmrb_torchrl.envs import family_of

    family = family_of(getattr(env, "bench_env_id", None) or getattr(env, "env_id", None) or "")
    if family is None:
        raise ValueError(f"no env family knows {type(env).__name__}.")
    return family


def episode_policy(policy: str, episode: int) -> str:
    """The policy of episode ``episode``: ``mixed`` alternates scripted (even) and random (odd),
    ``mixed-mission`` mission (even) and random (odd).

    Examples:
        >>> [episode_policy("mixed-mission", i) for i in range(3)]
        ['mission', 'random', 'mission']
    """
    if policy in MIXED:
        return MIXED[policy] if episode % 2 == 0 else "random"
    return policy


# ----------------------------------------------------------------------------- the run
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scorer_quality.py",
        description="Precision, recall, F1 and AUROC of a clip scorer against the MiniGrid, robosuite, Atari or "
                    "OGBench "
                    "oracle.",
    )
    parser.add_argument("--scorer", required=True, help="scorer spec for make_scorer (oracle:minigrid, "
                        "builtin:minigrid, clip:<dir>, hf:<dir>, python:mod:fn, ...)")
    parser.add_argument("--env", required=True, help="a MiniGrid or BabyAI env id (e.g. MiniGrid-DoorKey-6x6-v0), "
                        "several separated by commas, a family set (" + ", ".join(FAMILY_SETS) + ": "
                        "docs/builtin_scorer.md), robosuite/Lift, an ALE id, e.g. ALE/Pong-v5, or "
                        "ogbench/scene-task<N> (N = 1..5)")
    parser.add_argument("--episodes", type=int, required=True, help="episodes to roll out")
    parser.add_argument("--task", choices=TASK_MODES, default="auto",
                        help="mission: each episode's mission is the scorer's task= (builtin:minigrid derives its "
                        "checks from it); none: no task (the scorer's default prompts); auto: mission for "
                        "builtin:minigrid without a prompt, none otherwise. Default: auto")
    parser.add_argument("--policy", default="random",
                        help="random (uniform actions), scripted (DoorKeyPolicy: key -> door -> goal; layouts with "
                        "a goal tile), mixed (alternating episodes, scripted first), subgoal (SubgoalPolicy: "
                        "random objects of any layout) or mission (MissionPolicy: follows the episode's mission, "
                        "any MiniGrid/BabyAI mission the parser reads); several separated by commas run one after the "
                        "other. Default: random")
    parser.add_argument("--epsilon", type=float, default=0.2,
                        help="scripted/subgoal: probability of a random action per step. Default: 0.2")
    parser.add_argument("--burst-prob", type=float, default=0.05,
                        help="scripted/subgoal: probability per step of starting a burst of 2-8 random actions. "
                        "Default: 0.05")
    parser.add_argument("--seed", type=int, default=1000,
                        help="episode i resets with seed SEED + i; also seeds the policy and the noise. "
                        "Default: 1000 (seeds from 1000 on are held out: training data must use lower ones)")
    parser.add_argument("--clip-len", type=int, default=16, help="ClipSpec.clip_len (recipes: 16)")
    parser.add_argument("--stride", type=int, default=1, help="ClipSpec.stride (recipes: 1)")
    parser.add_argument("--frames", type=int, default=None,
                        help="ClipSpec.frames: frames per clip sent to the scorer (default: all)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="decision threshold (score > threshold is positive). Default: the scorer's "
                        "threshold attribute, else 0.5")
    parser.add_argument("--label-noise", type=float, default=0.0,
                        help="wrap the scorer in NoisyScorer(flip_prob=...), as the recipes' label_noise")
    parser.add_argument("--noise-std", type=float, default=0.0, help="NoisyScorer's Gaussian noise_std")
    parser.add_argument("--prompt", default=None, help="override the scorer's prompt")
    parser.add_argument("--scorer-kwargs", default=None,
                        help="JSON object of extra make_scorer keyword arguments, e.g. '{\"device\": \"cuda\"}'")
    parser.add_argument("--actions", default="auto",
                        help="the env's action set: auto (DoorKey: left,right,forward,pickup,toggle; "
                        "others: all), all, or a comma-separated list of MiniGrid action names")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="truncate episodes after this many steps (default: MiniGrid's own max_steps; "
                        f"robosuite: 200, the SAC recipe's; Atari: {ATARI_MAX_STEPS}; OGBench Scene: 750, OGBench's)")
    parser.add_argument("--frame-size", type=int, default=64, help="rendered frame size (recipes: 64)")
    parser.add_argument("--frame-view", default="auto", choices=["auto", "grid", "agent", "screen", "score"],
                        help="what the frames show: MiniGrid grid (the whole grid) or agent (the agent-centred view, "
                             "MiniGridEnv(frame_view='agent')); Atari screen (the whole screen) or score (the box of "
                             "the agent's score, AtariEnv(frame_view='score')); auto: the scorer's (agent for "
                             "builtin:minigrid_agent, score for builtin:atari, and clip:<dir> models built on them, as "
                             "the DQN recipe picks), else the family's first")
    parser.add_argument("--camera", default=None,
                        help="robosuite: the camera (default: the SAC recipe's, front_close+eye_in_hand on Lift; agentview, "
                             "frontview, ... or any RobosuiteEnv camera)")
    parser.add_argument("--full-render", action="store_true",
                        help="robosuite: render with reflections, shadows and multisampling (the recipes render "
                             "without them: RobosuiteEnv(fast_render=True))")
    parser.add_argument("--batch-size", type=int, default=64, help="clips per score_clips call")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for the run")
    parser.add_argument("--json", type=Path, default=None, help="write the results as JSON to this file")
    parser.add_argument("--scores", type=Path, default=None,
                        help="write every clip's score, oracle labels, episode and policy to this .npz (one env and "
                             "policy), e.g. to pick a threshold with best_threshold() on tuning episodes")
    parser.add_argument("--by-check", action="store_true",
                        help="count each clip above the threshold by the check that put it there (a contrastive "
                             "scorer with a prompt set: builtin:*): true and false positives per check, printed and "
                             "in the JSON under by_check (MiniGrid colours written C, so that per-episode missions "
                             "add up)")
    parser.add_argument("--quiet", action="store_true", help="print nothing (the JSON still gets written)")
    return parser


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    for name in ("episodes", "clip_len", "stride", "batch_size", "frame_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    for name in ("max_steps", "threads", "frames"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}.")
    if args.frames is not None and args.frames > args.clip_len:
        parser.error(f"--frames must be <= --clip-len={args.clip_len}, got {args.frames}.")
    if args.threshold is not None and not 0.0 <= args.threshold < 1.0:
        parser.error(f"--threshold must be in [0, 1), got {args.threshold}.")
    for name in ("epsilon", "burst_prob"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            parser.error(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(args, name)}.")
    if not 0.0 <= args.label_noise <= 1.0:
        parser.error(f"--label-noise must be in [0, 1], got {args.label_noise}.")
    if not (math.isfinite(args.noise_std) and args.noise_std >= 0):
        parser.error(f"--noise-std must be a finite float >= 0, got {args.noise_std}.")
    if args.by_check and (args.label_noise > 0 or args.noise_std > 0):
        parser.error("--by-check counts the checks of the scorer itself: drop --label-noise / --noise-std.")
    from vlmrb_torchrl.envs import families, family_of

    family = family_of(args.env)
    try:
        if family is None:
            raise ValueError("no env family owns it")
        family.check_id(args.env)
    except ValueError as err:
        parser.error(f"--env must be {', '.join(f.id_help for f in families())}; got {args.env!r} ({err}).")
    try:
        kwargs = json.loads(args.scorer_kwargs) if args.scorer_kwargs else {}
    except json.JSONDecodeError as err:
        parser.error(f"--scorer-kwargs must be a JSON object: {err}.")
    if not isinstance(kwargs, dict):
        parser.error(f"--scorer-kwargs must be a JSON object, got {args.scorer_kwargs!r}.")
    if args.prompt is not None:
        kwargs["prompt"] = args.prompt
    return kwargs


def _threshold(args: argparse.Namespace, scorer) -> float:
    if args.threshold is not None:
        return float(args.threshold)
    for name in ("threshold", "decision_threshold"):  # a wrapper's binarisation, a built-in model's tuned threshold
        own = getattr(scorer, name, None)
        if isinstance(own, numbers.Real) and not isinstance(own, bool) and 0.0 <= own < 1.0:
            return float(own)
    return 0.5


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(v) for v in value]
    return value


def _fmt(value: float) -> str:
    return "–" if isinstance(value, float) and math.isnan(value) else f"{value:.3f}"


def format_table(report: dict[str, dict]) -> str:
    """The per-event metrics as a Markdown table."""
    lines = [
        "| events | clips | pos | neg | TP | FP | FN | precision | recall | F1 | AUROC | F1 if all positive |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, m in report.items():
        name = {PROGRESS: "all progress", GOAL_ONLY: "goal only (vs every other clip)"}.get(key, EVENT_TYPES.get(key, key))
        lines.append(
            f"| {name} | {m['clips']} | {m['positives']} | {m['negatives']} | {m['tp']} | {m['fp']} | "
            f"{m['fn']} | {_fmt(m['precision'])} | {_fmt(m['recall'])} | {_fmt(m['f1'])} | {_fmt(m['auroc'])} | "
            f"{_fmt(m['f1_all_positive'])} |"
        )
    return "\n".join(lines)


def _make_env(parser: argparse.ArgumentParser, args: argparse.Namespace, *, render: bool):
    """The env the episodes run in, as the env's recipe builds it (its family's env, in evaluation mode: Atari's
    ``AtariEnv`` plays whole games with raw rewards, its frames are the recipe's), with the recipe's defaults
    (the SAC families' camera and episode limit, ending on success) unless ``--camera`` / ``--max-steps`` say
    otherwise; the SAC envs are built with a seed (robosuite draws the cube's size when the model is built)."""
    from vlmrb_torchrl.envs import family_of

    family = family_of(args.env)
    defaults = family.recipe_defaults(args.env)
    kwargs: dict[str, Any] = {"frame_size": args.frame_size}
    max_steps = args.max_steps or defaults.get("max_episode_steps") or (
        ATARI_MAX_STEPS if family.name == "atari" else None)
    if max_steps is not None:
        kwargs["max_episode_steps"] = max_steps
    if "camera" in defaults:  # (--camera is for the families whose recipe picks a camera)
        kwargs["camera"] = args.camera or defaults["camera"]
    if args.full_render:
        kwargs["fast_render"] = False
    if family.recipe == "sac":
        kwargs["seed"] = args.seed
    if family.owned_keys or family.frame_views:  # what its recipe maps to its env (MiniGrid: the action set; views)
        config = argparse.Namespace(env=args.env, actions=args.actions, observation="onehot", view="partial",
                                    frame_view=_frame_view(args))
        kwargs.update(family.env_kwargs(config))
    try:
        env = family.env_fn(args.env, train=False, render=render, **kwargs)()
    except ValueError as err:
        parser.error(f"--env {args.env!r}: {err}")
    env.bench_env_id = args.env
    return env


def _frame_view(args: argparse.Namespace) -> str:
    """``--frame-view``, ``auto`` resolved as the DQN recipe resolves it (the frames the scorer was trained on)."""
    if args.frame_view != "auto":
        return args.frame_view
    from vlmrb_torchrl.envs import family_of

    family = family_of(args.env)
    return family.frame_view(args.scorer) if family is not None else "grid"


def _task_scorers(parser: argparse.ArgumentParser, args: argparse.Namespace, scorer_kwargs: dict, base,
                  make_scorer) -> Callable[[str], Any] | None:
    """``mission -> scorer`` when each episode's mission is the scorer's task (``--task``), else ``None``.

    ``builtin:minigrid`` scorers for other missions share the first one's model and frame cache
    (:func:`~vlmrb_torchrl.envs.minigrid.prompts.with_mission`); other specs are built with
    ``task=mission``. One scorer per distinct mission, kept for the run. As in the DQN recipe, the
    built-in models leave out the door checks a mission only implies on an env whose first 8 episodes
    (from ``--seed``) show no door (:func:`~vlmrb_torchrl.envs.minigrid.env.minigrid_has_doors`), unless
    ``--scorer-kwargs`` sets ``doors``."""
    mode = args.task
    told = any(k in scorer_kwargs for k in ("prompt", "prompt_set", "task"))
    if mode == "auto":
        mode = "mission" if args.scorer in MISSION_SCORERS and not told else "none"
    if mode == "none":
        return None
    from vlmrb_torchrl.envs import family_of

    if not family_of(args.env).has_missions:
        parser.error(f"--task mission: {family_of(args.env).title} envs have no mission string; use --task none.")
    if "task" in scorer_kwargs:
        parser.error("--task mission gives the scorer each episode's mission: drop task from --scorer-kwargs.")
    cache: dict[str, Any] = {}
    doors = scorer_kwargs.get("doors", True)
    if args.scorer in MISSION_SCORERS and "doors" not in scorer_kwargs:
        from vlmrb_torchrl.envs.minigrid.env import minigrid_has_doors

        doors = minigrid_has_doors(args.env, seed=args.seed)

    def scorer_for(mission: str):
        if mission not in cache:
            if args.scorer in MISSION_SCORERS and hasattr(base, "with_prompt_set") and not told:
                from vlmrb_torchrl.envs.minigrid.prompts import with_mission

                cache[mission] = with_mission(base, mission, doors=doors)
            else:
                try:
                    cache[mission] = make_scorer(args.scorer, task=mission, **scorer_kwargs)
                except (ValueError, TypeError) as err:
                    parser.error(f"--task mission: --scorer {args.scorer!r} does not take task=: {err}")
        return cache[mission]

    scorer_for.cache, scorer_for.doors = cache, doors
    return scorer_for


def _expand_envs(value: str) -> list[str]:
    """``--env``'s ids: one, several separated by commas, or a family set name (:data:`FAMILY_SETS`)."""
    out: list[str] = []
    for item in (v.strip() for v in value.split(",") if v.strip()):
        out += list(FAMILY_SETS[item]) if item in FAMILY_SETS else [item]
    return list(dict.fromkeys(out))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the benchmark; returns the results written with ``--json`` (NaN as ``None`` there).

    With one env and one policy the results are one run's; with several (``--env a,b`` or a
    family set, ``--policy random,mission``) they are ``{"runs": [...], "summary": [...]}``:
    each run's results, and one row per (env, policy) with its all-progress F1 and AUROC.

    Errors in the arguments (an unknown env id, a scorer spec :func:`make_scorer` rejects, a
    policy the env does not support, a value out of range) exit through argparse with a message
    naming the argument (``SystemExit(2)``).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    envs = _expand_envs(args.env)
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        parser.error(f"--policy: invalid choice {bad or args.policy!r} (choose from {', '.join(POLICIES)}; "
                     "several separated by commas)")
    if not envs:
        parser.error("--env: no env id given.")
    if args.scores is not None and len(envs) * len(policies) > 1:
        parser.error("--scores writes one run's clips: give one env and one policy (mixed counts as one).")
    runs = []
    for env_id in envs:
        for policy in policies:
            one = argparse.Namespace(**{**vars(args), "env": env_id, "policy": policy})
            if len(envs) * len(policies) > 1:
                one.json, one.quiet = None, True
            runs.append(_run(parser, one))
            if len(envs) * len(policies) > 1 and not args.quiet:
                print(_summary_row(runs[-1]), flush=True)
    if len(runs) == 1:
        return runs[0]
    results = {"runs": runs, "summary": [row for r in runs for row in summary_rows(r)]}
    if not args.quiet:
        print("\n" + format_summary(results["summary"]))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_nan_to_none(results), indent=2) + "\n")
    return results


def summary_rows(results: dict) -> list[dict[str, Any]]:
    """One run's lines of the family table: the run's, then (mixed policies) each policy's episodes'."""
    rows = [summary_row(results)]
    for name, report in results["by_policy"].items():
        rows.append(summary_row(results, report=report, policy=name))
    return rows


def summary_row(results: dict, *, report: dict | None = None, policy: str | None = None) -> dict[str, Any]:
    """One run's line of the family table: env, policy, clips, positives, F1, AUROC, F1 if all positive."""
    m = (report or results["metrics"])[PROGRESS]
    return {"env": results["config"]["env"], "policy": policy or results["config"]["policy"], "clips": m["clips"],
            "positives": m["positives"], "precision": m["precision"], "recall": m["recall"], "f1": m["f1"],
            "auroc": m["auroc"], "f1_all_positive": m["f1_all_positive"],
            "successes": results["counts"]["successes"] if policy is None else None,
            "episodes": results["counts"]["episodes"] if policy is None else None,
            "held_out": results["config"]["env"] in FAMILY_SETS["family-held-out"]}


def _summary_row(results: dict) -> str:
    r = summary_row(results)
    return (f"{r['env']} | {r['policy']} | {r['clips']} clips, {r['positives']} positive | F1 {_fmt(r['f1'])} "
            f"AUROC {_fmt(r['auroc'])}")


def format_summary(rows: list[dict]) -> str:
    """The family table in Markdown: one row per (env, policy)."""
    lines = ["| env | held out | policy | episodes solved | clips | positive | precision | recall | F1 | AUROC | "
             "F1 if all positive |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        solved = "" if r["episodes"] is None else f"{r['successes']}/{r['episodes']}"
        lines.append(f"| {r['env']} | {'yes' if r['held_out'] else ''} | {r['policy']} | {solved} | "
                     f"{r['clips']} | {r['positives']} | {_fmt(r['precision'])} | "
                     f"{_fmt(r['recall'])} | {_fmt(r['f1'])} | {_fmt(r['auroc'])} | {_fmt(r['f1_all_positive'])} |")
    return "\n".join(lines)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """One env, one policy."""
    scorer_kwargs = _check_args(parser, args)

    from vlmrb_torchrl import ClipSpec, make_clip_scoring
    from vlmrb_torchrl.scoring.clips import ClipBatch
    from vlmrb_torchrl.scorers import NoisyScorer, make_scorer

    from vlmrb_torchrl.envs import family_of
    from vlmrb_torchrl.envs.family import load

    family = family_of(args.env)
    event_keys = load(family.event_keys)  # (Atari: a positive reward, no event types)

    threads_before = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        try:
            spec = family.resolve_scorer(args.scorer, args.env)  # builtin:scene: the env's task's, as the recipe picks
            scorer = make_scorer(spec, **scorer_kwargs)
        except (ValueError, TypeError, KeyError) as err:
            parser.error(f"--scorer {args.scorer!r}: {err}")
        scorer_for = _task_scorers(parser, args, scorer_kwargs, scorer, make_scorer)

        def noisy(inner):
            if args.label_noise > 0 or args.noise_std > 0:
                return NoisyScorer(inner, flip_prob=args.label_noise, noise_std=args.noise_std, seed=args.seed)
            return inner

        scorer = noisy(scorer)
        threshold = _threshold(args, scorer)
        spec = ClipSpec(clip_len=args.clip_len, stride=args.stride, frames=args.frames)
        # the oracle's per-type flags ride along in the clips, next to what the scorer reads
        # (every flag the env writes: a flag added to MINIGRID_EVENT_KEYS gets its own row)
        label_keys = {name: ("next", name) for name in (PROGRESS, *(k for k in event_keys if k != PROGRESS))}
        stream, transform = make_clip_scoring(scorer, spec, frame_key=FRAME_KEY,
                                              extra_keys=list(label_keys.values()))
        oracles = {name: make_scorer("oracle:minigrid", events_key=key) for name, key in label_keys.items()}
        env = _make_env(parser, args, render=stream.frame_key is not None)
        try:
            policy_names = sorted({episode_policy(args.policy, i) for i in range(args.episodes)})
            policies = {}
            for offset, name in enumerate(policy_names):
                try:
                    policies[name] = make_policy(name, env, args.seed * 7919 + offset,
                                                 epsilon=args.epsilon, burst_prob=args.burst_prob)
                except ValueError as err:
                    parser.error(f"--policy {args.policy}: {err}")

            all_scores, all_labels, clip_policy, clip_episode = [], {k: [] for k in label_keys}, [], []
            deciding = DecidingChecks(minigrid=family.has_missions) if args.by_check else None
            steps = successes = 0
            step_events = {name: 0 for name in label_keys}
            score_seconds = rollout_seconds = 0.0
            for episode in range(args.episodes):
                name = episode_policy(args.policy, episode)
                if hasattr(policies[name], "reset"):
                    policies[name].reset()  # no random burst carried over from the last episode
                env.set_seed(args.seed + episode)
                t0 = time.perf_counter()
                first = env.reset()  # BabyAI levels set max_steps at reset: the horizon is read after it
                horizon = args.max_steps or env.max_episode_steps or int(env.unwrapped.max_steps)
                with torch.no_grad():
                    rollout = env.rollout(horizon, policies[name], break_when_any_done=True, auto_reset=False,
                                          tensordict=first)
                rollout_seconds += time.perf_counter() - t0
                if scorer_for is not None:  # the episode's mission is the scorer's task
                    transform.scorer = noisy(scorer_for(env.mission))
                if deciding is not None and not isinstance(transform.scorer, _Recording):
                    transform.scorer = deciding.around(transform.scorer, parser)
                steps += rollout.numel()
                if ("next", "success") in rollout.keys(True):  # (Atari has no success flag)
                    successes += int(rollout["next", "success"].any())
                for key, flag in label_keys.items():
                    step_events[key] += int(rollout[flag].sum())
                rollout["collector", "traj_ids"] = torch.full(rollout.shape, episode, dtype=torch.long)
                pushed = (stream.push(rollout, torch.arange(rollout.numel())), stream.flush())
                batch = ClipBatch.cat([b for b in pushed if b is not None])
                for key, oracle in oracles.items():
                    all_labels[key].append(oracle.score(batch.clips).numpy().astype(bool))
                t0 = time.perf_counter()
                with torch.no_grad():
                    for start in range(0, len(batch), args.batch_size):
                        chunk = batch.clips[start : start + args.batch_size]
                        all_scores.append(transform.score_clips(chunk, frames=batch.frames).cpu().numpy())
                score_seconds += time.perf_counter() - t0
                clip_policy += [name] * len(batch)
                clip_episode += [episode] * len(batch)
        finally:
            env.close()
    finally:
        torch.set_num_threads(threads_before)

    scores = np.concatenate(all_scores).astype(np.float64)
    labels = {k: np.concatenate(v) for k, v in all_labels.items()}
    clip_policy = np.asarray(clip_policy)
    report = quality_report(scores, labels, threshold)
    by_policy = {}
    if args.policy in MIXED:
        for name in policy_names:
            keep = clip_policy == name
            by_policy[name] = quality_report(scores[keep], {k: v[keep] for k, v in labels.items()}, threshold)
    n_clips = int(scores.size)
    results = {
        "config": {
            "scorer": args.scorer, "env": args.env, "episodes": args.episodes, "policy": args.policy,
            "seed": args.seed, "clip_len": args.clip_len, "stride": args.stride, "frames": args.frames,
            "epsilon": args.epsilon, "burst_prob": args.burst_prob,
            "threshold": threshold, "label_noise": args.label_noise, "noise_std": args.noise_std,
            "actions": list(getattr(env, "action_names", ())), "max_steps": args.max_steps,
            "frame_size": args.frame_size, "frame_view": getattr(env, "frame_view", None),
            "camera": getattr(env, "camera", None),
            "fast_render": getattr(env, "fast_render", None), "task": "per-episode mission" if scorer_for is not None else None,
            "rendered": stream.frame_key is not None, "torch_threads": args.threads or threads_before,
            "doors": getattr(scorer_for, "doors", None),  # the mission checks' doors= (None: not told a mission)
        },
        "provenance": _jsonable(getattr(scorer, "provenance", {})),
        "tasks": {} if scorer_for is None else {
            mission: getattr(s, "prompt", None) for mission, s in list(scorer_for.cache.items())[:MAX_TASKS_RECORDED]},
        "counts": {
            "episodes": args.episodes, "successes": successes, "steps": steps, "clips": n_clips,
            "step_events": step_events,
            "positive_clips": {k: int(v.sum()) for k, v in labels.items()},
        },
        "throughput": {
            "score_seconds": score_seconds,
            "clips_per_second": n_clips / score_seconds if score_seconds > 0 else math.nan,
            "rollout_steps_per_second": steps / rollout_seconds if rollout_seconds > 0 else math.nan,
        },
        "metrics": report,
        "by_policy": by_policy,
    }
    if deciding is not None:
        results["by_check"] = deciding.table(scores > threshold, labels[PROGRESS])
    if not args.quiet:
        print(_summary(results))
        if deciding is not None:
            print("\n" + format_by_check(results["by_check"]))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_nan_to_none(results), indent=2) + "\n")
    if args.scores is not None:
        args.scores.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(args.scores, scores=scores, episode=np.asarray(clip_episode), policy=clip_policy,
                            threshold=threshold, **{f"label_{k}": v for k, v in labels.items()})
    return results


class DecidingChecks:
    """Records, for every clip scored, the check of the scorer's prompt set that gave the clip its score
    (the argmax of :meth:`~vlmrb_torchrl.scorers.HFContrastiveScorer.check_scores`), then counts the true
    and false positives at a threshold by it: which statement puts negative clips above the threshold.

    Examples:
        >>> import numpy as np
        >>> d = DecidingChecks()
        >>> d.checks = ["max the agent faces the red ball", "rise the agent faces the open door", "max the agent faces the blue ball"]
        >>> d.table(np.array([True, True, True]), np.array([True, False, False]))
        [{'check': 'max the agent faces the C ball', 'false_positives': 1, 'true_positives': 1}, {'check': 'rise the agent faces the open door', 'false_positives': 1, 'true_positives': 0}]
    """

    _COLOURS = re.compile(rf"\b({'|'.join(COLORS)})\b")

    def __init__(self, *, minigrid: bool = True) -> None:
        self.minigrid = minigrid
        self.checks: list[str] = []

    def around(self, scorer, parser: argparse.ArgumentParser):
        """``scorer`` with its ``score`` recording the deciding checks (every other attribute its own)."""
        if not hasattr(scorer, "check_scores"):
            parser.error(f"--by-check needs a scorer with a prompt set (builtin:*, clip:...), got {type(scorer).__name__}.")
        return _Recording(scorer, self)

    def table(self, predicted: np.ndarray, positive: np.ndarray) -> list[dict[str, Any]]:
        """Per check (most false positives first): the clips it put above the threshold, true and false."""
        if len(self.checks) != len(predicted):
            raise RuntimeError(f"--by-check recorded {len(self.checks)} clips for {len(predicted)} scores.")
        counts: dict[str, list[int]] = {}
        for check, above, label in zip(self.checks, predicted, positive):
            if above:
                name = self._COLOURS.sub("C", check) if self.minigrid else check
                counts.setdefault(name, [0, 0])[0 if label else 1] += 1
        rows = [{"check": k, "false_positives": fp, "true_positives": tp} for k, (tp, fp) in counts.items()]
        return sorted(rows, key=lambda r: (-r["false_positives"], -r["true_positives"], r["check"]))


class _Recording:
    def __init__(self, scorer, sink: DecidingChecks) -> None:
        self._scorer, self._sink = scorer, sink

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scorer, name)

    def score(self, clips):
        per_check = self._scorer.check_scores(clips)
        checks = self._scorer.prompt_set
        self._sink.checks += [f"{checks[i].aggregation} {checks[i].positive}" for i in per_check.argmax(-1).tolist()]
        return per_check.max(-1).values  # HFContrastiveScorer.score's scores


def format_by_check(rows: list[dict[str, Any]]) -> str:
    """``--by-check``'s table in Markdown."""
    lines = ["| deciding check | false positives | true positives |", "|---|---:|---:|"]
    lines += [f"| {r['check']} | {r['false_positives']} | {r['true_positives']} |" for r in rows]
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        if isinstance(value, dict):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_jsonable(v) for v in value]
        return repr(value)


def _summary(results: dict) -> str:
    c, n, t = results["config"], results["counts"], results["throughput"]
    noise = f" + NoisyScorer(flip_prob={c['label_noise']}, noise_std={c['noise_std']})" if (
        c["label_noise"] or c["noise_std"]) else ""
    lines = [
        f"scorer {c['scorer']}{noise} | {c['env']} | policy {c['policy']} | {c['episodes']} episodes from seed "
        f"{c['seed']} | clip_len {c['clip_len']}, stride {c['stride']}, frames {c['frames'] or 'all'} | "
        f"threshold {c['threshold']}",
        f"{n['steps']} steps, {n['successes']}/{n['episodes']} episodes solved, {n['clips']} clips; "
        f"step events: " + ", ".join(f"{k} {v}" for k, v in n["step_events"].items()),
        f"scoring {t['clips_per_second']:.1f} clips/s ({t['score_seconds']:.2f} s, {c['torch_threads']} torch "
        f"threads); rollouts {t['rollout_steps_per_second']:.0f} steps/s",
        "",
        format_table(results["metrics"]),
    ]
    for name, report in results["by_policy"].items():
        lines += ["", f"policy {name} only:", "", format_table(report)]
    if any(math.isnan(m[k]) for m in results["metrics"].values() for k in ("precision", "recall", "f1", "auroc")):
        lines += ["", "– : undefined: no clip shows this event (or, for precision, no clip is predicted positive)."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
