"""Where the DQN recipe's time goes, per frame: a whole run of ``vlmrb train dqn`` with a timer on each part.

Runs the recipe in this process (``vlmrb_torchrl.recipes.dqn.main``) with timers wrapped around
the functions that do each part of the work, and prints, per part, the main thread's wall-clock and
CPU time per frame (exclusive: a part's time excludes the parts it calls) and the calls per frame:

- start-up: Python and the imports (``torch``, ``tensordict``, ``torchrl``, ``minigrid``, ...), then
  everything ``main`` does before the first env step (config, envs, networks, replay, run directory);
- env: MiniGrid's own ``step`` (its ``gen_obs`` is the partial view below), the partial view, the
  observation encoding, the env's event flags, the batching into a TensorDict, TorchRL's
  ``EnvBase`` step/reset wrappers;
- policy: the Q-network forward when acting, the rest of the policy modules;
- collector: TorchRL's ``Collector`` rollout around the env and the policy, its creation and shutdown,
  the weight sync;
- replay: n-step returns, write, sample, priority update; the scoring hand-off (VLM modes: the
  buffer's clip cutting and queueing happen inside the write; waiting for the scorer is ``sync``);
- learner: loss forward (its Q-network passes apart), backward, gradient clip, Adam, ``zero_grad``,
  the target update, the epsilon schedule;
- end of batch: metrics rows and progress, evaluation, checkpoint;
- ``loop (other)``: what the loop body and the recipe's ``main`` do outside these parts.

The wrappers cost ~1-2 us per call (a few % of the total). The scorer thread's time (VLM modes) is
not the main thread's: it is timed apart (its CPU time per frame: batching the queued clips, the
scorer call, writing the scores into the sampler, the rest of its loop), and the process CPU time
(all threads) is printed too.

Usage::

    python benchmarks/dqn_profile.py replay=uniform total_frames=60000 learning_starts=2000 eval_every=60000
"""

from __future__ import annotations

import time

T0_WALL, T0_CPU = time.perf_counter(), time.process_time()

import functools  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections import defaultdict  # noqa: E402


def _process_age() -> float:
    """Seconds since this process started (the interpreter's own start-up included)."""
    import os

    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


class Profile:
    """A stack of timed parts; each part's exclusive wall-clock and main-thread CPU time."""

    def __init__(self) -> None:
        self.stack: list[list] = []
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.main = threading.main_thread()
        # other threads (the scorer's): their own stacks, and totals apart from the main thread's
        self.local = threading.local()
        self.lock = threading.Lock()
        self.thread_wall: dict[str, float] = defaultdict(float)
        self.thread_cpu: dict[str, float] = defaultdict(float)
        self.thread_calls: dict[str, int] = defaultdict(int)

    def push(self, label: str) -> None:
        self.stack.append([label, time.perf_counter(), time.thread_time(), 0.0, 0.0])

    def pop(self) -> None:
        label, w0, c0, child_w, child_c = self.stack.pop()
        w, c = time.perf_counter() - w0, time.thread_time() - c0
        self.wall[label] += w - child_w
        self.cpu[label] += c - child_c
        self.calls[label] += 1
        if self.stack:
            self.stack[-1][3] += w
            self.stack[-1][4] += c

    def snapshot(self) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
        """Each part's time so far, the parts still running included (up to now)."""
        wall, cpu, calls = defaultdict(float, self.wall), defaultdict(float, self.cpu), defaultdict(int, self.calls)
        now_w, now_c = time.perf_counter(), time.thread_time()
        for i, (label, w0, c0, child_w, child_c) in enumerate(self.stack):
            inner_w = now_w - self.stack[i + 1][1] if i + 1 < len(self.stack) else 0.0
            inner_c = now_c - self.stack[i + 1][2] if i + 1 < len(self.stack) else 0.0
            wall[label] += now_w - w0 - child_w - inner_w
            cpu[label] += now_c - c0 - child_c - inner_c
        return wall, cpu, calls

    def time_thread(self, label: str, original, *args, **kwargs):
        """``original(*args, **kwargs)`` timed under ``label`` in a thread other than the main one."""
        stack = self.local.__dict__.setdefault("stack", [])
        stack.append([label, time.perf_counter(), time.thread_time(), 0.0, 0.0])
        try:
            return original(*args, **kwargs)
        finally:
            label, w0, c0, child_w, child_c = stack.pop()
            w, c = time.perf_counter() - w0, time.thread_time() - c0
            with self.lock:
                self.thread_wall[label] += w - child_w
                self.thread_cpu[label] += c - child_c
                self.thread_calls[label] += 1
            if stack:
                stack[-1][3] += w
                stack[-1][4] += c

    def wrap(self, owner, name: str, label, *, thread: str | None = None) -> None:
        """Times ``owner.name`` under ``label`` (a string, or a function of the enclosing part's label)
        in the main thread, or under ``thread`` (a label) in any other thread (not timed there if ``None``)."""
        original = owner.__dict__[name] if isinstance(owner, type) and name in owner.__dict__ else getattr(owner, name)
        if isinstance(original, staticmethod):
            raise TypeError(f"{owner}.{name}: static methods are not wrapped")
        as_classmethod = isinstance(original, classmethod)
        if as_classmethod:
            original = original.__func__

        @functools.wraps(original)
        def timed(*args, **kwargs):
            if threading.current_thread() is not self.main:
                if thread is None:
                    return original(*args, **kwargs)
                return self.time_thread(thread, original, *args, **kwargs)
            parent = self.stack[-1][0] if self.stack else None
            self.push(label(parent) if callable(label) else label)
            try:
                return original(*args, **kwargs)
            finally:
                self.pop()

        setattr(owner, name, classmethod(timed) if as_classmethod else timed)


def instrument(prof: Profile) -> None:
    import minigrid.minigrid_env
    import torch
    from torchrl.collectors import Collector
    from torchrl.data import RandomSampler
    from torchrl.envs import EnvBase
    from torchrl.modules import MLP

    from vlmrb_torchrl.scoring import worker
    from vlmrb_torchrl.scoring.clips import ClipBatch, ClipStream
    from vlmrb_torchrl.envs.minigrid import env as mg
    from vlmrb_torchrl.recipes import checkpoint, dqn, evaluate, loop, replay
    from vlmrb_torchrl.recipes.dqn_loss import DoubleDQNLoss
    from vlmrb_torchrl.replay.sampler import VLMPrioritizedSampler
    from vlmrb_torchrl.scorers.contrastive import HFContrastiveScorer

    def in_eval(parent):
        return parent is not None and parent.startswith("eval")

    w = prof.wrap
    w(minigrid.minigrid_env.MiniGridEnv, "step", lambda p: "eval: env" if in_eval(p) else "env: MiniGrid step")
    w(minigrid.minigrid_env.MiniGridEnv, "reset", lambda p: "eval: env" if in_eval(p) else "env: MiniGrid reset")
    w(mg._FastPartialView, "__call__", lambda p: "eval: env" if in_eval(p) else "env: partial view (gen_obs)")
    for name in ("indices", "__call__"):
        w(mg._OneHotEncoder, name, lambda p: "eval: env" if in_eval(p) else "env: observation encoding")
    w(mg.MiniGridEnv, "_step_arrays", lambda p: "eval: env" if in_eval(p) else "env: events, flags")
    w(mg.MiniGridEnv, "_reset_arrays", lambda p: "eval: env" if in_eval(p) else "env: events, flags")
    for name in ("_step", "_reset"):
        w(mg.BatchedMiniGridEnv, name, lambda p: "eval: env" if in_eval(p) else "env: batching into a TensorDict")
    for name in ("step_and_maybe_reset", "step", "reset"):
        w(EnvBase, name, lambda p: "eval: env" if in_eval(p) else "env: TorchRL EnvBase step/reset wrappers")
    w(MLP, "forward", lambda p: "eval: policy" if in_eval(p) else
      ("policy: Q-network forward" if p in ("policy: modules", "policy: act") else "loss: Q-network forwards"))
    w(dqn.EGreedyQPolicy, "act", lambda p: "eval: policy" if in_eval(p) else "policy: act")
    w(Collector, "rollout", "collector: rollout plumbing")
    w(mg.BatchedMiniGridCollector, "rollout", "collector: rollout plumbing")
    w(mg.BatchedMiniGridCollector, "_batch", "collector: batch TensorDict")
    w(Collector, "update_policy_weights_", "collector: policy weight sync")
    w(Collector, "shutdown", "collector: create/shutdown")
    w(mg.BatchedMiniGridCollector, "shutdown", "collector: create/shutdown")
    w(dqn, "make_collector", "collector: create/shutdown")
    # the policy: the TensorDictSequential the collector calls (the explore policy) and the eval policy
    from tensordict.nn import TensorDictSequential

    w(TensorDictSequential, "forward", lambda p: "eval: policy" if in_eval(p) else "policy: modules")
    w(dqn, "n_step_returns", "replay: n-step returns")
    for cls in (replay.Replay, replay.UniformReplay, replay.VLMReplay):
        for name in ("store", "sample", "update_priority", "sync"):
            if name in cls.__dict__:
                w(cls, name, {"store": "replay: write (+ clip hand-off)", "sample": "replay: sample",
                              "update_priority": "replay: priority update", "sync": "replay: wait for scores"}[name])
    w(DoubleDQNLoss, "forward", "loss: forward (rest)")
    w(DoubleDQNLoss, "update_target", "learner: target update")
    w(torch.Tensor, "backward", "learner: backward")
    w(torch.nn.utils, "clip_grad_norm_", "learner: grad clip")
    w(torch.optim.Adam, "step", "learner: Adam step")
    w(torch.optim.Optimizer, "zero_grad", "learner: zero_grad")
    w(dqn.LinearEGreedy, "step", "learner: epsilon schedule")
    w(evaluate, "evaluate", "eval (rest)")
    w(checkpoint, "checkpoint_now", "end of batch: checkpoint")
    w(loop.Training, "end_batch", "end of batch: metrics, progress")
    w(dqn, "main", "loop (other)")
    # the scorer thread (VLM modes, asynchronous scoring); with synchronous scoring the same calls run in the
    # main thread, under "replay: wait for scores" (drain) and the scorer's own parts
    w(mg._FullGridRenderer, "__call__", lambda p: "eval: env" if in_eval(p) else "env: render frame")
    w(ClipStream, "push", "replay: clip cutting (ClipStream.push)")
    w(worker.AsyncScorer, "submit", "replay: queue clips (submit)")
    w(VLMPrioritizedSampler, "mark_update", "replay: sampler bookkeeping on write")
    w(VLMPrioritizedSampler, "generations", "replay: sampler bookkeeping on write")
    w(VLMPrioritizedSampler, "sample", "replay: sampler draw (VLM mixture, weights)")
    w(RandomSampler, "sample", "replay: sampler draw (uniform)")
    w(worker.AsyncScorer, "_run", "replay: scorer loop (sync)", thread="scorer thread: loop (other)")
    w(worker.AsyncScorer, "_take", "replay: scorer take (sync)", thread="scorer thread: take queued clips")
    w(ClipBatch, "cat", "replay: clip batch cat", thread="scorer thread: batch the clips")
    w(worker.AsyncScorer, "_score", "replay: scorer call (sync)", thread="scorer thread: scorer call")
    w(VLMPrioritizedSampler, "update_scores", "replay: write scores (sync)", thread="scorer thread: write scores")
    # a lazy scorer (builtin:, clip:) loads its model at its first call: in the scorer thread, once
    w(HFContrastiveScorer, "load", "replay: scorer model load (sync)", thread="scorer thread: model load (once)")


def main() -> None:
    argv = sys.argv[1:]
    import_wall = time.perf_counter()
    from vlmrb_torchrl.cli import build_config, _train_parser

    args = _train_parser("dqn").parse_intermixed_args(argv)
    cfg = build_config("dqn", args)
    prof = Profile()
    first_step: dict[str, float] = {}
    instrument(prof)
    imports_s = time.perf_counter() - import_wall  # the recipe's imports (instrument() imports them all)
    before_main = _process_age()

    import minigrid.minigrid_env

    from vlmrb_torchrl.recipes import dqn

    raw_step = minigrid.minigrid_env.MiniGridEnv.step

    def step_with_mark(self, *a, **k):
        if not first_step:
            first_step["wall"] = time.perf_counter()
            first_step["snapshot"] = prof.snapshot()
        return raw_step(self, *a, **k)

    minigrid.minigrid_env.MiniGridEnv.step = step_with_mark
    t_main = time.perf_counter()
    summary = dqn.main(cfg)
    total_main = time.perf_counter() - t_main
    frames = summary["env_steps"]
    process_s = _process_age()
    setup_s = first_step["wall"] - t_main
    setup_wall, setup_cpu, setup_calls = first_step["snapshot"]
    wall = {k: prof.wall[k] - setup_wall[k] for k in prof.wall}
    cpu = {k: prof.cpu[k] - setup_cpu[k] for k in prof.wall}
    calls = {k: prof.calls[k] - setup_calls[k] for k in prof.wall}
    loop_s = total_main - setup_s
    rows = sorted(wall, key=lambda k: -wall[k])
    print(f"{cfg.env} replay={cfg.replay} scorer={cfg.scorer if cfg.replay.startswith('vlm') else '-'} "
          f"{frames} frames, {summary.get('updates')} updates")
    print(f"process: {process_s:.1f} s wall, {time.process_time():.1f} s CPU (all threads). Before main: "
          f"{before_main:.2f} s (python, imports: the recipe's own {imports_s:.2f} s); main until the first env "
          f"step: {setup_s:.2f} s; from the first env step to the end: {loop_s:.1f} s "
          f"({1e3 * loop_s / frames:.3f} ms/frame)")
    print("| part (from the first env step on) | wall ms/frame | CPU ms/frame | calls/frame | % of wall |")
    print("|---|---:|---:|---:|---:|")
    for label in rows:
        print(f"| {label} | {1e3 * wall[label] / frames:.4f} | {1e3 * cpu[label] / frames:.4f} | "
              f"{calls[label] / frames:.3f} | {100 * wall[label] / loop_s:.1f} |")
    if prof.thread_cpu:
        print(f"scorer thread (whole run, set-up included): {sum(prof.thread_cpu.values()):.2f} s CPU")
        print("| scorer thread part | wall ms/frame | CPU ms/frame | calls/frame |")
        print("|---|---:|---:|---:|")
        for label in sorted(prof.thread_cpu, key=lambda k: -prof.thread_cpu[k]):
            print(f"| {label} | {1e3 * prof.thread_wall[label] / frames:.4f} | {1e3 * prof.thread_cpu[label] / frames:.4f} | "
                  f"{prof.thread_calls[label] / frames:.3f} |")
    print("set-up in main before the first env step, by part (wall s): "
          + ", ".join(f"{k} {v:.2f}" for k, v in sorted(setup_wall.items(), key=lambda kv: -kv[1]) if v >= 0.005))
    out = {"frames": frames, "process_s": process_s, "before_main_s": before_main, "imports_s": imports_s,
           "main_s": total_main, "setup_s": setup_s, "loop_s": loop_s, "process_cpu_s": time.process_time(),
           "setup": dict(setup_wall),
           "parts": {k: {"wall_s": wall[k], "cpu_s": cpu[k], "calls": calls[k]} for k in rows},
           "scorer_thread": {k: {"wall_s": prof.thread_wall[k], "cpu_s": prof.thread_cpu[k],
                                 "calls": prof.thread_calls[k]} for k in prof.thread_cpu}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
