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

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.data.postprocs import MultiStep
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
    generator, device, vlm_mode, scorer, needs_frames, updates_total, threads_before = common.start_run(cfg)

    # --- envs: the agent sees symbolic (MiniGrid) or stacked grey (Atari) observations;
    # frames for the VLM are rendered only when the scorer reads them
    env_kwargs = {} if cfg.max_episode_steps is None else {"max_episode_steps": cfg.max_episode_steps}
    actions = common.minigrid_actions(cfg.env, cfg.actions)
    if actions is not None:
        env_kwargs["actions"] = actions
    train_env_fn = common.env_factory(cfg.env, train=True, render=needs_frames, **env_kwargs)
    eval_env_fn = common.env_factory(cfg.env, train=False, render=False, **env_kwargs)
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
    modules = {"loss": loss, "optim": optim, "explore": explore}
    counters = common.resume_counters(cfg, checkpoint, modules=modules, rb=rb)
    run = common.Run(cfg, recipe="dqn", total=cfg.total_frames, resumed_from=counters["env_steps"])

    def make_collector(env_steps: int):
        return common.make_collector(train_env_fn, explore, num_envs=cfg.num_envs,
                                     frames_per_batch=cfg.frames_per_batch, total_frames=cfg.total_frames,
                                     seed=cfg.seed, env_steps=env_steps)

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
            stored = common.n_step_returns(multistep, batch) if multistep is not None else batch
            common.store(rb, stored, batch, vlm_mode=vlm_mode, sync=not cfg.async_scoring)
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
                   "time_s": time.perf_counter() - start, **common.replay_stats(rb, counters)}
            if common.maybe_evaluate(run, row, cfg=cfg, counters=counters, policy=eval_policy,
                                     make_env=eval_env_fn):
                metrics_last = row
            run.progress(frames, success=common.fmt(metrics_last.get("eval_success")), loss=common.fmt(loss_value),
                         eps=common.fmt(float(explore[1].eps)), scored=common.fmt(row.get("fraction_scored")))
            recreate = common.maybe_checkpoint(run, rb, cfg=cfg, counters=counters, stop_at=stop_at,
                                               modules=modules, vlm_mode=vlm_mode)
            if recreate is not None:  # checkpointed: leave this collector
                break
        collector.shutdown()
        if recreate:
            collector = make_collector(counters["env_steps"])

    # --- outputs: clip gallery, summary
    gallery = []
    if vlm_mode and cfg.gallery_clips > 0:
        gallery = common.clip_gallery(
            run.dir / "gallery", scorer=scorer, make_env=common.env_factory(cfg.env, train=False, render=True, **env_kwargs),
            policy=eval_policy, clip_len=cfg.clip_len, clips=cfg.gallery_clips, seed=cfg.seed,
            max_steps=cfg.max_episode_steps or 1_000)
    torch.set_num_threads(threads_before)
    return common.finish(run, rb, counters=counters, metrics=metrics_last, vlm_mode=vlm_mode, gallery=gallery)
