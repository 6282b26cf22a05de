"""What the families' envs share: flag and done specs, one step's output, frames rendered only where a
clip needs them, and the base of the single-task MuJoCo envs (robosuite, OGBench Scene).

Every env of the package writes the same kinds of entries: an agent observation, ``"pixels"`` for a
scorer (when asked to render), boolean event flags for the oracle, and TorchRL's ``reward`` /
``done`` / ``terminated`` / ``truncated``. The helpers here build them one way for every family.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from vlmrb_torchrl._signature import init_signature

__all__ = ["ClipRenderSteps", "FRAME_STATE_KEY", "FramedTaskEnv", "check_int", "done_spec", "flag_spec",
           "random_arm_action", "step_output"]

#: Where an env built with ``render="state"`` writes each step's frame state (what its ``state_renderer``, a
#: :class:`~vlmrb_torchrl.StateRenderer`, draws the frame from) in place of ``"pixels"``.
FRAME_STATE_KEY = "frame_state"


def flag_spec(batch_shape: Sequence[int] = (), device: Any = None) -> Categorical:
    """The spec of one boolean per-step flag: bool ``[*batch_shape, 1]``.

    Examples:
        >>> flag_spec((4,)).shape, flag_spec().dtype
        (torch.Size([4, 1]), torch.bool)
    """
    return Categorical(n=2, shape=(*batch_shape, 1), dtype=torch.bool, device=device)


def done_spec(batch_shape: Sequence[int] = (), device: Any = None) -> Composite:
    """TorchRL's ``done``, ``terminated`` and ``truncated`` flags of an env of ``batch_shape``.

    Examples:
        >>> sorted(done_spec().keys())
        ['done', 'terminated', 'truncated']
    """
    flag = flag_spec(batch_shape, device)
    return Composite(done=flag.clone(), terminated=flag.clone(), truncated=flag.clone(), shape=tuple(batch_shape),
                     device=device)


def step_output(entries: dict[str, torch.Tensor], flag_keys: Sequence[str], flags: Sequence[bool],
                reward: float | None, device: Any = None) -> TensorDictBase:
    """One step's output of a single env: ``entries``, each of ``flag_keys`` as a bool ``[1]`` from
    ``flags``, ``"reward"`` (float32 ``[1]``) unless ``None`` (a reset), on ``device``.

    Examples:
        >>> out = step_output({"observation": torch.zeros(3)}, ("success", "done"), [True, False], 1.0)
        >>> out["success"].tolist(), out["done"].shape, out["reward"].dtype
        ([True], torch.Size([1]), torch.float32)
    """
    out = dict(entries)
    out.update(zip(flag_keys, torch.tensor(list(flags), dtype=torch.bool).unsqueeze(-1).unbind(0)))
    if reward is not None:
        out["reward"] = torch.tensor([reward], dtype=torch.float32)
    td = TensorDict(out, batch_size=torch.Size([]))
    return td if device is None or torch.device(device).type == "cpu" else td.to(device)


def check_int(owner: str, name: str, value: Any, low: int = 1) -> int:
    """``value`` when it is an int ``>= low``; else a ``ValueError`` naming ``owner.name``.

    Examples:
        >>> check_int("SceneEnv", "frame_size", 64)
        64
        >>> check_int("SceneEnv", "frame_size", 0)
        Traceback (most recent call last):
        ...
        ValueError: SceneEnv.frame_size must be an int >= 1, got frame_size=0.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{owner}.{name} must be an int >= {low}, got {name}={value!r}.")
    return value


class ClipRenderSteps:
    """Which steps of an episode need a frame: those some clip sends to the scorer.

    Clips start at ``0, stride, 2 * stride, ...`` of every trajectory and send the frames at
    ``clip_spec.frame_indices()`` relative to their start. Step ``k`` (``k = 0`` is the reset
    observation) is needed iff ``k = c + p`` for a clip start ``c`` and a frame position ``p``.
    With the outcome frame on (``ClipSpec.final_frame``, the default) the positions run to
    ``clip_len``: a clip's last frame is the observation after its last step. The last step of
    the time limit (``horizon - 1``) is always rendered: tail clips pad with the trajectory's
    last frame; and a :class:`FramedTaskEnv` always renders the observation that ends an episode
    (the last clip's outcome), whatever ``render_steps`` says.

    With ``stride=1`` every step is some clip's frame (no savings); with ``stride=clip_len``
    and ``frames=F`` only ``F`` of every ``clip_len`` steps are rendered.

    Args:
        clip_spec: a :class:`~vlmrb_torchrl.ClipSpec` (or anything with ``clip_len``,
            ``stride`` and ``frame_indices()``).

    Keyword Args:
        horizon (int, optional): the episode time limit. Defaults to ``None``.

    Examples:
        >>> from vlmrb_torchrl import ClipSpec
        >>> need = ClipRenderSteps(ClipSpec(clip_len=8, stride=8, frames=2))
        >>> [k for k in range(20) if need(k)]  # frames 0 and 8 (the outcome) of each clip
        [0, 8, 16]
        >>> need = ClipRenderSteps(ClipSpec(clip_len=8, stride=8, frames=2, final_frame=False))
        >>> [k for k in range(20) if need(k)]
        [0, 7, 8, 15, 16]
    """

    def __init__(self, clip_spec, *, horizon: int | None = None) -> None:
        self.stride = int(clip_spec.stride)
        self.positions = sorted({int(p) for p in clip_spec.frame_indices().tolist()})
        self.horizon = horizon

    def __call__(self, step: int) -> bool:
        if self.horizon is not None and step == self.horizon - 1:
            return True
        return any(p <= step and (step - p) % self.stride == 0 for p in self.positions)


@init_signature
class FramedTaskEnv(EnvBase):
    """A single env of one simulated task whose frames, for a scorer, are rendered only on the steps some
    clip sends to it (``render_steps``) and on the step that ends an episode: the base of
    :class:`~vlmrb_torchrl.envs.RobosuiteEnv` and :class:`~vlmrb_torchrl.envs.SceneEnv`.

    A subclass sets :attr:`FLAG_KEYS` (its event flags, then ``terminated``, ``truncated``, ``done``),
    implements :meth:`render_frame` and :meth:`_close_simulator`, calls :meth:`_make_specs` with its
    observation and action specs, and returns :meth:`_output` from ``_reset`` and ``_step``.

    A subclass whose frames can be drawn from a few numbers of state (:mod:`vlmrb_torchrl.envs._mujoco_state`)
    implements :meth:`frame_state` and :attr:`state_renderer`; built with ``render="state"``, it writes that state
    every step (:data:`FRAME_STATE_KEY`) and renders nothing.

    Keyword Args:
        render (bool or str): write ``"pixels"``; ``"state"``: write :data:`FRAME_STATE_KEY` in its place.
        render_steps (Callable[[int], bool], optional): render only when ``render_steps(step_in_episode)``
            is true (e.g. a :class:`ClipRenderSteps`) and on the step that ends an episode; other steps
            get an all-zero frame. ``None`` renders every step.
        camera (str): the camera the frames come from.
        frame_size (int): frames are ``frame_size`` pixels high.
        max_episode_steps (int, optional): the time limit (``truncated``); ``None``: ``default_max_steps``.
        default_max_steps (int): the env's own time limit.
        terminate_on_success (bool): end the episode (``terminated``) when the task is solved.
        device: device of the outputs.

    Attributes:
        render_count (int): frames rendered since construction (tests, benchmarks).
        frame_shape (tuple of int): ``(height, width, 3)`` of a frame (a subclass may widen it).
    """

    #: The boolean entries :meth:`_output` writes from its ``flags``: the events, then terminated, truncated, done.
    FLAG_KEYS: ClassVar[tuple[str, ...]] = ("terminated", "truncated", "done")

    def __init__(self, *, render: bool | str, render_steps: Callable[[int], bool] | None, camera: str, frame_size: int,
                 max_episode_steps: int | None, default_max_steps: int, terminate_on_success: bool,
                 device: torch.device | str | None) -> None:
        owner = type(self).__name__
        if render not in (True, False, "state"):
            raise ValueError(f"{owner}.render must be True, False or 'state', got render={render!r}.")
        check_int(owner, "frame_size", frame_size)
        max_episode_steps = check_int(owner, "max_episode_steps",
                                      default_max_steps if max_episode_steps is None else max_episode_steps)
        super().__init__(device=device, batch_size=torch.Size([]))
        self.from_pixels = render is True
        self.from_state = render == "state"
        self.render_steps = render_steps
        self.camera = camera
        self.frame_size = frame_size
        self.frame_shape = (frame_size, frame_size, 3)
        self.max_episode_steps = max_episode_steps
        self.terminate_on_success = terminate_on_success
        self.render_count = 0
        self._step_in_episode = 0

    def render_frame(self) -> torch.Tensor:
        """Renders the camera now: uint8 :attr:`frame_shape` (counted in ``render_count``)."""
        raise NotImplementedError

    def frame_state(self) -> np.ndarray:
        """The state the frame of now is drawn from (:attr:`state_renderer`): float64 ``[S]``."""
        raise NotImplementedError(f"{type(self).__name__} does not draw its frames from state; use render=True.")

    @property
    def state_renderer(self) -> Any:
        """ψ: what draws this env's frames from the states :meth:`frame_state` gives (``render="state"`` writes
        them); ``None`` where the env cannot."""
        return None

    def _close_simulator(self) -> None:
        """Frees the simulator (and its renderer)."""

    def _make_specs(self, observation: dict[str, Any], action_spec: Any) -> None:
        """The specs: ``observation`` (the agent's entries), ``"pixels"`` when rendering (the frame state with
        ``render="state"``), the event flags, ``action_spec``, a float reward and the done flags."""
        obs = dict(observation)
        if self.from_pixels:
            obs["pixels"] = Bounded(0, 255, shape=self.frame_shape, dtype=torch.uint8, device=self.device)
        if self.from_state:
            obs[FRAME_STATE_KEY] = Unbounded(shape=self.frame_state().shape, dtype=torch.float64, device=self.device)
        for key in self.FLAG_KEYS[:-3]:
            obs[key] = flag_spec(device=self.device)
        self.observation_spec = Composite(obs, shape=(), device=self.device)
        self.action_spec = action_spec
        self.reward_spec = Unbounded(shape=(1,), dtype=torch.float32, device=self.device)
        self.done_spec = done_spec(device=self.device)

    def _output(self, entries: dict[str, torch.Tensor], flags: Sequence[bool], reward: float | None, *,
                ends_episode: bool = False) -> TensorDictBase:
        """One step's output: ``entries``, the frame (rendered when a clip needs it or the episode ends,
        else zeros; with ``render="state"`` the frame state, every step), the flags (:attr:`FLAG_KEYS`) and the reward."""
        if self.from_state:
            entries = {**entries, FRAME_STATE_KEY: torch.from_numpy(self.frame_state())}
        if self.from_pixels:
            if ends_episode or self.render_steps is None or self.render_steps(self._step_in_episode):
                entries = {**entries, "pixels": self.render_frame()}
            else:
                entries = {**entries, "pixels": torch.zeros(self.frame_shape, dtype=torch.uint8)}
        return step_output(entries, self.FLAG_KEYS, flags, reward, self.device)

    def close(self, *, raise_if_closed: bool = True) -> None:
        self._close_simulator()
        super().close(raise_if_closed=raise_if_closed)


def random_arm_action(plan: dict[str, Any], rng: np.random.Generator, *, size: int, burst_prob: float,
                      scale: np.ndarray | None = None) -> np.ndarray | None:
    """What the scripted arm policies (robosuite Lift, OGBench Scene) share: a burst of 3-15 uniform random
    actions (started with probability ``burst_prob`` per step in scripted episodes), or, in a random-motion
    episode (``plan["mode"] == "random"``), a smoothed random walk of the arm (an Ornstein-Uhlenbeck process
    in ``plan["ou"]``, times ``scale``) with the gripper (the last action) toggled now and then; ``None``
    when the script acts. ``plan`` holds ``mode``, ``burst``, ``ou`` and ``gripper``, updated in place.

    Examples:
        >>> plan = {"mode": "random", "burst": 0, "ou": np.zeros(3), "gripper": -1.0}
        >>> action = random_arm_action(plan, np.random.default_rng(0), size=3, burst_prob=0.0)
        >>> action.shape, action[-1] == plan["gripper"]  # the gripper: toggled now and then
        ((3,), True)
        >>> random_arm_action({**plan, "mode": "scripted"}, np.random.default_rng(0), size=3, burst_prob=0.0) is None
        True
    """
    if plan["burst"] > 0 or (plan["mode"] != "random" and rng.random() < burst_prob):
        plan["burst"] = plan["burst"] - 1 if plan["burst"] > 0 else int(rng.integers(3, 16))
        return rng.uniform(-1.0, 1.0, size)
    if plan["mode"] != "random":
        return None
    plan["ou"] += 0.15 * (-plan["ou"]) + 0.35 * rng.normal(size=size)
    if rng.random() < 0.04:
        plan["gripper"] = -plan["gripper"]
    action = np.clip(plan["ou"], -1.0, 1.0)
    if scale is not None:
        action = action * scale
    action[-1] = plan["gripper"]
    return action
