"""robosuite env: specs, scripted oracle events, frames rendered only where clips need them."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("robosuite")

from vlmrb_torchrl.scoring.clips import ClipSpec  # noqa: E402
from vlmrb_torchrl.envs import ClipRenderSteps  # noqa: E402
from vlmrb_torchrl.envs.robosuite.env import RobosuiteEnv, make_robosuite_env  # noqa: E402
from vlmrb_torchrl.scorers import make_scorer  # noqa: E402


@pytest.fixture(scope="module")
def lift():
    env = RobosuiteEnv("Lift", seed=0, terminate_on_success=False, max_episode_steps=150)
    yield env
    env.close()


def _scripted_pick(env: RobosuiteEnv, steps: int = 110) -> list[dict]:
    """Moves above the cube, descends, closes the gripper, lifts: one dict of flags per step."""
    raw = env.unwrapped
    td = env.reset()
    log = []
    for i in range(steps):
        eef = raw.sim.data.site_xpos[raw.robots[0].eef_site_id["right"]].copy()
        cube = raw.sim.data.body_xpos[raw.cube_body_id].copy()
        if i < 30:
            target, grip = cube + [0, 0, 0.05], -1.0
        elif i < 50:
            target, grip = cube, -1.0
        elif i < 65:
            target, grip = eef, 1.0
        else:
            target, grip = cube + [0, 0, 0.3], 1.0
        action = np.zeros(7)
        action[:3] = np.clip((target - eef) * 10, -1, 1)
        action[6] = grip
        td["action"] = torch.tensor(action, dtype=torch.float32)
        td = env.step(td)
        log.append({k: bool(td["next", k]) for k in ("grasping", "lifted", "success", "progress_event")})
        td = td["next"]
    return log


class TestRobosuiteEnv:
    def test_specs_and_rollout(self, lift):
        td = lift.reset()
        assert td["observation"].dtype == torch.float32 and td["observation"].shape == (60,)
        assert lift.action_spec.shape == (7,)
        rollout = lift.rollout(5)
        assert rollout["next", "reward"].shape == (5, 1)
        assert "pixels" not in rollout.keys()

    def test_bad_args(self):
        with pytest.raises(ValueError, match="unknown task='NoSuchTask'"):
            RobosuiteEnv("NoSuchTask")
        with pytest.raises(ValueError, match="frame_size must be an int >= 1"):
            RobosuiteEnv("Lift", frame_size=0)

    def test_scripted_grasp_then_lift_fires_events(self, lift):
        log = _scripted_pick(lift)
        first = {k: next((i for i, f in enumerate(log) if f[k]), None) for k in ("grasping", "lifted", "success")}
        assert first["grasping"] is not None, log
        assert first["lifted"] is not None and first["lifted"] > first["grasping"]
        assert first["success"] is not None
        assert not any(f["progress_event"] for f in log[:first["grasping"]])

    def test_random_trajectory_has_no_lift_or_success(self, lift):
        # uniform random OSC actions almost never grasp the cube; lifting it needs a grasp
        torch.manual_seed(0)
        rollout = lift.rollout(150)
        nxt = rollout["next"]
        assert not nxt["lifted"].any() and not nxt["success"].any()
        assert nxt["grasping"].float().mean() < 0.05

    def test_oracle_scores_robosuite_events(self, lift):
        scorer = make_scorer("oracle:robosuite")
        assert scorer.events_key == ("next", "progress_event")


class TestRenderOnlyClipFrames:
    def test_clip_render_steps(self):
        need = ClipRenderSteps(ClipSpec(clip_len=8, stride=8, frames=2), horizon=30)
        assert [k for k in range(30) if need(k)] == [0, 8, 16, 24, 29]  # clip frames 0 and 8 (the outcome)
        no_outcome = ClipRenderSteps(ClipSpec(clip_len=8, stride=8, frames=2, final_frame=False), horizon=30)
        assert [k for k in range(30) if no_outcome(k)] == [0, 7, 8, 15, 16, 23, 24, 29]
        every = ClipRenderSteps(ClipSpec(clip_len=8, stride=1, frames=2))
        assert all(every(k) for k in range(30))  # stride 1: every step is some clip's frame

    def test_renders_only_needed_steps(self):
        spec = ClipSpec(clip_len=8, stride=8, frames=2)
        env = make_robosuite_env("robosuite/Lift", seed=0, render=True, frame_size=32, max_episode_steps=20,
                                 render_steps=ClipRenderSteps(spec, horizon=20))
        rollout = env.rollout(20)  # reset + 19 steps are roots; the 20th step's frame is "next" only
        needed = [k for k in range(20) if ClipRenderSteps(spec, horizon=20)(k)]
        assert needed == [0, 8, 16, 19]
        assert env.render_count == len(needed) + 1  # + the observation that ends the episode (an outcome frame)
        rendered = rollout["pixels"].flatten(1).any(-1)
        assert rendered.nonzero().squeeze(-1).tolist() == needed
        assert rollout["next", "pixels"][-1].any()  # the truncating step's observation is rendered
        assert rollout["pixels"].shape == (20, 32, 32, 3) and rollout["pixels"].dtype == torch.uint8
        env.close()


def test_fast_render_switches_off_costly_effects_and_keeps_the_picture():
    """fast_render: no reflections, shadows or multisampling, a buffer of the frame's size; the frame of a state is
    robosuite's default frame up to edges and shadows, the same every time, and each env renders its own scene
    when several live in one process (robosuite leaves the last-built env's GL context current)."""
    import mujoco

    fast = RobosuiteEnv("Lift", seed=0, render=True, frame_size=48, render_steps=lambda k: False)
    full = RobosuiteEnv("Lift", seed=0, render=True, frame_size=48, fast_render=False, render_steps=lambda k: False)
    for env in (fast, full):
        env.set_seed(0)
        env.reset()
    frame = fast.render_frame()
    assert frame.shape == (48, 48, 3) and frame.dtype == torch.uint8
    reference = full.render_frame()  # the other env's context is made current
    assert torch.equal(fast.render_frame(), frame)  # and then this one's again
    difference = (frame.float() - reference.float()).abs().mean().item()
    assert 0 < difference < 8  # same scene (mean brightness ~220), aliased edges, no shadows
    context, model = fast.unwrapped.sim._render_context_offscreen, fast.unwrapped.sim.model._model
    assert context.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] == 0
    assert context.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] == 0
    assert (model.vis.quality.offsamples, model.vis.global_.offwidth, model.vis.global_.offheight) == (0, 48, 48)
    default = full.unwrapped.sim._render_context_offscreen
    assert default.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] == 1 and full.unwrapped.sim.model._model.vis.quality.offsamples > 0
    fast.close()
    full.close()


def _red(frame: torch.Tensor) -> torch.Tensor:
    """The red cube's pixels (~(185, 62, 73); the table, the arm and the floor are grey)."""
    f = frame.int()
    return (f[..., 0] > 2 * f[..., 1]) & (f[..., 0] > 2 * f[..., 2])


def _red_rows(frame: torch.Tensor) -> float:
    """Mean row of the red cube's pixels in an upright frame."""
    red = _red(frame)
    assert red.sum() >= 4, "no cube in the frame"
    return red.nonzero()[:, 0].float().mean().item()


def test_front_close_camera_shows_the_cube_large_and_a_lift_plainly():
    """camera="front_close" (ROBOSUITE_VIEWS): MuJoCo's free camera 45 cm in front of the cube, 45° field of
    view; it changes no camera of the model, shows the cube much larger than agentview, and a 5 cm lift
    moves the cube up the frame by many rows (a couple in agentview)."""
    from vlmrb_torchrl.envs.robosuite.env import ROBOSUITE_VIEWS

    view = ROBOSUITE_VIEWS["front_close"]
    assert (view.distance, view.fovy) == (0.45, 45.0)
    position = view.position()
    assert np.linalg.norm(position - np.asarray(view.lookat)) == pytest.approx(0.45)
    assert position[0] > 0.4 and abs(position[1]) < 1e-9 and position[2] > view.lookat[2]  # in front, above the aim

    env = RobosuiteEnv("Lift", seed=0, render=True, camera="front_close", render_steps=lambda k: False)
    try:
        env.set_seed(0)
        env.reset()
        raw = env.unwrapped
        cam_pos = raw.sim.model._model.cam_pos.copy()
        frames = {}
        for camera in ("front_close", "agentview"):
            env.camera = camera
            frames[camera] = env.render_frame()
        assert frames["front_close"].shape == (64, 64, 3) and frames["front_close"].dtype == torch.uint8
        assert not torch.equal(frames["front_close"], frames["agentview"])
        env.camera = "front_close"
        assert torch.equal(env.render_frame(), frames["front_close"])  # after a fixed camera, the same picture
        np.testing.assert_array_equal(raw.sim.model._model.cam_pos, cam_pos)  # no model camera moved
        assert _red(frames["front_close"]).sum() > 2 * _red(frames["agentview"]).sum()  # the cube: ~80 px vs ~30
        joint = raw.cube.joints[0]
        qpos = np.array(raw.sim.data.get_joint_qpos(joint))
        rows = {}
        for camera in ("front_close", "agentview"):
            env.camera = camera
            rows[camera] = [_red_rows(env.render_frame())]
        qpos[2] += 0.05
        raw.sim.data.set_joint_qpos(joint, qpos)
        raw.sim.forward()
        for camera in ("front_close", "agentview"):
            env.camera = camera
            rows[camera].append(_red_rows(env.render_frame()))
        lift_rows = {camera: before - after for camera, (before, after) in rows.items()}
        assert lift_rows["front_close"] > 6 and lift_rows["front_close"] > 2 * lift_rows["agentview"], lift_rows
    finally:
        env.close()


def test_split_view_draws_each_camera_into_its_strip_and_shows_what_the_front_cannot():
    """camera="front_side_close" (a SplitView): the left half of the frame is the middle of front_close's frame,
    the right half the middle of side_close's, at their scale; a move of the cube along front_close's line of
    sight (x) barely changes the front strip and moves the cube across the side strip."""
    from vlmrb_torchrl.envs.robosuite.env import ROBOSUITE_VIEWS, SplitView

    split = ROBOSUITE_VIEWS["front_side_close"]
    assert isinstance(split, SplitView) and split.panels == (ROBOSUITE_VIEWS["front_close"], ROBOSUITE_VIEWS["side_close"])
    side = ROBOSUITE_VIEWS["side_close"].position()
    assert abs(side[0]) < 1e-9 and side[1] > 0.4  # on the table's side, as far from the cube as front_close
    with pytest.raises(ValueError, match="does not split into 3 equal strips"):
        SplitView(split.panels + split.panels[:1]).strip_widths(64)

    env = RobosuiteEnv("Lift", seed=0, render=True, camera="front_side_close", render_steps=lambda k: False)
    try:
        env.set_seed(0)
        env.reset()
        frames = {}
        for camera in ("front_side_close", "front_close", "side_close"):
            env.camera = camera
            frames[camera] = env.render_frame().numpy().astype(int)
        both = frames["front_side_close"]
        assert both.shape == (64, 64, 3)
        for strip, camera in ((both[:, :32], "front_close"), (both[:, 32:], "side_close")):
            middle = frames[camera][:, 16:48]
            assert (strip == middle).all(axis=-1).mean() > 0.99  # the same picture (a rasterised edge may differ)
        raw = env.unwrapped
        joint = raw.cube.joints[0]
        qpos = np.array(raw.sim.data.get_joint_qpos(joint))
        env.camera = "front_side_close"
        cols = []
        for dx in (0.0, 0.04):  # 4 cm towards the front camera: the near-miss offset the front cannot see
            qpos_dx = qpos.copy()
            qpos_dx[0] += dx
            raw.sim.data.set_joint_qpos(joint, qpos_dx)
            raw.sim.forward()
            frame = env.render_frame()
            cols.append([_red(frame[:, half]).nonzero()[:, 1].float().mean().item()
                         for half in (slice(0, 32), slice(32, 64))])
        (front0, side0), (front1, side1) = cols
        assert abs(front1 - front0) < 1.0 and abs(side1 - side0) > 4.0, cols
    finally:
        env.close()
    with pytest.raises(ValueError, match=r"camera='front_side_close'.*63-px frame does not split into 2"):
        RobosuiteEnv("Lift", render=True, camera="front_side_close", frame_size=63)


def test_panel_view_draws_each_camera_whole_side_by_side(monkeypatch):
    """camera="front_close+eye_in_hand" (a PanelView, what builtin:lift reads): a [64, 128, 3] frame whose left
    square is front_close's frame and right square the gripper camera's; the spec says so, unrendered steps are
    zeros of that shape; the gripper camera moves with the gripper, the front one does not."""
    from vlmrb_torchrl.envs.robosuite.env import ROBOSUITE_VIEWS, PanelView

    view = ROBOSUITE_VIEWS["front_close+eye_in_hand"]
    assert isinstance(view, PanelView) and view.frame_shape(64) == (64, 128, 3)
    env = RobosuiteEnv("Lift", seed=0, render=True, camera="front_close+eye_in_hand", max_episode_steps=10,
                       render_steps=lambda k: k == 2)
    try:
        assert env.observation_spec["pixels"].shape == (64, 128, 3)
        env.set_seed(0)
        td = env.rollout(3)
        pixels = td["next", "pixels"]
        assert pixels.shape == (3, 64, 128, 3) and not pixels[0].any() and pixels[1].any()  # step 2 only
        frames = {}
        for camera in ("front_close+eye_in_hand", "front_close", "robot0_eye_in_hand"):
            env.camera = camera
            frames[camera] = env.render_frame()
        both = frames["front_close+eye_in_hand"]
        assert torch.equal(both[:, :64], frames["front_close"]) and torch.equal(both[:, 64:], frames["robot0_eye_in_hand"])
        env.camera = "front_close+eye_in_hand"
        for _ in range(5):  # the arm moves: the gripper's camera with it
            env.step(td[0].set("action", torch.ones(7)))
        moved = env.render_frame()
        assert (moved[:, 64:] != both[:, 64:]).any(-1).float().mean() > 0.05
    finally:
        env.close()
    monkeypatch.setitem(ROBOSUITE_VIEWS, "front+nowhere", PanelView((ROBOSUITE_VIEWS["front_close"], "nowhere")))
    with pytest.raises(ValueError, match=r"camera='front\+nowhere' draws \['nowhere'\]"):
        RobosuiteEnv("Lift", render=True, camera="front+nowhere")


def test_unknown_camera_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"unknown camera='nowhere'.*agentview.*front_close"):
        RobosuiteEnv("Lift", camera="nowhere")
