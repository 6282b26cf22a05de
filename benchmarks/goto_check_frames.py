"""Frame level: how well each wording of a "go to X" check reads the agent-centred view.

Plays ``MissionPolicy`` episodes of MiniGrid / BabyAI envs whose mission is a single "go to (the|a)
[colour] key|ball|box", labels every frame by what the simulator puts in the cell in front of the agent
(X or not), and scores the frame with ``builtin:minigrid_agent`` against each candidate check: P(the
positive statement) in a softmax over the check's statements. Prints precision, recall and F1 at 0.5,
AUROC and the best F1 over thresholds, one row per wording. This is how the go-to check of
:func:`~vlmrb_torchrl.envs.minigrid.prompts.mission_prompt_set` was picked (studies/builtin_scorer_builds.md:
"Go-to checks against what else the agent can face"), on training envs only.

Usage:

    python benchmarks/goto_check_frames.py --env BabyAI-GoToLocal-v0,MiniGrid-GoToObject-8x8-N2-v0 --seeds 100
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scorer_quality import auroc  # noqa: E402

from vlmrb_torchrl.envs.minigrid.missions import CARRYABLE, COLORS  # noqa: E402

GO_TO = re.compile(rf"go to (?:the|a) (?:({'|'.join(COLORS)}) )?({'|'.join(CARRYABLE)})")


def _thing(colour: str | None, kind: str) -> str:
    return f"the {colour} {kind}" if colour else f"the {kind}"


def wordings(colour: str | None, kind: str) -> dict[str, list[str]]:
    """The candidate checks for "go to X": positive first, then the negatives."""
    x = _thing(colour, kind)
    others = [f"the agent faces {_thing(colour, k)}" for k in CARRYABLE if k != kind]
    place = ["the agent faces the empty floor", "the agent faces a wall"]
    return {
        "faces X vs does not face X": [f"the agent faces {x}", f"the agent does not face {x}"],
        "faces X vs floor, wall": [f"the agent faces {x}", *place],
        "faces X vs floor, wall, other types in X's colour": [f"the agent faces {x}", *place, *others],
        "the same and the other colours of X's type": [f"the agent faces {x}", *place, *others,
                                                       *[f"the agent faces the {c} {kind}" for c in COLORS
                                                         if colour and c != colour]],
        "X is in front vs is not": [f"{x} is in front of the agent", f"{x} is not in front of the agent"],
    }


def frames_and_labels(env_id: str, seed: int, max_steps: int = 200):
    """One episode's frames, "faces X" labels and its (colour, kind), or ``None`` for another mission."""
    from torchrl.envs.utils import step_mdp

    from vlmrb_torchrl.envs import MiniGridEnv
    from vlmrb_torchrl.envs.minigrid.policies import MissionPolicy

    env = MiniGridEnv(env_id, seed=seed, frame_view="agent")
    policy = MissionPolicy(env, seed=seed, epsilon=0.2)
    td = env.reset()
    found = GO_TO.fullmatch(env.mission)
    if found is None:
        return None
    colour, kind = found.groups()
    frames, labels = [], []
    for _ in range(max_steps):
        menv = env.unwrapped
        cell = menv.grid.get(*menv.front_pos)
        labels.append(cell is not None and cell.type == kind and (colour is None or cell.color == colour))
        frames.append(td["pixels"].numpy())
        td = env.step(policy(td))
        done = bool(td["next", "done"])
        td = step_mdp(td)
        if done:
            break
    return frames, labels, (colour, kind)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="BabyAI-GoToLocal-v0,MiniGrid-GoToObject-8x8-N2-v0",
                        help="env ids, separated by commas (default: the two training envs the check was picked on)")
    parser.add_argument("--seeds", type=int, default=100, help="episodes per env, seeds 0..N-1 (default 100)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}.")
    torch.set_num_threads(args.threads)
    from vlmrb_torchrl.scorers import make_scorer

    scorer = make_scorer("builtin:minigrid_agent", prompt="the agent faces the key",
                         negatives=["the agent does not face the key"])
    scorer.load()
    probs: dict[str, list[float]] = {}
    labels: list[bool] = []
    for env_id in (e.strip() for e in args.env.split(",") if e.strip()):
        for seed in range(args.seeds):
            episode = frames_and_labels(env_id, seed)
            if episode is None:
                continue
            frames, truth, (colour, kind) = episode
            with torch.inference_mode():
                images = scorer._embed_frames(frames)
                for name, texts in wordings(colour, kind).items():
                    logits = scorer.logit_scale * images @ scorer._embed_text(texts).T
                    probs.setdefault(name, []).extend(logits.softmax(-1)[:, 0].tolist())
            labels += truth
    y = np.asarray(labels, dtype=bool)
    rows = []
    for name, p in probs.items():
        p = np.asarray(p)
        f1 = {t: 2 * ((p > t) & y).sum() / max(1, (p > t).sum() + y.sum()) for t in np.arange(0.02, 0.99, 0.02)}
        best = max(f1, key=lambda t: (f1[t], -t))
        predicted = p > 0.5
        tp = int((predicted & y).sum())
        rows.append({"check": name, "precision": tp / max(1, int(predicted.sum())), "recall": tp / max(1, int(y.sum())),
                     "f1": 2 * tp / max(1, int(predicted.sum() + y.sum())), "auroc": auroc(p, y),
                     "best_f1": float(f1[best]), "best_threshold": round(float(best), 2)})
    print(f"{len(y)} frames, {int(y.sum())} facing the mission's object")
    print("| go-to check | precision | recall | F1 at 0.5 | AUROC | best F1 (threshold) |\n|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['check']} | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} | {r['auroc']:.3f} | "
              f"{r['best_f1']:.3f} ({r['best_threshold']:.2f}) |")
    return rows


if __name__ == "__main__":
    main()
