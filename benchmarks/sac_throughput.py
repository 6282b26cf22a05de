"""SAC loop throughput on robosuite Lift: env steps/s with and without VLM frames, as ratios.

Runs the real recipe (``vlmrb_torchrl.recipes.sac.main``) for a few hundred frames per setting
and reads ``env_steps_per_s`` (collection + storing + learning, evaluation excluded). Also times
one offscreen render. Usage: ``python benchmarks/sac_throughput.py [--frames 600]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import torch  # noqa: E402

from vlmrb_torchrl.recipes.config import SACConfig, apply_overrides  # noqa: E402
from vlmrb_torchrl.recipes.sac import main  # noqa: E402

PIXELS = f"python:{__name__}:pixel_scorer"  # "__main__" when run as a script


class _PixelScorer:
    """Reads the frames (so the env renders them) and returns their mean brightness."""

    prompt = "mean brightness"
    in_keys = ["pixels", "mask"]
    provenance = {"backend": "benchmark"}

    def score(self, clips):
        return (clips["pixels"].float().mean((-1, -2, -3, -4)) / 255.0).clamp(0, 1)


def pixel_scorer(**kwargs):
    return _PixelScorer()


def render_cost(frame_size: int, n: int = 50) -> float:
    from vlmrb_torchrl.envs.robosuite import RobosuiteEnv

    env = RobosuiteEnv("Lift", seed=0, render=True, frame_size=frame_size, render_steps=lambda k: False)
    env.reset()
    env.render_frame()  # context warm-up
    start = time.perf_counter()
    for _ in range(n):
        env.rand_step()
        env.render_frame()
    per = (time.perf_counter() - start) / n
    start = time.perf_counter()
    for _ in range(n):
        env.rand_step()
    env.close()
    return per - (time.perf_counter() - start) / n


SETTINGS = {
    "uniform (no scoring)": {"replay": "uniform"},
    "vlm_td + oracle:robosuite (no frames)": {"replay": "vlm_td", "scorer": "oracle:robosuite"},
    "vlm_td + pixel scorer, stride 1 (every step rendered)": {"replay": "vlm_td", "scorer": PIXELS},
    "vlm_td + pixel scorer, stride 16, 4 frames (4/16 rendered)": {
        "replay": "vlm_td", "scorer": PIXELS, "clip_stride": 16, "clip_frames": 4},
    "uniform, env_backend=parallel": {"replay": "uniform", "env_backend": "parallel"},
}


def run(frames: int) -> None:
    for size in (64, 128):
        print(f"render {size}x{size}: {render_cost(size) * 1e3:.1f} ms/frame")
    base = None
    for name, overrides in SETTINGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            cfg = apply_overrides(SACConfig(), {
                "total_frames": frames, "learning_starts": frames // 3, "num_envs": 2, "frames_per_batch": 100,
                "max_episode_steps": 200, "buffer_size": 10_000, "eval_every": frames, "eval_episodes": 1,
                "checkpoint_every": frames, "gallery_clips": 0, "progress": False, "tensorboard": False,
                "output_dir": tmp, **overrides})
            summary = main(cfg)
        sps = summary["env_steps_per_s"]
        base = base or sps
        print(f"{name:60s} {sps:7.1f} env steps/s  ratio {sps / base:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=600)
    torch.set_num_threads(1)
    run(parser.parse_args().frames)
