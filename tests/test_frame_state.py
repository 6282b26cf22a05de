"""Frames rendered from stored state where the scorer runs (ψ, issue 61).

MiniGrid envs built with ``render="state"`` write a few bytes per step; :class:`MiniGridStateRenderer` must draw
from them exactly the frames ``render=True`` writes (every view and layout the built-in scorers read), and the
scoring side must show the scorer the same clips either way, rendering only the frames a clip shows.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("minigrid")

from vlmrb_torchrl import ClipSpec, StateRenderer, make_clip_scoring, make_vlm_replay_buffer  # noqa: E402
from vlmrb_torchrl.envs.minigrid.env import FRAME_STATE_KEY, MiniGridEnv, MiniGridStateRenderer  # noqa: E402
from vlmrb_torchrl.scorers import CallableScorer  # noqa: E402


def frames_and_states(env_id: str, steps: int, *, frame_view: str = "grid", seed: int = 1):
    """The frames of ``render=True`` and the states of ``render="state"`` along one random action sequence,
    episodes restarting when done: ``(frames [steps + 1, H, W, 3], states [steps + 1, S], events seen)``."""
    framed = MiniGridEnv(env_id, seed=seed, render=True, frame_view=frame_view)
    stated = MiniGridEnv(env_id, seed=seed, render="state", frame_view=frame_view)
    rng = np.random.default_rng(seed)
    frames, states, events = [framed._reset_arrays()["pixels"]], [stated._reset_arrays()[FRAME_STATE_KEY]], set()
    n_actions = framed.action_spec.space.n
    for _ in range(steps):
        action = int(rng.integers(n_actions))
        (a, flags, _), (b, _, _) = framed._step_arrays(action), stated._step_arrays(action)
        events |= {name for name, flag in zip(("key", "door"), flags[:2]) if flag}
        if flags[-1]:  # done: both restart (the same seeds follow)
            a, b = framed._reset_arrays(), stated._reset_arrays()
        frames.append(a["pixels"])
        states.append(b[FRAME_STATE_KEY])
    renderer = stated.state_renderer
    framed.close(), stated.close()
    return torch.from_numpy(np.stack(frames)), torch.from_numpy(np.stack(states)), events, renderer


@pytest.mark.parametrize("env_id, frame_view", [
    ("MiniGrid-DoorKey-5x5-v0", "grid"),  # 12-px cells, a key carried and a door opened on the way
    ("MiniGrid-DoorKey-16x16-v0", "grid"),  # 4-px cells
    ("MiniGrid-DoorKey-12x12-v0", "grid"),  # 4-px cells in the middle of a black 64x64 frame
    ("MiniGrid-LavaCrossingS11N5-v0", "grid"),  # 11x11: the same layout rule
    ("MiniGrid-UnlockPickup-v0", "grid"),  # not square
    ("MiniGrid-DoorKey-5x5-v0", "agent"),  # builtin:minigrid_agent's view: what the agent holds is drawn
    ("BabyAI-GoToLocal-v0", "agent"),
])
def test_frames_drawn_from_state_are_the_rendered_frames(env_id, frame_view):
    from minigrid.core.grid import Grid

    frames, states, events, renderer = frames_and_states(env_id, 300, frame_view=frame_view, seed=5)
    if env_id == "MiniGrid-DoorKey-5x5-v0":
        assert events == {"key", "door"}  # the states held a carried key and an open door
    Grid.tile_cache.clear()  # tiles drawn afresh from decoded objects, as in a scorer's process
    renderer = pickle.loads(pickle.dumps(renderer))  # as it travels to a process or Ray worker
    assert isinstance(renderer, StateRenderer) and renderer.state_size == states.shape[1]
    assert torch.equal(renderer(states), frames)
    assert torch.equal(renderer(states[5:9]), frames[5:9])  # any batch of states, tiles already cached


def test_render_state_writes_no_frames_and_checks_its_argument():
    env = MiniGridEnv("MiniGrid-DoorKey-5x5-v0", seed=0, render="state")
    out = env.rollout(3)
    assert "pixels" not in out.keys() and out["next", FRAME_STATE_KEY].shape == (3, 81)
    assert env.observation_spec[FRAME_STATE_KEY].dtype == torch.uint8 and "state" in repr(env)
    with pytest.raises(ValueError, match="render must be True, False or 'state'"):
        MiniGridEnv("MiniGrid-DoorKey-5x5-v0", render="frames")
    with pytest.raises(ValueError, match="frame_view must be one of"):
        MiniGridStateRenderer(5, 5, tile_size=12, frame_view="side")


def frame_sum_score(clips):
    """A scorer that tells frames apart: each shown frame's mean pixel, weighted by its position."""
    means = clips["pixels"].float().mean((2, 3, 4)) / 255  # [B, F]
    weights = torch.arange(1, means.shape[1] + 1, dtype=torch.float32)
    return (means * weights).sum(1) / weights.sum()


class CountingRenderer:
    """Wraps ψ and counts the states it was asked to draw."""

    def __init__(self, renderer) -> None:
        self.renderer, self.state_key, self.rendered = renderer, renderer.state_key, 0

    def __call__(self, states):
        self.rendered += len(states)
        return self.renderer(states)


def collector_batch(frames, states, steps):
    """One trajectory's ``[1, steps]`` collector batch holding both the frames and the states."""
    return TensorDict({
        "pixels": frames[:steps], ("next", "pixels"): frames[1:steps + 1],
        FRAME_STATE_KEY: states[:steps], ("next", FRAME_STATE_KEY): states[1:steps + 1],
        ("collector", "traj_ids"): torch.zeros(steps, dtype=torch.long),
        ("next", "done"): torch.zeros(steps, 1, dtype=torch.bool),
    }, batch_size=[steps]).unsqueeze(0)


@pytest.mark.parametrize("spec", [ClipSpec(clip_len=8), ClipSpec(clip_len=8, stride=8, frames=3)])
def test_the_scorer_sees_the_same_clips_and_only_shown_frames_are_drawn(spec):
    frames, states, _, renderer = frames_and_states("MiniGrid-DoorKey-5x5-v0", 64)
    batch = collector_batch(frames, states, 64)
    scorer = CallableScorer(frame_sum_score, in_keys=["pixels"])
    counting = CountingRenderer(renderer)
    scores = {}
    for name, psi in (("frames", None), ("states", counting)):
        stream, transform = make_clip_scoring(scorer, spec, renderer=psi)
        assert stream.frame_key == ("pixels" if psi is None else FRAME_STATE_KEY)
        clips = stream.push(batch, torch.arange(64))
        scores[name] = transform.score_clips(clips.clips, frames=clips.frames)
        shown = clips.clips.get(("clip", "frame_row"))[:, transform.positions].unique().numel()
    assert torch.equal(scores["frames"], scores["states"])
    assert counting.rendered == shown  # each shown frame once; none that no clip shows
    if spec.stride == spec.clip_len:
        assert counting.rendered < len(clips.clips) * spec.clip_len


def test_a_vlm_buffer_fed_states_scores_as_one_fed_frames():
    """make_vlm_replay_buffer(renderer=): the stored rows hold neither frames nor states; the scores match."""
    frames, states, _, renderer = frames_and_states("MiniGrid-DoorKey-5x5-v0", 40)
    batch = collector_batch(frames, states, 40)
    batch["observation"] = torch.zeros(1, 40, 3)
    scorer = CallableScorer(frame_sum_score, in_keys=["pixels"])
    scores = []
    for psi in (None, renderer):
        rb = make_vlm_replay_buffer(100, scorer, clip_spec=ClipSpec(clip_len=4), renderer=psi,
                                    sampler_kwargs={"threshold": None})
        dropped = FRAME_STATE_KEY if psi is None else "pixels"  # the env writes one or the other
        rb.extend(batch.exclude(dropped, ("next", dropped)), clips_from=None)
        rb.flush_clips()
        rb.async_scorer.drain()
        stored = set(rb.storage[:].keys(include_nested=True, leaves_only=True))
        assert not stored & {"pixels", FRAME_STATE_KEY, ("next", "pixels"), ("next", FRAME_STATE_KEY)}
        scores.append(rb.sampler.scores(torch.arange(40)))
        rb.close()
    assert not scores[0].isnan().any() and torch.equal(scores[0], scores[1])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["process", "ray"])
def test_states_are_drawn_in_the_scorer_process(backend):
    """ψ travels with the transform to a spawned child or a Ray actor and renders there."""
    import shutil
    import signal
    import sys
    import tempfile

    if backend == "ray":
        ray = pytest.importorskip("ray")
        if ray.is_initialized():
            pytest.skip("a Ray runtime is already running in this process")
        temp_dir = tempfile.mkdtemp(prefix="vlmrb_ray_")
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actor cannot import a test module
        handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir)
    try:
        frames, states, _, renderer = frames_and_states("MiniGrid-DoorKey-5x5-v0", 40)
        batch = collector_batch(frames, states, 40)
        batch["observation"] = torch.zeros(1, 40, 3)
        scorer = CallableScorer(frame_sum_score, in_keys=["pixels"])
        scores = []
        for psi, where in ((None, "thread"), (renderer, backend)):
            rb = make_vlm_replay_buffer(100, scorer, clip_spec=ClipSpec(clip_len=4), renderer=psi, backend=where,
                                        sampler_kwargs={"threshold": None},
                                        scorer_options={"num_workers": 1} if where == "ray" else None)
            rb.extend(batch, clips_from=None)
            rb.flush_clips()
            rb.async_scorer.drain(timeout=120)
            scores.append(rb.sampler.scores(torch.arange(40)))
            rb.close()
        assert not scores[0].isnan().any() and torch.equal(scores[0], scores[1])
    finally:
        if backend == "ray":
            ray.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)
            for signum, handler in handlers.items():  # ray.init's SIGTERM handler outlives ray.shutdown
                signal.signal(signum, handler)
