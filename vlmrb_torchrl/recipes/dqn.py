"""Double DQN with uniform, PER or VLM-guided replay, on MiniGrid or Atari.

Reads top to bottom: run setup, envs, networks, loss and optimizer, replay, resume, the
collect-store-learn loop, outputs. Every replay mode shares everything but the replay
(:mod:`~vlmrb_torchrl.recipes.replay`); :class:`~vlmrb_torchrl.recipes.loop.Training` drives the
collector, evaluations, progress and checkpoints around the loop body written here. Entry point:
``vlmrb train dqn key=value ...``.

Checkpoints re-create the collector with seeds derived from ``(seed, env_steps)`` — in the
uninterrupted run too — so a resumed run reproduces the uninterrupted one exactly when
``async_scoring=false`` (with asynchronous scoring, scores land at timing-dependent moments).
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.data.postprocs import MultiStep
from torchrl.envs.utils import ExplorationType, exploration_type, set_exploration_type
from torchrl.data import Categorical, Composite
from torchrl.modules import MLP, ConvNet, EGreedyModule, QValueActor

from vlmrb_torchrl.modules import OneHotLinear
from vlmrb_torchrl.recipes.config import DQNConfig
from vlmrb_torchrl.recipes.dqn_loss import DoubleDQNLoss
from vlmrb_torchrl.envs.family import family_of
from vlmrb_torchrl.recipes.envs import env_factory, make_collector, probe_env
from vlmrb_torchrl.recipes.gallery import attach_run_gallery, clip_gallery
from vlmrb_torchrl.recipes.loop import Training
from vlmrb_torchrl.recipes.replay import importance_weighted, make_replay
from vlmrb_torchrl.recipes.checkpoint import checkpointed_modules, resume_counters
from vlmrb_torchrl.recipes.run import Run, start_run
from vlmrb_torchrl.recipes.run_dir import make_run_dir, prepare_run_dir, release_run_dir


#: What the learner reads of a stored transition (the replay stores only these: sampling copies every stored
#: entry, and a MiniGrid collector batch has ~30 of them, flags and policy outputs included).
LEARNER_KEYS = ("observation", "action", "steps_to_next_obs", ("next", "observation"), ("next", "reward"),
                ("next", "terminated"), ("next", "done"))
#: What n-step returns read of a collector batch: the learner's entries and the flags that end a window. Rendered
#: frames (several KB a step, for the scorer only) stay out: MultiStep would shift every ``("next", ...)`` entry.
N_STEP_KEYS = (*LEARNER_KEYS, ("next", "truncated"))


class _Scale(nn.Module):
    """uint8 pixels -> float in [0, 1] (the replay stores uint8 to keep Atari buffers small)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() / 255.0


def make_q_network(obs_spec, n_actions: int, hidden: int) -> nn.Module:
    """MLP for vector observations (MiniGrid), Nature CNN for image stacks (Atari).

    Integer vector observations are the positions of the ones of a one-hot vector (MiniGrid's
    ``observation="indices"``, ``Bounded(0, D - 1)``): the MLP's first layer is then a
    :class:`~vlmrb_torchrl.modules.OneHotLinear` of ``D`` inputs, the same network (and, from
    the same seed, the same initial weights) as the MLP on the one-hot vector.

    Examples:
        >>> from torchrl.data import Bounded
        >>> make_q_network(Bounded(0, 983, shape=(148,), dtype=torch.int16), 5, 256)[0]
        OneHotLinear(in_features=984, out_features=256, bias=True)
    """
    obs_shape = obs_spec.shape
    if len(obs_shape) == 1 and not obs_spec.dtype.is_floating_point:
        mlp = MLP(in_features=int(obs_spec.space.high.max()) + 1, out_features=n_actions, num_cells=[hidden, hidden])
        mlp[0] = OneHotLinear.from_linear(mlp[0])
        return mlp
    if len(obs_shape) == 1:
        return MLP(in_features=obs_shape[0], out_features=n_actions, num_cells=[hidden, hidden])
    cnn = ConvNet(num_cells=[32, 64, 64], kernel_sizes=[8, 4, 3], strides=[4, 2, 1])
    with torch.no_grad():
        flat = cnn(torch.zeros(1, *obs_shape)).shape[-1]
    return nn.Sequential(_Scale(), cnn, MLP(in_features=flat, out_features=n_actions, num_cells=[512]))


class LinearEGreedy(EGreedyModule):
    """TorchRL's ``EGreedyModule`` whose ``step(frames)`` is one tensor operation.

    ``EGreedyModule.step(frames)`` subtracts the per-frame decrement ``frames`` times in a Python
    loop (128 tensor ops per collector batch, ~5% of a small DQN's time); this subtracts
    ``frames`` decrements at once. The schedule is the same (linear, clamped at ``eps_end``) up
    to float rounding. Its forward pass on a plain categorical action (no mask) draws the same
    random numbers as ``EGreedyModule``'s (``torch.rand``, then ``torch.randint``), so it picks
    the same actions, without expanding the action spec at every step.

    Examples:
        >>> from torchrl.data import Categorical
        >>> explore = LinearEGreedy(Categorical(5), annealing_num_steps=100, eps_init=1.0, eps_end=0.1)
        >>> explore.step(50); round(float(explore.eps), 6)
        0.55
        >>> explore.step(1000); round(float(explore.eps), 6)
        0.1
    """

    def step(self, frames: int = 1) -> None:
        decrement = (self.eps_init - self.eps_end) / self.annealing_num_steps
        self.eps.data.copy_(torch.maximum(self.eps_end, self.eps - frames * decrement))

    def _plain_spec(self):
        """The categorical action spec when the one-op forward applies (no mask, a plain key), else ``None``."""
        spec = self.spec  # EGreedyModule keeps the action spec inside a Composite
        if isinstance(spec, Composite) and isinstance(self.action_key, str) and self.action_key in spec.keys():
            spec = spec[self.action_key]
        plain = (isinstance(spec, Categorical) and spec.mask is None and self.action_mask_key is None
                 and isinstance(self.action_key, str))
        return spec if plain else None

    def explore(self, action: torch.Tensor, spec: Categorical, batch_shape: torch.Size | None = None) -> torch.Tensor:
        """``action`` (``[*batch_shape]``) with each entry replaced by a uniform random action with probability
        ``eps``: the random draws of ``EGreedyModule.forward`` (``torch.rand``, then ``torch.randint``)."""
        explore = torch.rand(action.shape if batch_shape is None else batch_shape, device=self.eps.device) < self.eps
        random = torch.randint(0, spec.space.n, action.shape, device=action.device, dtype=spec.dtype)
        return torch.where(explore, random, action)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        spec = self._plain_spec()
        if spec is None or exploration_type() not in (ExplorationType.RANDOM, None):
            return super().forward(tensordict)
        tensordict.set(self.action_key, self.explore(tensordict.get(self.action_key), spec, tensordict.shape))
        return tensordict


class EGreedyQPolicy(TensorDictSequential):
    """``TensorDictSequential(QValueActor, LinearEGreedy)`` that can also act on an observation tensor (:meth:`act`).

    A TensorDict policy like any other (same modules, same ``state_dict``); :meth:`act` computes
    its outputs without the per-module TensorDict plumbing, which costs several times the
    network's own forward pass on a batch of 8 observations. The collectors that step arrays
    (:class:`~vlmrb_torchrl.envs.minigrid.env.BatchedMiniGridCollector`) call it.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Categorical
        >>> qnet = QValueActor(nn.Linear(3, 4), in_keys=["observation"], spec=Categorical(4))
        >>> policy = make_policy(qnet, Categorical(4), eps_init=0.5, eps_end=0.5, steps=1)
        >>> obs = torch.randn(8, 3)
        >>> state = torch.get_rng_state()
        >>> out = policy.act(obs)
        >>> _ = torch.set_rng_state(state)
        >>> td = policy(TensorDict({"observation": obs}, [8]))
        >>> all(torch.equal(td[key], value) for key, value in out.items())
        True
    """

    def __init__(self, qnet: QValueActor, explore: LinearEGreedy) -> None:
        super().__init__(qnet, explore)
        choose = qnet.module[1]  # the QValueModule after the value network's TensorDictModule
        self._tensor_path = (choose.action_space == "categorical" and choose.action_mask_key is None
                             and explore._plain_spec() is not None)

    @torch.no_grad()
    def act(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        """The policy's outputs for ``observation`` (``[*batch, *obs]``), exploring as under
        ``ExplorationType.RANDOM``: ``"action"``, ``"action_value"`` and ``"chosen_action_value"``."""
        qnet, explore = self.module[0], self.module[1]
        if not self._tensor_path:  # masks, one-hot actions: the modules themselves
            from tensordict import TensorDict

            td = TensorDict({"observation": observation}, observation.shape[:-1])
            with set_exploration_type(ExplorationType.RANDOM):
                td = self(td)
            return {key: td.get(key) for key in ("action", "action_value", "chosen_action_value")}
        values = qnet.module[0].module(observation)
        action = torch.argmax(values, dim=-1).to(torch.long)  # QValueModule, categorical actions
        chosen = values.gather(-1, action.unsqueeze(-1))
        return {"action": explore.explore(action, explore._plain_spec()), "action_value": values,
                "chosen_action_value": chosen}


def make_policy(qnet: QValueActor, action_spec, *, eps_init: float, eps_end: float, steps: int) -> EGreedyQPolicy:
    return EGreedyQPolicy(qnet, LinearEGreedy(action_spec, annealing_num_steps=max(1, steps),
                                              eps_init=eps_init, eps_end=eps_end))


def n_step_returns(multistep: MultiStep, batch: TensorDictBase) -> TensorDictBase:
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


def main(cfg: DQNConfig) -> dict:
    cfg = dataclasses.replace(cfg).validate()
    checkpoint = prepare_run_dir(cfg, recipe="dqn", write=False)  # resume= checks, output_dir refused if reused
    with contextlib.ExitStack() as cleanup:  # closes the replay and run, restores torch threads; on errors too
        # --- run setup: seeds, the learner's torch threads, device, the scorer (VLM modes); a bad scorer
        # (or env id, below) fails with a ConfigError before the run directory is written
        start = cleanup.enter_context(start_run(cfg))

        # --- envs: the agent sees symbolic (MiniGrid) or stacked grey (Atari) observations, as the env's
        # family maps the config to its factory; frames for the VLM are rendered only when the scorer reads them
        env_kwargs = {} if cfg.max_episode_steps is None else {"max_episode_steps": cfg.max_episode_steps}
        env_kwargs.update(family_of(cfg.env).env_kwargs(cfg, scorer=start.scorer))
        eval_limit = min((n for n in (cfg.max_episode_steps, cfg.eval_max_episode_steps) if n is not None), default=None)
        eval_env_fn = env_factory(cfg.env, train=False, render=False,
                                  **{**env_kwargs, **({} if eval_limit is None else {"max_episode_steps": eval_limit})})
        # the capped evaluation's twin at the training limit (at checkpoints and the end): a policy that
        # solves the task, but slower than the cap, shows there instead of as a failure
        full_eval = cfg.eval_full_every != 0 and cfg.eval_max_episode_steps is not None and (
            cfg.max_episode_steps is None or cfg.eval_max_episode_steps < cfg.max_episode_steps)
        full_eval_env_fn = env_factory(cfg.env, train=False, render=False, **env_kwargs) if full_eval else None
        probe = probe_env(eval_env_fn, cfg.env)
        obs_spec = probe.observation_spec["observation"]
        action_spec = probe.action_spec
        step = probe.fake_tensordict()  # what a stored transition weighs: the replay's memory, a checkpoint's disk
        # ψ: an env that can draw its frames from a few bytes of state stores those, and the scorer's side renders
        # the frames its clips show (the same pixels); other envs render and pass frames
        renderer = getattr(probe, "state_renderer", None) if start.needs_frames and cfg.frames_from_state else None
        probe.close()
        train_env_fn = env_factory(cfg.env, train=True, render="state" if renderer is not None else start.needs_frames,
                                   **env_kwargs)
        make_run_dir(cfg, checkpoint, recipe="dqn", step=step)  # scorer and env built: a failed start wrote nothing
        # the lock and SIGTERM, once all else is closed; a run that fails before its first checkpoint is deleted
        cleanup.push(lambda error, *_: release_run_dir(cfg.output_dir, failed=error is not None))

        # --- networks, loss, optimizer
        q_values = make_q_network(obs_spec, action_spec.space.n, cfg.hidden).to(start.device)
        qnet = QValueActor(q_values, in_keys=["observation"], spec=action_spec)
        explore = make_policy(qnet, action_spec, eps_init=cfg.eps_start, eps_end=cfg.eps_end,
                              steps=int(cfg.eps_fraction * cfg.total_frames))
        eval_policy = make_policy(qnet, action_spec, eps_init=cfg.eval_eps, eps_end=cfg.eval_eps, steps=1)
        # n-step targets use gamma ** steps_to_next_obs; TD errors only for the modes that read them
        loss = DoubleDQNLoss(q_values, gamma=cfg.gamma, td_error=cfg.replay in ("per", "vlm_td"),
                             importance_weights=importance_weighted(cfg))
        params = list(loss.value_network.parameters())
        # fused: one kernel for all parameters instead of ~8 tensor ops each (the default on CPU)
        optim = torch.optim.Adam(params, lr=cfg.lr, fused=True)
        multistep = MultiStep(gamma=cfg.gamma, n_steps=cfg.n_steps) if cfg.n_steps > 1 else None

        # --- replay: the only thing that differs between replay modes
        replay = cleanup.enter_context(make_replay(cfg, generator=start.generator, updates=start.updates_total,
                                                   scorer=start.scorer, renderer=renderer))
        # the gallery's best and worst clips of the whole run, kept as they are scored (a scorer reading frames)
        run_gallery = (attach_run_gallery(replay.buffer, cfg.gallery_clips, seed=cfg.seed, renderer=renderer,
                                          min_gap=cfg.clip_spec().clip_len * cfg.num_envs)
                       if start.needs_frames and cfg.gallery_clips > 0 else None)

        # --- resume
        modules = checkpointed_modules({"loss": loss, "optim": optim, "explore": explore}, start.scorer)
        counters = resume_counters(cfg, checkpoint, modules=modules, rb=replay.buffer)
        run = cleanup.enter_context(Run(cfg, recipe="dqn", total=cfg.total_frames,
                                        resumed_from=counters["env_steps"], scorer=start.scorer))
        training = cleanup.enter_context(Training(
            cfg, run=run, replay=replay, counters=counters, modules=modules, device=start.device,
            eval_policy=eval_policy, eval_env_fn=eval_env_fn, full_eval_env_fn=full_eval_env_fn,
            make_collector=lambda env_steps: make_collector(
                train_env_fn, explore, num_envs=cfg.num_envs, frames_per_batch=cfg.frames_per_batch,
                total_frames=cfg.total_frames, seed=cfg.seed, env_steps=env_steps)))

        # --- the loop: collect -> store (and queue clips) -> learn; evaluations and checkpoints in end_batch
        loss_value, last_loss = float("nan"), None
        for batch in training.batches():
            learner_batch = batch.select(*N_STEP_KEYS, strict=False)  # frames go to the clip stream only
            stored = n_step_returns(multistep, learner_batch) if multistep is not None else learner_batch
            replay.store(stored.select(*LEARNER_KEYS, strict=False), batch)  # clips are cut from `batch`
            explore[1].step(batch.numel())
            for sample in training.samples(batch):  # counters["updates"] counts this update
                loss_t = loss(sample)  # also writes sample["td_error"] for per and vlm_td
                optim.zero_grad()
                loss_t.backward()
                nn.utils.clip_grad_norm_(params, cfg.max_grad_norm, foreach=True)
                optim.step()
                if counters["updates"] % cfg.target_update == 0:
                    loss.update_target()
                last_loss = loss_t
            if last_loss is not None:  # read once per batch: .item() waits for the update to finish
                loss_value, last_loss = last_loss.item(), None
            training.end_batch({"loss": loss_value, "epsilon": float(explore[1].eps)}, show=("loss", "epsilon"))

        # --- outputs: clip gallery, summary
        gallery = []
        if run_gallery is not None and run_gallery.top:
            gallery = run_gallery.write(run.dir / "gallery", prompt=getattr(start.scorer, "prompt", "") or "")
        elif start.scorer is not None and cfg.gallery_clips > 0:  # no frames in the training clips (the oracle)
            gallery = clip_gallery(
                run.dir / "gallery", scorer=start.scorer,
                make_env=env_factory(cfg.env, train=False, render=True, **env_kwargs), policy=eval_policy,
                clip_spec=cfg.clip_spec(), clips=cfg.gallery_clips, seed=cfg.seed, steps=cfg.gallery_steps)
        return run.write_summary(counters, training.metrics_last, gallery)
