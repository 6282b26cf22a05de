"""Distillation: scored clips/s and teacher calls of a DistilledScorer vs its slow teacher alone.

Rolls out ``--episodes`` MiniGrid episodes (``mixed`` policy of ``scorer_quality.py``: scripted
DoorKey episodes with random actions and bursts, alternating with random episodes; frames
rendered at 64 px, as in the recipes), cuts every episode into the recipes' clips
(``ClipSpec(clip_len=16)``, stride 1, outcome frame) with :func:`~vlmrb_torchrl.make_clip_scoring`
and scores them in the order they were collected, ``--batch`` clips at a time (the scoring
worker's batch size), with two scorers:

- ``teacher``: the teacher (``--teacher``, ``builtin:minigrid`` or ``oracle:minigrid``) behind a
  fixed sleep of ``--delay-ms`` per clip (a real VLM's cost; the sleep is per clip of each call).
  Timed on every ``--teacher-every``-th batch only (the teacher scoring everything is the
  slow arm), interleaved with the distilled arm in the same run;
- ``distilled``: ``DistilledScorer(<the same delayed teacher>)`` with ``--teacher-fraction`` and
  ``--min-agreement``, timed on every batch (routing, the student's forward and its online
  training included).

Reference labels are the undelayed teacher's ``score > 0.5`` on every clip (untimed). Reported:
clips/s of each arm (clips / seconds inside ``transform.score_clips``) and their ratio; teacher
calls of the distilled arm vs the clips scored (teacher-only calls the teacher on every clip),
overall and after the student was first trusted; F1 vs the teacher of the scores the learner
gets (all clips), of the student on its random audits while trusted (``trusted_audit_f1``:
the goal's "F1 vs the teacher on audited clips"), and the fallbacks.

``--train [--delay-ms MS] KEY=VALUE ...`` instead runs ``vlmrb train dqn KEY=VALUE ...`` (add
``distill=true``) in this process and writes the distilled scorer's ``stats()`` (teacher and
student calls, agreement; the teacher's calls alone without ``distill``) to
``<output_dir>/distill_stats.json`` at the end. ``--delay-ms`` slows the teacher as above, so the
run's metrics (``env_steps_per_s``, ``fraction_scored``, ``scorer_dropped``) show what a slow VLM
costs the learner with and without a student.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/distill_throughput.py --teacher oracle:minigrid --delay-ms 20
    OMP_NUM_THREADS=1 python benchmarks/distill_throughput.py --teacher builtin:minigrid --delay-ms 100 --json out.json
    python benchmarks/distill_throughput.py --train env=MiniGrid-DoorKey-6x6-v0 scorer=builtin:minigrid distill=true \
        output_dir=runs/distill/seed0 ...
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scorer_quality import episode_policy, make_policy  # noqa: E402 - the rollout policies of the quality benchmark


class DelayedScorer:
    """A scorer plus a fixed sleep per clip: a slow VLM emulated from a fast one.

    It also lists the frames in its ``in_keys`` (an oracle does not read them), so that every
    arm's transform packs the same clips as the distilled scorer's.
    """

    def __init__(self, scorer, delay_s: float) -> None:
        self.scorer, self.delay_s = scorer, delay_s
        self.prompt, self.in_keys = scorer.prompt, list(dict.fromkeys([*scorer.in_keys, "pixels"]))
        self.provenance = {**scorer.provenance, "delay_s": delay_s}
        self.calls = 0

    def score(self, clips):
        self.calls += clips.batch_size[0]
        time.sleep(self.delay_s * clips.batch_size[0])
        return self.scorer.score(clips)


def f1(pred: np.ndarray, truth: np.ndarray) -> float:
    tp = int((pred & truth).sum())
    wrong = int((pred & ~truth).sum() + (~pred & truth).sum())
    return 2 * tp / (2 * tp + wrong) if 2 * tp + wrong else math.nan


def train(overrides: list[str], delay_s: float = 0.0) -> dict:
    """``vlmrb train dqn *overrides``, keeping the scorer to save its ``stats()`` next to the run's summary.

    With ``delay_s`` the teacher (or, without ``distill=true``, the scorer) sleeps that long per clip.
    """
    from vlmrb_torchrl import cli
    from vlmrb_torchrl.recipes import run as run_module
    from vlmrb_torchrl.scorers import DistilledScorer

    built = []
    make = run_module.make_scorer_from_config

    def keep(cfg):
        scorer = make(cfg)
        if delay_s and isinstance(scorer, DistilledScorer):
            scorer.teacher = DelayedScorer(scorer.teacher, delay_s)
        elif delay_s:
            scorer = DelayedScorer(scorer, delay_s)
        built.append(scorer)
        return scorer

    run_module.make_scorer_from_config = keep
    try:
        code = cli.main(["train", "dqn", *overrides])
    finally:
        run_module.make_scorer_from_config = make
    stats = built[-1].stats() if built and hasattr(built[-1], "stats") else {}
    if built and isinstance(built[-1], DelayedScorer):
        stats = {"teacher_calls": built[-1].calls}
    out_dir = next((o.split("=", 1)[1] for o in overrides if o.startswith("output_dir=")), None)
    if out_dir is not None:
        Path(out_dir, "distill_stats.json").write_text(json.dumps(stats, indent=1, default=str) + "\n")
    print(json.dumps({"exit": code, **stats}, indent=1, default=str))
    return stats


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--teacher", default="oracle:minigrid", help="teacher spec (builtin:minigrid, oracle:minigrid)")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="sleep per clip added to the teacher")
    parser.add_argument("--env", default="MiniGrid-DoorKey-6x6-v0")
    parser.add_argument("--episodes", type=int, default=120)
    parser.add_argument("--batch", type=int, default=32, help="clips per scorer call")
    parser.add_argument("--teacher-every", type=int, default=8, help="time the teacher-only arm on every N-th batch")
    parser.add_argument("--teacher-fraction", type=float, default=0.1)
    parser.add_argument("--min-agreement", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from vlmrb_torchrl import ClipSpec, make_clip_scoring
    from vlmrb_torchrl.scoring.clips import ClipBatch
    from vlmrb_torchrl.envs.minigrid.env import make_minigrid_env
    from vlmrb_torchrl.envs.minigrid import minigrid_actions
    from vlmrb_torchrl.scorers import DistilledScorer, make_scorer

    torch.set_num_threads(1)
    reference = DelayedScorer(make_scorer(args.teacher), 0.0)
    teacher = DelayedScorer(reference, args.delay_ms / 1000)
    distilled = DistilledScorer(DelayedScorer(reference, args.delay_ms / 1000), teacher_fraction=args.teacher_fraction,
                                min_agreement=args.min_agreement, seed=0)
    spec = ClipSpec(clip_len=16)
    stream, distill_tf = make_clip_scoring(distilled, spec, frame_key="pixels")
    _, teacher_tf = make_clip_scoring(teacher, spec, frame_key="pixels")
    _, reference_tf = make_clip_scoring(reference, spec, frame_key="pixels")
    env = make_minigrid_env(args.env, render=True, actions=minigrid_actions(args.env, "auto"))
    policies = {name: make_policy(name, env, args.seed * 7919 + i, epsilon=0.2, burst_prob=0.05)
                for i, name in enumerate(("scripted", "random"))}

    times = {"teacher": 0.0, "distilled": 0.0}
    timed_teacher_clips = 0
    labels, outputs, was_trusted = [], [], []
    first_trusted_clip = None
    n_batches = 0
    try:
        for episode in range(args.episodes):
            policy = policies[episode_policy("mixed", episode)]
            if hasattr(policy, "reset"):
                policy.reset()
            env.set_seed(args.seed + episode)
            with torch.no_grad():
                rollout = env.rollout(int(env.unwrapped.max_steps), policy, break_when_any_done=True)
            rollout["collector", "traj_ids"] = torch.full(rollout.shape, episode, dtype=torch.long)
            pushed = [b for b in (stream.push(rollout, torch.arange(rollout.numel())), stream.flush()) if b is not None]
            batch = ClipBatch.cat(pushed)
            for start in range(0, len(batch), args.batch):
                chunk = batch.clips[start : start + args.batch]
                with torch.no_grad():
                    truth = reference_tf.score_clips(chunk, frames=batch.frames) > 0.5
                if n_batches % args.teacher_every == 0:
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        teacher_tf.score_clips(chunk, frames=batch.frames)
                    times["teacher"] += time.perf_counter() - t0
                    timed_teacher_clips += len(chunk)
                trusted = distilled.trusted
                t0 = time.perf_counter()
                out = distill_tf.score_clips(chunk, frames=batch.frames)
                times["distilled"] += time.perf_counter() - t0
                if trusted and first_trusted_clip is None:
                    first_trusted_clip = (sum(len(x) for x in labels), distilled.stats()["teacher_calls"])
                labels.append(truth.numpy())
                outputs.append(out.numpy())
                was_trusted.append(np.full(len(chunk), trusted))
                n_batches += 1
    finally:
        env.close()

    truth = np.concatenate(labels)
    out = np.concatenate(outputs)
    trusted_mask = np.concatenate(was_trusted)
    stats = distilled.stats()
    n = len(truth)
    teacher_cps = timed_teacher_clips / times["teacher"]
    distilled_cps = n / times["distilled"]
    after = None
    if first_trusted_clip is not None:
        clips_after = n - first_trusted_clip[0]
        calls_after = stats["teacher_calls"] - first_trusted_clip[1]
        after = {"clips": clips_after, "teacher_calls": calls_after, "teacher_share": calls_after / clips_after}
    results = {
        "config": vars(args) | {"json": str(args.json) if args.json else None},
        "clips": n,
        "positive_share": float(truth.mean()),
        "teacher_clips_per_s": teacher_cps,
        "distilled_clips_per_s": distilled_cps,
        "speedup": distilled_cps / teacher_cps,
        "teacher_calls": stats["teacher_calls"],
        "teacher_share": stats["teacher_calls"] / n,
        "fewer_teacher_calls": n / stats["teacher_calls"],
        "after_first_trusted": after,
        "first_trusted_at_clip": None if first_trusted_clip is None else first_trusted_clip[0],
        "f1_all_clips": f1(out > 0.5, truth),
        "f1_trusted_clips": f1(out[trusted_mask] > 0.5, truth[trusted_mask]),
        "trusted_audit_f1": stats["trusted_audit_f1"],
        "trusted_audits": sum(stats[f"trusted_audit_{k}"] for k in ("tp", "fp", "fn", "tn")),
        "window_agreement_f1": stats["agreement_f1"],
        "fallbacks": stats["fallbacks"],
        "recoveries": stats["recoveries"],
        "provenance": distilled.provenance,
    }
    print(json.dumps({k: v for k, v in results.items() if k not in ("provenance",)}, indent=1, default=str))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--train":
        args = sys.argv[2:]
        delay_ms = float(args.pop(args.index("--delay-ms") + 1)) if "--delay-ms" in args else 0.0
        args = [a for a in args if a != "--delay-ms"]
        train(args, delay_ms / 1000)
    else:
        main()
