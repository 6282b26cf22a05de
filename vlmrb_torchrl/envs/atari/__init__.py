"""The Atari family: ALE ids (``ALE/<Game>-v5``), trained by the DQN recipe.

- ``env.py``: :class:`~vlmrb_torchrl.envs.AtariEnv` (DQN-preprocessed frames for the agent, RGB frames
  for the VLM, positive-reward events for the oracle) and :class:`~vlmrb_torchrl.envs.BatchedAtariEnv`
  (ale-py's vector env), per-game VLM prompts;
- ``policies.py``: the scripted agent of Pong and Breakout, and what the RAM says (ball, score digit);
- ``prompts.py``: ``builtin:atari``'s prompt set;
- ``training.py``, ``domain.py``: what ``vlmrb build-scorer atari`` trains on;
- this module: the family's record, :data:`FAMILY`.
"""

from __future__ import annotations

import functools
from typing import Any

from vlmrb_torchrl.envs.family import EnvFamily, load, rendered_frames

__all__ = ["ATARI_BUILTIN_GAMES", "FAMILY", "AtariFamily", "atari_game", "atari_scorer_frame_view"]

_ENV = "vlmrb_torchrl.envs.atari.env"

#: The Atari games ``builtin:atari`` was trained on (``ALE/<Game>-v5``).
ATARI_BUILTIN_GAMES: tuple[str, ...] = ("Pong", "Breakout")


def atari_game(env_id: str) -> str:
    """The game of an ALE id: ``"ALE/Pong-v5"`` -> ``"Pong"``.

    Examples:
        >>> atari_game("ALE/Breakout-v5")
        'Breakout'
    """
    return env_id.split("/", 1)[-1].split("-", 1)[0]


def atari_scorer_frame_view(scorer: str) -> str | None:
    """The Atari frames a scorer's model was trained on: ``"score"`` (the box of the agent's score,
    ``AtariEnv(frame_view="score")``) for ``builtin:atari`` and for ``clip:<dir>`` models whose ``training.json``
    says so (``vlmrb build-scorer atari``), ``None`` when it cannot tell (a hub id, an oracle, a model trained on
    something else): then the whole screen.

    Examples:
        >>> atari_scorer_frame_view("builtin:atari"), atari_scorer_frame_view("oracle:atari")
        ('score', None)
    """
    kind, _, rest = str(scorer).partition(":")
    if kind == "builtin":
        return "score" if rest == "atari" else None
    view = rendered_frames(scorer).get("atari_frame_view")
    return view if view in ("screen", "score") else None


class AtariFamily(EnvFamily):
    """Atari 2600 games through the ALE (:class:`~vlmrb_torchrl.envs.AtariEnv`): ``ALE/<Game>-v5`` ids.

    Examples:
        >>> FAMILY.default_scorer("ALE/Pong-v5"), FAMILY.default_scorer("ALE/Tennis-v5")
        ('builtin:atari', None)
    """

    name = "atari"
    title = "Atari"
    id_prefixes = ("ALE/",)
    example_id = "ALE/Pong-v5"
    recipe = "dqn"
    env_factory = f"{_ENV}:make_atari_env"
    batched_env = f"{_ENV}:BatchedAtariEnv"
    event_keys = ("progress_event",)  # a positive reward on the step: the player scored
    oracles = {"atari": ("next", "progress_event")}
    builtin_scorers = ("atari",)
    training_domains = {"atari": "vlmrb_torchrl.envs.atari.domain:atari_domain"}
    frame_states = {"AtariFrameState": "vlmrb_torchrl.envs.atari.training"}
    policies = {"scripted": "vlmrb_torchrl.envs.atari.policies:AtariPolicy"}
    frame_views = ("screen", "score")
    # the whole pipeline in a few minutes on 2 CPU cores (a Nature-CNN update costs ~50-100 ms of CPU there), far
    # too short to learn: one evaluation of 4 episodes cut at 500 steps (<= 2,000 steps), a gallery of <= 1,000 steps
    quick_preset = {"total_frames": 6_400, "num_envs": 8, "frames_per_batch": 128, "learning_starts": 1_000,
                    "batch_size": 32, "buffer_size": 6_400, "eval_every": 6_400, "eval_episodes": 4, "eval_envs": 4,
                    "eval_max_episode_steps": 500, "checkpoint_every": 6_400, "gallery_steps": 1_000}

    def env_fn(self, env_id: str, *, train: bool = True, render: bool = False, **kwargs: Any) -> functools.partial:
        """Training envs end episodes on a lost life and clip rewards; evaluation envs play whole games."""
        return functools.partial(load(self.env_factory), env_id, train=train, render=render, **kwargs)

    def scripted_policy(self, env: Any, name: str = "scripted", *, seed: int = 0, epsilon: float = 0.0,
                        burst_prob: float = 0.0) -> Any:
        return self.policy_class(name)(env, seed=seed, random_share=0.0, epsilons=(epsilon,))

    def env_kwargs(self, cfg: Any, *, scorer: Any = None) -> dict[str, Any]:
        """The scorer's frames: the whole screen, or the box of the agent's score (``frame_view``)."""
        view = getattr(cfg, "frame_view", None)
        return {"frame_view": view} if view in self.frame_views else {}

    def known_ids(self) -> list[str] | None:
        from vlmrb_torchrl.envs.atari.env import _import_ale

        try:
            gymnasium, _ = _import_ale()
        except ImportError:
            return None
        return [env_id for env_id in gymnasium.registry if self.owns(env_id)]

    def default_scorer(self, env_id: str, *, seed: int = 0) -> str | None:
        return "builtin:atari" if atari_game(env_id) in ATARI_BUILTIN_GAMES else None

    def scorer_frame_view(self, scorer: str) -> str | None:
        return atari_scorer_frame_view(scorer)

    def config_checks(self, cfg: Any) -> list[tuple[str, bool, str]]:
        from vlmrb_torchrl.envs.atari.env import ATARI_SCORE_BOXES

        vlm = cfg.replay in ("vlm", "vlm_td")
        view = getattr(cfg, "frame_view", "auto")
        return [("scorer", not (vlm and cfg.scorer == "builtin:atari") or atari_game(cfg.env) in ATARI_BUILTIN_GAMES,
                 "a scorer for this game (builtin:atari knows ALE/Pong-v5 and ALE/Breakout-v5; pass "
                 "scorer=oracle:atari or your own)"),
                ("frame_view", view != "score" or atari_game(cfg.env) in ATARI_SCORE_BOXES,
                 f"screen or auto on {cfg.env} (the score box is known for {', '.join(sorted(ATARI_SCORE_BOXES))})")]


#: The family's record (:func:`~vlmrb_torchrl.envs.family.family_of` finds it).
FAMILY = AtariFamily()
