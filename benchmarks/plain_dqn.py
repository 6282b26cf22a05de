"""The fastest hand-written double DQN on MiniGrid we could write: the baseline of ``learner_throughput.py``.

What a performance-minded researcher writes without TorchRL (CleanRL style, then tuned), with the
recipe's settings: 2x256 tanh MLP, Huber loss, grad-norm clip 10, Adam lr 5e-4, gamma 0.99, 3-step
returns, batch 64, replay 100k, one update per 4 frames after ``--learning-starts``, 8 envs,
epsilon 1 -> 0.05 over 40% of the frames, hard target copy every 250 updates, DoorKey's 5 actions.
It imports nothing from vlmrb_torchrl, so it measures a plain loop, not this package. What makes
it fast:

- the raw MiniGrid envs (``gym.make(...).unwrapped``: no wrapper stack), stepped in one Python loop,
  with MiniGrid's own observation switched off: the 7x7 partial view is re-implemented in NumPy
  (:class:`FastView`: the grid's cell codes cached and updated only where an action changes the
  grid, the view gathered with precomputed index maps, occlusion with a lookup table per view
  row) and kept as the positions of the one-hot vector's ones (148 int16), 13x smaller in replay;
- the network sees the float one-hot vector (984 inputs; built from the positions with one
  ``scatter_`` per batch) through ``nn.Linear`` — "one-hot cells into an MLP". ``--first-layer
  embedding_bag`` reads the positions with ``nn.EmbeddingBag`` instead (the recipe's trick);
- a NumPy ring buffer (uniform indices from NumPy's generator, one fancy index per array), n-step
  returns from a per-env window, the discount ``gamma ** n`` stored with each transition;
- one forward pass per 8-env step to act, ``torch.no_grad`` for the targets, fused Adam, the
  ``foreach`` gradient clip, ``zero_grad(set_to_none=True)``, one torch thread.

Evaluation: ``--eval-every N`` evaluates every N frames and at the end, ``--eval-episodes``
episodes at epsilon 0.01 in ``--eval-envs`` envs stepped together (as the recipe does); 0 = only at
the end (``--no-eval``: never).

Usage: ``python benchmarks/plain_dqn.py --frames 60000 --learning-starts 2000``; prints one JSON line
with ``env_steps``, ``updates``, ``loop_s`` (collection + learning + the evaluations before the last),
``env_steps_per_s`` and the last ``eval_success``.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import time

import gymnasium as gym
import minigrid  # noqa: F401  (registers the ids)
import numpy as np
import torch
import torch.nn.functional as F
from minigrid.core.constants import COLOR_TO_IDX, DIR_TO_VEC, OBJECT_TO_IDX, STATE_TO_IDX
from torch import nn

ACTIONS = (0, 1, 2, 3, 5)  # left, right, forward, pickup, toggle
GRID_CHANGING = (3, 4, 5)  # pickup, drop, toggle: they change the cell in front of the agent
N_OBJ, N_COL, N_STATE = len(OBJECT_TO_IDX), len(COLOR_TO_IDX), len(STATE_TO_IDX)
PER_CELL = N_OBJ + N_COL + N_STATE
EMPTY = (OBJECT_TO_IDX["empty"], 0, 0)
WALL = OBJECT_TO_IDX["wall"]
DOOR = OBJECT_TO_IDX["door"]


def _visibility_tables(v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MiniGrid's ``Grid.process_vis`` one view row at a time, as lookup tables.

    For row ``j`` (the agent's row is ``v - 1``), the visible cells after both sweeps and the cells it
    makes visible in row ``j - 1`` depend only on the row's visible cells before the sweeps and which
    of its cells can be seen through: ``final[m | see << v]`` and ``up[m | see << v]`` (bit ``i`` = cell ``i``).
    """
    n = 1 << v
    combo = np.arange(n * n)
    mask = (combo[:, None] >> np.arange(v)) & 1
    see = (combo[:, None] >> (v + np.arange(v))) & 1
    up = np.zeros_like(mask)
    for i in range(v - 1):  # left to right
        spread = mask[:, i] & see[:, i]
        mask[:, i + 1] |= spread
        up[:, i + 1] |= spread
        up[:, i] |= spread
    for i in range(v - 1, 0, -1):  # right to left
        spread = mask[:, i] & see[:, i]
        mask[:, i - 1] |= spread
        up[:, i - 1] |= spread
        up[:, i] |= spread
    weights = 1 << np.arange(v)
    bits = ((np.arange(n)[:, None] >> np.arange(v)) & 1).astype(bool)
    return mask @ weights, up @ weights, bits


class FastView:
    """MiniGrid's partial view (``gen_obs()["image"]`` and direction) as the positions of the one-hot's ones.

    The grid's cell codes (``WorldObj.encode``) and see-through flags live in arrays padded with
    walls (what MiniGrid shows outside the grid); they are rebuilt at reset and re-read for the cell in
    front of the agent after an action that can change it (pickup, drop, toggle) — enough for
    DoorKey, whose objects move only when the agent acts on them.
    """

    def __init__(self, env) -> None:
        self.env = env
        self.v = v = env.agent_view_size
        self.final, self.up, self.bits = _visibility_tables(v)
        self.row_weights = 1 << np.arange(v)
        self.cell_offsets = (np.arange(v * v)[:, None] * PER_CELL + np.array([0, N_OBJ, N_OBJ + N_COL])).ravel()
        self.dir_offset = v * v * PER_CELL
        self.agent_cell = (v // 2) * v + v - 1  # view (i, j) is cell i * v + j, as MiniGrid's image[i, j]
        self.maps = []  # per direction: the world offsets (dx, dy) of view cell (i, j), flattened
        i, j = np.meshgrid(np.arange(v), np.arange(v), indexing="ij")
        for d in range(4):
            fx, fy = DIR_TO_VEC[d]
            rx, ry = -fy, fx
            self.maps.append(((fx * (v - 1 - j) + rx * (i - v // 2)).ravel(),
                              (fy * (v - 1 - j) + ry * (i - v // 2)).ravel()))
        env.gen_obs = lambda: None  # MiniGrid's own view is not computed

    def reset(self) -> None:
        grid, pad = self.env.grid, self.v
        self.width = grid.width + 2 * pad
        codes = np.zeros((grid.height + 2 * pad, self.width, 3), np.int64)
        codes[...] = (WALL, COLOR_TO_IDX["grey"], 0)
        see = np.zeros(codes.shape[:2], bool)
        self.codes, self.see = codes.reshape(-1, 3), see.reshape(-1)
        for y in range(grid.height):
            for x in range(grid.width):
                self.refresh(x, y)

    def refresh(self, x: int, y: int) -> None:
        obj = self.env.grid.get(x, y)
        k = (y + self.v) * self.width + x + self.v
        self.codes[k] = EMPTY if obj is None else obj.encode()
        self.see[k] = obj is None or obj.see_behind()

    def __call__(self) -> np.ndarray:
        env, v = self.env, self.v
        d = env.agent_dir
        dx, dy = self.maps[d]
        ax, ay = env.agent_pos
        flat = (dy + (ay + v)) * self.width + (dx + (ax + v))
        codes = self.codes[flat]  # [v * v, 3]
        if env.see_through_walls:
            visible = np.ones(v * v, bool)
        else:
            see_rows = self.row_weights @ self.see[flat].reshape(v, v)  # bit i of row j: cell (i, j)
            m, rows = 1 << (v // 2), [0] * v
            for j in range(v - 1, -1, -1):
                e = m | (int(see_rows[j]) << v)
                rows[j], m = self.final[e], self.up[e]
            visible = self.bits[rows].T.reshape(-1)  # [i, j] -> i * v + j
        carried = env.carrying
        codes[self.agent_cell] = carried.encode() if carried is not None else EMPTY
        codes[~visible] = 0
        out = np.empty(v * v * 3 + 1, np.int16)
        out[:-1] = self.cell_offsets + codes.ravel()
        out[-1] = self.dir_offset + d
        return out


class Env:
    """A raw MiniGrid env with :class:`FastView` observations."""

    def __init__(self, env_id: str) -> None:
        self.env = gym.make(env_id).unwrapped
        self.view = FastView(self.env)

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.env.reset(seed=seed)
        self.view.reset()
        return self.view()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        env = self.env
        if action in GRID_CHANGING:
            fx, fy = env.front_pos
        _, reward, terminated, truncated, _ = env.step(action)
        if action in GRID_CHANGING and 0 <= fx < env.grid.width and 0 <= fy < env.grid.height:
            self.view.refresh(fx, fy)
        return self.view(), float(reward), terminated, truncated


def q_network(dim: int, n_actions: int, first_layer: str) -> nn.Module:
    layers = [nn.Linear(dim, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, n_actions)]
    if first_layer == "embedding_bag":
        return nn.Sequential(PositionsLinear(layers[0]), *layers[1:])
    return nn.Sequential(OneHot(dim), *layers)


class OneHot(nn.Module):
    """Positions of the ones -> the float one-hot vector."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return torch.zeros(positions.shape[0], self.dim).scatter_(1, positions.long(), 1.0)


class PositionsLinear(nn.Module):
    """``nn.Linear`` on the one-hot vector, read from the positions of its ones with ``nn.EmbeddingBag``."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(linear.in_features, linear.out_features, mode="sum")
        with torch.no_grad():
            self.bag.weight.copy_(linear.weight.t())
        self.bias = nn.Parameter(linear.bias.detach().clone())

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.bag(positions.long()) + self.bias


@torch.no_grad()
def evaluate(qnet: nn.Module, env_id: str, *, episodes: int, n_envs: int, seed: int, rng: np.random.Generator) -> float:
    """Success rate of ``episodes`` episodes at epsilon 0.01, in ``n_envs`` envs stepped together."""
    n_envs = min(n_envs, episodes)
    envs = [Env(env_id) for _ in range(n_envs)]
    quota = [episodes // n_envs + (i < episodes % n_envs) for i in range(n_envs)]
    obs = [env.reset(seed=seed + i) for i, env in enumerate(envs)]
    successes = []
    running = list(range(n_envs))
    while running:
        greedy = qnet(torch.from_numpy(np.stack([obs[i] for i in running]))).argmax(-1).tolist()
        still = []
        for i, g in zip(running, greedy):
            a = int(rng.integers(len(ACTIONS))) if rng.random() < 0.01 else g
            obs[i], reward, terminated, truncated = envs[i].step(ACTIONS[a])
            if terminated or truncated:
                successes.append(float(reward > 0))
                quota[i] -= 1
                if quota[i] == 0:
                    continue
                obs[i] = envs[i].reset()
            still.append(i)
        running = still
    return float(np.mean(successes))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="MiniGrid-DoorKey-5x5-v0")
    parser.add_argument("--frames", type=int, default=60_000)
    parser.add_argument("--learning-starts", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=0, help="frames between evaluations; 0: at the end only")
    parser.add_argument("--no-eval", action="store_true", help="no evaluation at all")
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--eval-envs", type=int, default=10)
    parser.add_argument("--first-layer", choices=("linear", "embedding_bag"), default="linear")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    n_envs, n_steps, gamma, batch, capacity = 8, 3, 0.99, 64, 100_000
    train_every, target_every, eps_frames = 4, 250, int(0.4 * args.frames)

    envs = [Env(args.env) for _ in range(n_envs)]
    obs = [env.reset(seed=args.seed + i) for i, env in enumerate(envs)]
    width = obs[0].shape[0]
    dim = envs[0].view.dir_offset + 4
    qnet = q_network(dim, len(ACTIONS), args.first_layer)
    target = copy.deepcopy(qnet)
    params = list(qnet.parameters())
    optim = torch.optim.Adam(params, lr=5e-4, fused=True)

    buf_obs = np.zeros((capacity, width), np.int16)
    buf_next = np.zeros((capacity, width), np.int16)
    buf_act = np.zeros(capacity, np.int64)
    buf_ret = np.zeros(capacity, np.float32)
    buf_disc = np.zeros(capacity, np.float32)  # gamma ** n, 0 after a termination
    size = pos = 0
    windows = [collections.deque() for _ in range(n_envs)]  # (obs, action, reward) of the last n steps
    powers = [gamma**k for k in range(n_steps + 1)]

    def flush(window, nxt, terminated):
        # the oldest step's n-step return, bootstrapping from `nxt` unless the episode terminated
        nonlocal size, pos
        ret = 0.0
        for k, (_, _, r) in enumerate(window):
            ret += r * powers[k]
        o, a, _ = window.popleft()
        buf_obs[pos], buf_act[pos], buf_ret[pos], buf_next[pos] = o, a, ret, nxt
        buf_disc[pos] = 0.0 if terminated else powers[len(window) + 1]
        pos = (pos + 1) % capacity
        size = min(size + 1, capacity)

    def update():
        idx = rng.integers(size, size=batch)
        o, nx = torch.from_numpy(buf_obs[idx]), torch.from_numpy(buf_next[idx])
        act, ret, disc = torch.from_numpy(buf_act[idx]), torch.from_numpy(buf_ret[idx]), torch.from_numpy(buf_disc[idx])
        q = qnet(o).gather(1, act[:, None]).squeeze(1)
        with torch.no_grad():
            y = ret + disc * target(nx).gather(1, qnet(nx).argmax(1, keepdim=True)).squeeze(1)
        loss = F.smooth_l1_loss(q, y)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 10.0, foreach=True)
        optim.step()

    frames = updates = 0
    success = float("nan")
    next_eval = args.eval_every or args.frames
    start = time.perf_counter()
    loop_s = 0.0
    while frames < args.frames:
        eps = max(0.05, 1.0 - 0.95 * frames / eps_frames)
        with torch.no_grad():
            greedy = qnet(torch.from_numpy(np.stack(obs))).argmax(-1).tolist()
        for i, env in enumerate(envs):
            a = int(rng.integers(len(ACTIONS))) if rng.random() < eps else greedy[i]
            nxt, reward, terminated, truncated = env.step(ACTIONS[a])
            window = windows[i]
            window.append((obs[i], a, reward))
            if len(window) == n_steps:
                flush(window, nxt, terminated)
            if terminated or truncated:
                while window:
                    flush(window, nxt, terminated)
                nxt = env.reset()
            obs[i] = nxt
            frames += 1
            if frames >= args.learning_starts and frames % train_every == 0 and size >= batch:
                update()
                updates += 1
                if updates % target_every == 0:
                    target.load_state_dict(qnet.state_dict())
        loop_s = time.perf_counter() - start  # as the recipe's env_steps_per_s: the last evaluation not included
        if not args.no_eval and frames >= min(next_eval, args.frames):
            success = evaluate(qnet, args.env, episodes=args.eval_episodes, n_envs=args.eval_envs,
                               seed=args.seed + 10_000 + frames, rng=rng)
            next_eval += args.eval_every or args.frames
    print(json.dumps({"env_steps": frames, "updates": updates, "loop_s": loop_s, "env_steps_per_s": frames / loop_s,
                      "eval_success": success}))


if __name__ == "__main__":
    main()
