"""The robosuite family: ``robosuite/<Task>`` ids (Lift, Stack, Door, ...), trained by the SAC recipe.

- ``env.py``: :class:`~vlmrb_torchrl.envs.RobosuiteEnv` (state observations for the agent, camera
  frames for the VLM, grasp / lift / success events for the oracle) and the cameras this package
  places (:data:`~vlmrb_torchrl.envs.ROBOSUITE_VIEWS`);
- ``policies.py``: the scripted Lift agent and the privileged state captions are made from;
- ``prompts.py``: ``builtin:lift``'s prompt set;
- ``training.py``, ``domain.py``: what ``vlmrb build-scorer lift`` / ``lift_hand`` train on;
- this module: the family's record, :data:`FAMILY`, and the cameras of ``builtin:lift``.
"""

from __future__ import annotations

from typing import Any

from vlmrb_torchrl.envs.family import EnvFamily

__all__ = ["FAMILY", "LIFT_PANEL_CAMERAS", "LIFT_SCORER_CAMERA", "RobosuiteFamily"]

#: The frames ``builtin:lift`` reads and the SAC recipe's default camera on ``robosuite/Lift``: a
#: :class:`~vlmrb_torchrl.envs.PanelView` (:data:`~vlmrb_torchrl.envs.ROBOSUITE_VIEWS`) of the two
#: cameras its models were trained on, :data:`LIFT_PANEL_CAMERAS`, side by side.
LIFT_SCORER_CAMERA = "front_close+eye_in_hand"

#: The cameras of ``builtin:lift``'s two models, left to right: ``front_close`` (45 cm in front of the cube, where
#: a lift is plain; ``vlmrb build-scorer lift``) and ``robot0_eye_in_hand`` (the gripper's own camera, where the
#: cube sits between the finger pads or not; ``vlmrb build-scorer lift_hand``).
LIFT_PANEL_CAMERAS = ("front_close", "robot0_eye_in_hand")


class RobosuiteFamily(EnvFamily):
    """robosuite manipulation tasks (:class:`~vlmrb_torchrl.envs.RobosuiteEnv`): ``robosuite/<Task>`` ids.

    The SAC recipe's defaults: a 200-step horizon, ``agentview`` frames (Lift: :data:`LIFT_SCORER_CAMERA`,
    the cameras ``builtin:lift`` was trained on), robosuite's sparse success reward, ``builtin:lift``.

    Examples:
        >>> FAMILY.recipe_defaults("robosuite/Lift")["camera"], FAMILY.recipe_defaults("robosuite/Stack")["camera"]
        ('front_close+eye_in_hand', 'agentview')
    """

    name = "robosuite"
    title = "robosuite"
    id_prefixes = ("robosuite/",)
    example_id = "robosuite/Lift"
    recipe = "sac"
    env_factory = "vlmrb_torchrl.envs.robosuite.env:make_robosuite_env"
    event_keys = "vlmrb_torchrl.envs.robosuite.env:ROBOSUITE_EVENT_KEYS"
    oracles = {"robosuite": ("next", "progress_event")}  # grasping | lifted | success
    builtin_scorers = ("lift",)
    training_domains = {"lift": "vlmrb_torchrl.envs.robosuite.domain:lift_domain",
                        "lift_hand": "vlmrb_torchrl.envs.robosuite.domain:lift_hand_domain"}
    frame_states = {"LiftState": "vlmrb_torchrl.envs.robosuite.policies"}
    policies = {"scripted": "vlmrb_torchrl.envs.robosuite.policies:LiftPolicy"}

    @property
    def id_help(self) -> str:
        return "robosuite/<Task> (e.g. robosuite/Lift)"

    def recipe_defaults(self, env_id: str) -> dict[str, Any]:
        camera = LIFT_SCORER_CAMERA if env_id == "robosuite/Lift" else "agentview"
        return {"max_episode_steps": 200, "camera": camera, "reward_shaping": False}

    def known_ids(self) -> list[str] | None:
        from vlmrb_torchrl.envs.robosuite.env import _import_robosuite

        try:
            return [f"robosuite/{task}" for task in _import_robosuite().ALL_ENVIRONMENTS]
        except ImportError:
            return None

    def default_scorer(self, env_id: str, *, seed: int = 0) -> str | None:
        return "builtin:lift" if env_id == "robosuite/Lift" else None  # its models know Lift's scene only

    def config_checks(self, cfg: Any) -> list[tuple[str, bool, str]]:
        lift = cfg.replay in ("vlm", "vlm_td") and cfg.scorer == "builtin:lift"
        return [("scorer", not lift or cfg.env == "robosuite/Lift",
                 "a scorer for this task (builtin:lift knows Lift's scene only; pass scorer=oracle:robosuite, "
                 "clip:<dir>, hf:<dir>, openai:<url>#<model> or python:<module>:<callable>)"),
                ("camera", not lift or cfg.camera == LIFT_SCORER_CAMERA,
                 f"{LIFT_SCORER_CAMERA} with scorer={cfg.scorer} (the camera it was trained on)"),
                ("frame_size", not lift or cfg.frame_size == 64,
                 f"64 with scorer={cfg.scorer} (the frame size it was trained on)")]


#: The family's record (:func:`~vlmrb_torchrl.envs.family.family_of` finds it).
FAMILY = RobosuiteFamily()
