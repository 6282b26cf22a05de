"""What the recipes share: run directory and logging, envs, replay, evaluation, checkpoints, gallery."""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import random
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import (
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    TensorDictReplayBuffer,
)

from vlmrb_torchrl.buffer import make_vlm_replay_buffer
from vlmrb_torchrl.clips import ClipSpec, ClipStream
from vlmrb_torchrl.transform import VLMScoreTransform

METRIC_COLUMNS = [
    "env_steps", "episodes", "eval_success", "eval_return", "loss", "epsilon", "lambda",
    "fraction_scored", "positive_fraction", "sampled_positive_fraction", "stale_drops", "scorer_clips_per_s",
    "scorer_backlog", "scorer_dropped", "env_steps_per_s", "time_s",
]
#: SAC's metrics: the entropy temperature and policy entropy instead of epsilon.
SAC_METRIC_COLUMNS = [c for c in METRIC_COLUMNS if c != "epsilon"]
SAC_METRIC_COLUMNS[SAC_METRIC_COLUMNS.index("loss") + 1:SAC_METRIC_COLUMNS.index("loss") + 1] = [
    "loss_actor", "loss_qvalue", "alpha", "entropy"]


# ---------------------------------------------------------------------------------- run setup
def seed_everything(seed: int) -> torch.Generator:
    """Seeds Python, NumPy and torch; returns the replay buffer's generator."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


class RunStart(NamedTuple):
    generator: torch.Generator  # the replay buffer's
    device: torch.device
    vlm_mode: bool
    scorer: Any  # None outside the VLM modes
    needs_frames: bool  # the scorer reads rendered frames
    updates_total: int  # gradient updates over the whole run
    threads_before: int  # torch intra-op threads to restore at the end


def start_run(cfg: Any) -> RunStart:
    """What every recipe does first: seeds, pins the learner's torch threads, resolves the device
    and, in VLM modes, builds the scorer."""
    generator = seed_everything(cfg.seed)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(cfg.torch_threads)
    vlm_mode = cfg.replay in ("vlm", "vlm_td")
    scorer = make_scorer_from_config(cfg) if vlm_mode else None
    return RunStart(generator, resolve_device(cfg.device), vlm_mode, scorer,
                    scorer is not None and "pixels" in scorer.in_keys,
                    max(0, cfg.total_frames - cfg.learning_starts) // cfg.train_every, threads_before)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class Run:
    """A run directory: resolved config, ``metrics.csv``, TensorBoard events, progress bar.

    ``log(metrics)`` appends one CSV row (missing columns are left empty) and the same
    scalars to TensorBoard under ``<group>/<name>``.
    """

    def __init__(self, cfg: Any, *, recipe: str, total: int, resumed_from: int = 0,
                 columns: list[str] | None = None) -> None:
        if cfg.output_dir is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            env = cfg.env.replace("/", "-")
            cfg.output_dir = f"runs/{recipe}__{env}__{cfg.replay}__seed{cfg.seed}__{stamp}"
        self.dir = Path(cfg.output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "checkpoints").mkdir(exist_ok=True)
        (self.dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
        self.csv_path = self.dir / "metrics.csv"
        new_file = not self.csv_path.exists() or resumed_from == 0
        self._csv_file = open(self.csv_path, "w" if new_file else "a", newline="")
        self._csv = csv.DictWriter(self._csv_file, fieldnames=columns or METRIC_COLUMNS, extrasaction="ignore")
        if new_file:
            self._csv.writeheader()
        self._tb = None
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # pragma: no cover - tensorboard is part of the recipe extras
                SummaryWriter = None
            if SummaryWriter is not None:
                self._tb = SummaryWriter(log_dir=str(self.dir / "tensorboard"), purge_step=resumed_from or None)
                self._tb.add_text("config", "\n".join(f"    {k}: {v}" for k, v in dataclasses.asdict(cfg).items()))
        self._pbar = None
        if cfg.progress:
            from tqdm.auto import tqdm

            self._pbar = tqdm(total=total, initial=resumed_from, unit="frames", dynamic_ncols=True,
                              desc=f"{recipe} {cfg.env} {cfg.replay}")

    def log(self, metrics: dict[str, Any]) -> None:
        row = {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in metrics.items() if v is not None}
        self._csv.writerow(row)
        self._csv_file.flush()
        if self._tb is not None:
            step = int(metrics["env_steps"])
            for key, value in metrics.items():
                if key != "env_steps" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(_tb_tag(key), value, step)

    def progress(self, frames: int, **postfix: Any) -> None:
        if self._pbar is not None:
            self._pbar.update(frames)
            self._pbar.set_postfix({k: v for k, v in postfix.items() if v is not None}, refresh=False)

    def close(self) -> None:
        self._csv_file.close()
        if self._tb is not None:
            self._tb.close()
        if self._pbar is not None:
            self._pbar.close()


def _tb_tag(key: str) -> str:
    if key.startswith("eval_"):
        return f"eval/{key[5:]}"
    if key.startswith("scorer_"):
        return f"scorer/{key[7:]}"
    if key in ("lambda", "fraction_scored", "positive_fraction", "sampled_positive_fraction", "stale_drops",
               "drawn", "drawn_positive"):
        return f"replay/{key}"
    if key in ("env_steps_per_s", "time_s", "render_per_step"):
        return f"time/{key}"
    return f"train/{key}"


# ---------------------------------------------------------------------------------- envs
def env_factory(env_id: str, *, train: bool = True, render: bool = False, **kwargs: Any):
    """A picklable zero-argument env constructor for MiniGrid (``MiniGrid-*``, ``BabyAI-*``), ALE or
    robosuite (``robosuite/<Task>``) ids."""
    if env_id.startswith("robosuite/"):
        from vlmrb_torchrl.envs.robosuite import make_robosuite_env

        return functools.partial(make_robosuite_env, env_id, render=render, **kwargs)
    if env_id.startswith(("MiniGrid-", "BabyAI-")):
        from vlmrb_torchrl.envs.minigrid import make_minigrid_env

        return functools.partial(make_minigrid_env, env_id, render=render, **kwargs)
    if env_id.startswith("ALE/"):
        from vlmrb_torchrl.envs.atari import make_atari_env

        return functools.partial(make_atari_env, env_id, train=train, render=render, **kwargs)
    raise ValueError(
        f"env={env_id!r} is not supported: use a MiniGrid id (e.g. MiniGrid-DoorKey-6x6-v0) "
        "an Atari id (e.g. ALE/Pong-v5) or robosuite/<Task> (e.g. robosuite/Lift)."
    )


def minigrid_actions(env_id: str, actions: str) -> tuple[str, ...] | None:
    """The ``actions=`` of a MiniGrid env for the config value ``actions`` (auto | all | a,b,c);
    ``None`` (all actions, or not a MiniGrid id) means the env's full action set."""
    if not env_id.startswith(("MiniGrid-", "BabyAI-")) or actions == "all":
        return None
    if actions == "auto":
        from vlmrb_torchrl.envs.minigrid import DOORKEY_ACTIONS

        return DOORKEY_ACTIONS if "DoorKey" in env_id else None
    return tuple(name.strip() for name in actions.split(",") if name.strip())


def default_scorer_for(env_id: str) -> str | None:
    if env_id.startswith("robosuite/"):
        return "oracle:robosuite"
    return "oracle:minigrid" if env_id.startswith(("MiniGrid-", "BabyAI-")) else None


def make_collector(env_fn, policy, *, num_envs: int, frames_per_batch: int, total_frames: int, seed: int,
                   env_steps: int, parallel: bool = False, init_random_frames: int = 0):
    """A ``Collector`` over ``num_envs`` copies of ``env_fn`` for the frames left after ``env_steps``.

    Env seeds derive from ``(seed, env_steps)``, in the uninterrupted run too, so a run resumed
    from a checkpoint re-creates exactly the collector the uninterrupted run re-created there.
    ``parallel=True`` steps each env in its own process (``ParallelEnv``).
    """
    from torchrl.collectors import Collector
    from torchrl.envs import ParallelEnv, SerialEnv

    env = (ParallelEnv if parallel else SerialEnv)(num_envs, env_fn)
    env.set_seed(seed * 1_000_003 + env_steps)
    remaining = total_frames - env_steps
    kwargs = {"init_random_frames": init_random_frames} if init_random_frames > 0 else {}
    return Collector(env, policy, frames_per_batch=frames_per_batch,
                     total_frames=-(-remaining // frames_per_batch) * frames_per_batch,
                     device="cpu", auto_register_policy_transforms=False, **kwargs)


def resume_counters(cfg: Any, checkpoint: Path | None, *, modules: dict[str, Any], rb) -> dict[str, Any]:
    """Fresh counters, or those of ``checkpoint`` after loading its modules and replay into place."""
    counters = {"env_steps": 0, "episodes": 0, "updates": 0, "next_eval": cfg.eval_every,
                "next_checkpoint": cfg.checkpoint_every}
    if checkpoint is not None:
        counters = load_checkpoint(checkpoint, modules=modules, rb=rb)
        if cfg.output_dir is None:  # continue in the run directory the checkpoint belongs to
            cfg.output_dir = str(checkpoint.parent.parent)
        truncate_metrics(Path(cfg.output_dir) / "metrics.csv", counters["env_steps"])
    return counters


def store(rb, stored: TensorDictBase, batch: TensorDictBase, *, vlm_mode: bool, sync: bool) -> None:
    """Writes a collector batch to the replay; VLM modes also queue its clips (``sync``: wait for scores)."""
    if vlm_mode:
        rb.extend(stored, clips_from=batch)  # clips see the raw 1-step data and frames
        if sync:
            rb.async_scorer.drain()
    else:
        rb.extend(stored.reshape(-1).exclude("pixels", ("next", "pixels")))


def n_step_returns(multistep, batch: TensorDictBase) -> TensorDictBase:
    """TorchRL's ``MultiStep`` on a collector batch ``[envs, time]``, with the done flags it forgets.

    ``MultiStep`` (torchrl 0.14) replaces ``("next", obs)`` by the observation at the end of the
    n-step window and sums the rewards up to a termination, but keeps the *first* step's
    ``("next", "terminated" | "truncated" | "done")``. A transition 1 to n-1 steps before a
    termination then bootstraps from the terminal observation — a state the agent never acts
    from, whose Q-values are whatever the network extrapolates. Here the flags are taken at the
    window's last step, where the new next observation comes from.
    """
    out = multistep(batch.clone(False))
    steps = out.get("steps_to_next_obs")
    steps = steps.reshape(out.shape)
    last = torch.arange(out.shape[-1]).expand(out.shape) + steps - 1  # window's last step
    for key in ("terminated", "truncated", "done"):
        flag = batch.get(("next", key), None)
        if flag is not None:
            out.set(("next", key), flag.gather(-2, last.unsqueeze(-1).expand_as(flag)))
    return out


def checkpoint_now(run: Run, rb, *, modules: dict[str, Any], counters: dict[str, Any], vlm_mode: bool) -> None:
    """Saves ``checkpoints/step_<env_steps>``; in VLM modes every score of the data before it is in."""
    if vlm_mode:
        rb.flush_clips()
        rb.async_scorer.drain()
    save_checkpoint(run.dir / "checkpoints" / f"step_{counters['env_steps']}", modules=modules, rb=rb,
                    counters=dict(counters))


def maybe_checkpoint(run: Run, rb, *, cfg: Any, counters: dict[str, Any], stop_at: int,
                     modules: dict[str, Any], vlm_mode: bool) -> bool | None:
    """Checkpoints when one is due or the run stops here.

    Returns ``None`` when no checkpoint was taken, else whether the loop must re-create its
    collector (every checkpoint before the stop does, so that env seeds restart from
    ``(seed, env_steps)`` exactly as in a run resumed from that checkpoint).
    """
    at_stop = counters["env_steps"] >= stop_at
    due = counters["env_steps"] >= counters["next_checkpoint"]
    if not (due or at_stop):
        return None
    if due:
        counters["next_checkpoint"] += cfg.checkpoint_every
    checkpoint_now(run, rb, modules=modules, counters=counters, vlm_mode=vlm_mode)
    return not at_stop


def finish(run: Run, rb, *, counters: dict[str, Any], metrics: dict[str, Any], vlm_mode: bool,
           gallery: list[Path]) -> dict[str, Any]:
    """Closes the replay and the run, writes ``summary.json`` and returns the summary."""
    if vlm_mode:
        rb.close(flush=False)
    run.close()
    summary = {"run_dir": str(run.dir), **counters, **{k: v for k, v in metrics.items() if k != "env_steps"},
               "gallery": [str(p) for p in gallery]}
    (run.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    return summary


def fmt(value) -> str | None:
    """Progress-bar number: 3 significant digits, None for missing/NaN."""
    return None if value is None or value != value else f"{value:.3g}"


# ---------------------------------------------------------------------------------- replay
def make_scorer_from_config(cfg: Any):
    from vlmrb_torchrl.scorers import NoisyScorer, make_scorer

    kwargs = dict(cfg.scorer_kwargs or {})
    if cfg.prompt is not None:
        kwargs["prompt"] = cfg.prompt
    scorer = make_scorer(cfg.scorer, **kwargs)
    if cfg.label_noise > 0:
        scorer = NoisyScorer(scorer, flip_prob=cfg.label_noise, seed=cfg.seed)
    return scorer


def make_replay(cfg: Any, *, generator: torch.Generator, updates: int, scorer=None) -> TensorDictReplayBuffer:
    """The replay buffer for ``cfg.replay``; everything but the sampler is identical across modes."""
    storage = LazyTensorStorage(cfg.buffer_size)  # CPU: TorchRL's PyPI wheel has no CUDA trees
    if cfg.replay == "uniform":
        return TensorDictReplayBuffer(storage=storage, sampler=RandomSampler(), batch_size=cfg.batch_size,
                                      generator=generator)
    if cfg.replay == "per":
        sampler = PrioritizedSampler(cfg.buffer_size, alpha=cfg.per_alpha, beta=cfg.per_beta)
        return TensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=cfg.batch_size,
                                      generator=generator)
    default = cfg.default_priority if cfg.default_priority in ("mean", "max") else float(cfg.default_priority)
    warmup = cfg.vlm_warmup if cfg.vlm_warmup is not None else max(1, updates // 2)
    return make_vlm_replay_buffer(
        cfg.buffer_size, scorer,
        clip_spec=ClipSpec(clip_len=cfg.clip_len, stride=cfg.clip_stride, frames=cfg.clip_frames,
                           assign=cfg.clip_assign),
        storage=storage, batch_size=cfg.batch_size, generator=generator,
        sampler_kwargs={"lambda_max": cfg.lambda_max, "warmup": warmup, "threshold": cfg.threshold,
                        "eps": cfg.vlm_eps, "beta": cfg.vlm_beta, "default_priority": default,
                        "td_boost": cfg.replay == "vlm_td", "alpha": cfg.per_alpha},
    )


def replay_stats(rb: TensorDictReplayBuffer, counters: dict[str, Any]) -> dict[str, Any]:
    """Replay columns of the metrics row (empty for uniform/PER).

    ``sampled_positive_fraction`` is the share of positives among the transitions sampled
    since the last logged row (``counters["drawn_logged"]``, updated by :func:`maybe_evaluate`
    and checkpointed with the counters, so resumed runs log the same intervals).
    """
    if not hasattr(rb, "vlm_stats"):
        return {}
    stats = rb.vlm_stats()
    drawn_before, positive_before = counters.get("drawn_logged", (0, 0))
    drawn = stats["drawn"] - drawn_before
    return {"lambda": stats["lambda"], "fraction_scored": stats["fraction_scored"],
            "positive_fraction": stats["positive_fraction"],
            "sampled_positive_fraction": (stats["drawn_positive"] - positive_before) / drawn if drawn else float("nan"),
            "stale_drops": stats["stale_drops"],
            "scorer_clips_per_s": stats["scorer/clips_per_s"], "scorer_backlog": stats["scorer/backlog"],
            "scorer_dropped": stats["scorer/dropped"], "drawn": stats["drawn"], "drawn_positive": stats["drawn_positive"]}


# ---------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(policy, make_env, *, episodes: int, seed: int, max_steps: int = 100_000,
             num_envs: int = 1) -> dict[str, float]:
    """Runs ``episodes`` full episodes of ``policy`` (already at its evaluation epsilon).

    With ``num_envs > 1`` the episodes run in ``num_envs`` env copies stepped together
    (``SerialEnv``, one batched policy call per step), ``episodes // num_envs`` per copy and one
    more for the first ``episodes % num_envs`` copies: exactly ``episodes`` i.i.d. episodes (each
    copy counts its first episodes, so short successful ones are not favoured), several times
    faster with small networks. Episodes still running
    after ``max_steps`` steps count as failures with their partial return.

    Returns the success rate (NaN when the env reports no ``success``) and the mean return
    (``raw_reward`` when the env provides it, e.g. unclipped Atari scores).
    """
    if num_envs <= 1:
        return _evaluate_serial(policy, make_env, episodes=episodes, seed=seed, max_steps=max_steps)
    from torchrl.envs import SerialEnv

    env = SerialEnv(num_envs, make_env)
    env.set_seed(seed)
    quota = torch.full((num_envs,), episodes // num_envs, dtype=torch.long)
    quota[: episodes % num_envs] += 1
    td = env.reset()
    reward_key = "raw_reward" if "raw_reward" in env.observation_spec.keys() else "reward"
    has_success = "success" in env.observation_spec.keys()
    running_return = torch.zeros(num_envs, dtype=torch.float64)
    running_success = torch.zeros(num_envs, dtype=torch.bool)
    finished = torch.zeros(num_envs, dtype=torch.long)
    successes, returns = [], []
    for _ in range(max_steps):
        td, td_root = env.step_and_maybe_reset(policy(td))
        nxt = td["next"]
        running_return += nxt[reward_key].reshape(num_envs).double()
        if has_success:
            running_success |= nxt["success"].reshape(num_envs)
        for i in nxt["done"].reshape(num_envs).nonzero().flatten().tolist():
            if finished[i] < quota[i]:
                finished[i] += 1
                returns.append(float(running_return[i]))
                successes.append(float(running_success[i]))
            running_return[i], running_success[i] = 0.0, False
        if bool((finished >= quota).all()):
            break
        td = td_root
    else:  # episodes cut by max_steps: failures with their partial returns
        for i in (finished < quota).nonzero().flatten().tolist():
            returns.append(float(running_return[i]))
            successes.append(0.0)
    env.close()
    return {"eval_success": float(np.mean(successes)) if has_success else float("nan"),
            "eval_return": float(np.mean(returns))}


def _evaluate_serial(policy, make_env, *, episodes: int, seed: int, max_steps: int) -> dict[str, float]:
    env = make_env()
    env.set_seed(seed)
    successes, returns = [], []
    for _ in range(episodes):
        rollout = env.rollout(max_steps, policy, break_when_any_done=True)
        nxt = rollout["next"]
        reward_key = "raw_reward" if "raw_reward" in nxt.keys() else "reward"
        returns.append(float(nxt[reward_key].sum()))
        if "success" in nxt.keys():
            successes.append(float(nxt["success"].any()))
    env.close()
    return {"eval_success": float(np.mean(successes)) if successes else float("nan"),
            "eval_return": float(np.mean(returns))}


def maybe_evaluate(run: Run, row: dict[str, Any], *, cfg: Any, counters: dict[str, Any], policy, make_env,
                   max_steps: int = 100_000) -> bool:
    """When an evaluation is due (every ``eval_every`` frames and at the end), adds its results
    to ``row`` and logs the row; returns whether it did."""
    if counters["env_steps"] < counters["next_eval"] and counters["env_steps"] < cfg.total_frames:
        return False
    counters["next_eval"] += cfg.eval_every
    row.update(evaluate(policy, make_env, episodes=cfg.eval_episodes, seed=cfg.seed + 10_000 + counters["env_steps"],
                        max_steps=max_steps, num_envs=min(cfg.eval_envs, cfg.eval_episodes)))
    run.log(row)
    if "drawn" in row:
        counters["drawn_logged"] = (row["drawn"], row["drawn_positive"])
    return True


# ---------------------------------------------------------------------------------- checkpoints
def save_checkpoint(path: Path, *, modules: dict[str, Any], rb: TensorDictReplayBuffer,
                    counters: dict[str, Any]) -> None:
    """Model/optimizer states, counters, RNG states and the replay buffer (storage + sampler)."""
    path.mkdir(parents=True, exist_ok=True)
    state = {name: obj.state_dict() for name, obj in modules.items()}
    state["counters"] = counters
    state["rng"] = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    torch.save(state, path / "state.pt")
    rb.dumps(path / "replay")
    (path / "DONE").write_text(json.dumps(counters))  # written last: the checkpoint is complete


def truncate_metrics(path: Path, env_steps: int) -> None:
    """Drops the metric rows logged after the checkpoint a run resumes from."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = lines[:1] + [ln for ln in lines[1:] if int(float(ln.split(",", 1)[0])) <= env_steps]
    path.write_text("".join(kept))


def latest_checkpoint(resume: str) -> Path:
    path = Path(resume)
    if (path / "DONE").exists():
        return path
    candidates = sorted((p for p in (path / "checkpoints").glob("step_*") if (p / "DONE").exists()),
                        key=lambda p: int(p.name.split("_")[1]))
    if not candidates:
        raise FileNotFoundError(f"resume={resume!r}: no complete checkpoint found (looked for {path}/checkpoints/step_*).")
    return candidates[-1]


def load_checkpoint(path: Path, *, modules: dict[str, Any], rb: TensorDictReplayBuffer) -> dict[str, Any]:
    state = torch.load(path / "state.pt", weights_only=False)
    for name, obj in modules.items():
        obj.load_state_dict(state[name])
    rb.loads(path / "replay")
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    return state["counters"]


# ---------------------------------------------------------------------------------- gallery
@torch.no_grad()
def clip_gallery(out_dir: Path, *, scorer, make_env, policy, clip_len: int, clips: int, seed: int,
                 episodes: int = 6, max_steps: int = 1_000) -> list[Path]:
    """Scores clips from a few rendered episodes and saves the top/bottom ``clips`` as GIFs.

    Each GIF carries its score and the scorer's prompt in the frame's caption strip.
    """
    from PIL import Image, ImageDraw

    env = make_env()
    env.set_seed(seed)
    stream = ClipStream(ClipSpec(clip_len=clip_len), frame_key="pixels",
                        extra_keys=VLMScoreTransform(scorer, clip_len=clip_len).score_key_list())
    batches = []
    offset = 0
    for episode in range(episodes):
        rollout = env.rollout(max_steps, policy, break_when_any_done=True)
        rollout["collector", "traj_ids"] = torch.full(rollout.shape, episode, dtype=torch.long)
        index = torch.arange(offset, offset + rollout.numel())
        offset += rollout.numel()
        for out in (stream.push(rollout, index), stream.flush()):
            if out is not None:
                batches.append(out)
    env.close()
    if not batches:
        return []
    from vlmrb_torchrl.clips import ClipBatch

    batch = ClipBatch.cat(batches)
    transform = VLMScoreTransform(scorer, clip_len=clip_len)
    scores = torch.cat([transform.score_clips(c) for c in batch.clips.split(64)])
    order = torch.argsort(scores, descending=True, stable=True)
    picks = [("top", i) for i in order[:clips].tolist()] + [("bottom", i) for i in order.flip(0)[:clips].tolist()]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    prompt = getattr(scorer, "prompt", "") or ""
    for rank, (kind, i) in enumerate(picks):
        frames = batch.clips["pixels"][i][batch.clips["mask"][i]]
        images = []
        for frame in frames.numpy():
            img = Image.fromarray(frame).resize((frame.shape[1] * 3, frame.shape[0] * 3), Image.NEAREST)
            canvas = Image.new("RGB", (img.width, img.height + 28), "black")
            canvas.paste(img, (0, 28))
            draw = ImageDraw.Draw(canvas)
            draw.text((2, 1), f"score {scores[i]:.2f}", fill="white")
            draw.text((2, 14), prompt[:60], fill="gray")
            images.append(canvas)
        path = out_dir / f"{kind}_{rank % clips if clips else rank}_score{scores[i]:.2f}.gif"
        images[0].save(path, save_all=True, append_images=images[1:], duration=150, loop=0)
        paths.append(path)
    (out_dir / "prompt.txt").write_text(prompt)
    return paths
