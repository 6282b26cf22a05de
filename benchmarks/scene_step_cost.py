"""OGBench Scene step cost, with and without a VLM frame rendered on every step.

Steps ``SceneEnv`` (``ogbench/scene-task2``, as the SAC recipe builds it: OGBench's reward,
``front_pixels`` frames at 64 px rendered cheaply) with uniform random actions from a seeded reset,
``--steps`` steps without frames and ``--render-steps`` steps rendering one on every step, in
interleaved rounds so that load on the machine moves both alike. Reports steps per second of wall
time and per CPU-second of this process (``time.process_time``: all its threads, so Mesa's
rasteriser threads count; on a shared machine the CPU rate is the one to compare). The recipe
renders only the steps some clip sends to the scorer (``render_clip_frames_only``), so its cost per
step lies between the two.

Usage: ``MUJOCO_GL=egl python benchmarks/scene_step_cost.py [--steps 600] [--render-steps 150] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import torch  # noqa: E402


def steps_per_s(render: bool, steps: int, seed: int) -> tuple[float, float]:
    """(steps per wall second, steps per CPU-second) of ``steps`` random-action TorchRL steps."""
    from vlmrb_torchrl.envs.ogbench.env import make_ogbench_env

    env = make_ogbench_env("ogbench/scene-task2", render=render, seed=seed)
    try:
        td = env.reset()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            td = env.step(env.rand_action(td))["next"]
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        env.close()
    return steps / wall, steps / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600, help="steps per round without frames")
    parser.add_argument("--render-steps", type=int, default=150, help="steps per round with a frame each")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| round | frames | steps/s (wall) | steps per CPU-second |\n|---|---|---:|---:|")
    for round_ in range(args.rounds):
        for render, steps in ((False, args.steps), (True, args.render_steps)):
            wall, cpu = steps_per_s(render, steps, args.seed + round_)
            print(f"| {round_} | {'every step' if render else 'none'} | {wall:.0f} | {cpu:.0f} |", flush=True)


if __name__ == "__main__":
    main()
