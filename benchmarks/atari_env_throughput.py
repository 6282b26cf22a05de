"""Atari env-steps/s: ``BatchedAtariEnv`` (ale-py's vector env) against ``AtariEnv`` copies in a ``SerialEnv``.

One process, interleaved: every round steps each arm ``--steps`` batched steps (``--envs`` copies,
random actions, done copies reset through TorchRL's ``step_and_maybe_reset``, as a collector
does), in a rotated order, so that a machine getting busier or idler moves every arm alike.
Reported per arm: env-steps per second of wall-clock and per CPU-second (the process's CPU time,
ale-py's worker threads included), median over rounds, and their ratios against ``serial``
computed within each round. Arms (8 copies, 84x84 gray 4-stack, frameskip 4 by default):

- ``serial``: ``SerialEnv(n, make_atari_env(render=True))``, the recipes' Atari env before the
  batched one, with 64-px RGB scorer frames;
- ``serial_noframes``: the same without scorer frames;
- ``batched``: ``BatchedAtariEnv(n, render=True)``: one RGB screen per step feeds the gray stack
  and the scorer frame;
- ``batched_noframes``: ``BatchedAtariEnv(n, render=False)``;
- ``batched_1thread``: ``batched`` with one ale-py worker thread (what it costs when the
  emulator does not get a second core);
- ``ale_vector``: ale-py's ``AtariVectorEnv`` alone (its own gray stack, no TorchRL, no scorer
  frames): the ceiling;
- ``ale_vector_rgb``: ale-py's ``AtariVectorEnv`` alone, configured as ``BatchedAtariEnv``
  configures it (max-pooled 210x160 RGB screens, no stack): the ceiling of that design, what
  ``batched`` adds on top of it is its own cost (resizes, stack, TorchRL step).

Torch runs on one thread (the recipes' ``torch_threads=1``).

Usage::

    python benchmarks/atari_env_throughput.py --env ALE/Pong-v5 --envs 8 --steps 400 --rounds 5
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

ARMS = ("serial", "serial_noframes", "batched", "batched_noframes", "batched_1thread", "ale_vector", "ale_vector_rgb")


def make_arm(name: str, env_id: str, num_envs: int, seed: int):
    """A ``step(n)`` callable that plays ``n`` batched steps of random actions in the arm's env."""
    from torchrl.envs import SerialEnv

    from vlmrb_torchrl.envs.atari.env import BatchedAtariEnv, atari_game_name, make_atari_env

    if name.startswith("ale_vector"):
        import re

        from ale_py.vector_env import AtariVectorEnv

        game = re.sub(r"(?<!^)(?=[A-Z])", "_", atari_game_name(env_id)).lower()  # Pong -> pong, MsPacman -> ms_pacman
        # ale_vector_rgb: BatchedAtariEnv's own settings (max-pooled RGB screens, no stack, no resize)
        screens = dict(img_height=210, img_width=160, grayscale=False, stack_num=1) if name.endswith("rgb") else {}
        vec = AtariVectorEnv(game, num_envs, repeat_action_probability=0.25, use_fire_reset=False,
                             reward_clipping=False, **screens)
        vec.reset(seed=seed)
        rng = np.random.default_rng(seed)
        n_actions = int(vec.single_action_space.n)

        def step_vector(n: int) -> None:
            for _ in range(n):
                vec.step(rng.integers(0, n_actions, num_envs))

        return step_vector, vec.close
    render = not name.endswith("noframes")
    if name.startswith("serial"):
        env = SerialEnv(num_envs, functools.partial(make_atari_env, env_id, render=render, frame_size=64))
    else:
        env = BatchedAtariEnv(num_envs, env_id, render=render, frame_size=64,
                              num_threads=1 if name.endswith("1thread") else None)
    env.set_seed(seed)
    state = {"td": env.reset()}

    def step_torchrl(n: int) -> None:
        td = state["td"]
        for _ in range(n):
            td.set("action", env.action_spec.rand())
            _, td = env.step_and_maybe_reset(td)
        state["td"] = td

    return step_torchrl, env.close


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--envs", type=int, default=8, help="env copies stepped together")
    parser.add_argument("--steps", type=int, default=400, help="batched steps per arm and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {ARMS}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"unknown arms {unknown}: choose from {ARMS}")
    torch.set_num_threads(1)
    steppers = {name: make_arm(name, args.env, args.envs, args.seed) for name in arms}
    for step, _ in steppers.values():
        step(20)  # warm-up: first resets, allocator, lazy imports
    wall = {name: [] for name in arms}
    cpu = {name: [] for name in arms}
    for r in range(args.rounds):
        order = arms[r % len(arms):] + arms[: r % len(arms)]
        for name in order:
            step, _ = steppers[name]
            w0, c0 = time.perf_counter(), time.process_time()
            step(args.steps)
            w, c = time.perf_counter() - w0, time.process_time() - c0
            frames = args.steps * args.envs
            wall[name].append(frames / w)
            cpu[name].append(frames / c)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {wall[n][-1]:.0f}/s" for n in arms), flush=True)
    for _, close in steppers.values():
        close()
    base = "serial" if "serial" in arms else arms[0]
    rows = {}
    for name in arms:
        rows[name] = {
            "steps_per_s": statistics.median(wall[name]),
            "steps_per_cpu_s": statistics.median(cpu[name]),
            "ratio_wall": statistics.median(a / b for a, b in zip(wall[name], wall[base])),
            "ratio_cpu": statistics.median(a / b for a, b in zip(cpu[name], cpu[base])),
        }
    print(f"\n{args.env}, {args.envs} copies, {args.steps} steps x {args.rounds} rounds (medians; ratios vs {base} "
          "within each round)\n")
    print("| arm | env-steps/s | x serial | env-steps per CPU-s | x serial |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['steps_per_s']:,.0f} | {row['ratio_wall']:.2f} | {row['steps_per_cpu_s']:,.0f} | "
              f"{row['ratio_cpu']:.2f} |")
    results = {"config": vars(args) | {"json": str(args.json) if args.json else None}, "rows": rows,
               "raw": {"wall": wall, "cpu": cpu}}
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
