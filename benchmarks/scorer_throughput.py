"""Scorer throughput: clips/s of every scorer backend on the same clips.

Builds the tiny test models (2 layers, hidden 32; ``tests/scorers/tiny_vlms.py``) in a temporary
directory, offline, and times ``scorer.score(clips)`` on batches of ``--batch`` clips of
``--frames`` RGB frames of ``--size`` x ``--size`` pixels (what ``VLMScoreTransform`` sends
after subsampling and resizing). Also times ``OpenAIScorer`` against the fake chat-completions
server of the tests (on 127.0.0.1: measures the client side, PNG encoding + HTTP + JSON), and
``CachedScorer`` on an all-hits batch. The tiny models measure the package's overhead
(preprocessing, chat template, padding, logits gather), not a real VLM's compute: pass real
models with ``--spec`` (e.g. on a GPU machine with the weights in a local directory or the cache).

``--overlap`` measures instead the real scoring path on overlapping clips: collector-like
``[envs, steps]`` batches of random frames (episodes of ``--episode-len`` steps, with their
``("next", "pixels")``) go through ``ClipStream`` (``clip_len=--clip-len``, stride 1, outcome
frame on, pooled frames) → ``AsyncScorer`` → ``VLMScoreTransform`` → ``HFContrastiveScorer``
(the tiny CLIP, or ``--spec clip:<dir>``), once embedding every clip's frames from scratch
(``embedding_cache=0``: each frame is in ``clip_len + 1`` clips) and once reusing frame
embeddings (the default cache). It prints clips/s (wall clock, from the first push to the
last score written) and vision-tower frames per stored transition.

Usage:

    python benchmarks/scorer_throughput.py [--batch 16] [--frames 8] [--size 64] [--repeats 5]
    python benchmarks/scorer_throughput.py --no-tiny --device cuda --dtype bfloat16 \\
        --spec hf:HuggingFaceTB/SmolVLM-256M-Instruct --spec hf:Qwen/Qwen2-VL-2B-Instruct
    python benchmarks/scorer_throughput.py --overlap --threads 1 [--clip-len 16] [--transitions 960]

Prints one Markdown row per backend: clips/s, ms per clip, frames/s, and the ratio to the
fastest tiny generative backend measured in the same run (``--overlap``: one row per cache
setting).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the scorers test package: tiny models, fake server

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tiny models are local; a --spec must be local or cached

from vlmrb_torchrl.scorers import CachedScorer, CallableScorer, make_scorer  # noqa: E402


def clips_of(batch: int, frames: int, size: int, seed: int = 0):
    from scorers import tiny_vlms

    return tiny_vlms.noise_clips(batch, frames, size=size, seed=seed)


def time_scorer(scorer, clips, repeats: int) -> float:
    """Median seconds of one ``score(clips)`` call after a warm-up call."""
    scorer.score(clips)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        scorer.score(clips)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def collector_batches(num_envs: int, steps: int, episode_len: int, size: int, chunk: int, seed: int = 0):
    """``[num_envs, chunk]`` batches of random frames as a collector yields them (traj ids, dones,
    ``("next", "pixels")`` = the next step's frame, or a fresh terminal frame at an episode end)."""
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(seed)
    frames = torch.randint(0, 256, (num_envs, steps + 1, size, size, 3), generator=g, dtype=torch.uint8)
    t = torch.arange(steps)
    done = (t % episode_len == episode_len - 1).expand(num_envs, steps)
    nxt = frames[:, 1:].clone()
    # after a done the next root frame is a reset frame, not the terminal one
    nxt[done] = torch.randint(0, 256, (int(done.sum()), size, size, 3), generator=g, dtype=torch.uint8)
    traj = torch.arange(num_envs)[:, None] + num_envs * (t // episode_len)[None]
    for lo in range(0, steps, chunk):
        sl = slice(lo, min(lo + chunk, steps))
        yield TensorDict({"pixels": frames[:, :steps][:, sl], ("next", "pixels"): nxt[:, sl],
                          ("collector", "traj_ids"): traj[:, sl], ("next", "done"): done[:, sl, None]},
                         batch_size=[num_envs, sl.stop - sl.start])


def overlap(args) -> None:
    """Overlapping stride-1 clips through stream + worker + transform + a contrastive scorer."""
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    from vlmrb_torchrl import AsyncScorer, ClipSpec, VLMPrioritizedSampler, make_clip_scoring

    num_envs = 4
    steps = args.transitions // num_envs
    with tempfile.TemporaryDirectory() as tmp:
        if args.spec:
            spec = args.spec[0]
        else:
            from scorers import tiny_vlms

            spec = f"clip:{tiny_vlms.build('clip', Path(tmp) / 'clip')}"
        rows = []
        for cache in (0, 4096):
            scorer = make_scorer(spec, embedding_cache=cache, device=args.device, dtype=args.dtype)
            stream, transform = make_clip_scoring(scorer, ClipSpec(clip_len=args.clip_len, stride=1))
            sampler = VLMPrioritizedSampler(num_envs * steps)
            rb = TensorDictReplayBuffer(storage=LazyTensorStorage(num_envs * steps), sampler=sampler)
            batches = list(collector_batches(num_envs, steps, args.episode_len, args.size, chunk=50))
            t0 = time.perf_counter()
            with AsyncScorer(transform, sampler, batch_size=32, on_full="block") as worker:
                for batch in batches:
                    index = rb.extend(batch.reshape(-1).exclude("pixels", ("next", "pixels")))
                    worker.submit(stream.push(batch, index, sampler.generations(index)))
                worker.submit(stream.flush())
                worker.drain()
                clips = worker.stats()["scored"]
            seconds = time.perf_counter() - t0
            embedded = scorer.stats()["frames_embedded"]
            rows.append((cache, clips, seconds, embedded / (num_envs * steps)))
            print(f"  embedding_cache={cache}: {clips / seconds:.1f} clips/s", file=sys.stderr, flush=True)
    print()
    print(f"{num_envs * steps} transitions ({num_envs} envs, episodes of {args.episode_len} steps), clip_len "
          f"{args.clip_len}, stride 1, outcome frame on, frames {args.size}x{args.size}, scorer {spec.split('/')[-1]}, "
          f"torch threads {torch.get_num_threads()}")
    print()
    print("| frame embeddings | clips | clips/s | vision frames / transition |")
    print("|---|---:|---:|---:|")
    for cache, clips, seconds, per in rows:
        what = "every clip from scratch (embedding_cache=0)" if cache == 0 else f"reused (embedding_cache={cache})"
        print(f"| {what} | {clips} | {clips / seconds:.1f} | {per:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16, help="clips per score() call")
    parser.add_argument("--frames", type=int, default=8, help="frames per clip")
    parser.add_argument("--size", type=int, default=64, help="frame height and width")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--spec", action="append", default=[], help="extra scorer specs (real models)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--no-tiny", action="store_true", help="skip the tiny models")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--overlap", action="store_true",
                        help="overlapping stride-1 clips through stream + worker + transform (see above)")
    parser.add_argument("--clip-len", type=int, default=16, help="--overlap: steps per clip")
    parser.add_argument("--transitions", type=int, default=960, help="--overlap: transitions streamed")
    parser.add_argument("--episode-len", type=int, default=60, help="--overlap: steps per episode")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.overlap:
        overlap(args)
        return

    clips = clips_of(args.batch, args.frames, args.size)
    rows: list[tuple[str, str, float]] = []  # (name, detail, seconds per call)

    def run(name: str, detail: str, scorer) -> None:
        seconds = time_scorer(scorer, clips, args.repeats)
        rows.append((name, detail, seconds))
        print(f"  {name:<34} {args.batch / seconds:9.1f} clips/s", file=sys.stderr, flush=True)

    run(
        "CallableScorer (mean pixel)",
        "reference: no model",
        CallableScorer(lambda c: c["pixels"].float().mean((1, 2, 3, 4)) / 255),
    )

    if not args.no_tiny and importlib.util.find_spec("transformers") is not None:
        from scorers import tiny_vlms

        has_tv = importlib.util.find_spec("torchvision") is not None
        with tempfile.TemporaryDirectory() as tmp:
            hw = {"device": args.device, "dtype": args.dtype}
            for family in tiny_vlms.FAMILIES:
                if family in tiny_vlms.NEEDS_TORCHVISION and not has_tv:
                    print(f"  (skipping tiny {family}: needs torchvision)", file=sys.stderr)
                    continue
                needed = tiny_vlms.NEEDS_MODULE.get(family)
                if needed and importlib.util.find_spec(needed) is None:
                    print(f"  (skipping tiny {family}: needs {needed})", file=sys.stderr)
                    continue
                directory = tiny_vlms.build(family, Path(tmp) / family)
                scorer = make_scorer(str(directory), **hw)
                mode = getattr(scorer, "input_mode", None) or f"aggregation={scorer.aggregation}"
                run(f"tiny {family}", f"{type(scorer).__name__}, {mode}", scorer)
                if family == "idefics3":
                    run(
                        "tiny idefics3, grid",
                        "HFGenerativeScorer, grid",
                        make_scorer(str(directory), input_mode="grid", **hw),
                    )
                    cached = CachedScorer(scorer)
                    run("CachedScorer(tiny idefics3), hits", "every clip cached", cached)

    from scorers import fake_openai

    server = fake_openai.FakeServer()
    try:
        for concurrency in (1, 8):
            scorer = make_scorer(f"openai:{server.url}#tiny-vlm", max_concurrency=concurrency)
            run(f"OpenAIScorer, {concurrency} concurrent", "fake local server: client overhead", scorer)
            scorer.close()
    finally:
        server.close()

    for spec in args.spec:
        scorer = (
            make_scorer(spec, device=args.device, dtype=args.dtype)
            if not spec.startswith("openai:")
            else make_scorer(spec)
        )
        run(spec, repr(scorer), scorer)

    generative = [s for name, detail, s in rows if name.startswith("tiny") and "Generative" in detail]
    base = min(generative) if generative else None
    print()
    print(
        f"batch {args.batch} clips x {args.frames} frames of {args.size}x{args.size}, torch threads "
        f"{torch.get_num_threads()}, median of {args.repeats} calls"
    )
    print()
    print("| scorer | what | clips/s | ms/clip | frames/s | × fastest tiny generative |")
    print("|---|---|---:|---:|---:|---:|")
    for name, detail, seconds in rows:
        ratio = f"{base / seconds:.2f}" if base else "–"
        print(
            f"| {name} | {detail} | {args.batch / seconds:.1f} | {1000 * seconds / args.batch:.2f} | "
            f"{args.batch * args.frames / seconds:.0f} | {ratio} |"
        )


if __name__ == "__main__":
    main()
