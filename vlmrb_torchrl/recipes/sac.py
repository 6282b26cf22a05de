"""SAC with uniform, PER or VLM-guided replay (TD-boosted by default), on robosuite manipulation.

Reads top to bottom: run setup, envs, networks, loss and optimizers, replay, resume, the
collect-store-learn loop (evaluation and checkpoints inside it), outputs. Every replay mode
shares everything but the replay buffer. Entry point: ``vlmrb train sac key=value ...``.

TorchRL's SAC recipe (``sota-implementations/sac``): tanh-normal ``ProbabilisticActor``, twin
``ValueOperator`` critics, ``SACLoss`` with automatic entropy tuning, ``SoftUpdate`` targets.
Priorities go back through ``rb.update_tensordict_priority(sample)`` (TorchRL's recipe calls
``update_priority(td)``, a ``TypeError`` in 0.14.1). The first ``learning_starts`` frames use
uniform random actions.
"""

from __future__ import annotations

import dataclasses
import time

import torch
from tensordict.nn import InteractionType, NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import SACLoss, SoftUpdate

from vlmrb_torchrl.clips import ClipSpec
from vlmrb_torchrl.recipes import common
from vlmrb_torchrl.recipes.config import SACConfig


def make_actor(obs_dim: int, action_spec, hidden: int) -> ProbabilisticActor:
    """MLP -> (loc, scale) -> TanhNormal squashed into the action bounds."""
    net = nn.Sequential(MLP(in_features=obs_dim, out_features=2 * action_spec.shape[-1], num_cells=[hidden, hidden],
                            activation_class=nn.ReLU),
                        NormalParamExtractor(scale_mapping="biased_softplus_1.0", scale_lb=1e-4))
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"])
    return ProbabilisticActor(module, in_keys=["loc", "scale"], spec=action_spec, distribution_class=TanhNormal,
                              distribution_kwargs={"low": action_spec.space.low, "high": action_spec.space.high},
                              default_interaction_type=InteractionType.RANDOM, return_log_prob=False)


def make_critic(obs_dim: int, action_dim: int, hidden: int) -> ValueOperator:
    return ValueOperator(MLP(in_features=obs_dim + action_dim, out_features=1, num_cells=[hidden, hidden],
                             activation_class=nn.ReLU), in_keys=["action", "observation"])


class _Deterministic(nn.Module):
    """The actor at its mode (tanh of the mean): the evaluation and gallery policy."""

    def __init__(self, actor: ProbabilisticActor) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, td):
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            return self.actor(td)


def main(cfg: SACConfig) -> dict:
    cfg = dataclasses.replace(cfg).validate()
    checkpoint = common.latest_checkpoint(cfg.resume) if cfg.resume else None

    # --- run setup: seeds, device, run directory, loggers, progress bar
    generator, device, vlm_mode, scorer, needs_frames, updates_total, threads_before = common.start_run(cfg)

    # --- envs: the agent sees proprio + object state; camera frames for the VLM are rendered only
    # when the scorer reads them, and then only on the steps some clip sends to it
    spec = ClipSpec(clip_len=cfg.clip_len, stride=cfg.clip_stride, frames=cfg.clip_frames, assign=cfg.clip_assign)
    env_kwargs = {"max_episode_steps": cfg.max_episode_steps, "camera": cfg.camera, "frame_size": cfg.frame_size,
                  "reward_shaping": cfg.reward_shaping}
    render_steps = None
    if needs_frames and cfg.render_clip_frames_only:
        from vlmrb_torchrl.envs.robosuite import ClipRenderSteps

        render_steps = ClipRenderSteps(spec, horizon=cfg.max_episode_steps or 500)
    train_env_fn = common.env_factory(cfg.env, train=True, render=needs_frames, render_steps=render_steps,
                                      **env_kwargs)
    eval_env_fn = common.env_factory(cfg.env, train=False, render=False, **env_kwargs)
    probe = eval_env_fn()
    obs_dim = probe.observation_spec["observation"].shape[-1]
    action_spec = probe.action_spec
    fake = probe.fake_tensordict()
    probe.close()

    # --- networks, loss, optimizers
    actor = make_actor(obs_dim, action_spec, cfg.hidden).to(device)
    critic = make_critic(obs_dim, action_spec.shape[-1], cfg.hidden).to(device)
    with torch.no_grad():  # initialise lazy shapes / check the wiring on a fake step
        actor(fake.to(device))
        critic(fake.to(device))
    loss = SACLoss(actor, critic, num_qvalue_nets=2, loss_function="l2", delay_actor=False, delay_qvalue=True,
                   alpha_init=cfg.alpha_init, action_spec=action_spec)
    loss.make_value_estimator(gamma=cfg.gamma)
    target_update = SoftUpdate(loss, eps=1.0 - cfg.tau)
    optim = torch.optim.Adam([
        {"params": list(loss.actor_network_params.flatten_keys().values())},
        {"params": list(loss.qvalue_network_params.flatten_keys().values())},
        {"params": [loss.log_alpha]},
    ], lr=cfg.lr)
    eval_policy = _Deterministic(actor)

    # --- replay: the only thing that differs between replay modes
    rb = common.make_replay(cfg, generator=generator, updates=updates_total, scorer=scorer)

    # --- resume
    modules = {"loss": loss, "optim": optim}
    counters = common.resume_counters(cfg, checkpoint, modules=modules, rb=rb)
    run = common.Run(cfg, recipe="sac", total=cfg.total_frames, resumed_from=counters["env_steps"],
                     columns=common.SAC_METRIC_COLUMNS)

    def make_collector(env_steps: int):
        return common.make_collector(train_env_fn, actor, num_envs=cfg.num_envs,
                                     frames_per_batch=cfg.frames_per_batch, total_frames=cfg.total_frames,
                                     seed=cfg.seed, env_steps=env_steps, parallel=cfg.env_backend == "parallel",
                                     init_random_frames=max(0, cfg.learning_starts - env_steps))

    # --- the loop: collect -> store (and queue clips) -> learn
    metrics_last: dict = {}
    losses = {"loss": float("nan"), "loss_actor": float("nan"), "loss_qvalue": float("nan"),
              "alpha": float(loss.log_alpha.detach().exp()), "entropy": float("nan")}
    start = time.perf_counter()
    steps_at_start = counters["env_steps"]
    stop_at = min(cfg.total_frames, cfg.stop_at or cfg.total_frames)
    collector = make_collector(counters["env_steps"])
    while counters["env_steps"] < stop_at:
        recreate = False
        for batch in collector:
            frames = batch.numel()
            counters["env_steps"] += frames
            common.store(rb, batch, batch, vlm_mode=vlm_mode, sync=not cfg.async_scoring)
            counters["episodes"] += int(batch["next", "done"].sum())

            if counters["env_steps"] >= cfg.learning_starts:
                for _ in range(frames // cfg.train_every):
                    sample = rb.sample().to(device)
                    loss_td = loss(sample)
                    total = loss_td["loss_actor"] + loss_td["loss_qvalue"] + loss_td["loss_alpha"]
                    optim.zero_grad()
                    total.backward()
                    optim.step()
                    target_update.step()
                    if cfg.replay != "uniform":
                        rb.update_tensordict_priority(sample)  # PER priorities / vlm_td boost
                    counters["updates"] += 1
                losses = {"loss": float(total.detach()),
                          "loss_actor": float(loss_td["loss_actor"].detach()),
                          "loss_qvalue": float(loss_td["loss_qvalue"].detach()),
                          "alpha": float(loss_td["alpha"]), "entropy": float(loss_td["entropy"])}
                collector.update_policy_weights_()

            steps_per_s = (counters["env_steps"] - steps_at_start) / (time.perf_counter() - start)
            row = {"env_steps": counters["env_steps"], "episodes": counters["episodes"], **losses,
                   "env_steps_per_s": steps_per_s, "time_s": time.perf_counter() - start, **common.replay_stats(rb, counters)}
            if common.maybe_evaluate(run, row, cfg=cfg, counters=counters, policy=eval_policy,
                                     make_env=eval_env_fn, max_steps=cfg.max_episode_steps or 500):
                metrics_last = row
            run.progress(frames, success=common.fmt(metrics_last.get("eval_success")),
                         loss=common.fmt(losses["loss"]), alpha=common.fmt(losses["alpha"]),
                         scored=common.fmt(row.get("fraction_scored")))
            recreate = common.maybe_checkpoint(run, rb, cfg=cfg, counters=counters, stop_at=stop_at,
                                               modules=modules, vlm_mode=vlm_mode)
            if recreate is not None:  # checkpointed: leave this collector
                break
        collector.shutdown()
        if recreate:
            collector = make_collector(counters["env_steps"])

    # --- outputs: clip gallery (frames rendered every step here), summary
    gallery = []
    if vlm_mode and cfg.gallery_clips > 0:
        gallery = common.clip_gallery(
            run.dir / "gallery", scorer=scorer, make_env=common.env_factory(cfg.env, train=False, render=True,
                                                                           **env_kwargs),
            policy=eval_policy, clip_len=cfg.clip_len, clips=cfg.gallery_clips, seed=cfg.seed, episodes=2,
            max_steps=cfg.max_episode_steps or 500)
    torch.set_num_threads(threads_before)
    return common.finish(run, rb, counters=counters, metrics=metrics_last, vlm_mode=vlm_mode, gallery=gallery)
