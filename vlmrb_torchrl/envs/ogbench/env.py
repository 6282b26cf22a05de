"""OGBench Scene for VLM-RB: the 40-dim state for the agent, the env's own camera for the VLM.

OGBench's Scene (Park et al., 2025; the paper's robotic domain): a UR5e arm with a Robotiq
gripper, a cube, two buttons, a drawer and a window. Each button toggles a lock: button 0 the
drawer's, button 1 the window's (a locked handle is drawn red, an unlocked one white). A task
is a goal configuration of five *subgoals*: the cube on its target, each button in its goal
state, the drawer and the window at their goal positions. The five single tasks:

====  ==================  ==============================================================
task  name                from the start to the goal
====  ==================  ==============================================================
1     open                open the drawer and the window (both unlocked)
2     unlock_and_lock     unlock both, close the drawer and the window, lock both again
3     rearrange_medium    move the cube 20 cm, unlock and close the window, open the drawer
4     put_in_drawer       unlock and open the drawer, put the cube in it, close it
5     rearrange_hard      task 4 and lock the drawer again; unlock, open and relock the window
====  ==================  ==============================================================

The paper's Scene-3/4/5 are tasks 3/4/5 (``scene-singletask-task{3,4,5}-v0``).

The agent sees OGBench's 40-dim state observation (float32); the scorer sees the env's own
``front_pixels`` camera (the one OGBench's pixel-based Scene renders: the arm drawn
transparent so that nothing hides behind it), rendered cheaply (shadows, reflections and
multisampling off: ~20 ms instead of ~219 ms at 64 px) and only on the steps some clip sends
to the scorer (``render_steps``). The frames keep OGBench's task visualisation (the state-based
env's ``visualize_info``): the cube's target drawn as a faint cube, and the cube lighter once it
sits on it.

A seed determines every episode, bit for bit: OGBench settles the scene at each reset with two
random actions, drawn here from a generator seeded with the env (they leave the constraint
solver's warm start in the state the episode starts from; see ``_seeded_scene_class``).

Reward, success and termination are OGBench's: the reward is the number of satisfied subgoals
minus 5 (``-5 .. 0``), the episode ends when the task is solved, and both are computed from the
state *before* the action (OGBench's ``success_timing="pre"`` for single tasks), so the episode
ends on the step after the one that solves the task. ``reward="success"`` makes it sparse:
``0`` when solved, ``-1`` otherwise. Privileged events, per step, from the state *after* it,
feed ``oracle:ogbench``: a subgoal becoming satisfied, and the task solved.

OGBench is an optional dependency (``pip install 'vlmrb-torchrl[ogbench]'``: ogbench with
MuJoCo 3.3.x, next to robosuite; no dataset is downloaded). Offscreen rendering uses
``MUJOCO_GL=egl`` unless the variable is already set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Unbounded

from vlmrb_torchrl._signature import init_signature
from vlmrb_torchrl.envs._base import FramedTaskEnv
from vlmrb_torchrl.envs._mujoco_state import MujocoStateRenderer, StateLayout, model_patch, visual_settings
from vlmrb_torchrl.envs.ogbench import scene_task

__all__ = ["SceneEnv", "SceneStateRenderer", "make_ogbench_env", "scene_task", "SCENE_TASKS", "SCENE_SUBGOALS", "OGBENCH_EVENT_KEYS"]

os.environ.setdefault("MUJOCO_GL", "egl")

_has_ogbench = importlib.util.find_spec("ogbench") is not None

MISSING_OGBENCH = (
    "OGBench environments need ogbench, which is not installed: pip install 'vlmrb-torchrl[ogbench]' "
    "(ogbench>=1.2 with mujoco>=3.3,<3.4)"
)

#: Scene's single tasks by number: OGBench's task names.
SCENE_TASKS: dict[int, str] = {1: "open", 2: "unlock_and_lock", 3: "rearrange_medium", 4: "put_in_drawer",
                               5: "rearrange_hard"}

#: Scene's subgoals, in OGBench's order: the cube on its target, button 0 (the drawer's lock) and
#: button 1 (the window's lock) in their goal states, the drawer and the window at their goal
#: positions (within 4 cm).
SCENE_SUBGOALS = ("cube", "button_0", "button_1", "drawer", "window")

#: Boolean per-step event entries written by :class:`SceneEnv` (``("next", key)`` in collector
#: data): ``"<subgoal>_achieved"`` when that subgoal becomes satisfied on the step, ``"success"``
#: while the task is solved, ``"progress_event"`` their OR (what ``oracle:ogbench`` reads).
OGBENCH_EVENT_KEYS = (*(f"{name}_achieved" for name in SCENE_SUBGOALS), "success", "progress_event")

#: The looks of OGBench's pixel-based Scene (``visual-scene-*``): the gripper's dark parts purple,
#: the arm drawn transparent (alpha per material).
_PIXEL_ARM = {
    "ur5e/robotiq/metal": 0.1, "ur5e/robotiq/silicone": 0.1, "ur5e/robotiq/gray": 0.1, "ur5e/robotiq/black": 0.1,
    "ur5e/robotiq/pad_gray": 0.5, "ur5e/black": 0.1, "ur5e/jointgray": 0.1, "ur5e/linkgray": 0.1,
    "ur5e/lightblue": 0.1,
}
_PURPLE = (0.61, 0.28, 0.82)
_REWARDS = ("subgoals", "success")


def _import_ogbench():
    if not _has_ogbench:
        raise ImportError(MISSING_OGBENCH)
    import gymnasium
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import ogbench  # noqa: F401  (registers the scene-* ids)
    return gymnasium


@contextlib.contextmanager
def _quiet():
    """Silences gymnasium's note that OGBench's float64 action bounds become float32 (OGBench builds
    a new ``action_space`` at construction and at each reset)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32", category=UserWarning)
        yield


@functools.cache
def _seeded_scene_class() -> type:
    """OGBench's ``SceneEnv`` whose resets are determined by their seed, all of the simulator state.

    OGBench's reset (task mode) steps the scene twice with ``self.action_space.sample()`` to settle
    it, then restores ``qpos`` and ``qvel``; but ``action_space`` is a new ``Box`` at every call,
    seeded from the OS's entropy, and the controls and the constraint solver's warm start
    (``qacc_warmstart``) those steps leave stay in the state the episode starts from. The
    observations are the same, but a later step's constraint solution can differ in its last
    bits, and a trajectory of one seed and one action sequence drifted apart some steps into the
    episode (two SAC runs of one seed differed after the first time-limit reset). Here those actions come
    from a generator of the env's own, seeded with each seeded reset (a stream independent of the
    one OGBench draws the scene from: every initial state is still OGBench's for its seed) and
    continued by unseeded ones.
    """
    from gymnasium.spaces import Box
    from ogbench.manipspace.envs.scene_env import SceneEnv as OGBenchScene

    class SeededScene(OGBenchScene):
        _action_rng: np.random.Generator | None = None

        def reset(self, *args, seed: int | None = None, **kwargs):
            if seed is not None or self._action_rng is None:
                self._action_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
            return super().reset(*args, seed=seed, **kwargs)

        @property
        def action_space(self) -> Box:
            space = super().action_space
            if self._action_rng is None:  # before the first reset (gymnasium.make's checks)
                return space
            return Box(space.low, space.high, dtype=space.dtype, seed=self._action_rng)

    return SeededScene


def _offscreen_gl() -> None:
    """Makes new ``mujoco.Renderer`` objects use the OpenGL backend ``MUJOCO_GL`` names now.

    MuJoCo picks its backend when it is first imported, and torchrl imports it (its MuJoCo envs)
    before this module can set ``MUJOCO_GL=egl``: without this, rendering on a headless machine
    would try GLFW and fail.
    """
    from mujoco import gl_context

    wanted = os.environ.get("MUJOCO_GL", "").lower().strip()
    if wanted in ("egl", "osmesa") and getattr(gl_context, "_MUJOCO_GL", wanted) != wanted:
        if wanted == "egl":
            from mujoco.egl import GLContext
        else:
            from mujoco.osmesa import GLContext
        gl_context.GLContext = GLContext
        gl_context._MUJOCO_GL = wanted


def _cheap_scene(scene) -> None:
    """Shadows and reflections off: the frame is the same but for shadows, ~3x cheaper on a CPU."""
    import mujoco

    scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
    scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0


@init_signature
class SceneEnv(FramedTaskEnv):
    """TorchRL environment for an OGBench Scene single task (``scene-singletask-task{N}-v0``).

    Args:
        task (int): the task, 1 to 5 (:data:`SCENE_TASKS`). Defaults to ``3``.

    Keyword Args:
        seed (int, optional): seeds the first episode (the next ones continue its generator; a
            later :meth:`set_seed` seeds the next reset). Defaults to ``None``.
        render (bool or str): write ``"pixels"``; ``"state"``: write, in their place, what the frame is drawn
            from (``"frame_state"``: positions and the colours Scene changes, float64), which
            :attr:`state_renderer` turns into the same pixels where the scorer runs. Defaults to ``False``.
        render_steps (Callable[[int], bool], optional): render only when
            ``render_steps(step_in_episode)`` is true (e.g. a
            :class:`~vlmrb_torchrl.envs.ClipRenderSteps`) and on the step that ends an episode (the
            last clip's outcome frame); other steps get an all-zero frame. ``None`` renders every
            step. Defaults to ``None``.
        camera (str): the camera: ``"front_pixels"`` (OGBench's pixel camera) or ``"front"``
            (further back). Defaults to ``"front_pixels"``.
        frame_size (int): frames are ``[frame_size, frame_size, 3]`` uint8. Defaults to ``64``.
        transparent_arm (bool): draw the arm as OGBench's pixel-based Scene does (transparent,
            the gripper purple) so that it hides nothing. Defaults to ``True``.
        max_episode_steps (int): time limit (``truncated``). Defaults to ``750`` (OGBench's).
        reward (str): ``"subgoals"`` (OGBench's: satisfied subgoals minus 5) or ``"success"``
            (``0`` when solved, else ``-1``). Defaults to ``"subgoals"``.
        terminate_on_success (bool): end the episode (``terminated``) when the task is solved, as
            OGBench does. Defaults to ``True``.
        device: device of the outputs. Defaults to ``"cpu"``.

    Entries written (``batch_size=[]``):

    - ``"observation"``: float32 ``[40]``, OGBench's state observation.
    - ``"pixels"`` (``render=True``): uint8 ``[frame_size, frame_size, 3]``.
    - ``"frame_state"`` (``render="state"``): float64 ``[56]`` (:meth:`frame_state`).
    - ``"subgoals"``: int64 ``[1]``, subgoals satisfied after the step (0-5).
    - :data:`OGBENCH_EVENT_KEYS`: bool ``[1]``, from the state after the step:
      ``"<subgoal>_achieved"`` (satisfied now, not before the step), ``"success"`` (all five
      satisfied), ``"progress_event"`` (their OR).
    - ``"reward"`` float32 ``[1]``, ``"done"``, ``"terminated"``, ``"truncated"`` bool ``[1]``.

    Attributes:
        render_count (int): frames rendered since construction (tests, benchmarks).

    Examples:
        >>> env = SceneEnv(3, seed=0)
        >>> rollout = env.rollout(10)  # random actions
        >>> rollout["observation"].shape, rollout["next", "subgoals"][-1].item(), rollout["next", "reward"][-1].item()
        (torch.Size([10, 40]), 1, -4.0)
        >>> env.close()
    """

    def __init__(
        self,
        task: int = 3,
        *,
        seed: int | None = None,
        render: bool = False,
        render_steps: Callable[[int], bool] | None = None,
        camera: str = "front_pixels",
        frame_size: int = 64,
        transparent_arm: bool = True,
        max_episode_steps: int | None = 750,
        reward: str = "subgoals",
        terminate_on_success: bool = True,
        device: torch.device | str | None = "cpu",
    ) -> None:
        gymnasium = _import_ogbench()
        if task not in SCENE_TASKS:
            raise ValueError(f"SceneEnv: unknown task={task!r}; Scene's tasks are 1-5 ({SCENE_TASKS}).")
        if reward not in _REWARDS:
            raise ValueError(f"SceneEnv.reward must be one of {_REWARDS}, got reward={reward!r}.")
        if camera not in ("front_pixels", "front"):
            raise ValueError(f"SceneEnv: unknown camera={camera!r}; Scene's cameras are 'front_pixels' and 'front'.")
        super().__init__(render=render, render_steps=render_steps, camera=camera, frame_size=frame_size,
                         max_episode_steps=max_episode_steps, default_max_steps=750,
                         terminate_on_success=terminate_on_success, device=device)
        self.task = task
        self.transparent_arm = transparent_arm
        self.reward = reward
        # OGBench's own id (its registered settings: single task, no block permutation, "pre" success
        # timing), built as the subclass that seeds its reset's random actions; the time limit is ours, on
        # the unwrapped env
        spec = dataclasses.replace(gymnasium.spec(f"scene-singletask-task{task}-v0"),
                                   entry_point=_seeded_scene_class())
        with _quiet():
            self._env = gymnasium.make(spec, width=frame_size, height=frame_size).unwrapped
        self._satisfied = np.zeros(len(SCENE_SUBGOALS), dtype=bool)
        with _quiet():
            self._env.reset(seed=seed)  # builds the MuJoCo model
        self._pending_seed = seed  # the first episode is seeded the same way
        self._configure_rendering()
        self._state_layout = self._frame_state_layout()
        self._state_renderer: SceneStateRenderer | None = None
        self._specs()
        if self.from_pixels:
            _offscreen_gl()

    # ------------------------------------------------------------------ specs
    #: The flags :meth:`_output` writes: the events, then terminated, truncated, done.
    FLAG_KEYS = (*OGBENCH_EVENT_KEYS, "terminated", "truncated", "done")

    def _specs(self) -> None:
        self._make_specs({"observation": Unbounded(shape=(40,), dtype=torch.float32, device=self.device),
                          "subgoals": Bounded(0, len(SCENE_SUBGOALS), shape=(1,), dtype=torch.int64, device=self.device)},
                         Bounded(-1.0, 1.0, shape=(5,), dtype=torch.float32, device=self.device))

    def _configure_rendering(self) -> None:
        model = self._env._model
        model.vis.quality.offsamples = 0  # no multisampling: read when the renderer is created (first render)
        if self.transparent_arm:
            import mujoco

            for name, alpha in _PIXEL_ARM.items():
                mat = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MATERIAL, name)
                if name.endswith(("/black", "/pad_gray")) and name.startswith("ur5e/robotiq"):
                    model.mat_rgba[mat, :3] = _PURPLE
                model.mat_rgba[mat, 3] = alpha

    def _frame_state_layout(self) -> StateLayout:
        """What a frame is drawn from: the positions (the data's kinematics are at ``qpos``: OGBench's step ends
        with ``mj_forward``) and the colours OGBench changes during an episode (the buttons', the cube's and its
        target's geoms; the drawer's and window's handle materials)."""
        import mujoco

        env, model = self._env, self._env._model
        geoms = [gid for ids in (*env._button_geom_ids_list, *env._cube_geom_ids_list, *env._cube_target_geom_ids_list)
                 for gid in ids]
        materials = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MATERIAL, name)
                     for name in ("drawer_handle", "window_handle")]
        return StateLayout(model.nq, model.nmocap, geoms=tuple(int(g) for g in geoms),
                           materials=tuple(int(m) for m in materials))

    def frame_state(self) -> np.ndarray:
        """The state this env's frame of now is drawn from: float64 ``[nq + 7 * nmocap + 4 * 6]`` (56): ``qpos``,
        the cube target's mocap pose and the RGBA of the geoms and materials Scene recolours
        (:class:`~vlmrb_torchrl.envs._mujoco_state.StateLayout`)."""
        return self._state_layout.encode(self._env._model, self._env._data)

    @property
    def state_renderer(self) -> SceneStateRenderer:
        """ψ: the :class:`SceneStateRenderer` that draws this env's frames from :meth:`frame_state` (what
        ``render="state"`` writes), whatever ``render`` it was built with."""
        if self._state_renderer is None:
            import mujoco
            from ogbench.manipspace import mjcf_utils

            mjcf = self._env._mjcf_model
            xml = mjcf_utils.to_string(mjcf)
            fresh = mujoco.MjModel.from_xml_string(xml, mjcf_utils.get_assets(mjcf))
            model = self._env._model
            self._state_renderer = SceneStateRenderer(xml, model_patch(model, fresh), visual_settings(model),
                                                      self._state_layout, self.frame_shape, task=self.task,
                                                      camera=self.camera)
        return self._state_renderer

    @property
    def unwrapped(self):
        """The OGBench ``SceneEnv`` (a gymnasium env)."""
        return self._env

    # ------------------------------------------------------------------ core
    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._pending_seed = int(seed)

    def satisfied(self) -> np.ndarray:
        """bool ``[5]``: which subgoals (:data:`SCENE_SUBGOALS`) hold now."""
        cube, buttons, drawer, window = self._env._compute_successes()
        return np.array([all(cube), *buttons, drawer, window], dtype=bool)

    def render_frame(self) -> torch.Tensor:
        """Renders the camera now: uint8 ``[frame_size, frame_size, 3]`` (counted in ``render_count``)."""
        img = self._env.render(camera=self.camera, scene_callback=_cheap_scene)
        self.render_count += 1
        return torch.from_numpy(np.ascontiguousarray(img))

    def _entries(self, obs: np.ndarray) -> dict[str, torch.Tensor]:
        return {"observation": torch.as_tensor(obs, dtype=torch.float32),
                "subgoals": torch.tensor([int(self._satisfied.sum())], dtype=torch.int64)}

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        seed, self._pending_seed = self._pending_seed, None
        with _quiet():
            obs, _ = self._env.reset(seed=seed)
        self._step_in_episode = 0
        self._satisfied = self.satisfied()
        return self._output(self._entries(obs), [False] * len(self.FLAG_KEYS), None)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action").detach().cpu().numpy().astype(np.float64)
        obs, reward, terminated, _, info = self._env.step(action)
        self._step_in_episode += 1
        before, self._satisfied = self._satisfied, self.satisfied()
        achieved = (self._satisfied & ~before).tolist()
        success = bool(self._satisfied.all())
        if self.reward == "success":
            reward = float(info["success"]) - 1.0
        terminated = bool(terminated) and self.terminate_on_success
        truncated = self._step_in_episode >= self.max_episode_steps
        flags = [*achieved, success, any(achieved) or success, terminated, truncated, terminated or truncated]
        return self._output(self._entries(obs), flags, float(reward), ends_episode=terminated or truncated)

    def _close_simulator(self) -> None:
        env = self.__dict__.get("_env")
        if env is not None:
            renderer = getattr(env, "_renderer", None)
            if renderer is not None:  # its EGL context, freed now rather than by a finaliser at exit
                renderer.close()
                env._renderer = None
            env.close()

    def __repr__(self) -> str:
        render = "'state'" if self.from_state else self.from_pixels
        return (f"{type(self).__name__}(task={self.task} ({SCENE_TASKS[self.task]}), render={render}, "
                f"camera={self.camera!r})")


def _scene_assets(task: int, frame_size: int) -> dict[str, bytes]:
    """The meshes and textures of Scene's model (the ``assets`` its XML names), from OGBench's files."""
    from ogbench.manipspace import mjcf_utils

    gymnasium = _import_ogbench()
    with _quiet():
        raw = gymnasium.make(f"scene-singletask-task{task}-v0", width=frame_size, height=frame_size).unwrapped
    mjcf = raw.modify_mjcf_model(raw.build_mjcf_model())
    assets = mjcf_utils.get_assets(mjcf)
    raw.close()
    return assets


class SceneStateRenderer(MujocoStateRenderer):
    """ψ for OGBench Scene: draws the frames a :class:`SceneEnv` renders from the states it writes with
    ``render="state"`` (``"frame_state"``, float64 ``[56]``, 448 bytes where a 64-px frame is 12,288), pixel for
    pixel (tested across episodes, buttons toggled).

    A :class:`~vlmrb_torchrl.StateRenderer`: get it from :attr:`SceneEnv.state_renderer`. It carries the model's
    XML and what the env changed after compiling it (the transparent arm, no multisampling, ...); where it renders
    it reads the meshes from OGBench's files (one OGBench env built, ~5 s, once per thread) and draws the camera
    as the env does (``mujoco.Renderer``, shadows and reflections off).

    Keyword Args:
        task (int): the Scene task (its model's assets).
        camera (str): the env's camera.

    Examples:
        >>> env = SceneEnv(3, seed=0, render="state", frame_size=32)
        >>> psi, state = env.state_renderer, env.rollout(2)["next", "frame_state"]
        >>> state.shape, psi.state_size, psi.frame_shape  # psi(state): uint8 [2, 32, 32, 3], the env's frames
        (torch.Size([2, 56]), 56, (32, 32, 3))
        >>> env.close()
    """

    def __init__(self, xml: str, patch: dict, vis: dict, layout: StateLayout, frame_shape: tuple[int, int, int], *,
                 task: int, camera: str) -> None:
        super().__init__(xml, patch, vis, layout, frame_shape)
        self.task, self.camera = int(task), camera

    def _assets(self) -> dict[str, bytes]:
        return _scene_assets(self.task, self.frame_shape[0])

    def _make_context(self, model) -> Any:
        import mujoco

        _offscreen_gl()
        renderer = mujoco.Renderer(model, height=self.frame_shape[0], width=self.frame_shape[1])
        return renderer, mujoco.MjData(model), mujoco.MjvOption()

    def _data(self, context: Any):
        return context[1]

    def _close_context(self, context: Any) -> None:
        context[0].close()

    def _render(self, context: Any) -> np.ndarray:
        renderer, data, option = context
        renderer.update_scene(data=data, camera=self.camera, scene_option=option)
        _cheap_scene(renderer.scene)
        return renderer.render()


def make_ogbench_env(env_id: str = "ogbench/scene-task3", **kwargs: Any) -> SceneEnv:
    """Builds a :class:`SceneEnv` from a recipe env id (``ogbench/scene-task1`` ... ``ogbench/scene-task5``);
    keyword arguments as there. Picklable via ``functools.partial``.

    The recipes' shared keywords are accepted too: ``reward_shaping`` (``True`` or ``None``: the
    subgoal count, OGBench's own reward; ``False``: sparse success), ``train`` (ignored) and
    ``fast_render`` (``True``: Scene's frames are always rendered cheaply; ``False`` is refused).

    Examples:
        >>> env = make_ogbench_env("ogbench/scene-task1", reward_shaping=False)
        >>> env.task, env.reward, env.max_episode_steps
        (1, 'success', 750)
        >>> env.close()
    """
    kwargs.pop("train", None)
    if kwargs.pop("fast_render", True) is False:
        raise ValueError("fast_render=False: OGBench Scene's frames are always rendered without shadows, reflections "
                         "and multisampling (the transparent arm needs no more); the option is robosuite's.")
    shaping = kwargs.pop("reward_shaping", None)
    if shaping is not None:
        kwargs.setdefault("reward", "subgoals" if shaping else "success")
    return SceneEnv(scene_task(env_id), **kwargs)
