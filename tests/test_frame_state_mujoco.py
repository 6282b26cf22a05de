"""Frames rendered from stored state where the scorer runs (ψ, issue 61) for the MuJoCo envs.

robosuite and OGBench Scene envs built with ``render="state"`` write the positions (and the colours Scene changes)
a frame is drawn from; their ``state_renderer`` must draw from them exactly the frames ``render=True`` writes,
across episodes, after being pickled (as it travels to a scorer process), built from an env that renders nothing
(as the recipes' probe env).
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch

os.environ.setdefault("MUJOCO_GL", "egl")

mujoco = pytest.importorskip("mujoco")

from vlmrb_torchrl import StateRenderer  # noqa: E402
from vlmrb_torchrl.envs._base import FRAME_STATE_KEY  # noqa: E402
from vlmrb_torchrl.envs._mujoco_state import (MujocoStateRenderer, StateLayout, model_patch,  # noqa: E402
                                              visual_settings)

_XML = """<mujoco>
  <visual><global offwidth="32" offheight="32"/></visual>
  <worldbody>
    <light pos="0 0 2"/>
    <camera name="eye" pos="0 -1.2 0.6" xyaxes="1 0 0 0 0.45 0.9"/>
    <geom type="plane" size="1 1 .1" rgba=".8 .8 .8 1"/>
    <body name="target" mocap="true" pos=".2 0 .1"><geom type="box" size=".05 .05 .05" rgba="0 1 0 .5"/></body>
    <body name="ball" pos="0 0 .3"><freejoint/><geom name="ball" size=".08" rgba="1 0 0 1"/></body>
  </worldbody>
</mujoco>"""


class _TinyRenderer(MujocoStateRenderer):
    """ψ of a one-camera toy model, drawn with ``mujoco.Renderer`` (as OGBench's env draws)."""

    def _make_context(self, model):
        from vlmrb_torchrl.envs.ogbench.env import _offscreen_gl

        _offscreen_gl()
        return mujoco.Renderer(model, height=self.frame_shape[0], width=self.frame_shape[1]), mujoco.MjData(model)

    def _data(self, context):
        return context[1]

    def _close_context(self, context):
        context[0].close()

    def _render(self, context):
        renderer, data = context
        renderer.update_scene(data, camera="eye")
        return renderer.render()


def test_states_of_a_toy_model_draw_its_frames():
    """The machinery on a toy model, fast: positions before the step (what mj_step leaves the kinematics at), a
    moved mocap body, a colour changed per step and one changed after compiling (the patch), pickled ψ."""
    model = mujoco.MjModel.from_xml_string(_XML)
    model.geom_rgba[1, 3] = 0.0  # the plane hidden after compiling: carried by the patch
    ball = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "ball")
    layout = StateLayout(model.nq, model.nmocap, geoms=(ball,))
    psi = _TinyRenderer(_XML, model_patch(model, mujoco.MjModel.from_xml_string(_XML)), visual_settings(model),
                        layout, (32, 32, 3))
    assert sorted(psi.patch) == ["geom_rgba"] and psi.state_size == 7 + 7 + 4
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    with mujoco.Renderer(model, 32, 32) as renderer:
        frames, states = [], []
        for step in range(6):
            data.mocap_pos[0, 0] = 0.2 - 0.05 * step
            model.geom_rgba[ball, :3] = (1.0, 0.1 * step, 0.0)
            mujoco.mj_step(model, data, nstep=19)
            positions = layout.positions(data)  # what the kinematics of the last mj_step are computed from
            mujoco.mj_step(model, data)
            renderer.update_scene(data, camera="eye")
            frames.append(renderer.render())
            states.append(layout.encode(model, data, positions))
    frames, states = torch.from_numpy(np.stack(frames)), torch.from_numpy(np.stack(states))
    psi = pickle.loads(pickle.dumps(psi))
    assert isinstance(psi, StateRenderer) and psi.state_key == FRAME_STATE_KEY
    assert torch.equal(psi(states), frames) and torch.equal(psi(states[2:4]), frames[2:4])
    assert frames[0].float().std() > 0 and not torch.equal(frames[0], frames[-1])  # the frames show something
    drawn = []
    psi._render = lambda context, draw=psi._render: drawn.append(1) or draw(context)
    assert torch.equal(psi(states[1:5]), frames[1:5]) and not drawn  # kept by state: none drawn again
    psi.cache_frames = 2
    assert torch.equal(psi(states.flip(0)), frames.flip(0)) and len(drawn) == 0  # still cached: all six
    psi._cache.clear()
    assert torch.equal(psi(states), frames) and len(drawn) == 6 and len(psi._cache) == 2
    psi.close()


def _frames_and_states(env, steps: int, *, every=None):
    """The frames ``env`` (``render=True``) writes along a random action sequence, episodes restarting when done,
    and its :meth:`frame_state` of each; ``every(env, step)`` runs before each step."""
    torch.manual_seed(0)
    td = env.reset()
    frames, states, resets = [td["pixels"]], [torch.from_numpy(env.frame_state())], 0
    for step in range(steps):
        if every is not None:
            every(env, step)
        td = env.rand_step(td)
        frames.append(td["next", "pixels"])
        states.append(torch.from_numpy(env.frame_state()))
        td = td["next"]
        if td["done"].item():
            td, resets = env.reset(), resets + 1
            frames.append(td["pixels"])
            states.append(torch.from_numpy(env.frame_state()))
    return torch.stack(frames), torch.stack(states), resets


@pytest.mark.slow  # two robosuite envs per case (~10 s each on 2 cores)
@pytest.mark.parametrize("camera, fast_render", [("front_close+eye_in_hand", True), ("agentview", False)])
def test_robosuite_frames_drawn_from_state_are_the_rendered_frames(camera, fast_render):
    """builtin:lift's two-camera panel (a free camera and the hand's), and a model camera with robosuite's
    default image (multisampling, shadows, reflections)."""
    pytest.importorskip("robosuite")
    from vlmrb_torchrl.envs.robosuite.env import RobosuiteEnv

    kwargs = dict(seed=0, frame_size=64, camera=camera, fast_render=fast_render, max_episode_steps=9)
    probe = RobosuiteEnv("Lift", render=False, **kwargs)  # as the recipe asks its (non-rendering) probe env
    psi = pickle.loads(pickle.dumps(probe.state_renderer))
    probe.close()
    env = RobosuiteEnv("Lift", render=True, **kwargs)
    frames, states, resets = _frames_and_states(env, 20)
    env.close()
    assert resets >= 2 and states.shape[1] == psi.state_size == 30
    assert torch.equal(psi(states), frames)
    psi.close()


@pytest.mark.slow  # two OGBench envs (~5 s each), and one more where ψ renders
def test_scene_frames_drawn_from_state_are_the_rendered_frames():
    """Across episodes, with the buttons toggled (their colours, and the handles' of the drawer and window)."""
    pytest.importorskip("ogbench")
    from vlmrb_torchrl.envs.ogbench.env import SceneEnv

    probe = SceneEnv(3, seed=0, render=False, max_episode_steps=9)
    psi = pickle.loads(pickle.dumps(probe.state_renderer))
    probe.close()

    def toggle_buttons(env, step):
        if step in (4, 13):
            scene = env.unwrapped
            scene._cur_button_states[:] = 1 - scene._cur_button_states
            scene._apply_button_states()

    env = SceneEnv(3, seed=0, render=True, max_episode_steps=9)
    frames, states, resets = _frames_and_states(env, 20, every=toggle_buttons)
    env.close()
    colours = states[:, -24:]
    assert resets >= 2 and (colours != colours[0]).any()  # recoloured on the way
    assert torch.equal(psi(states), frames)
    psi.close()


@pytest.mark.slow  # builds robosuite and OGBench envs
def test_render_state_writes_states_not_frames_and_refuses_a_rebuilt_model():
    pytest.importorskip("robosuite")
    pytest.importorskip("ogbench")
    from vlmrb_torchrl.envs.ogbench.env import SceneEnv
    from vlmrb_torchrl.envs.robosuite.env import RobosuiteEnv

    for env in (RobosuiteEnv("Lift", seed=0, render="state", max_episode_steps=5),
                SceneEnv(3, seed=0, render="state", max_episode_steps=5)):
        out = env.rollout(3)
        assert "pixels" not in out.keys() and out["next", FRAME_STATE_KEY].dtype == torch.float64
        assert out["next", FRAME_STATE_KEY].shape == (3, env.state_renderer.state_size) and env.render_count == 0
        assert "render='state'" in repr(env)
        env.close()
    with pytest.raises(ValueError, match="render must be True, False or 'state'"):
        SceneEnv(3, render="frames")
    with pytest.raises(ValueError, match="needs hard_reset=False"):
        RobosuiteEnv("Lift", render="state", env_kwargs={"hard_reset": True})
    rebuilt = RobosuiteEnv("Lift", seed=0, env_kwargs={"hard_reset": True})
    assert rebuilt.state_renderer is None  # the recipes pass frames then
    rebuilt.close()
