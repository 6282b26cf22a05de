"""SAC with uniform, PER or VLM-guided replay (TD-boosted by default), on robosuite and OGBench Scene manipulation.

Reads top to bottom: run setup, envs, networks, loss and optimizers, replay, resume, the
collect-store-learn loop, outputs. Every replay mode shares everything but the replay
(:mod:`~vlmrb_torchrl.recipes.replay`); :class:`~vlmrb_torchrl.recipes.loop.Training` drives the
collector, evaluations, progress and checkpoints around the loop body written here. Entry point:
``vlmrb train sac key=value ...``.

TorchRL's SAC recipe (``sota-implementations/sac``): a tanh-normal ``ProbabilisticActor`` collects;
the update is :class:`~vlmrb_torchrl.recipes.sac_loss.SACLearner`, what ``SACLoss`` (twin critics,
automatic entropy tuning) + Adam + ``SoftUpdate`` compute, on tensors, with the twin critics as one
:class:`~vlmrb_torchrl.modules.EnsembleMLP` (tested equal to ``SACLoss``). CleanRL's knobs:
``policy_lr`` / ``q_lr``, ``policy_frequency``, ``utd_ratio``. Priorities go back through
``update_tensordict_priority(sample)`` (``Training.samples``) (TorchRL's recipe calls
``update_priority(td)``, a ``TypeError`` in 0.14.1). The first ``learning_starts`` frames use
uniform random actions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import warnings

import torch
from tensordict.nn import InteractionType, NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal

from vlmrb_torchrl.envs.family import family_of
from vlmrb_torchrl.modules import EnsembleMLP
from vlmrb_torchrl.recipes.config import SACConfig
from vlmrb_torchrl.recipes.envs import env_factory, make_collector, probe_env
from vlmrb_torchrl.recipes.gallery import attach_run_gallery, clip_gallery
from vlmrb_torchrl.recipes.loop import Training
from vlmrb_torchrl.recipes.replay import importance_weighted, make_replay
from vlmrb_torchrl.recipes.checkpoint import checkpointed_modules, resume_counters
from vlmrb_torchrl.recipes.collector_process import CollectorProcess
from vlmrb_torchrl.recipes.run import SAC_METRIC_COLUMNS, Run, start_run
from vlmrb_torchrl.recipes.run_dir import make_run_dir, prepare_run_dir, release_run_dir
from vlmrb_torchrl.recipes.value_ceiling import SoftValueCeiling
from vlmrb_torchrl.recipes.sac_loss import SACLearner


#: What the learner reads of a stored transition (the replay stores only these: sampling copies every stored
#: entry, and a collector batch also holds the policy's loc/scale, event flags, step counts, ...).
LEARNER_KEYS = ("observation", "action", ("next", "observation"), ("next", "reward"), ("next", "terminated"),
                ("next", "done"))


def make_actor(obs_dim: int, action_spec, hidden: int) -> ProbabilisticActor:
    """MLP -> (loc, scale) -> TanhNormal squashed into the action bounds.

    ``actor.module[0].module`` is the network ``observation -> (loc, scale)`` the learner trains.
    """
    net = nn.Sequential(MLP(in_features=obs_dim, out_features=2 * action_spec.shape[-1], num_cells=[hidden, hidden],
                            activation_class=nn.ReLU),
                        NormalParamExtractor(scale_mapping="biased_softplus_1.0", scale_lb=1e-4))
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"])
    return ProbabilisticActor(module, in_keys=["loc", "scale"], spec=action_spec, distribution_class=TanhNormal,
                              distribution_kwargs={"low": action_spec.space.low, "high": action_spec.space.high},
                              default_interaction_type=InteractionType.RANDOM, return_log_prob=False)


def make_critic(obs_dim: int, action_dim: int, hidden: int) -> nn.Module:
    """A ``ValueOperator``'s network: ``[action, observation]`` -> Q (2x``hidden`` MLP)."""
    return MLP(in_features=obs_dim + action_dim, out_features=1, num_cells=[hidden, hidden], activation_class=nn.ReLU)


def _collector(env_fn, policy, *, env_steps: int, learning_starts: int, **kwargs):
    """The training collector for the frames after ``env_steps``: random actions until ``learning_starts``
    (a picklable factory: :class:`~vlmrb_torchrl.recipes.collector_process.CollectorProcess` calls it in its child)."""
    return make_collector(env_fn, policy, env_steps=env_steps, init_random_frames=max(0, learning_starts - env_steps),
                          **kwargs)


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
    checkpoint = prepare_run_dir(cfg, recipe="sac", write=False)  # resume= checks, output_dir refused if reused
    with contextlib.ExitStack() as cleanup:  # closes the replay and run, restores torch threads; on errors too
        # --- run setup: seeds, the learner's torch threads, device, the scorer (VLM modes); a bad scorer
        # (or env id, below) fails with a ConfigError before the run directory is written
        start = cleanup.enter_context(start_run(cfg))

        # --- envs: the agent sees proprio + object state; camera frames for the VLM are rendered only
        # when the scorer reads them, and then only on the steps some clip sends to it (the env's
        # defaults, e.g. its camera and episode limit, were filled in by cfg.validate())
        spec = cfg.clip_spec()
        # seed: robosuite draws the scene (Lift: the cube's size) when it builds the model, before any
        # set_seed; an unseeded build made two runs of one seed differ from the first update on
        env_kwargs = {"max_episode_steps": cfg.max_episode_steps, "camera": cfg.camera, "frame_size": cfg.frame_size,
                      "fast_render": cfg.fast_render, "reward_shaping": cfg.reward_shaping, "seed": cfg.seed,
                      **family_of(cfg.env).env_kwargs(cfg, scorer=start.scorer)}
        eval_env_fn = env_factory(cfg.env, train=False, render=False, **env_kwargs)
        probe = probe_env(eval_env_fn, cfg.env)
        obs_dim = probe.observation_spec["observation"].shape[-1]
        action_spec = probe.action_spec
        fake = probe.fake_tensordict()
        # ψ: the envs store the positions (and colours) a frame is drawn from, and the scorer's side renders the
        # frames its clips show (the same pixels); frames_from_state=false renders in the envs and passes frames
        renderer = getattr(probe, "state_renderer", None) if start.needs_frames and cfg.frames_from_state else None
        probe.close()
        render_steps = None
        if start.needs_frames and renderer is None and cfg.render_clip_frames_only:
            from vlmrb_torchrl.envs import ClipRenderSteps

            render_steps = ClipRenderSteps(spec, horizon=cfg.max_episode_steps)
        train_env_fn = env_factory(cfg.env, train=True, render="state" if renderer is not None else start.needs_frames,
                                   render_steps=render_steps, **env_kwargs)
        make_run_dir(cfg, checkpoint, recipe="sac", step=fake)  # scorer and env built: a failed start wrote nothing
        # the lock and SIGTERM, once all else is closed; a run that fails before its first checkpoint is deleted
        cleanup.push(lambda error, *_: release_run_dir(cfg.output_dir, failed=error is not None))

        # --- networks, learner, optimizer
        actor = make_actor(obs_dim, action_spec, cfg.hidden).to(start.device)
        with torch.no_grad():  # check the wiring on a fake step
            actor(fake.to(start.device))
        # twin critics, one ensemble: each member drawn as its own MLP would be
        critic = EnsembleMLP.from_mlps([make_critic(obs_dim, action_spec.shape[-1], cfg.hidden) for _ in range(2)])
        learner = SACLearner(actor.module[0].module, critic, action_low=action_spec.space.low,
                             action_high=action_spec.space.high, gamma=cfg.gamma, tau=cfg.tau,
                             alpha_init=cfg.alpha_init, importance_weights=importance_weighted(cfg)).to(start.device)
        optim = learner.make_optimizer(policy_lr=cfg.policy_lr or cfg.lr, q_lr=cfg.q_lr or cfg.lr)
        eval_policy = _Deterministic(actor)

        # --- replay: the only thing that differs between replay modes
        replay = cleanup.enter_context(make_replay(cfg, generator=start.generator, updates=start.updates_total,
                                                   scorer=start.scorer, renderer=renderer))
        # the gallery's best and worst clips of the whole run, kept as they are scored (a scorer reading frames)
        run_gallery = (attach_run_gallery(replay.buffer, cfg.gallery_clips, seed=cfg.seed, renderer=renderer,
                                          min_gap=cfg.clip_spec().clip_len * cfg.num_envs)
                       if start.needs_frames and cfg.gallery_clips > 0 else None)

        # a warning when the critics hold values the replayed rewards cannot back up (they are diverging);
        # checkpointed with the learner: a resumed run keeps the rewards seen and when it reported
        ceiling = SoftValueCeiling(gamma=cfg.gamma, max_entropy=float(
            torch.log(action_spec.space.high - action_spec.space.low).sum()))

        # --- resume
        modules = checkpointed_modules({"learner": learner, "optim": optim, "value_ceiling": ceiling}, start.scorer)
        counters = resume_counters(cfg, checkpoint, modules=modules, rb=replay.buffer)
        # --- collection: in a child process one batch ahead of the learner (the second core), or in this one
        collector_fn = functools.partial(
            _collector, train_env_fn, actor, num_envs=cfg.num_envs, frames_per_batch=cfg.frames_per_batch,
            total_frames=cfg.total_frames, seed=cfg.seed, learning_starts=cfg.learning_starts,
            parallel=cfg.env_backend == "parallel")
        if cfg.async_collection:
            collector_fn = cleanup.enter_context(CollectorProcess(collector_fn, actor, seed=cfg.seed)).collector
        run = cleanup.enter_context(Run(cfg, recipe="sac", total=cfg.total_frames,
                                        resumed_from=counters["env_steps"], columns=SAC_METRIC_COLUMNS,
                                        scorer=start.scorer))
        training = cleanup.enter_context(Training(
            cfg, run=run, replay=replay, counters=counters, modules=modules, device=start.device,
            eval_policy=eval_policy, eval_env_fn=eval_env_fn, eval_max_steps=cfg.max_episode_steps,
            make_collector=lambda env_steps: collector_fn(env_steps=env_steps)))

        # --- the loop: collect -> store (and queue clips) -> learn; evaluations and checkpoints in end_batch
        last = {"alpha": learner.log_alpha.detach().exp()}  # the last update's losses (the actor's: its last update)
        for batch in training.batches():
            replay.store(batch.select(*LEARNER_KEYS, strict=False), batch)  # clips are cut from `batch`
            ceiling.observe(batch.get(("next", "reward")))
            for sample in training.samples(batch):  # counters["updates"] counts this update
                # CleanRL's delayed policy update: the actor every policy_frequency-th update, that many times
                due = (counters["updates"] - 1) % cfg.policy_frequency == 0
                last.update(learner.update(sample, optim, actor_steps=cfg.policy_frequency if due else 0))
            losses = {key: float(last.get(key, float("nan"))) for key in
                      ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy", "q_value")}
            losses["loss"] = losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]
            del losses["loss_alpha"]
            diverging = ceiling.check(losses["q_value"], alpha=losses["alpha"], env_steps=counters["env_steps"])
            if diverging is not None:
                warnings.warn(f"vlmrb train sac: {diverging}", RuntimeWarning, stacklevel=1)
            training.end_batch(losses, show=("loss", "alpha"))

        # --- outputs: clip gallery (frames rendered every step here), summary
        gallery = []
        if run_gallery is not None and run_gallery.top:
            gallery = run_gallery.write(run.dir / "gallery", prompt=getattr(start.scorer, "prompt", "") or "")
        elif start.scorer is not None and cfg.gallery_clips > 0:  # no frames in the training clips (the oracle)
            gallery = clip_gallery(
                run.dir / "gallery", scorer=start.scorer,
                make_env=env_factory(cfg.env, train=False, render=True, **env_kwargs), policy=eval_policy,
                clip_spec=spec, clips=cfg.gallery_clips, seed=cfg.seed, episodes=2, steps=cfg.gallery_steps)
        return run.write_summary(counters, {**training.metrics_last, "q_ceiling_exceeded_at": ceiling.exceeded_at},
                                 gallery)
