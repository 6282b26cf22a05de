"""Double DQN with uniform, PER or VLM-guided replay, on MiniGrid or Atari.

Reads top to bottom: run setup, envs, networks, loss and optimizer, replay, resume, the
collect-store-learn loop (evaluation and checkpoints inside it), outputs. Every replay mode
shares everything but the replay buffer. Entry point: ``vlmrb train dqn key=value ...``.

Checkpoints re-create the collector with seeds derived from ``(seed, env_steps)`` — in the
uninterrupted run too — so a resumed run reproduces the uninterrupted one exactly when
``async_scoring=false`` (with asynchronous scoring, scores land at timing-dependent moments).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.data.postprocs import MultiStep
from torchrl.envs import SerialEnv
from torchrl.modules import MLP, ConvNet, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate

from vlmrb_torchrl.recipes import common
from vlmrb_torchrl.recipes.config import DQNConfig


class _Scale(nn.Module):
    """uint8 pixels -> float in [0, 1] (the replay stores uint8 to keep Atari buffers small)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() / 255.0


def make_q_network(obs_shape: torch.Size, n_actions: int, hidden: int) -> nn.Module:
    """MLP for vector observations (MiniGrid), Nature CNN for image stacks (Atari)."""
    if len(obs_shape) == 1:
        return MLP(in_features=obs_shape[0], out_features=n_actions, num_cells=[hidden, hidden])
    cnn = ConvNet(num_cells=[32, 64, 64], kernel_sizes=[8, 4, 3], strides=[4, 2, 1])
    with torch.no_grad():
        flat = cnn(torch.zeros(1, *obs_shape)).shape[-1]
    return nn.Sequential(_Scale(), cnn, MLP(in_features=flat, out_features=n_actions, num_cells=[512]))


def make_policy(qnet: QValueActor, action_spec, *, eps_init: float, eps_end: float, steps: int) -> TensorDictSequential:
    return TensorDictSequential(qnet, EGreedyModule(action_spec, annealing_num_steps=max(1, steps),
                                                    eps_init=eps_init, eps_end=eps_end))


def main(cfg: DQNConfig) -> dict:
    cfg = dataclasses.replace(cfg).validate()
    checkpoint = common.latest_checkpoint(cfg.resume) if cfg.resume else None

    # --- run setup: seeds, device, run directory, loggers, progress bar
    generator = common.seed_everything(cfg.seed)
    device = common.resolve_device(cfg.device)
    vlm_mode = cfg.replay in ("vlm", "vlm_td")
    scorer = common.make_scorer_from_config(cfg) if vlm_mode else None
    needs_frames = scorer is not None and "pixels" in scorer.in_keys
    updates_total = max(0, cfg.total_frames - cfg.learning_starts) // cfg.train_every

    # --- envs: the agent sees symbolic (MiniGrid) or stacked grey (Atari) observations;
    # frames for the VLM are rendered only when the scorer reads them
    limit = {} if cfg.max_episode_steps is None else {"max_episode_steps": cfg.max_episode_steps}
    train_env_fn = common.env_factory(cfg.env, train=True, render=needs_frames, **limit)
    eval_env_fn = common.env_factory(cfg.env, train=False, render=False, **limit)
    probe = eval_env_fn()
    obs_shape = probe.observation_spec["observation"].shape
    action_spec = probe.action_spec
    probe.close()

    # --- networks, loss, optimizer
    qnet = QValueActor(make_q_network(obs_shape, action_spec.space.n, cfg.hidden), in_keys=["observation"],
                       spec=action_spec).to(device)
    explore = make_policy(qnet, action_spec, eps_init=cfg.eps_start, eps_end=cfg.eps_end,
                          steps=int(cfg.eps_fraction * cfg.total_frames))
    eval_policy = make_policy(qnet, action_spec, eps_init=cfg.eval_eps, eps_end=cfg.eval_eps, steps=1)
    loss = DQNLoss(qnet, action_space=action_spec, delay_value=True, double_dqn=True, loss_function="smooth_l1")
    loss.make_value_estimator(gamma=cfg.gamma)  # n-step targets use gamma ** steps_to_next_obs
    target_update = HardUpdate(loss, value_network_update_interval=1)  # stepped every target_update updates
    optim = torch.optim.Adam(loss.parameters(), lr=cfg.lr)
    multistep = MultiStep(gamma=cfg.gamma, n_steps=cfg.n_steps) if cfg.n_steps > 1 else None

    # --- replay: the only thing that differs between replay modes
    rb = common.make_replay(cfg, generator=generator, updates=updates_total, scorer=scorer)

    # --- resume
    counters = {"env_steps": 0, "episodes": 0, "updates": 0, "next_eval": cfg.eval_every,
                "next_checkpoint": cfg.checkpoint_every}
    modules = {"loss": loss, "optim": optim, "explore": explore}
    if checkpoint is not None:
        counters = common.load_checkpoint(checkpoint, modules=modules, rb=rb)
        if cfg.output_dir is None:  # continue in the run directory the checkpoint belongs to
            cfg.output_dir = str(checkpoint.parent.parent)
        common.truncate_metrics(Path(cfg.output_dir) / "metrics.csv", counters["env_steps"])
    run = common.Run(cfg, recipe="dqn", total=cfg.total_frames, resumed_from=counters["env_steps"])

    def make_collector(env_steps: int) -> Collector:
        env = SerialEnv(cfg.num_envs, train_env_fn)
        env.set_seed(cfg.seed * 1_000_003 + env_steps)  # same seeds for uninterrupted and resumed runs
        remaining = cfg.total_frames - env_steps
        return Collector(env, explore, frames_per_batch=cfg.frames_per_batch,
                         total_frames=-(-remaining // cfg.frames_per_batch) * cfg.frames_per_batch,
                         device="cpu", auto_register_policy_transforms=False)

    # --- the loop: collect -> store (and queue clips) -> learn
    metrics_last: dict = {}
    loss_value = float("nan")
    start = time.perf_counter()
    steps_at_start = counters["env_steps"]
    stop_at = min(cfg.total_frames, cfg.stop_at or cfg.total_frames)
    collector = make_collector(counters["env_steps"])
    while counters["env_steps"] < stop_at:
        recreate = False
        for batch in collector:
            frames = batch.numel()
            counters["env_steps"] += frames
            stored = multistep(batch.clone(False)) if multistep is not None else batch
            if vlm_mode:
                rb.extend(stored, clips_from=batch)  # clips see the raw 1-step data and frames
                if not cfg.async_scoring:
                    rb.async_scorer.drain()
            else:
                rb.extend(stored.reshape(-1).exclude("pixels", ("next", "pixels")))
            done = batch["next", "done"]
            counters["episodes"] += int(done.sum())
            explore[1].step(frames)

            if counters["env_steps"] >= cfg.learning_starts:
                for _ in range(frames // cfg.train_every):
                    sample = rb.sample().to(device)
                    loss_td = loss(sample)
                    optim.zero_grad()
                    loss_td["loss"].backward()
                    nn.utils.clip_grad_norm_(loss.parameters(), cfg.max_grad_norm)
                    optim.step()
                    if cfg.replay != "uniform":
                        rb.update_tensordict_priority(sample)  # PER priorities / vlm_td boost
                    counters["updates"] += 1
                    if counters["updates"] % cfg.target_update == 0:
                        target_update.step()
                    loss_value = float(loss_td["loss"].detach())
                collector.update_policy_weights_()

            steps_per_s = (counters["env_steps"] - steps_at_start) / (time.perf_counter() - start)
            row = {"env_steps": counters["env_steps"], "episodes": counters["episodes"], "loss": loss_value,
                   "epsilon": float(explore[1].eps), "env_steps_per_s": steps_per_s,
                   "time_s": time.perf_counter() - start, **common.replay_stats(rb)}
            if counters["env_steps"] >= counters["next_eval"] or counters["env_steps"] >= cfg.total_frames:
                counters["next_eval"] += cfg.eval_every
                row.update(common.evaluate(eval_policy, eval_env_fn, episodes=cfg.eval_episodes,
                                           seed=cfg.seed + 10_000 + counters["env_steps"]))
                run.log(row)
                metrics_last = row
            run.progress(frames, success=_fmt(metrics_last.get("eval_success")), loss=_fmt(loss_value),
                         eps=_fmt(float(explore[1].eps)), scored=_fmt(row.get("fraction_scored")))
            at_stop = counters["env_steps"] >= stop_at
            if counters["env_steps"] >= counters["next_checkpoint"] or at_stop:
                if counters["env_steps"] >= counters["next_checkpoint"]:
                    counters["next_checkpoint"] += cfg.checkpoint_every
                if vlm_mode:  # a checkpoint holds every score of the data before it
                    rb.flush_clips()
                    rb.async_scorer.drain()
                common.save_checkpoint(run.dir / "checkpoints" / f"step_{counters['env_steps']}",
                                       modules=modules, rb=rb, counters=dict(counters))
                recreate = not at_stop
                break
        collector.shutdown()
        if recreate:
            collector = make_collector(counters["env_steps"])

    # --- outputs: clip gallery, summary
    gallery = []
    if vlm_mode and cfg.gallery_clips > 0:
        gallery = common.clip_gallery(
            run.dir / "gallery", scorer=scorer, make_env=common.env_factory(cfg.env, train=False, render=True, **limit),
            policy=eval_policy, clip_len=cfg.clip_len, clips=cfg.gallery_clips, seed=cfg.seed,
            max_steps=cfg.max_episode_steps or 1_000)
    if vlm_mode:
        rb.close(flush=False)
    run.close()
    summary = {"run_dir": str(run.dir), **counters, **{k: v for k, v in metrics_last.items() if k != "env_steps"},
               "gallery": [str(p) for p in gallery]}
    (run.dir / "summary.json").write_text(_json(summary))
    return summary


def _fmt(value) -> str | None:
    return None if value is None or value != value else f"{value:.3g}"


def _json(data: dict) -> str:
    import json

    return json.dumps(data, indent=2, default=float)
