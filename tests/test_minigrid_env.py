"""Tests for vlmrb_torchrl.envs.minigrid.env (MiniGridEnv / make_minigrid_env)."""

from __future__ import annotations

import collections
from functools import partial

import numpy as np
import pytest
import torch

pytest.importorskip("minigrid")
pytest.importorskip("gymnasium")

import gymnasium  # noqa: E402
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX  # noqa: E402
from minigrid.minigrid_env import MiniGridEnv as RawMiniGridEnv  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import ParallelEnv, SerialEnv  # noqa: E402
from torchrl.envs.utils import check_env_specs, step_mdp  # noqa: E402

import vlmrb_torchrl.envs.minigrid.env as minigrid_module  # noqa: E402
from vlmrb_torchrl.envs import (  # noqa: E402
    DOORKEY_ACTIONS,
    MINIGRID_EVENT_KEYS,
    BatchedMiniGridEnv,
    MiniGridEnv,
    make_minigrid_env,
)

DOORKEY = "MiniGrid-DoorKey-5x5-v0"
EMPTY = "MiniGrid-Empty-5x5-v0"
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = range(6)
EVENT_KEYS = ("key_picked_up", "door_opened", "goal_reached", "success")


# ---------------------------------------------------------------------------------- helpers
def reference_observation(menv) -> np.ndarray:
    """One-hot of MiniGrid's own gen_obs(), written as a plain loop (independent of the env code)."""
    obs = RawMiniGridEnv.gen_obs(menv)  # the stock implementation, whatever the instance uses
    image, direction = obs["image"], obs["direction"]
    n_obj, n_col, n_state = len(OBJECT_TO_IDX), len(COLOR_TO_IDX), len(STATE_TO_IDX)
    per_cell = n_obj + n_col + n_state
    v = image.shape[0]
    out = np.zeros(v * v * per_cell + 4, dtype=np.float32)
    for i in range(v):
        for j in range(v):
            base = (i * v + j) * per_cell
            obj, col, state = (int(x) for x in image[i, j])
            out[base + obj] = 1
            out[base + n_obj + col] = 1
            out[base + n_obj + n_col + state] = 1
    out[v * v * per_cell + direction] = 1
    return out


def find_cells(menv, obj_type: str) -> list[tuple[int, int]]:
    grid = menv.grid
    return [
        (i, j)
        for j in range(grid.height)
        for i in range(grid.width)
        if grid.get(i, j) is not None and grid.get(i, j).type == obj_type
    ]


_DIRS = [(1, 0), (0, 1), (-1, 0), (0, -1)]


def plan(menv, *, face=None, reach=None) -> list[int]:
    """BFS over (x, y, dir) with left/right/forward: actions to face ``face`` or stand on ``reach``.

    Walks over empty cells and overlappable objects (open doors, goals, floor), never lava.
    """

    def passable(x, y):
        cell = menv.grid.get(x, y)
        return cell is None or (cell.can_overlap() and cell.type != "lava")

    def done(state):
        x, y, d = state
        if reach is not None:
            return (x, y) == tuple(reach)
        dx, dy = _DIRS[d]
        return (x + dx, y + dy) == tuple(face)

    start = (int(menv.agent_pos[0]), int(menv.agent_pos[1]), int(menv.agent_dir))
    parents = {start: None}
    queue = collections.deque([start])
    while queue:
        state = queue.popleft()
        if done(state):
            actions = []
            while parents[state] is not None:
                state, action = parents[state]
                actions.append(action)
            return actions[::-1]
        x, y, d = state
        dx, dy = _DIRS[d]
        successors = [((x, y, (d - 1) % 4), LEFT), ((x, y, (d + 1) % 4), RIGHT)]
        if passable(x + dx, y + dy) or (reach is not None and (x + dx, y + dy) == tuple(reach)):
            successors.append(((x + dx, y + dy, d), FORWARD))
        for nxt, action in successors:
            if nxt not in parents:
                parents[nxt] = (state, action)
                queue.append(nxt)
    raise AssertionError(f"no path to face={face} reach={reach}")


def scripted_doorkey_episode(seed: int = 0, *, loops: bool = True, render: bool = True):
    """Solves DoorKey-5x5 with a planner; with ``loops``, also drops/re-picks the key and
    closes/reopens the door. Returns (stacked step TensorDicts, actions, event indices)."""
    env = make_minigrid_env(DOORKEY, seed=seed, render=render)
    td = env.reset()
    menv = env.unwrapped
    (key_pos,) = find_cells(menv, "key")
    (door_pos,) = find_cells(menv, "door")
    (goal_pos,) = find_cells(menv, "goal")
    steps, actions, expected = [], [], {k: [] for k in EVENT_KEYS}

    def run(seq):
        nonlocal td
        for a in seq:
            out = env.step(step_input(td, a))
            steps.append(out)
            actions.append(a)
            td = step_mdp(out)

    run(plan(menv, face=key_pos) + [PICKUP])
    expected["key_picked_up"].append(len(actions) - 1)
    if loops:
        run([DROP, PICKUP])  # same key again: must not fire
    run(plan(menv, face=door_pos) + [TOGGLE])
    expected["door_opened"].append(len(actions) - 1)
    if loops:
        run([TOGGLE, TOGGLE])  # close and reopen: must not fire
    run(plan(menv, reach=goal_pos))
    expected["goal_reached"].append(len(actions) - 1)
    expected["success"].append(len(actions) - 1)
    env.close()
    return torch.stack(steps), actions, expected


# ------------------------------------------------------------------------------------ tests
class TestMiniGridEnv:
    # construction errors ---------------------------------------------------------------
    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"env_id": "MiniGrid-NoSuchEnv-v0"}, ValueError, "could not make env_id='MiniGrid-NoSuchEnv-v0'"),
            ({"env_id": "CartPole-v1"}, ValueError, "needs a MiniGrid env id"),
            ({"frame_size": 0}, ValueError, "frame_size must be an int >= 1"),
            ({"max_episode_steps": 0}, ValueError, "max_episode_steps must be None or an int >= 1"),
        ],
    )
    def test_construction_errors(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            make_minigrid_env(**kwargs)

    @pytest.mark.parametrize("actions", [["left", "jump"], ["left", "left"], [], "left"])
    def test_bad_action_subset(self, actions):
        with pytest.raises(ValueError, match="MiniGridEnv.actions=.* expected distinct names from"):
            make_minigrid_env(DOORKEY, actions=actions)

    def test_action_subset_maps_indices_to_minigrid_actions(self):
        check_env_specs(make_minigrid_env(DOORKEY, seed=0, actions=DOORKEY_ACTIONS))
        env = make_minigrid_env(DOORKEY, seed=1, render=False, actions=DOORKEY_ACTIONS)
        assert env.action_spec.n == 5 and env.action_names == list(DOORKEY_ACTIONS)
        ref = make_minigrid_env(DOORKEY, seed=1, render=False)
        td, td_ref = env.reset(), ref.reset()
        rng = np.random.default_rng(0)
        positions = set()
        for _ in range(200):  # index i of the subset acts exactly like MiniGrid's own DOORKEY_ACTIONS[i]
            i = int(rng.integers(5))
            full = ref.action_names.index(DOORKEY_ACTIONS[i])
            td = step_mdp(env.step(td.set("action", torch.tensor(i))))
            td_ref = step_mdp(ref.step(td_ref.set("action", torch.tensor(full))))
            assert torch.equal(td["observation"], td_ref["observation"])
            positions.add(tuple(env.unwrapped.agent_pos))
            if td["done"].any():
                td, td_ref = env.reset(), ref.reset()
        assert len(positions) > 1

    def test_missing_minigrid_raises_import_error(self, monkeypatch):
        monkeypatch.setattr(minigrid_module, "_has_minigrid", False)
        with pytest.raises(ImportError, match=r"pip install 'vlmrb-torchrl\[minigrid\]'"):
            make_minigrid_env()

    # specs -------------------------------------------------------------------------------
    @pytest.mark.parametrize("render", [True, False])
    def test_specs(self, render):
        env = make_minigrid_env(DOORKEY, seed=0, render=render)
        check_env_specs(env)
        obs_spec = env.observation_spec
        assert obs_spec["observation"].shape == (7 * 7 * 20 + 4,)
        assert obs_spec["observation"].dtype == torch.float32
        assert ("pixels" in obs_spec.keys()) is render
        if render:
            assert obs_spec["pixels"].shape == (60, 60, 3) and obs_spec["pixels"].dtype == torch.uint8
        for key in MINIGRID_EVENT_KEYS:
            assert obs_spec[key].shape == (1,) and obs_spec[key].dtype == torch.bool
        assert env.action_spec.n == 7 and env.action_spec.shape == () and env.action_spec.dtype == torch.int64
        assert env.action_names == ["left", "right", "forward", "pickup", "drop", "toggle", "done"]
        assert env.reward_spec.shape == (1,) and env.reward_spec.dtype == torch.float32
        assert set(env.done_keys) == {"done", "terminated", "truncated"}
        td = env.reset()
        assert td["observation"].sum() == 7 * 7 * 3 + 1  # one-hot: 3 ones per cell + direction
        for key in MINIGRID_EVENT_KEYS:
            assert not td[key].any()
        assert env.mission == "use the key to open the door and then get to the goal"

    def test_factory_builds_the_class(self):
        env = make_minigrid_env(DOORKEY, seed=0, render=False, max_episode_steps=9)
        direct = MiniGridEnv(DOORKEY, seed=0, render=False, max_episode_steps=9)
        assert type(env) is MiniGridEnv and env.max_episode_steps == 9
        assert (env.reset() == direct.reset()).all()

    @pytest.mark.parametrize(
        "env_id, env_kwargs, frame_shape, obs_dim",
        [
            ("MiniGrid-DoorKey-8x8-v0", None, (64, 64, 3), 984),
            ("MiniGrid-DoorKey-16x16-v0", None, (64, 64, 3), 984),
            ("MiniGrid-KeyCorridorS3R1-v0", None, (27, 63, 3), 984),  # 7x3 grid, tile 9
            ("MiniGrid-Empty-5x5-v0", {"agent_view_size": 5}, (60, 60, 3), 5 * 5 * 20 + 4),
        ],
    )
    def test_shapes_other_ids(self, env_id, env_kwargs, frame_shape, obs_dim):
        env = make_minigrid_env(env_id, seed=0, env_kwargs=env_kwargs)
        td = env.rollout(3)
        assert td["next", "pixels"].shape == (3, *frame_shape)
        assert td["next", "observation"].shape == (3, obs_dim)

    # observation -------------------------------------------------------------------------
    @pytest.mark.parametrize(
        "env_id, env_kwargs, fast_obs",
        [
            (DOORKEY, None, True),
            (DOORKEY, None, False),
            ("MiniGrid-DoorKey-8x8-v0", None, True),
            ("MiniGrid-MultiRoom-N2-S4-v0", None, True),
            ("MiniGrid-KeyCorridorS3R1-v0", None, True),
            ("MiniGrid-Empty-8x8-v0", None, True),  # see_through_walls=True
            ("MiniGrid-LavaGapS5-v0", {"agent_view_size": 3}, True),
        ],
    )
    def test_observation_matches_gen_obs(self, env_id, env_kwargs, fast_obs):
        env = make_minigrid_env(env_id, seed=1, render=False, env_kwargs=env_kwargs, fast_obs=fast_obs)
        assert env.fast_obs is fast_obs
        rng = np.random.default_rng(0)
        td = env.reset()
        np.testing.assert_array_equal(td["observation"].numpy(), reference_observation(env.unwrapped))
        for _ in range(300):
            # mostly forward/turns so the agent explores; pickups/toggles change the grid
            action = int(rng.choice([LEFT, RIGHT, FORWARD, FORWARD, PICKUP, DROP, TOGGLE]))
            td = env.step(step_input(td, action))["next"]
            np.testing.assert_array_equal(td["observation"].numpy(), reference_observation(env.unwrapped))
            if td["done"].item():
                td = env.reset()
                np.testing.assert_array_equal(td["observation"].numpy(), reference_observation(env.unwrapped))

    # pixels ------------------------------------------------------------------------------
    @pytest.mark.parametrize(
        "env_id", [DOORKEY, "MiniGrid-DoorKey-8x8-v0", "MiniGrid-KeyCorridorS3R1-v0", "MiniGrid-MultiRoom-N2-S4-v0"]
    )
    def test_pixels_match_minigrid_render(self, env_id):
        env = make_minigrid_env(env_id, seed=2)
        menv = env.unwrapped
        rng = np.random.default_rng(1)
        td = env.reset()
        for _ in range(150):
            out = env.step(step_input(td, int(rng.choice([LEFT, RIGHT, FORWARD, FORWARD, PICKUP, TOGGLE]))))
            if out["next", "done"]:
                td = env.reset()
                continue
            expected = menv.get_frame(highlight=False, tile_size=env.tile_size)
            np.testing.assert_array_equal(out["next", "pixels"].numpy(), expected)
            td = out["next"]

    def test_pixels_change_when_agent_moves(self):
        env = make_minigrid_env("MiniGrid-Empty-5x5-v0", seed=0)
        td = env.reset()
        menv = env.unwrapped
        before = td["pixels"].clone()
        assert before.dtype == torch.uint8 and before.shape == (60, 60, 3)
        actions = plan(menv, reach=_free_neighbour(menv))
        pos0 = tuple(menv.agent_pos)
        for a in actions:
            td = env.step(step_input(td, a))["next"]
        assert tuple(menv.agent_pos) != pos0
        assert not torch.equal(td["pixels"], before)
        # turning in place also changes the frame (agent triangle)
        out = env.step(step_input(td, LEFT))
        assert not torch.equal(out["next", "pixels"], td["pixels"])

    # determinism -------------------------------------------------------------------------
    def test_seed_is_deterministic(self):
        actions = torch.randint(0, 6, (200,), generator=torch.Generator().manual_seed(0))
        runs = []
        for _ in range(2):
            env = make_minigrid_env("MiniGrid-DoorKey-8x8-v0", seed=7)
            td = env.reset()
            frames = []
            for a in actions:
                out, td = env.step_and_maybe_reset(step_input(td, int(a)))
                frames.append(out["next"].select("observation", "pixels", "reward", "done"))
            runs.append(torch.stack(frames))
        assert (runs[0] == runs[1]).all()

    def test_seed_reproduces_gymnasium_reset(self):
        env = make_minigrid_env("MiniGrid-DoorKey-8x8-v0", seed=3)
        env.reset()
        ref = gymnasium.make("MiniGrid-DoorKey-8x8-v0")
        ref.reset(seed=3)
        np.testing.assert_array_equal(env.unwrapped.grid.encode(), ref.unwrapped.grid.encode())
        assert tuple(env.unwrapped.agent_pos) == tuple(ref.unwrapped.agent_pos)
        # set_seed applies at the next reset; different seeds give different layouts
        layouts = set()
        for seed in range(6):
            env.set_seed(seed)
            env.reset()
            layouts.add(env.unwrapped.grid.encode().tobytes() + bytes(env.unwrapped.agent_pos))
        assert len(layouts) > 1
        env.set_seed(3)
        env.reset()
        np.testing.assert_array_equal(env.unwrapped.grid.encode(), ref.unwrapped.grid.encode())

    # time limits -------------------------------------------------------------------------
    def test_max_episode_steps_truncates(self):
        env = make_minigrid_env(DOORKEY, seed=0, render=False, max_episode_steps=5)
        td = env.rollout(12, policy=lambda td: td.set("action", torch.tensor(LEFT)), break_when_any_done=False)
        nxt = td["next"]
        assert nxt["truncated"].squeeze(-1).tolist() == [False] * 4 + [True] + [False] * 4 + [True] + [False] * 2
        assert not nxt["terminated"].any()
        assert (nxt["done"] == nxt["truncated"]).all()

    def test_minigrid_max_steps_reported_as_truncated(self):
        env = make_minigrid_env(DOORKEY, seed=0, render=False, env_kwargs={"max_steps": 3})
        td = env.rollout(10, policy=lambda td: td.set("action", torch.tensor(RIGHT)))
        assert td.shape == (3,)
        assert td["next", "truncated"][-1].item() and not td["next", "terminated"].any()

    # events ------------------------------------------------------------------------------
    @pytest.mark.parametrize("seed", [0, 1, 2])
    @pytest.mark.parametrize("loops", [False, True])
    def test_doorkey_events_fire_once(self, seed, loops):
        steps, actions, expected = scripted_doorkey_episode(seed, loops=loops, render=False)
        nxt = steps["next"]
        n = len(actions)
        for key in EVENT_KEYS:
            fired = nxt[key].squeeze(-1).nonzero().flatten().tolist()
            assert fired == expected[key], (key, actions)
        progress = sorted(set(sum(expected.values(), [])))
        assert nxt["progress_event"].squeeze(-1).nonzero().flatten().tolist() == progress
        assert len(progress) == 3
        assert nxt["terminated"].squeeze(-1).nonzero().flatten().tolist() == [n - 1]
        assert not nxt["truncated"].any()
        assert nxt["reward"][-1].item() > 0 and (nxt["reward"][:-1] == 0).all()
        if loops:
            assert actions[expected["key_picked_up"][0] + 1 : expected["key_picked_up"][0] + 3] == [DROP, PICKUP]
            assert actions[expected["door_opened"][0] + 1 : expected["door_opened"][0] + 3] == [TOGGLE, TOGGLE]

    def test_events_reset_with_episode(self):
        env = make_minigrid_env(DOORKEY, seed=0, render=False)
        counts = []
        for _ in range(2):
            td = env.reset()
            menv = env.unwrapped
            (key_pos,) = find_cells(menv, "key")
            fired = 0
            for a in plan(menv, face=key_pos) + [PICKUP]:
                td = env.step(step_input(td, a))["next"]
                fired += int(td["key_picked_up"].item())
            counts.append(fired)
        assert counts == [1, 1]

    def test_empty_env_goal_only(self):
        env = make_minigrid_env("MiniGrid-Empty-5x5-v0", seed=0, render=False)
        td = env.reset()
        (goal_pos,) = find_cells(env.unwrapped, "goal")
        outs = []
        for a in plan(env.unwrapped, reach=goal_pos):
            out = env.step(step_input(td, a))
            outs.append(out)
            td = step_mdp(out)
        nxt = torch.stack(outs)["next"]
        assert not nxt["key_picked_up"].any() and not nxt["door_opened"].any()
        last = len(outs) - 1
        for key in ("goal_reached", "success", "progress_event", "terminated"):
            assert nxt[key].squeeze(-1).nonzero().flatten().tolist() == [last], key

    def test_lava_terminates_without_success(self):
        env = make_minigrid_env("MiniGrid-LavaGapS5-v0", seed=0, render=False)
        td = env.reset()
        lava = find_cells(env.unwrapped, "lava")[0]
        for a in plan(env.unwrapped, face=lava) + [FORWARD]:
            out = env.step(step_input(td, a))
            td = out["next"]
        assert td["terminated"].item() and td["done"].item()
        assert not td["success"].item() and not td["progress_event"].item() and td["reward"].item() == 0

    # batched envs and collectors -------------------------------------------------------------
    def test_serial_env_and_dqn_modules(self):
        from torchrl.modules import MLP, QValueActor
        from torchrl.objectives import DQNLoss

        env = SerialEnv(2, partial(make_minigrid_env, DOORKEY, render=False))
        env.set_seed(0)
        assert env.mission == ["use the key to open the door and then get to the goal"] * 2
        qnet = MLP(in_features=984, out_features=7, num_cells=[16])
        actor = QValueActor(qnet, in_keys=["observation"], spec=env.action_spec_unbatched)
        data = env.rollout(20, actor, break_when_any_done=False)
        assert data["action"].shape == (2, 20) and data["action"].dtype == torch.int64
        loss = DQNLoss(actor, action_space=env.action_spec_unbatched, delay_value=False)
        loss.make_value_estimator(gamma=0.99)
        value = loss(data.reshape(-1))["loss"]
        assert torch.isfinite(value)
        env.close()

    @pytest.mark.slow  # spawns worker processes
    def test_parallel_env_collector(self):
        env = ParallelEnv(2, partial(make_minigrid_env, DOORKEY, render=True))
        env.set_seed(0)
        assert list(env.mission) == ["use the key to open the door and then get to the goal"] * 2
        collector = Collector(env, None, frames_per_batch=200, total_frames=400)
        batches = list(collector)
        collector.shutdown()
        assert len(batches) == 2
        batch = batches[-1]
        assert batch.batch_size == (2, 100)
        assert batch["next", "pixels"].shape == (2, 100, 60, 60, 3) and batch["next", "pixels"].dtype == torch.uint8
        assert batch["next", "observation"].shape == (2, 100, 984)
        assert batch["collector", "traj_ids"].shape == (2, 100)
        for key in MINIGRID_EVENT_KEYS:
            assert batch["next", key].shape == (2, 100, 1) and batch["next", key].dtype == torch.bool
        # progress_event is the OR of the other flags
        others = torch.stack([batch["next", k] for k in EVENT_KEYS]).any(0)
        assert (batch["next", "progress_event"] == others).all()

    def test_single_env_collector(self):
        collector = Collector(
            partial(make_minigrid_env, "MiniGrid-Empty-5x5-v0", seed=0), None, frames_per_batch=100, total_frames=300
        )
        n = 0
        for batch in collector:
            assert batch.batch_size == (100,)
            assert batch["next", "pixels"].shape == (100, 60, 60, 3)
            n += batch.numel()
        collector.shutdown()
        assert n == 300


# ------------------------------------------------------------------- index observations
class TestIndexObservation:
    def test_indices_are_the_positions_of_the_one_hot_ones(self):
        onehot = make_minigrid_env("MiniGrid-DoorKey-6x6-v0", seed=2, render=False)
        indices = make_minigrid_env("MiniGrid-DoorKey-6x6-v0", seed=2, render=False, observation="indices")
        spec = indices.observation_spec["observation"]
        assert spec.shape == (148,) and spec.dtype == torch.int16 and int(spec.space.high.max()) == 983
        check_env_specs(make_minigrid_env(DOORKEY, seed=0, render=True, observation="indices"))
        a, b = onehot.reset(), indices.reset()
        gen = torch.Generator().manual_seed(0)
        for _ in range(300):  # random walk through resets: the encodings agree at every step
            x, idx = a["observation"], b["observation"].long()
            assert idx.unique().numel() == 148  # distinct positions, as a one-hot has
            assert torch.equal(torch.zeros(984).scatter_(0, idx, 1.0), x)
            assert torch.equal(x, torch.from_numpy(reference_observation(onehot.unwrapped)))
            action = int(torch.randint(7, (), generator=gen))
            a, b = onehot.step(step_input(a, action)), indices.step(step_input(b, action))
            if a["next", "done"]:
                a, b = onehot.reset(), indices.reset()
            else:
                a, b = step_mdp(a), step_mdp(b)

    def test_unknown_encoding_is_refused(self):
        with pytest.raises(ValueError, match=r"observation must be one of \('onehot', 'indices'\)"):
            make_minigrid_env(DOORKEY, observation="dense")


# ---------------------------------------------------------------------- fully observed state
def reference_full_state(menv) -> np.ndarray:
    """The full view's one-hot written as a plain loop over MiniGrid's own grid.encode()."""
    objects = [k for k, _ in sorted(OBJECT_TO_IDX.items(), key=lambda kv: kv[1]) if k != "empty"]
    colors = [k for k, _ in sorted(COLOR_TO_IDX.items(), key=lambda kv: kv[1]) if k != "grey"]
    states = [k for k, _ in sorted(STATE_TO_IDX.items(), key=lambda kv: kv[1]) if k != "open"]
    name = {**{v: k for k, v in OBJECT_TO_IDX.items()}}
    cname = {v: k for k, v in COLOR_TO_IDX.items()}
    sname = {v: k for k, v in STATE_TO_IDX.items()}
    per_cell = len(objects) + len(colors) + len(states)
    w, h = menv.width, menv.height
    vec = np.zeros(w * h * per_cell + w * h + 4 + len(objects) + len(colors), dtype=np.float32)
    grid = menv.grid.encode()  # [w, h, 3]
    for y in range(h):
        for x in range(w):
            obj, col, state = grid[x, y]
            if name[obj] == "empty":
                continue  # an empty cell is all zeros (its colour code is filler)
            base = (y * w + x) * per_cell
            vec[base + objects.index(name[obj])] = 1
            if cname[col] != "grey":
                vec[base + len(objects) + colors.index(cname[col])] = 1
            if sname[state] != "open":
                vec[base + len(objects) + len(colors) + states.index(sname[state])] = 1
    offset = w * h * per_cell
    vec[offset + int(menv.agent_pos[1]) * w + int(menv.agent_pos[0])] = 1
    vec[offset + w * h + int(menv.agent_dir)] = 1
    if menv.carrying is not None:
        obj, col, _ = menv.carrying.encode()
        vec[offset + w * h + 4 + objects.index(name[obj])] = 1
        if cname[col] != "grey":
            vec[offset + w * h + 4 + len(objects) + colors.index(cname[col])] = 1
    return vec


class TestFullView:
    @pytest.mark.parametrize("env_id", ["MiniGrid-DoorKey-5x5-v0", "MiniGrid-DoorKey-12x12-v0", "MiniGrid-LavaGapS5-v0"])
    def test_matches_the_reference_encoding_and_indices(self, env_id):
        onehot = make_minigrid_env(env_id, seed=3, render=False, view="full")
        indices = make_minigrid_env(env_id, seed=3, render=False, view="full", observation="indices")
        menv = onehot.unwrapped
        cells = menv.width * menv.height
        dim = cells * 17 + cells + 4 + 15
        spec = indices.observation_spec["observation"]
        assert onehot.observation_spec["observation"].shape == (dim,)
        assert spec.shape == (3 * cells + 4,) and spec.dtype == torch.int16
        assert int(spec.space.low.min()) == -1 and int(spec.space.high.max()) == dim - 1
        a, b = onehot.reset(), indices.reset()
        gen = torch.Generator().manual_seed(0)
        carried = False
        for _ in range(400):  # random walk through resets (pickups, door toggles): the encodings agree
            x, idx = a["observation"], b["observation"].long()
            ones = idx[idx >= 0]
            assert (idx[len(ones):] == -1).all() and ones.unique().numel() == ones.numel()
            assert torch.equal(torch.zeros(dim).scatter_(0, ones, 1.0), x)
            assert torch.equal(x, torch.from_numpy(reference_full_state(menv)))
            carried |= menv.carrying is not None
            action = int(torch.randint(6, (), generator=gen))
            a, b = onehot.step(step_input(a, action)), indices.step(step_input(b, action))
            if a["next", "done"]:
                a, b = onehot.reset(), indices.reset()
            else:
                a, b = step_mdp(a), step_mdp(b)
        assert carried or "Lava" in env_id  # the carried-object channels were exercised

    def test_empty_cells_cost_nothing_and_the_agent_moves(self):
        env = make_minigrid_env("MiniGrid-Empty-5x5-v0", seed=0, render=False, view="full", observation="indices")
        obs = env.reset()["observation"]
        # 16 border walls (one channel each), the goal (object + green), the agent's cell and direction
        assert int((obs >= 0).sum()) == 16 + 2 + 2
        moved = env.step(step_input(env.reset(), FORWARD))["next", "observation"]
        assert not torch.equal(moved, obs)

    def test_carried_key(self):
        env = make_minigrid_env(DOORKEY, seed=0, render=False, view="full")
        env.reset()
        menv = env.unwrapped
        from minigrid.core.world_object import Key

        menv.carrying = Key("yellow")
        vec = env._obs({})
        w = menv.width * menv.height
        carry = w * 17 + w + 4
        assert vec[carry + 4] == 1  # key: the 5th object channel (unseen, wall, floor, door, key, ...)
        assert vec[carry + 10 + 4] == 1  # yellow: the 5th colour channel (red, green, blue, purple, yellow)

    def test_both_is_the_partial_view_then_the_full_state(self):
        kwargs = {"seed": 4, "render": False}
        both = make_minigrid_env("MiniGrid-DoorKey-8x8-v0", view="both", observation="indices", **kwargs)
        parts = [make_minigrid_env("MiniGrid-DoorKey-8x8-v0", view=v, observation="indices", **kwargs)
                 for v in ("partial", "full")]
        dense = make_minigrid_env("MiniGrid-DoorKey-8x8-v0", view="both", **kwargs)
        partial_dim = 984
        tds = [env.reset() for env in (both, *parts, dense)]
        for step in range(60):
            b, p, f, d = (td["observation"] for td in tds)
            assert torch.equal(b[:148], p)  # the egocentric view's positions first
            full_ones = f[f >= 0].long() + partial_dim
            assert torch.equal(b[148 : 148 + full_ones.numel()].long(), full_ones)
            assert (b[148 + full_ones.numel():] == -1).all()
            assert torch.equal(torch.zeros(d.shape[0]).scatter_(0, b[b >= 0].long(), 1.0), d)
            action = (FORWARD, LEFT, PICKUP, TOGGLE, RIGHT)[step % 5]
            tds = [env.step(step_input(td, action)) for env, td in zip((both, *parts, dense), tds)]
            tds = [step_mdp(td) for td in tds]
        assert dense.observation_spec["observation"].shape == (partial_dim + 64 * 17 + 64 + 4 + 15,)

    def test_batched_env_and_unknown_view(self):
        kwargs = {"render": False, "view": "full", "observation": "indices"}
        batched = BatchedMiniGridEnv(3, "MiniGrid-DoorKey-6x6-v0", seed=0, **kwargs)
        serial = SerialEnv(3, partial(make_minigrid_env, "MiniGrid-DoorKey-6x6-v0", **kwargs))
        serial.set_seed(0)
        actions = torch.randint(5, (3, 50), generator=torch.Generator().manual_seed(0))
        ours = batched.rollout(50, _Scripted(actions), break_when_any_done=False)
        theirs = serial.rollout(50, _Scripted(actions), break_when_any_done=False)
        assert torch.equal(ours["next", "observation"], theirs["next", "observation"])
        check_env_specs(batched)
        with pytest.raises(ValueError, match=r"view must be one of \('partial', 'full', 'both'\)"):
            make_minigrid_env(DOORKEY, view="global")


class TestGridCodeCache:
    """The views re-encode the grid only when a cell changed (_GridWatcher): every way a cell changes
    shows in the next observation, which stays equal to MiniGrid's own encodings."""

    @staticmethod
    def reference_both(menv) -> np.ndarray:
        return np.concatenate([reference_observation(menv), reference_full_state(menv)])

    @pytest.mark.parametrize(
        "env_id, env_kwargs",
        [
            ("MiniGrid-Dynamic-Obstacles-6x6-v0", None),  # obstacles move by themselves
            ("MiniGrid-MultiRoom-N2-S4-v0", None),  # doors open and close
            ("MiniGrid-DoorKey-8x8-v0", {"agent_view_size": 9}),  # a wider view than the 7x7 default
            ("MiniGrid-FourRooms-v0", {"agent_view_size": 15}),  # the widest fast view, walls to see past
            ("MiniGrid-LavaGapS5-v0", {"agent_view_size": 3}),
        ],
    )
    def test_both_views_match_minigrid_through_a_random_walk(self, env_id, env_kwargs):
        env = make_minigrid_env(env_id, seed=2, render=False, view="both", env_kwargs=env_kwargs)
        assert env.fast_obs
        menv = env.unwrapped
        rng = np.random.default_rng(1)
        td = env.reset()
        for _ in range(300):
            np.testing.assert_array_equal(td["observation"].numpy(), self.reference_both(menv))
            action = int(rng.choice([LEFT, RIGHT, FORWARD, FORWARD, PICKUP, DROP, TOGGLE]))
            td = env.step(step_input(td, action))["next"]
            if td["done"].item():
                np.testing.assert_array_equal(td["observation"].numpy(), self.reference_both(menv))
                td = env.reset()

    def test_changes_made_outside_a_step_are_seen(self):
        from minigrid.core.world_object import Ball, Door

        env = make_minigrid_env(DOORKEY, seed=0, render=False, view="both")
        td = env.reset()
        menv = env.unwrapped
        (door_pos,) = find_cells(menv, "door")
        door = menv.grid.get(*door_pos)
        before = td["observation"]
        agent = (int(menv.agent_pos[0]), int(menv.agent_pos[1]))
        x, y = next((i, j) for j in range(menv.height) for i in range(menv.width)
                    if menv.grid.get(i, j) is None and (i, j) != agent)
        edits = [
            lambda: menv.grid.set(x, y, Ball("purple")),  # an object placed
            lambda: setattr(door, "is_locked", False),  # a door's state: its code and see-through flag
            lambda: setattr(door, "is_open", True),
            lambda: menv.grid.set(*door_pos, Door("red", is_open=True)),  # replaced by an equal-looking object
            lambda: menv.grid.set(x, y, None),  # removed
            lambda: setattr(menv, "grid", menv.grid.copy()),  # a new grid
        ]
        for edit in edits:
            edit()
            obs = env._obs(menv.gen_obs())
            np.testing.assert_array_equal(obs, self.reference_both(menv))
        assert not np.array_equal(obs, before.numpy())  # the door is open now

    def test_views_wider_than_15_cells_use_minigrid_own_code(self):
        env = make_minigrid_env(EMPTY, seed=0, render=False, env_kwargs={"agent_view_size": 17})
        assert not env.fast_obs
        td = env.reset()
        np.testing.assert_array_equal(td["observation"].numpy(), reference_observation(env.unwrapped))


def test_doorkey_12x12_is_registered():
    env = make_minigrid_env("MiniGrid-DoorKey-12x12-v0", seed=0, render=True)
    td = env.reset()
    assert env.unwrapped.max_steps == 10 * 12 * 12 and td["pixels"].shape == (64, 64, 3)
    assert "MiniGrid-DoorKey-12x12-v0" in gymnasium.registry
    assert minigrid_module.register_extra_envs() == []  # idempotent


# grid frames: where the grid sits -------------------------------------------------------------
def _frames_of_random_play(env, steps: int = 6):
    """The env's frame at reset and after ``steps`` random actions (turns, moves, pickups, toggles), each
    with the raw env it shows."""
    rng = np.random.default_rng(0)
    td = env.reset()
    yield td["pixels"].numpy()
    for _ in range(steps):
        out = env.step(step_input(td, int(rng.choice([LEFT, FORWARD, FORWARD, PICKUP, TOGGLE]))))
        if out["next", "done"]:
            return
        yield out["next", "pixels"].numpy()
        td = out["next"]


@pytest.mark.parametrize(
    "size, frame",
    [
        ((5, 5), (12, 60, 60, 0, 0)),  # DoorKey-5x5
        ((6, 6), (10, 60, 60, 0, 0)),
        ((8, 8), (8, 64, 64, 0, 0)),
        ((9, 9), (7, 63, 63, 0, 0)),  # LavaCrossingS9N1
        ((10, 10), (6, 60, 60, 0, 0)),
        ((11, 11), (4, 64, 64, 8, 8)),  # 44 px, on the 4-px lattice: 8 px above, 12 below
        ((12, 12), (4, 64, 64, 8, 8)),  # DoorKey-12x12: 48 px, 8 px each side
        ((13, 13), (4, 52, 52, 0, 0)),
        ((16, 16), (4, 64, 64, 0, 0)),
        ((25, 25), (4, 100, 100, 0, 0)),  # MultiRoom-N2-S4
        ((11, 6), (5, 30, 55, 0, 0)),  # UnlockPickup: 5-px cells, but not square
        ((12, 6), (5, 30, 60, 0, 0)),  # RedBlueDoors-6x6
        ((7, 3), (9, 27, 63, 0, 0)),  # KeyCorridorS3R1
    ],
)
def test_grid_frame_layout_per_grid(size, frame):
    assert tuple(minigrid_module.grid_frame_layout(*size)) == frame


def test_doorkey_12x12_frames_are_4px_tiles_in_a_64px_frame():
    env = make_minigrid_env("MiniGrid-DoorKey-12x12-v0", seed=1)
    assert env.tile_size == 4 and env.observation_spec["pixels"].shape == (64, 64, 3)
    menv = env.unwrapped
    frames = 0
    for frame in _frames_of_random_play(env, steps=20):
        assert frame.shape == (64, 64, 3)
        np.testing.assert_array_equal(frame[8:56, 8:56], menv.get_frame(highlight=False, tile_size=4))
        inner = np.zeros(frame.shape[:2], dtype=bool)
        inner[8:56, 8:56] = True
        assert not frame[~inner].any()  # a black margin
        frames += 1
    assert frames == 21


def _shipped_grid_model_envs() -> list[str]:
    """Every env a recorded number of the shipped grid model was measured on (docs/builtin_scorer.md): its
    training and held-out layouts (its training.json), the family benchmark's sets, the next build's layouts."""
    import json

    from vlmrb_torchrl.envs.minigrid.training import (
        BENCHMARK_TRAIN_ENVS, HELD_OUT_LAYOUTS, LARGE_GRID_ENVS, TRAIN_LAYOUTS)

    from vlmrb_torchrl.scorers.builtin import builtin_model_dir

    report = json.loads((builtin_model_dir("minigrid") / "training.json").read_text())
    ids = [lay["env_id"] for lay in report["layouts"]] + list(report["held_out_layouts"])
    ids += [*BENCHMARK_TRAIN_ENVS, *HELD_OUT_LAYOUTS, *LARGE_GRID_ENVS, *(lay.env_id for lay in TRAIN_LAYOUTS)]
    return sorted(set(ids) - {"MiniGrid-DoorKey-12x12-v0"})  # the one grid redrawn on purpose (above)


@pytest.mark.parametrize("env_id", _shipped_grid_model_envs())
def test_grid_frames_unchanged_where_the_shipped_model_was_measured(env_id):
    # the rule before 4-px tiles on a 64-px frame for 11x11/12x12, written out: the shipped scorers'
    # recorded numbers hold only while these frames stay what they were, pixel for pixel
    env = make_minigrid_env(env_id, seed=0)
    menv = env.unwrapped
    tile = max(4, 64 // max(menv.width, menv.height))
    assert env.observation_spec["pixels"].shape == (menv.height * tile, menv.width * tile, 3)
    for frame in _frames_of_random_play(env):
        np.testing.assert_array_equal(frame, menv.get_frame(highlight=False, tile_size=tile))


class TestBatchedMiniGridEnv:
    @pytest.mark.parametrize(("render", "observation"), [(False, "onehot"), (True, "indices")])
    def test_same_data_as_serial_env_step_for_step(self, render, observation):
        kwargs = {"render": render, "actions": DOORKEY_ACTIONS, "observation": observation}
        batched = BatchedMiniGridEnv(6, DOORKEY, **kwargs)
        serial = SerialEnv(6, partial(make_minigrid_env, DOORKEY, **kwargs))
        assert batched.set_seed(11) == serial.set_seed(11)  # the same per-copy seeds, the same next seed
        actions = torch.randint(5, (6, 400), generator=torch.Generator().manual_seed(0))
        ours, theirs = batched.rollout(400, _Scripted(actions), break_when_any_done=False), \
            serial.rollout(400, _Scripted(actions), break_when_any_done=False)
        assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
        for key in theirs.keys(True, True):
            assert torch.equal(ours[key], theirs[key]), key
        assert theirs["next", "done"].sum() >= 6  # partial resets happened (episodes end at different steps)
        assert theirs["next", "success"].any()
        assert batched.mission == serial.mission

    def test_specs_collector_and_errors(self):
        env = BatchedMiniGridEnv(3, DOORKEY, seed=0, render=False, observation="indices")
        check_env_specs(env)
        assert env.batch_size == (3,) and len(env.envs) == 3
        collector = Collector(env, None, frames_per_batch=60, total_frames=120)
        batch = next(iter(collector))
        collector.shutdown()
        assert batch.batch_size == (3, 20) and batch["next", "observation"].dtype == torch.int16
        with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
            BatchedMiniGridEnv(0, DOORKEY)


class TestBatchedMiniGridCollector:
    @staticmethod
    def _policy(env, seed: int = 0):
        from torchrl.modules import QValueActor

        from vlmrb_torchrl.recipes.dqn import make_policy, make_q_network

        torch.manual_seed(seed)
        spec = env.observation_spec["observation"]
        qnet = QValueActor(make_q_network(spec[0], env.action_spec.space.n, 16), in_keys=["observation"],
                           spec=env.action_spec[0])
        return make_policy(qnet, env.action_spec[0], eps_init=0.9, eps_end=0.9, steps=1)

    @pytest.mark.parametrize(("render", "observation"), [(False, "indices"), (True, "onehot")])
    def test_same_batches_and_random_draws_as_torchrl_collector(self, render, observation):
        from vlmrb_torchrl.envs.minigrid.env import BatchedMiniGridCollector

        # Empty-5x5, episodes of at most 30 steps: random successes and truncations at different steps in each copy
        kwargs = {"render": render, "actions": ("left", "right", "forward"), "observation": observation,
                  "max_episode_steps": 30}
        policy = self._policy(BatchedMiniGridEnv(1, EMPTY, **kwargs))
        runs = {}
        for name in ("torchrl", "ours"):
            env = BatchedMiniGridEnv(4, EMPTY, **kwargs)
            env.set_seed(5)
            torch.manual_seed(1)
            if name == "torchrl":
                collector = Collector(env, policy, frames_per_batch=64, total_frames=64 * 10, device="cpu",
                                      auto_register_policy_transforms=False)
            else:
                collector = BatchedMiniGridCollector(env, policy, frames_per_batch=64, total_frames=64 * 10)
            runs[name] = ([batch.clone() for batch in collector], torch.get_rng_state())
            collector.shutdown()
        (theirs, rng_theirs), (ours, rng_ours) = runs["torchrl"], runs["ours"]
        assert len(ours) == len(theirs) == 10
        assert torch.equal(rng_ours, rng_theirs)  # the same epsilon-greedy draws, construction included
        for a, b in zip(ours, theirs):
            assert a.batch_size == b.batch_size == (4, 16) and a.names == b.names
            assert set(a.keys(True, True)) == set(b.keys(True, True))
            for key in b.keys(True, True):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        done = torch.cat([b["next", "done"] for b in theirs], 1)
        terminated = torch.cat([b["next", "terminated"] for b in theirs], 1)
        assert done.sum() >= 20 and terminated.sum() >= 3 and (done & ~terminated).any()
        assert int(theirs[-1]["collector", "traj_ids"].max()) >= 20  # new trajectory ids were handed out

    def test_make_collector_picks_it_for_minigrid_and_torchrl_otherwise(self):
        from vlmrb_torchrl.envs.minigrid.env import BatchedMiniGridCollector
        from vlmrb_torchrl.recipes.envs import env_factory, make_collector

        factory = env_factory(DOORKEY, render=False, observation="indices", actions=DOORKEY_ACTIONS)
        policy = self._policy(BatchedMiniGridEnv(1, DOORKEY, render=False, observation="indices",
                                                 actions=DOORKEY_ACTIONS))
        kwargs = dict(num_envs=2, frames_per_batch=8, total_frames=20, seed=0, env_steps=4)
        fast = make_collector(factory, policy, **kwargs)
        assert isinstance(fast, BatchedMiniGridCollector) and fast.total_frames == 16  # whole batches
        assert [b.batch_size for b in fast] == [(2, 4), (2, 4)]
        fast.shutdown()
        for other in (dict(parallel=False, init_random_frames=8), ):
            slow = make_collector(factory, policy, **kwargs, **other)
            assert isinstance(slow, Collector)
            slow.shutdown()
        with pytest.raises(TypeError, match="needs a policy with act"):
            BatchedMiniGridCollector(BatchedMiniGridEnv(2, DOORKEY), lambda td: td, frames_per_batch=8, total_frames=8)
        with pytest.raises(ValueError, match="multiple of num_envs=2"):
            BatchedMiniGridCollector(BatchedMiniGridEnv(2, DOORKEY), policy, frames_per_batch=7, total_frames=7)


class _Scripted:
    """A policy playing fixed actions ``[envs, steps]``, one column per call."""

    def __init__(self, actions):
        self.actions, self.t = actions, 0

    def __call__(self, td):
        td["action"] = self.actions[:, self.t]
        self.t += 1
        return td


# ------------------------------------------------------------------------------ small utils
def step_input(td, action: int):
    td = td.clone(False)
    td["action"] = torch.tensor(action)
    return td


def _free_neighbour(menv):
    x, y = int(menv.agent_pos[0]), int(menv.agent_pos[1])
    for dx, dy in _DIRS:
        if menv.grid.get(x + dx, y + dy) is None:
            return (x + dx, y + dy)
    raise AssertionError("agent is boxed in")


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
