"""The reliability probes that are not unit tests (docs/reliability.md, "The probe list"): they run for a minute or
more, kill processes or need several of them.

- ``load``: ``--threads`` threads (default 4: one extends the buffer, one samples and writes TD priorities, the
  others score what was inserted, late) hammer one :class:`~vlmrb_torchrl.VLMPrioritizedSampler` for
  ``--seconds`` (default 60). Every score is a function of the row it was computed from, so a score written on a
  recycled slot (a stale score) shows as a slot whose score does not match the row it holds. Reports the
  exceptions (0 expected), the score rows written, the stale writes the sampler dropped and the stale scores
  that landed (0 expected).
- ``kill``: the SAC recipe on OGBench Scene (uniform replay, synchronous: bit-reproducible), killed with SIGKILL
  at ``--points`` points (after the first checkpoint, while the second is written, after it) and resumed to the
  end each time; every resumed run must end with the uninterrupted run's metrics and weights, bit for bit.
- ``response``: a server that answers a 2-clip scoring call with ``--mb`` MB (default 200); the peak resident
  memory the OpenAI scorer adds with its cap (the default ``max_response_bytes``) and without it (a cap above the
  answer).

Usage (from the repository root; ``PYTHONPATH=$PWD`` for a checkout)::

    python benchmarks/reliability_probes.py load [--threads 4] [--seconds 60]
    python benchmarks/reliability_probes.py kill [--frames 1200] [--checkpoint-every 400]
    python benchmarks/reliability_probes.py response [--mb 200]

Each prints one JSON object and exits 1 when a promise does not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


# ----------------------------------------------------------------------------------------------- load
def _score_of(row_ids):
    """What a scorer computes from the row it read: a function of the row's content (its unique id)."""
    return (row_ids % 997).float() / 996


def load(threads: int, seconds: float, capacity: int = 4096) -> dict:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    from vlmrb_torchrl import VLMPrioritizedSampler

    sampler = VLMPrioritizedSampler(capacity, lambda_max=0.5, warmup=100, td_boost=True, threshold=None)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler, batch_size=64)
    pending: queue.Queue = queue.Queue(maxsize=256)
    stop = threading.Event()
    errors: list[BaseException] = []
    counts = {"extended": 0, "samples": 0, "score_rows": 0}
    lock = threading.Lock()
    next_id = [0]

    def guarded(fn):
        def run():
            try:
                while not stop.is_set():
                    fn()
            except BaseException as err:  # noqa: BLE001 - counted, the probe's finding
                errors.append(err)
        return run

    def extend():
        n = 64
        ids = torch.arange(next_id[0], next_id[0] + n)
        next_id[0] += n
        index = rb.extend(TensorDict(row_id=ids, batch_size=[n]))
        try:
            pending.put_nowait((index, sampler.generations(index), ids))
        except queue.Full:  # the scorers are behind: these rows stay unscored
            pass
        with lock:
            counts["extended"] += n

    def sample():
        if len(rb) < 64:
            time.sleep(0.001)
            return
        out = rb.sample()
        rb.update_tensordict_priority(out.set("td_error", torch.rand(len(out))))
        with lock:
            counts["samples"] += 1

    def score():
        try:
            index, generation, ids = pending.get(timeout=0.1)
        except queue.Empty:
            return
        time.sleep(random.uniform(0, 0.01))  # a scorer is slower than the learner: slots get recycled meanwhile
        sampler.update_scores(index, _score_of(ids), generation)
        with lock:
            counts["score_rows"] += len(index)

    roles = [extend, sample] + [score] * max(1, threads - 2)
    workers = [threading.Thread(target=guarded(role), daemon=True) for role in roles]
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join(30)
    while not pending.empty():  # the scores still queued land now: the newest on their rows, the others dropped
        index, generation, ids = pending.get()
        sampler.update_scores(index, _score_of(ids), generation)
        counts["score_rows"] += len(index)
    held = rb.storage.get(torch.arange(len(rb)))["row_id"]
    scores = sampler.scores(torch.arange(len(rb)))
    scored = ~torch.isnan(scores)
    stale_landed = int((scores[scored] != _score_of(held[scored])).sum())
    result = {"probe": "load", "threads": len(workers), "seconds": seconds, "exceptions": len(errors),
              "first_exception": repr(errors[0]) if errors else None, **counts,
              "stale_dropped": int(sampler.stats()["stale_drops"]), "scored_slots_checked": int(scored.sum()),
              "stale_scores_landed": stale_landed}
    result["ok"] = not errors and stale_landed == 0 and counts["score_rows"] > 0
    return result


# ----------------------------------------------------------------------------------------------- kill
_VOLATILE = ("env_steps_per_s", "time_s", "scorer_clips_per_s")


def _train(out: Path, args: argparse.Namespace, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "vlmrb_torchrl.cli", "train", "sac", f"env={args.env}", "replay=uniform",
               f"total_frames={args.frames}", f"checkpoint_every={args.checkpoint_every}", "learning_starts=200",
               "frames_per_batch=100", "batch_size=32", "hidden=32", "max_episode_steps=100", "eval_episodes=1",
               f"eval_every={args.frames}", "gallery_clips=0", "progress=false", "tensorboard=false",
               "async_scoring=false", "seed=3", f"output_dir={out}", *extra]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})


def _finished(out: Path) -> tuple[list[dict], dict]:
    import csv

    import torch

    with open(out / "metrics.csv", newline="") as f:
        rows = [{k: v for k, v in row.items() if k not in _VOLATILE} for row in csv.DictReader(f)]
    last = max((p for p in (out / "checkpoints").glob("step_*")), key=lambda p: int(p.name.split("_")[1]))
    return rows, torch.load(last / "state.pt", weights_only=True)


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def kill(args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(prefix="vlmrb_kill_probe_"))
    reference = root / "reference"
    done = _train(reference, args)
    if done.wait() != 0:
        return {"probe": "kill", "ok": False, "error": f"the uninterrupted run failed: {done.stderr.read()[-2000:]}"}
    expected_rows, expected_state = _finished(reference)
    first, second = args.checkpoint_every, 2 * args.checkpoint_every

    def done_at(out: Path, step: int) -> bool:
        return (out / "checkpoints" / f"step_{step}" / "DONE").exists()

    points = {
        "after the first checkpoint": lambda out: done_at(out, first),
        "while the second checkpoint is written": lambda out: (out / "checkpoints" / f".step_{second}.partial").exists()
        or done_at(out, second),
        "after the second checkpoint": lambda out: done_at(out, second),
    }
    results = []
    for name, condition in list(points.items())[:args.points]:
        out = root / name.replace(" ", "_")
        run = _train(out, args)
        seen = _wait_for(lambda: condition(out) or run.poll() is not None, 1800)
        ended_first = run.poll() is not None
        partial = any((out / "checkpoints").glob(".step_*.partial"))  # a checkpoint half written at the kill
        run.send_signal(signal.SIGKILL)
        run.wait()
        resumes = 0
        while not (out / "summary.json").exists() and resumes < 3:
            resumed = _train(out, args, f"resume={out}")
            resumes += 1
            if resumed.wait() != 0:
                results.append({"point": name, "ok": False, "error": resumed.stderr.read()[-2000:]})
                break
        else:
            rows, state = _finished(out)
            results.append({"point": name, "killed_mid_run": seen and not ended_first, "partial_checkpoint_at_kill":
                            partial, "resumes": resumes,
                            "metrics_identical": rows == expected_rows, "weights_identical": _same(state, expected_state),
                            "ok": rows == expected_rows and _same(state, expected_state)})
    shutil.rmtree(root, ignore_errors=True)
    return {"probe": "kill", "env": args.env, "frames": args.frames, "points": results,
            "ok": len(results) == args.points and all(r["ok"] for r in results)}


# ----------------------------------------------------------------------------------------------- response
def _rss(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def _reset_peak() -> None:
    """Sets the peak resident memory (``VmHWM``) to the current one (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def response(mb: int) -> dict:
    import http.server

    from vlmrb_torchrl.scorers import OpenAIScorer, OpenAIScorerError
    from vlmrb_torchrl.testing import make_clips

    body = b'{"choices": [{"message": {"content": "' + b"x" * (mb << 20) + b'"}}]}'

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:  # the scorer hung up: what the cap does
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    result = {"probe": "response", "answer_mb": mb}
    for name, cap in (("capped", None), ("uncapped", (mb + 1) << 20)):
        scorer = OpenAIScorer(url, "m", max_retries=0, timeout=120, **({} if cap is None else
                                                                        {"max_response_bytes": cap}))
        before = _rss()
        _reset_peak()
        try:
            scorer.score(make_clips(2, 2))
            said = "scored"
        except OpenAIScorerError as err:
            said = str(err)[:120]
        result[name] = {"peak_rss_added_mb": round((_rss("VmHWM") - before) / 2**20), "error": said}
    server.shutdown()
    result["ok"] = result["capped"]["peak_rss_added_mb"] < 64 and "max_response_bytes" in result["capped"]["error"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="probe", required=True)
    p = sub.add_parser("load")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--seconds", type=float, default=60.0)
    p = sub.add_parser("kill")
    p.add_argument("--env", default="ogbench/scene-task1")
    p.add_argument("--frames", type=int, default=1200)
    p.add_argument("--checkpoint-every", type=int, default=400)
    p.add_argument("--points", type=int, default=3, choices=(1, 2, 3))
    p = sub.add_parser("response")
    p.add_argument("--mb", type=int, default=200)
    args = parser.parse_args(argv)
    if args.probe == "load":
        result = load(args.threads, args.seconds)
    elif args.probe == "kill":
        result = kill(args)
    else:
        result = response(args.mb)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
