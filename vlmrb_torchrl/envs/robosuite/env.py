"""robosuite manipulation for VLM-RB: state observations for the agent, camera frames for the VLM.

The agent sees proprioception + object state (robosuite's ``*-state`` observables, flattened,
float32); the scorer sees a low-resolution offscreen camera frame, rendered only on the steps
whose frames some clip sends to the scorer (see :class:`ClipRenderSteps`). Privileged events
(gripper grasping the task object, object lifted, task success) feed ``oracle:robosuite``.

robosuite is an optional dependency (``pip install 'vlmrb-torchrl[robosuite]'``: robosuite
1.5.x with ``mujoco>=3.3,<3.4``; newer mujoco 3.x releases break robosuite 1.5.2's joint
lookup). Offscreen rendering uses ``MUJOCO_GL=egl`` unless the variable is already set.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Unbounded

from vlmrb_torchrl._signature import init_signature
from vlmrb_torchrl.envs._base import FramedTaskEnv
from vlmrb_torchrl.envs._mujoco_state import MujocoStateRenderer, StateLayout, model_patch, visual_settings

__all__ = ["RobosuiteEnv", "make_robosuite_env", "ROBOSUITE_EVENT_KEYS", "CameraView", "SplitView", "PanelView",
           "ROBOSUITE_VIEWS", "RobosuiteStateRenderer"]

os.environ.setdefault("MUJOCO_GL", "egl")

_has_robosuite = importlib.util.find_spec("robosuite") is not None

MISSING_ROBOSUITE = (
    "robosuite environments need robosuite, which is not installed: pip install 'vlmrb-torchrl[robosuite]' "
    "(robosuite>=1.5,<1.6 with mujoco>=3.3,<3.4)"
)

#: Boolean per-step event entries written by :class:`RobosuiteEnv` (``("next", key)`` in
#: collector data). ``"progress_event"`` is the OR of the others.
ROBOSUITE_EVENT_KEYS = ("grasping", "lifted", "success", "progress_event")

#: The object whose grasp / lift the events track, by task (attribute of the robosuite env).
#: Door: the handle is grasped, nothing is lifted. Other tasks: only ``success`` fires.
_TASK_OBJECTS = {"Lift": "cube", "Stack": "cubeA", "Door": "door"}


@dataclasses.dataclass(frozen=True)
class CameraView:
    """A camera placed by where it looks: MuJoCo's free camera aimed at ``lookat`` from ``distance``.

    The camera sits at ``lookat - distance * (cos(el) cos(az), cos(el) sin(az), sin(el))`` (degrees,
    world frame) and looks at ``lookat``; ``elevation < 0`` looks down. Rendering one changes no
    camera of the robosuite model (a free camera is MuJoCo's ``mjCAMERA_FREE``, drawn with the
    model's ``vis.global_.fovy``, which :class:`RobosuiteEnv` sets to ``fovy`` before drawing).

    Attributes:
        lookat (tuple of float): the point looked at (m, world frame).
        distance (float): camera-to-``lookat`` distance (m).
        azimuth (float): heading (degrees); 180 looks along ``-x``, from in front of the table.
        elevation (float): pitch (degrees).
        fovy (float): vertical field of view (degrees).

    Examples:
        >>> view = ROBOSUITE_VIEWS["front_close"]
        >>> x, y, z = view.position()  # 45 cm in front of the cube's start (x = 0, y = 0), 12 cm above the aim
        >>> round(float(x), 3), abs(round(float(y), 3)), round(float(z), 3)
        (0.435, 0.0, 0.976)
    """

    lookat: tuple[float, float, float]
    distance: float
    azimuth: float
    elevation: float
    fovy: float = 45.0

    def position(self) -> np.ndarray:
        """The camera's position (m, world frame)."""
        az, el = np.radians(self.azimuth), np.radians(self.elevation)
        forward = np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
        return np.asarray(self.lookat, dtype=np.float64) - self.distance * forward


@dataclasses.dataclass(frozen=True)
class SplitView:
    """One frame made of several cameras' views side by side: each :class:`CameraView` drawn into an equal
    vertical strip of the frame, left to right.

    A strip keeps its camera's vertical field of view, so it is the middle of that camera's square frame at the
    same scale: two strips of a 64-px frame are each 32 px wide, 64 high. What one camera cannot tell apart (an
    offset along its line of sight) shows in another's strip, and the frame stays one image of the usual size
    for a scorer that reads one image per step.

    Attributes:
        panels (tuple of CameraView): the cameras, left to right; the frame's width must be a multiple of
            their number.

    Examples:
        >>> view = ROBOSUITE_VIEWS["front_side_close"]
        >>> len(view.panels), view.strip_widths(64)
        (2, [32, 32])
    """

    panels: tuple[CameraView, ...]

    def strip_widths(self, frame_size: int) -> list[int]:
        """The width of each panel's strip in a ``frame_size`` frame (``frame_size`` must divide evenly)."""
        if not self.panels or frame_size % len(self.panels):
            raise ValueError(f"SplitView: a {frame_size}-px frame does not split into {len(self.panels)} equal "
                             "strips; use a frame_size that is a multiple of the number of panels.")
        return [frame_size // len(self.panels)] * len(self.panels)


@dataclasses.dataclass(frozen=True)
class PanelView:
    """One frame made of several cameras' full pictures side by side: each panel a ``frame_size`` square,
    left to right, so a frame is ``[frame_size, len(panels) * frame_size, 3]``.

    Unlike :class:`SplitView` (strips of one square frame), every camera keeps its whole picture at the
    frame's resolution; a scorer that reads the panels apart (:class:`~vlmrb_torchrl.scorers.PanelScorer`)
    sees each one as if it were that camera's own frame. A panel is a :class:`CameraView` or the name of a
    camera of the robosuite model (e.g. ``"robot0_eye_in_hand"``, which moves with the gripper).

    Attributes:
        panels (tuple of CameraView or str): the cameras, left to right.

    Examples:
        >>> view = ROBOSUITE_VIEWS["front_close+eye_in_hand"]
        >>> view.panels[1], view.frame_shape(64)
        ('robot0_eye_in_hand', (64, 128, 3))
    """

    panels: tuple[CameraView | str, ...]

    def frame_shape(self, frame_size: int) -> tuple[int, int, int]:
        """``(height, width, 3)`` of a frame whose panels are ``frame_size`` squares."""
        return frame_size, len(self.panels) * frame_size, 3


_FRONT_CLOSE = CameraView(lookat=(0.0, 0.0, 0.86), distance=0.45, azimuth=180.0, elevation=-15.0, fovy=45.0)
_SIDE_CLOSE = dataclasses.replace(_FRONT_CLOSE, azimuth=270.0)

#: Cameras :class:`RobosuiteEnv` renders besides the model's own, by name. ``"front_close"``: in
#: front of the table, 45 cm from the point 6 cm above the table's centre (where Lift's cube starts,
#: within 3 cm), 12 cm above it, 45° field of view. At 64 px the cube is ~8 px wide and a 5 cm lift
#: moves it ~10 px against the fixed table edge; in ``agentview`` the fingers hide the cube and a
#: lift moves it a few pixels. ``"front_close_narrow"``: the same camera with a 30° field of view (the
#: cube and the fingers 1.5x larger, a lift of 12 cm still in the frame); ``builtin:lift`` builds on it
#: (8-px and 4-px patches) were not better (studies/builtin_scorer_builds.md), it stays for rebuilds that compare
#: cameras. ``"side_close"``: ``front_close`` turned 90° about the cube, on the table's side (``+y``),
#: looking across the arm's reach.
#: ``"front_side_close"``: a :class:`SplitView`, the middle strips of ``front_close`` (left) and
#: ``side_close`` (right), each at its own camera's scale: a grasp aimed beside the cube along one camera's
#: line of sight shows in the other's strip; a ``builtin:lift`` built on it had fewer false positives and more
#: misses, not better (studies/builtin_scorer_builds.md), it stays for rebuilds that compare cameras.
#: ``"front_close+eye_in_hand"``: a :class:`PanelView`, ``front_close`` (left) and the gripper's own camera
#: ``robot0_eye_in_hand`` (right), each a full square: what ``builtin:lift`` reads (a model per panel; the hand
#: camera sees whether the cube sits between the finger pads, the front one sees the cube rise). A frame is
#: ``[frame_size, 2 * frame_size, 3]``.
ROBOSUITE_VIEWS: dict[str, CameraView | SplitView | PanelView] = {
    "front_close": _FRONT_CLOSE,
    "front_close_narrow": dataclasses.replace(_FRONT_CLOSE, fovy=30.0),
    "side_close": _SIDE_CLOSE,
    "front_side_close": SplitView((_FRONT_CLOSE, _SIDE_CLOSE)),
    "front_close+eye_in_hand": PanelView((_FRONT_CLOSE, "robot0_eye_in_hand")),
}


def _import_robosuite():
    if not _has_robosuite:
        raise ImportError(MISSING_ROBOSUITE)
    import logging

    import robosuite

    logging.getLogger("robosuite_logs").setLevel(logging.ERROR)
    return robosuite


@init_signature
class RobosuiteEnv(FramedTaskEnv):
    """TorchRL environment for a robosuite task (Panda arm, default OSC controller).

    Args:
        task (str): any robosuite environment name (``"Lift"``, ``"Stack"``, ``"Door"``, ...).
            Defaults to ``"Lift"``.

    Keyword Args:
        robots (str): robot name. Defaults to ``"Panda"``.
        seed (int, optional): seed of the robosuite env (object placement). Defaults to ``None``.
        render (bool or str): write ``"pixels"``; ``"state"``: write, in their place, the positions the frame
            is drawn from (``"frame_state"``, float64 ``[nq + 7 * nmocap]``), which :attr:`state_renderer` turns
            into the same pixels where the scorer runs (needs ``hard_reset=False``, the default). Defaults to
            ``False``.
        render_steps (Callable[[int], bool], optional): render only when
            ``render_steps(step_in_episode)`` is true (e.g. a :class:`ClipRenderSteps`) and on
            the step that ends an episode (the last clip's outcome frame); other steps get an
            all-zero frame. ``None`` renders every step. Defaults to ``None``.
        camera (str): offscreen camera: one of the model's (``"agentview"``, ``"frontview"``,
            ``"sideview"``, ``"birdview"``, ``"robot0_eye_in_hand"``, ...) or of
            :data:`ROBOSUITE_VIEWS` (``"front_close"``: close in front of Lift's cube, where a lift is
            plain). Defaults to ``"agentview"``.
        frame_size (int): frames are ``[frame_size, frame_size, 3]`` uint8 (a :class:`PanelView`:
            ``[frame_size, n * frame_size, 3]``, one square per panel). Defaults to ``64``.
        fast_render (bool): render without reflections, shadows and multisampling, into an offscreen
            buffer of the frame's size (:mod:`vlmrb_torchrl.envs._mujoco_render`): ~4x cheaper frames
            on a CPU, aliased edges, no shadows. ``False`` renders robosuite's default image.
            Defaults to ``True``.
        max_episode_steps (int): time limit (``truncated``). Defaults to ``500``.
        reward_shaping (bool): robosuite's dense shaped reward instead of the sparse success
            reward (1 on success steps). Defaults to ``False``.
        terminate_on_success (bool): end the episode (``terminated``) on success. Defaults to
            ``True``.
        lift_height (float): ``lifted`` fires when the object is this far (m) above its height
            at reset. Defaults to ``0.03``.
        control_freq (int): controller frequency (Hz). Defaults to ``20``.
        device: device of the outputs. Defaults to ``"cpu"``.
        env_kwargs (dict, optional): extra ``robosuite.make`` keyword arguments.

    Entries written (``batch_size=[]``):

    - ``"observation"``: float32 ``[D]``: robosuite's ``robot0_proprio-state`` then
      ``object-state`` (Lift: 50 + 10 = 60).
    - ``"pixels"`` (``render=True``): uint8 ``[frame_size, frame_size, 3]``, upright (a
      :class:`PanelView`: ``[frame_size, n * frame_size, 3]``).
    - ``"frame_state"`` (``render="state"``): float64 ``[nq + 7 * nmocap]`` (:meth:`frame_state`).
    - ``"grasping"``, ``"lifted"``, ``"success"``, ``"progress_event"``: bool ``[1]``,
      *state* flags of the current step: the gripper grasps the task object (robosuite's
      ``_check_grasp``), the object is ``lift_height`` above its reset height, the task's own
      ``_check_success()``; ``progress_event`` is their OR.
    - ``"reward"`` float32 ``[1]``, ``"done"``, ``"terminated"``, ``"truncated"`` bool ``[1]``.

    Attributes:
        render_count (int): frames rendered since construction (tests, benchmarks).

    Examples:
        >>> env = RobosuiteEnv("Lift", seed=0, render=True, frame_size=32, max_episode_steps=20)
        >>> td = env.rollout(3)  # random actions
        >>> td["observation"].shape, td["next", "pixels"].shape, td["next", "pixels"].dtype
        (torch.Size([3, 60]), torch.Size([3, 32, 32, 3]), torch.uint8)
        >>> td["next", "progress_event"].any().item()  # random arm motions grasp nothing
        False
        >>> env.close()
    """

    def __init__(
        self,
        task: str = "Lift",
        *,
        robots: str = "Panda",
        seed: int | None = None,
        render: bool = False,
        render_steps: Callable[[int], bool] | None = None,
        camera: str = "agentview",
        frame_size: int = 64,
        fast_render: bool = True,
        max_episode_steps: int | None = 500,
        reward_shaping: bool = False,
        terminate_on_success: bool = True,
        lift_height: float = 0.03,
        control_freq: int = 20,
        device: torch.device | str | None = "cpu",
        env_kwargs: dict | None = None,
    ) -> None:
        suite = _import_robosuite()
        super().__init__(render=render, render_steps=render_steps, camera=camera, frame_size=frame_size,
                         max_episode_steps=max_episode_steps, default_max_steps=500,
                         terminate_on_success=terminate_on_success, device=device)
        max_episode_steps = self.max_episode_steps
        self.task = task
        self.fast_render = bool(fast_render)
        self._render_context = None  # robosuite's offscreen context, once set up for this env's frames
        self.lift_height = lift_height
        kwargs = dict(
            robots=robots, has_renderer=False, has_offscreen_renderer=self.from_pixels, use_camera_obs=False,
            use_object_obs=True, reward_shaping=reward_shaping, reward_scale=1.0, control_freq=control_freq,
            horizon=max_episode_steps, ignore_done=True, hard_reset=False, seed=seed,
        )
        kwargs.update(env_kwargs or {})
        if task not in suite.ALL_ENVIRONMENTS:
            raise ValueError(
                f"RobosuiteEnv: unknown task={task!r}; robosuite tasks: {sorted(suite.ALL_ENVIRONMENTS)}."
            )
        self._env = suite.make(task, **kwargs)
        cameras = list(self._env.sim.model.camera_names)
        if camera not in cameras and camera not in ROBOSUITE_VIEWS:
            self._env.close()
            raise ValueError(f"RobosuiteEnv: unknown camera={camera!r}; {task}'s cameras: {cameras}, "
                             f"and views placed by this package: {sorted(ROBOSUITE_VIEWS)}.")
        view = ROBOSUITE_VIEWS.get(camera)  # as render_frame reads it: a view placed here before a model camera
        if isinstance(view, SplitView):
            try:
                view.strip_widths(frame_size)
            except ValueError as err:
                self._env.close()
                raise ValueError(f"RobosuiteEnv: camera={camera!r}: {err}") from None
        missing = [p for p in getattr(view, "panels", ()) if isinstance(p, str) and p not in cameras]
        if missing:
            self._env.close()
            raise ValueError(f"RobosuiteEnv: camera={camera!r} draws {missing}, which {task}'s model does not have "
                             f"(its cameras: {cameras}).")
        if isinstance(view, PanelView):
            self.frame_shape = view.frame_shape(frame_size)
        if self.from_state and self._env.hard_reset:
            self._env.close()
            raise ValueError("RobosuiteEnv(render='state') needs hard_reset=False: with hard_reset=True robosuite "
                             "rebuilds the model at every reset (Lift draws a new cube size), which a stored state "
                             "does not hold; use render=True.")
        model = self._env.sim.model._model
        self._state_layout = StateLayout(model.nq, model.nmocap)
        self._state_renderer: RobosuiteStateRenderer | None = None
        self._kinematic_positions: np.ndarray | None = None  # None: the kinematics are at qpos (after a reset)
        self._record_kinematic_positions()
        self._object_z0: float | None = None
        obs = self._env.reset()
        self._state_keys = [k for k in obs if k.endswith("-state")]
        self._specs(self._obs(obs).shape[0])

    # ------------------------------------------------------------------ specs
    #: The flags :meth:`_output` writes: the events, then terminated, truncated, done.
    FLAG_KEYS = (*ROBOSUITE_EVENT_KEYS, "terminated", "truncated", "done")

    def _specs(self, obs_dim: int) -> None:
        low, high = self._env.action_spec
        self._make_specs({"observation": Unbounded(shape=(obs_dim,), dtype=torch.float32, device=self.device)},
                         Bounded(torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32),
                                 shape=(len(low),), dtype=torch.float32, device=self.device))

    @property
    def unwrapped(self):
        """The robosuite environment."""
        return self._env

    # ------------------------------------------------------------------ core
    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._env.rng = np.random.default_rng(int(seed))
            initializer = getattr(self._env, "placement_initializer", None)
            if initializer is not None and hasattr(initializer, "rng"):
                initializer.rng = self._env.rng
            torch.manual_seed(int(seed))  # for rand_action / random exploration in this process

    def _obs(self, obs: dict) -> np.ndarray:
        return np.concatenate([np.asarray(obs[k], dtype=np.float32).ravel() for k in self._state_keys])

    def _object_z(self) -> float | None:
        name = _TASK_OBJECTS.get(self.task)
        obj = getattr(self._env, name, None) if name else None
        if obj is None or self.task == "Door":
            return None
        return float(self._env.sim.data.body_xpos[self._env.sim.model.body_name2id(obj.root_body)][2])

    def events(self) -> tuple[bool, bool, bool]:
        """``(grasping, lifted, success)`` now: the event flags :meth:`step` writes (see the class docstring)."""
        env = self._env
        name = _TASK_OBJECTS.get(self.task)
        obj = getattr(env, name, None) if name else None
        grasping = False
        if obj is not None:
            geoms = getattr(obj, "important_geoms", {}).get("handle", obj) if self.task == "Door" else obj
            grasping = bool(env._check_grasp(gripper=env.robots[0].gripper, object_geoms=geoms))
        z = self._object_z()
        lifted = z is not None and self._object_z0 is not None and z > self._object_z0 + self.lift_height
        return grasping, bool(lifted), bool(env._check_success())

    def _prepare_render_context(self) -> None:
        """Makes this env's GL context current (robosuite makes a context current only when it creates it,
        so with several envs in a process the last one built stays current) and, with ``fast_render``, sets
        the context up once for cheap frames."""
        context = self._env.sim._render_context_offscreen
        context.gl_ctx.make_current()
        if context is self._render_context:
            return
        if self.fast_render:
            _fast_context(context, self.frame_size)
        self._render_context = context

    def render_frame(self) -> torch.Tensor:
        """Renders the camera now: uint8 ``frame_shape`` (counted in ``render_count``)."""
        self._prepare_render_context()
        img = _render_view(self._env.sim, ROBOSUITE_VIEWS.get(self.camera, self.camera), self.frame_size)
        self.render_count += 1
        return torch.from_numpy(np.ascontiguousarray(img[::-1]))

    # ------------------------------------------------------------------ frames from state (ψ)
    def _record_kinematic_positions(self) -> None:
        """Keeps the positions each physics step starts from: a robosuite step ends with ``mj_step`` (or, with
        ``lite_physics``, ``mj_step2``), which leaves the kinematics (what a frame shows) at the positions *before*
        its last integration, one physics step behind ``qpos``. :meth:`frame_state` stores those."""
        sim = self._env.sim
        for name in ("step", "step2"):
            original = getattr(sim, name)

            def stepped(*args, _original=original, **kwargs):
                self._kinematic_positions = self._state_layout.positions(sim.data._data)
                return _original(*args, **kwargs)

            setattr(sim, name, stepped)

    def frame_state(self) -> np.ndarray:
        """The state this env's frame of now is drawn from: float64 ``[nq + 7 * nmocap]`` (Lift: 30), the positions
        the simulator's kinematics were computed from (:class:`~vlmrb_torchrl.envs._mujoco_state.StateLayout`)."""
        sim = self._env.sim
        return self._state_layout.encode(sim.model._model, sim.data._data, self._kinematic_positions)

    @property
    def state_renderer(self) -> RobosuiteStateRenderer | None:
        """ψ: the :class:`RobosuiteStateRenderer` that draws this env's frames from :meth:`frame_state` (what
        ``render="state"`` writes), whatever ``render`` it was built with; ``None`` with ``hard_reset=True`` (the
        model, and Lift's cube size, is drawn anew at every reset)."""
        if self._env.hard_reset:
            return None
        if self._state_renderer is None:
            import mujoco

            env, model = self._env, self._env.sim.model._model
            xml = env.model.get_xml()
            for processor in env._xml_processors:  # as robosuite's _initialize_sim compiles it
                xml = processor(xml)
            vopt = np.array(mujoco.MjvOption().geomgroup)  # as robosuite sets its offscreen context's
            vopt[0], vopt[1] = int(env.render_collision_mesh), int(env.render_visual_mesh)
            self._state_renderer = RobosuiteStateRenderer(
                xml, model_patch(model, mujoco.MjModel.from_xml_string(xml)), visual_settings(model), self._state_layout,
                self.frame_shape, camera=self.camera, frame_size=self.frame_size, fast_render=self.fast_render,
                geomgroup=tuple(int(g) for g in vopt), device_id=int(env.render_gpu_device_id))
        return self._state_renderer

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        obs = self._env.reset()
        self._kinematic_positions = None  # robosuite's reset ends with mj_forward
        self._step_in_episode = 0
        self._object_z0 = self._object_z()
        return self._output({"observation": torch.from_numpy(self._obs(obs))}, [False] * len(self.FLAG_KEYS), None)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action").detach().cpu().numpy().astype(np.float64)
        obs, reward, _, _ = self._env.step(action)
        self._step_in_episode += 1
        grasping, lifted, success = self.events()
        terminated = success and self.terminate_on_success
        truncated = self._step_in_episode >= self.max_episode_steps
        progress = grasping or lifted or success
        flags = [grasping, lifted, success, progress, terminated, truncated, terminated or truncated]
        return self._output({"observation": torch.from_numpy(self._obs(obs))}, flags, float(reward),
                            ends_episode=terminated or truncated)

    def _close_simulator(self) -> None:
        env = self.__dict__.get("_env")
        if env is not None:
            env.close()

    def __repr__(self) -> str:
        render = "'state'" if self.from_state else self.from_pixels
        return f"{type(self).__name__}(task={self.task!r}, render={render}, camera={self.camera!r})"


def _fast_context(context, frame_size: int) -> None:
    """Sets robosuite's offscreen ``context`` up for cheap ``frame_size`` frames: no multisampling, a buffer of the
    frame's size (the ``MjrContext`` is made anew to read them), no reflections or shadows."""
    from vlmrb_torchrl.envs._mujoco_render import disable_costly_effects, fast_offscreen_model

    fast_offscreen_model(context.model._model, width=frame_size, height=frame_size)
    context.con.free()
    context._set_mujoco_context_and_buffers()  # MjrContext reads multisampling and buffer size when made
    disable_costly_effects(context.scn)


def _render_view(sim, view: CameraView | SplitView | PanelView | str, frame_size: int) -> np.ndarray:
    """Renders ``view`` with ``sim``'s offscreen context: a camera of the robosuite model (its name) by
    ``sim.render``, a :class:`CameraView` with the context's free camera (what ``sim.render`` does for a named
    one), a :class:`SplitView` one strip per panel, a :class:`PanelView` one square per panel; bottom-up rows as
    ``read_pixels`` gives them."""
    if isinstance(view, str):
        return sim.render(camera_name=view, width=frame_size, height=frame_size)
    if isinstance(view, PanelView):
        return np.concatenate([_render_view(sim, panel, frame_size) for panel in view.panels], axis=1)
    import mujoco
    from robosuite.utils.binding_utils import _MjSim_render_lock  # the lock sim.render holds

    context = sim._render_context_offscreen
    if isinstance(view, SplitView):
        panels, widths = view.panels, view.strip_widths(frame_size)
    else:
        panels, widths = (view,), [frame_size]
    strips = []
    with _MjSim_render_lock:
        for panel, width in zip(panels, widths):
            context.cam.type = mujoco.mjtCamera.mjCAMERA_FREE
            context.cam.lookat[:] = panel.lookat
            context.cam.distance, context.cam.azimuth, context.cam.elevation = (panel.distance, panel.azimuth,
                                                                                panel.elevation)
            context.model._model.vis.global_.fovy = panel.fovy  # the free camera's (vertical) field of view
            context.render(width=width, height=frame_size, camera_id=-1)
            strips.append(context.read_pixels(width, frame_size))
    return strips[0] if len(strips) == 1 else np.concatenate(strips, axis=1)


class RobosuiteStateRenderer(MujocoStateRenderer):
    """ψ for robosuite: draws the frames a :class:`RobosuiteEnv` renders from the states it writes with
    ``render="state"`` (:data:`~vlmrb_torchrl.envs.FRAME_STATE_KEY`, float64 ``[nq + 7 * nmocap]``, 240 bytes on
    Lift where a ``front_close+eye_in_hand`` frame is 24,576), pixel for pixel (tested on Lift's cameras).

    A :class:`~vlmrb_torchrl.StateRenderer`: get it from :attr:`RobosuiteEnv.state_renderer`. It carries the
    model's XML (meshes are read from robosuite's files where it renders) and what the env changed after
    compiling it; where it renders, it builds robosuite's own offscreen context (one per thread) with the env's
    geom groups and, with ``fast_render``, the env's cheap settings, and draws the env's camera or view.

    Keyword Args:
        camera (str): the env's camera (a model camera or a :data:`ROBOSUITE_VIEWS` name).
        frame_size (int): the env's frame size.
        fast_render (bool): the env's ``fast_render``.
        geomgroup (tuple of int): the env's offscreen ``vopt.geomgroup``.
        device_id (int): the EGL device, as the env's ``render_gpu_device_id``. Defaults to ``-1``.

    Examples:
        >>> env = RobosuiteEnv("Lift", seed=0, render="state", frame_size=32, max_episode_steps=20)
        >>> psi, state = env.state_renderer, env.rollout(2)["next", "frame_state"]
        >>> state.shape, psi(state).shape
        (torch.Size([2, 30]), torch.Size([2, 32, 32, 3]))
        >>> env.close()
    """

    def __init__(self, xml: str, patch: dict, vis: dict, layout: StateLayout, frame_shape: tuple[int, int, int], *,
                 camera: str, frame_size: int, fast_render: bool, geomgroup: tuple[int, ...],
                 device_id: int = -1) -> None:
        super().__init__(xml, patch, vis, layout, frame_shape)
        self.camera, self.frame_size, self.fast_render = camera, int(frame_size), bool(fast_render)
        self.geomgroup, self.device_id = tuple(geomgroup), int(device_id)

    def _make_context(self, model) -> Any:
        _import_robosuite()
        from robosuite.utils.binding_utils import MjRenderContextOffscreen, MjSim

        sim = MjSim(model)
        context = MjRenderContextOffscreen(sim, device_id=self.device_id)
        context.vopt.geomgroup[:] = self.geomgroup
        if self.fast_render:
            _fast_context(context, self.frame_size)
        return sim

    def _data(self, context: Any):
        return context.data._data

    def _render(self, context: Any) -> np.ndarray:
        context._render_context_offscreen.gl_ctx.make_current()
        return _render_view(context, ROBOSUITE_VIEWS.get(self.camera, self.camera), self.frame_size)[::-1]


def make_robosuite_env(task: str = "Lift", **kwargs: Any) -> RobosuiteEnv:
    """Builds a :class:`RobosuiteEnv` (keyword arguments as there); picklable via ``functools.partial``.

    ``task`` may carry the recipe prefix: ``"robosuite/Lift"`` and ``"Lift"`` are the same.

    Examples:
        >>> import functools
        >>> from torchrl.envs import SerialEnv
        >>> env = SerialEnv(2, functools.partial(make_robosuite_env, "robosuite/Lift", max_episode_steps=20))
        >>> env.reset()["observation"].shape  # two copies, 60 state inputs each
        torch.Size([2, 60])
        >>> env.close()
    """
    if task.startswith("robosuite/"):
        task = task.split("/", 1)[1]
    kwargs.pop("train", None)
    return RobosuiteEnv(task, **kwargs)
