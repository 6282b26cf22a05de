"""Frame level: does the goal check see the agent on the goal, from whichever side it stepped on?

For each DoorKey layout (``--seeds`` layouts from seed 0) the agent is put on the goal with the key in
hand and the door open, once facing each way, and the frame the env renders (``MiniGridEnv``'s
``frame_view="grid"``, what ``builtin:minigrid_goal`` reads) is scored by the goal check: P("the agent
is on the goal") in a softmax over the check's statements. Prints, per env and facing, the mean
probability and the share of layouts above 0.5. DoorKey's goal is in the bottom-right corner, so an
agent steps onto it facing right (from the left) or facing down (from above); the episode ends there.
This is how the goal-only rows' missed random-play goals were explained (docs/builtin_scorer.md:
"Goals entered from the left").

Usage:

    python benchmarks/goal_check_frames.py --env MiniGrid-DoorKey-8x8-v0,MiniGrid-DoorKey-12x12-v0,MiniGrid-DoorKey-16x16-v0 --seeds 20
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

#: MiniGrid's ``agent_dir`` values, by the way the agent faces, and the side it came from onto a cell.
FACINGS = {"right (from the left)": 0, "down (from above)": 1, "left (from the right)": 2, "up (from below)": 3}


def goal_frames(env_id: str, seed: int, frame_size: int = 64) -> dict[str, np.ndarray]:
    """The frames of layout ``seed`` with the agent on the goal, the key in hand and the door open, by facing."""
    from minigrid.core.world_object import Door, Goal, Key

    from vlmrb_torchrl.envs import make_minigrid_env

    env = make_minigrid_env(env_id, frame_size=frame_size, render=True)
    env.set_seed(seed)
    env.reset()
    menv = env.unwrapped
    grid = menv.grid.grid
    menv.agent_pos = next((i % menv.width, i // menv.width) for i, o in enumerate(grid) if isinstance(o, Goal))
    for i, obj in enumerate(grid):
        if isinstance(obj, Door):
            obj.is_locked, obj.is_open = False, True
        elif isinstance(obj, Key):
            grid[i], menv.carrying = None, obj
    frames = {}
    for name, direction in FACINGS.items():
        menv.agent_dir = direction
        frames[name] = env._renderer(menv)
    env.close()
    return frames


def on_goal_probability(scorer, frames: list[np.ndarray]) -> np.ndarray:
    """``[N]``: P(the goal check's positive statement) of each frame (``builtin:minigrid_goal``'s one check),
    the frames embedded as the scorer embeds a clip's."""
    scorer.load()
    with scorer._lock, torch.inference_mode():
        image = scorer._embed_frames(frames).to(scorer.text_embeds.device)
        text = scorer.text_embeds[scorer._check_rows[0]]
        return (scorer.logit_scale * image @ text.T).softmax(-1)[:, 0].cpu().numpy()


def main(argv: list[str] | None = None) -> dict[str, dict[str, tuple[float, float]]]:
    """Prints and returns ``{env: {facing: (mean P, share > 0.5)}}``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="MiniGrid-DoorKey-8x8-v0,MiniGrid-DoorKey-12x12-v0,MiniGrid-DoorKey-16x16-v0",
                        help="comma-separated DoorKey env ids")
    parser.add_argument("--seeds", type=int, default=20, help="layouts, from seed 0")
    parser.add_argument("--frame-size", type=int, default=64, help="MiniGridEnv's frame_size (recipes: 64)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from vlmrb_torchrl.scorers import make_scorer

    scorer = make_scorer("builtin:minigrid_goal")
    results = {}
    print(f"| env | frame | {' | '.join(f'facing {f}' for f in FACINGS)} |")
    print(f"|---|---|{'---:|' * len(FACINGS)}")
    for env_id in (e.strip() for e in args.env.split(",") if e.strip()):
        per_seed = [goal_frames(env_id, seed, args.frame_size) for seed in range(args.seeds)]
        row = {}
        for name in FACINGS:
            p = on_goal_probability(scorer, [frames[name] for frames in per_seed])
            row[name] = (float(p.mean()), float((p > 0.5).mean()))
        results[env_id] = row
        shape = "x".join(map(str, per_seed[0][next(iter(FACINGS))].shape[:2]))
        print(f"| {env_id} | {shape} | " + " | ".join(f"{m:.2f} ({s:.0%})" for m, s in row.values()) + " |")
    return results


if __name__ == "__main__":
    main()
