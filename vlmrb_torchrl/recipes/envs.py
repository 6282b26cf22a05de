"""The recipes' env and collector factories (MiniGrid, Atari, robosuite, OGBench Scene)."""

from __future__ import annotations

import functools
from typing import Any, Callable

__all__ = ["env_factory", "probe_env", "has_batched_env", "is_atari", "is_minigrid", "make_batched_env",
           "minigrid_actions", "make_collector"]


def env_factory(env_id: str, *, train: bool = True, render: bool = False, **kwargs: Any) -> Callable[[], Any]:
    """A picklable zero-argument env constructor for MiniGrid (``MiniGrid-*``, ``BabyAI-*``), ALE,
    robosuite (``robosuite/<Task>``) or OGBench Scene (``ogbench/scene-task<N>``) ids.

    Args:
        env_id (str): the env id.

    Keyword Args:
        train (bool): training env (Atari: life-loss episodes, clipped rewards) or evaluation env.
        render (bool): write rendered frames (``"pixels"``) for a scorer that reads them.
        **kwargs: passed to the env's constructor.

    Raises:
        ConfigError: ``env_id`` is of no supported family (a ``ValueError``).

    Examples:
        >>> env_factory("CartPole-v1")
        Traceback (most recent call last):
        ...
        vlmrb_torchrl.recipes.config.ConfigError: env='CartPole-v1' is not supported: ...
    """
    from vlmrb_torchrl.recipes.config import ConfigError

    if env_id.startswith("robosuite/"):
        from vlmrb_torchrl.envs.robosuite.env import make_robosuite_env

        return functools.partial(make_robosuite_env, env_id, render=render, **kwargs)
    if env_id.startswith("ogbench/"):
        from vlmrb_torchrl.envs.ogbench.env import make_ogbench_env, scene_task

        scene_task(env_id)  # an unknown id fails here, not in a collector's worker
        return functools.partial(make_ogbench_env, env_id, render=render, **kwargs)
    if is_minigrid(env_id):
        from vlmrb_torchrl.envs.minigrid.env import make_minigrid_env

        return functools.partial(make_minigrid_env, env_id, render=render, **kwargs)
    if is_atari(env_id):
        from vlmrb_torchrl.envs.atari.env import make_atari_env

        return functools.partial(make_atari_env, env_id, train=train, render=render, **kwargs)
    raise ConfigError(
        f"env={env_id!r} is not supported: use a MiniGrid id (e.g. MiniGrid-DoorKey-6x6-v0) "
        "an Atari id (e.g. ALE/Pong-v5), robosuite/<Task> (e.g. robosuite/Lift) or ogbench/scene-task<N> "
        "(OGBench Scene, N = 1..5)."
    )


def probe_env(env_fn: Callable[[], Any], env_id: str) -> Any:
    """``env_fn()``, the env a recipe builds first to read its specs; a bad env id or a missing extra (a
    ``ValueError`` or ``ImportError`` from the env's constructor) is raised as a one-line
    :class:`~vlmrb_torchrl.recipes.config.ConfigError` naming ``env=``.

    Examples:
        >>> probe_env(env_factory("MiniGrid-DoorKy-5x5-v0"), "MiniGrid-DoorKy-5x5-v0")
        Traceback (most recent call last):
        ...
        vlmrb_torchrl.recipes.config.ConfigError: env='MiniGrid-DoorKy-5x5-v0': ... Did you mean: `MiniGrid-DoorKey-5x5`?...
    """
    from vlmrb_torchrl.recipes.config import ConfigError

    try:
        return env_fn()
    except (ValueError, ImportError) as err:
        raise ConfigError(f"env={env_id!r}: {err}") from err


def is_minigrid(env_id: str) -> bool:
    """Whether ``env_id`` is a MiniGrid (or BabyAI) id.

    Examples:
        >>> is_minigrid("MiniGrid-DoorKey-8x8-v0"), is_minigrid("ALE/Pong-v5")
        (True, False)
    """
    return env_id.startswith(("MiniGrid-", "BabyAI-"))


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` is an ALE id (``ALE/<Game>-v5``).

    Examples:
        >>> is_atari("ALE/Pong-v5"), is_atari("MiniGrid-DoorKey-8x8-v0")
        (True, False)
    """
    return env_id.startswith("ALE/")


def make_batched_env(env_fn: Callable[[], Any], num_envs: int, *, parallel: bool = False):
    """``num_envs`` copies of ``env_fn``'s env stepped together.

    A MiniGrid factory from :func:`env_factory` gives a
    :class:`~vlmrb_torchrl.envs.minigrid.env.BatchedMiniGridEnv` (the data ``SerialEnv`` gives, with
    less overhead per step), an Atari one a :class:`~vlmrb_torchrl.envs.atari.env.BatchedAtariEnv`
    (ale-py's vector env: the emulator in C++ threads, one RGB screen per step for the agent's
    gray stack and the scorer's frame; ``parallel`` is ignored: it steps in parallel already);
    any other factory a ``SerialEnv``, or a ``ParallelEnv`` (one process per copy) with
    ``parallel=True``. See :func:`has_batched_env`.

    Examples:
        >>> type(make_batched_env(env_factory("MiniGrid-DoorKey-5x5-v0"), 2)).__name__
        'BatchedMiniGridEnv'
    """
    from torchrl.envs import ParallelEnv, SerialEnv

    batched = _batched_env_class(env_fn)
    if batched is not None and not (parallel and batched.__name__ == "BatchedMiniGridEnv"):
        return batched(num_envs, *env_fn.args, **env_fn.keywords)
    return _closing_keeps_threads(ParallelEnv if parallel else SerialEnv)(num_envs, env_fn)


@functools.cache
def _closing_keeps_threads(base: type) -> type:
    """TorchRL's ``SerialEnv`` or ``ParallelEnv`` whose ``close()`` leaves torch's thread count as it found it.

    TorchRL's batched envs raise the process's intra-op threads by their number of workers when
    they close (``min(initial threads, threads + workers)``: a ParallelEnv's workers give their
    cores back). A recipe closes a ``SerialEnv`` after every evaluation and collector, so the
    learner, pinned to ``torch_threads``, ran with 2 threads after the first one: on 2 shared
    cores that oversubscribes, and a run resumed from a checkpoint (1 thread until its first
    close) computed with another rounding than the uninterrupted run.
    """
    import torch

    class Batched(base):
        def close(self, *args, **kwargs):
            threads = torch.get_num_threads()
            try:
                return super().close(*args, **kwargs)
            finally:
                torch.set_num_threads(threads)

    Batched.__name__ = Batched.__qualname__ = base.__name__
    Batched.__doc__ = f"TorchRL's ``{base.__name__}``; closing it keeps torch's thread count."
    return Batched


def has_batched_env(env_fn: Callable[[], Any]) -> bool:
    """Whether :func:`make_batched_env` steps ``env_fn``'s copies in an env class of its own (MiniGrid,
    Atari) rather than in a ``SerialEnv``. For Atari that class also preprocesses frames its own way
    (see :class:`~vlmrb_torchrl.envs.atari.env.BatchedAtariEnv`): evaluations and galleries use it, with
    one copy if need be, so that the agent sees what it saw in training.

    Examples:
        >>> has_batched_env(env_factory("MiniGrid-DoorKey-5x5-v0")), has_batched_env(lambda: None)
        (True, False)
    """
    return _batched_env_class(env_fn) is not None


def _batched_env_class(env_fn):
    if not isinstance(env_fn, functools.partial):
        return None
    from vlmrb_torchrl.envs.atari.env import BatchedAtariEnv, make_atari_env
    from vlmrb_torchrl.envs.minigrid.env import BatchedMiniGridEnv, make_minigrid_env

    return {make_minigrid_env: BatchedMiniGridEnv, make_atari_env: BatchedAtariEnv}.get(env_fn.func)


def minigrid_actions(env_id: str, actions: str) -> tuple[str, ...] | None:
    """The ``actions=`` of a MiniGrid env for the config value ``actions`` (auto | all | a,b,c);
    ``None`` (all actions, or not a MiniGrid id) means the env's full action set.

    Examples:
        >>> minigrid_actions("MiniGrid-Empty-5x5-v0", "left, right,forward")
        ('left', 'right', 'forward')
        >>> minigrid_actions("ALE/Pong-v5", "auto") is None
        True
    """
    if not is_minigrid(env_id) or actions == "all":
        return None
    if actions == "auto":
        from vlmrb_torchrl.envs.minigrid.env import DOORKEY_ACTIONS

        return DOORKEY_ACTIONS if "DoorKey" in env_id else None
    return tuple(name.strip() for name in actions.split(",") if name.strip())


def make_collector(env_fn, policy, *, num_envs: int, frames_per_batch: int, total_frames: int, seed: int,
                   env_steps: int, parallel: bool = False, init_random_frames: int = 0):
    """A collector over ``num_envs`` copies of ``env_fn`` for the frames left after ``env_steps``.

    Env seeds derive from ``(seed, env_steps)``, in the uninterrupted run too, so a run resumed
    from a checkpoint re-creates exactly the collector the uninterrupted run re-created there.
    ``parallel=True`` steps each env in its own process (``ParallelEnv``).

    MiniGrid copies stepped in this process with a policy that acts on tensors (``policy.act``,
    e.g. the DQN recipe's :class:`~vlmrb_torchrl.recipes.dqn.EGreedyQPolicy`) get a
    :class:`~vlmrb_torchrl.envs.minigrid.env.BatchedMiniGridCollector` (TorchRL's ``Collector``'s
    batches, ~4x less overhead per step); everything else TorchRL's ``Collector``.
    """
    env = make_batched_env(env_fn, num_envs, parallel=parallel)
    env.set_seed(seed * 1_000_003 + env_steps)
    remaining = total_frames - env_steps
    total = -(-remaining // frames_per_batch) * frames_per_batch
    if init_random_frames == 0 and callable(getattr(policy, "act", None)):
        from vlmrb_torchrl.envs.minigrid.env import BatchedMiniGridCollector, BatchedMiniGridEnv

        if isinstance(env, BatchedMiniGridEnv):
            return BatchedMiniGridCollector(env, policy, frames_per_batch=frames_per_batch, total_frames=total)
    from torchrl.collectors import Collector

    kwargs = {"init_random_frames": init_random_frames} if init_random_frames > 0 else {}
    return Collector(env, policy, frames_per_batch=frames_per_batch, total_frames=total,
                     device="cpu", auto_register_policy_transforms=False, **kwargs)
