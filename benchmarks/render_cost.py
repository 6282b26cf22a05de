"""Offscreen frame cost per camera: robosuite's default rendering against the recipes' fast rendering.

For each camera of robosuite Lift, renders ``--frames`` frames of ``--size`` pixels (the arm
moving randomly between frames) with ``RobosuiteEnv(fast_render=False)`` (reflections, shadows,
4x multisampling, a 640x480 offscreen buffer: robosuite's defaults) and with
``fast_render=True`` (none of those, a buffer of the frame's size:
:mod:`vlmrb_torchrl.envs._mujoco_render`), in interleaved rounds so that load on the machine moves
both alike. Reports ms per frame (``render_frame()`` alone, median over rounds) and how far the fast frames are from the default ones (mean absolute pixel
difference, 0-255, same states).

Usage: ``MUJOCO_GL=egl python benchmarks/render_cost.py [--frames 30] [--rounds 3] [--size 64]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import torch  # noqa: E402

CAMERAS = ("agentview", "frontview", "sideview", "robot0_eye_in_hand")


def time_frames(env, camera: str, frames: int, seed: int) -> tuple[float, list[np.ndarray]]:
    """Seconds per render over ``frames`` random-action steps from a seeded reset, and the frames."""
    env.camera = camera
    env.set_seed(seed)
    env.reset()
    env.render_frame()  # the context's first use (set-up) is not timed
    images, total = [], 0.0
    generator = torch.Generator().manual_seed(seed)
    for _ in range(frames):
        action = torch.rand(env.action_spec.shape, generator=generator) * 2 - 1
        env.unwrapped.step(action.numpy().astype(np.float64))  # move the arm (robosuite's own step, not timed)
        start = time.perf_counter()
        images.append(env.render_frame().numpy())
        total += time.perf_counter() - start
    return total / frames, images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--cameras", default=",".join(CAMERAS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    from vlmrb_torchrl.envs.robosuite.env import RobosuiteEnv

    envs = {mode: RobosuiteEnv("Lift", seed=0, render=True, frame_size=args.size, fast_render=mode == "fast",
                               render_steps=lambda k: False) for mode in ("default", "fast")}
    cameras = args.cameras.split(",")
    ms = {(camera, mode): [] for camera in cameras for mode in envs}
    diff = {}
    for round_ in range(args.rounds):
        for camera in cameras:
            images = {}
            for mode, env in envs.items():
                seconds, images[mode] = time_frames(env, camera, args.frames, seed=round_)
                ms[(camera, mode)].append(seconds * 1e3)
            diff[camera] = float(np.mean([np.abs(a.astype(float) - b.astype(float)).mean()
                                          for a, b in zip(images["default"], images["fast"])]))
    for env in envs.values():
        env.close()
    print(f"robosuite Lift, {args.size}x{args.size}, MUJOCO_GL={os.environ['MUJOCO_GL']}, median of {args.rounds} "
          f"interleaved rounds of {args.frames} frames")
    print("| camera | default (ms/frame) | fast (ms/frame) | speed-up | mean abs pixel difference |")
    print("|---|---:|---:|---:|---:|")
    for camera in cameras:
        default, fast = statistics.median(ms[(camera, "default")]), statistics.median(ms[(camera, "fast")])
        print(f"| {camera} | {default:.1f} | {fast:.1f} | {default / fast:.1f}x | {diff[camera]:.1f} |")


if __name__ == "__main__":
    main()
