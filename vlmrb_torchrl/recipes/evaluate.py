"""Policy evaluation: full episodes in batched env copies, and the schedule that logs them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["evaluate", "maybe_evaluate", "full_eval_every", "on_env_device"]


def on_env_device(policy, env_device: torch.device | str | None = "cpu"):
    """``policy`` for env data on ``env_device``: a policy whose parameters live on another device (the
    learner's GPU) gets its inputs moved there and its outputs moved back; others are returned as is.

    The recipes' collectors copy the policy to the envs' device themselves; evaluations and
    galleries call the learner's own policy, on ``device=cuda`` a GPU module fed CPU env data.

    Examples:
        >>> from torch import nn
        >>> net = nn.Linear(2, 2)
        >>> on_env_device(net) is net  # parameters already on the envs' device (the CPU)
        True
    """
    device = _parameter_device(policy)
    env_device = torch.device("cpu" if env_device is None else env_device)  # a device-less env holds CPU data
    if device is None or device == env_device:
        return policy

    def moved(td):
        return policy(td.to(device)).to(env_device)

    return moved


def _parameter_device(policy) -> torch.device | None:
    parameters = getattr(policy, "parameters", None)
    first = next(iter(parameters()), None) if callable(parameters) else None
    return None if first is None else first.device


@torch.no_grad()
def evaluate(policy, make_env, *, episodes: int, seed: int, max_steps: int = 100_000,
             num_envs: int = 1) -> dict[str, float]:
    """Runs ``episodes`` full episodes of ``policy`` (already at its evaluation epsilon).

    With ``num_envs > 1`` the episodes run in ``num_envs`` env copies stepped together
    (:func:`~vlmrb_torchrl.recipes.envs.make_batched_env`, one batched policy call per step), ``episodes // num_envs`` per copy and one
    more for the first ``episodes % num_envs`` copies: exactly ``episodes`` i.i.d. episodes (each
    copy counts its first episodes, so short successful ones are not favoured), several times
    faster with small networks (MiniGrid and Atari factories always run in their batched env, one
    copy if need be: for Atari it preprocesses frames as training did). Episodes still running
    after ``max_steps`` steps count as failures with their partial return.

    Returns the success rate (NaN when the env reports no ``success``), the mean return
    (``raw_reward`` when the env provides it, e.g. unclipped Atari scores), the mean episode length
    (``eval_episode_len``; an episode cut by ``max_steps`` counts the steps it played) and, for envs that count
    satisfied subgoals (``"subgoals"``: OGBench Scene), their mean number at the episodes' ends
    (``eval_subgoals``; episodes cut by ``max_steps`` count where they were).
    (``tests/test_evaluate.py`` checks the episode accounting against a scripted env.)
    """
    from vlmrb_torchrl.recipes.envs import has_batched_env, make_batched_env

    if num_envs <= 1 and not has_batched_env(make_env):  # MiniGrid and Atari: their batched env, the training one
        return _evaluate_serial(policy, make_env, episodes=episodes, seed=seed, max_steps=max_steps)

    env = make_batched_env(make_env, num_envs)
    policy = on_env_device(policy, env.device)
    env.set_seed(seed)
    quota = torch.full((num_envs,), episodes // num_envs, dtype=torch.long)
    quota[: episodes % num_envs] += 1
    td = env.reset()
    reward_key = "raw_reward" if "raw_reward" in env.observation_spec.keys() else "reward"
    has_success = "success" in env.observation_spec.keys()
    has_subgoals = "subgoals" in env.observation_spec.keys()
    running_return = torch.zeros(num_envs, dtype=torch.float64)
    running_success = torch.zeros(num_envs, dtype=torch.bool)
    running_steps = torch.zeros(num_envs, dtype=torch.long)
    last_subgoals = torch.zeros(num_envs, dtype=torch.float64)
    finished = torch.zeros(num_envs, dtype=torch.long)
    successes, returns, subgoals, lengths = [], [], [], []
    for _ in range(max_steps):
        td, td_root = env.step_and_maybe_reset(policy(td))
        nxt = td["next"]
        running_return += nxt[reward_key].reshape(num_envs).double()
        running_steps += 1
        if has_success:
            running_success |= nxt["success"].reshape(num_envs)
        if has_subgoals:
            last_subgoals = nxt["subgoals"].reshape(num_envs).double()
        for i in nxt["done"].reshape(num_envs).nonzero().flatten().tolist():
            if finished[i] < quota[i]:
                finished[i] += 1
                returns.append(float(running_return[i]))
                successes.append(float(running_success[i]))
                subgoals.append(float(last_subgoals[i]))
                lengths.append(int(running_steps[i]))
            running_return[i], running_success[i], running_steps[i] = 0.0, False, 0
        if bool((finished >= quota).all()):
            break
        td = td_root
    else:  # episodes cut by max_steps: failures with their partial returns
        for i in (finished < quota).nonzero().flatten().tolist():
            returns.append(float(running_return[i]))
            successes.append(0.0)
            subgoals.append(float(last_subgoals[i]))
            lengths.append(int(running_steps[i]))
    env.close()
    return _results(successes if has_success else [], returns, subgoals if has_subgoals else [], lengths)


def _results(successes: list[float], returns: list[float], subgoals: list[float],
             lengths: list[int]) -> dict[str, float]:
    out = {"eval_success": float(np.mean(successes)) if successes else float("nan"),
           "eval_return": float(np.mean(returns)), "eval_episode_len": float(np.mean(lengths))}
    if subgoals:
        out["eval_subgoals"] = float(np.mean(subgoals))
    return out


def _evaluate_serial(policy, make_env, *, episodes: int, seed: int, max_steps: int) -> dict[str, float]:
    env = make_env()
    env.set_seed(seed)
    policy = on_env_device(policy, env.device)
    successes, returns, subgoals, lengths = [], [], [], []
    for _ in range(episodes):
        rollout = env.rollout(max_steps, policy, break_when_any_done=True)
        nxt = rollout["next"]
        lengths.append(rollout.shape[-1])
        reward_key = "raw_reward" if "raw_reward" in nxt.keys() else "reward"
        returns.append(float(nxt[reward_key].sum()))
        if "success" in nxt.keys():
            successes.append(float(nxt["success"].any()))
        if "subgoals" in nxt.keys():
            subgoals.append(float(nxt["subgoals"][-1]))
    env.close()
    return _results(successes, returns, subgoals, lengths)


def maybe_evaluate(run, row: dict[str, Any], *, cfg: Any, counters: dict[str, Any], policy, make_env,
                   max_steps: int = 100_000, make_full_env=None, full_max_steps: int = 100_000) -> bool:
    """When an evaluation is due (every ``eval_every`` frames and at the end), adds its results
    to ``row`` and logs the row with ``run.log``; returns whether it did.

    Evaluation episodes are seeded with ``seed + 10_000 + env_steps``: the same in a resumed run.

    With ``make_full_env`` (the recipe's evaluation env at the *training* episode limit, given when
    ``eval_max_episode_steps`` cuts evaluation episodes shorter), the row also gets an evaluation at the
    env's own limit, ``eval_full_success``, ``eval_full_return`` and ``eval_full_episode_len``: every
    ``cfg.eval_full_every`` frames (``None``: at every checkpoint, ``checkpoint_every``) and at the end,
    on the first logged row at or past each due step (``counters["next_full_eval"]``). It draws its
    exploration from a forked torch RNG, so adding it leaves the learner's run unchanged.
    """
    due = counters["env_steps"] >= counters["next_eval"]
    final = counters["env_steps"] >= cfg.total_frames
    if not due and not final:
        return False
    if due:  # the run's last evaluation, logged off the schedule, leaves it alone (a longer resumed run keeps it)
        counters["next_eval"] += cfg.eval_every
    seed = cfg.seed + 10_000 + counters["env_steps"]
    num_envs = min(cfg.eval_envs, cfg.eval_episodes)
    row.update(evaluate(policy, make_env, episodes=cfg.eval_episodes, seed=seed, max_steps=max_steps,
                        num_envs=num_envs))
    if make_full_env is not None:
        every = full_eval_every(cfg)
        next_full = counters.setdefault("next_full_eval", every)
        if counters["env_steps"] >= next_full or final:
            while counters["next_full_eval"] <= counters["env_steps"]:
                counters["next_full_eval"] += every
            devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
            with torch.random.fork_rng(devices=devices):  # the learner's exploration stream stays as without it
                full = evaluate(policy, make_full_env, episodes=cfg.eval_episodes, seed=seed,
                                max_steps=full_max_steps, num_envs=num_envs)
            row.update({f"eval_full_{key[len('eval_'):]}": value for key, value in full.items()})
    run.log(row)
    return True


def full_eval_every(cfg: Any) -> int:
    """Frames between the evaluations at the env's own episode limit (:func:`maybe_evaluate`):
    ``cfg.eval_full_every``, or ``cfg.checkpoint_every`` when that is ``None``.

    Examples:
        >>> from types import SimpleNamespace
        >>> full_eval_every(SimpleNamespace(eval_full_every=None, checkpoint_every=200_000))
        200000
        >>> full_eval_every(SimpleNamespace(eval_full_every=100_000, checkpoint_every=200_000))
        100000
    """
    every = getattr(cfg, "eval_full_every", None)
    return int(cfg.checkpoint_every if every is None else every)
