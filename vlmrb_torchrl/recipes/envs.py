"""The recipes' env and collector factories, for any registered env family (:mod:`vlmrb_torchrl.envs.family`)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from vlmrb_torchrl.envs.family import EnvFamily, families, family_of, load

__all__ = ["env_factory", "probe_env", "has_batched_env", "make_batched_env", "make_collector"]


def env_factory(env_id: str, *, train: bool = True, render: bool | str = False, **kwargs: Any) -> Callable[[], Any]:
    """A picklable zero-argument env constructor for ``env_id``, from its family
    (:func:`~vlmrb_torchrl.envs.family_of`: MiniGrid ``MiniGrid-*`` / ``BabyAI-*``, Atari ``ALE/<Game>-v5``,
    robosuite ``robosuite/<Task>``, OGBench Scene ``ogbench/scene-task<N>``, or a registered one).

    Args:
        env_id (str): the env id.

    Keyword Args:
        train (bool): training env (Atari: life-loss episodes, clipped rewards) or evaluation env.
        render (bool or str): write rendered frames (``"pixels"``) for a scorer that reads them; ``"state"``: write
            the state they are drawn from (an env with a ``state_renderer``: MiniGrid, robosuite, OGBench Scene).
        **kwargs: passed to the env's constructor.

    Raises:
        ConfigError: ``env_id`` is of no registered family (a ``ValueError``).

    Examples:
        >>> env_factory("CartPole-v1")
        Traceback (most recent call last):
        ...
        vlmrb_torchrl.recipes.config.ConfigError: env='CartPole-v1' is not supported: use ...
    """
    from vlmrb_torchrl.recipes.config import ConfigError

    family = family_of(env_id)
    if family is None:
        raise ConfigError(f"env={env_id!r} is not supported: use " + ", ".join(f.id_help for f in families()) + ".")
    return family.env_fn(env_id, train=train, render=render, **kwargs)


def probe_env(env_fn: Callable[[], Any], env_id: str) -> Any:
    """``env_fn()``, the env a recipe builds first to read its specs; a bad env id or a missing extra (a
    ``ValueError`` or ``ImportError`` from the env's constructor) is raised as a one-line
    :class:`~vlmrb_torchrl.recipes.config.ConfigError` naming ``env=`` (an id its simulator does not know is
    refused before, by the config's ``env`` check).

    Examples:
        >>> probe_env(env_factory("MiniGrid-DoorKey-5x5-v0", frame_size=0), "MiniGrid-DoorKey-5x5-v0")
        Traceback (most recent call last):
        ...
        vlmrb_torchrl.recipes.config.ConfigError: env='MiniGrid-DoorKey-5x5-v0': MiniGridEnv.frame_size must be an int >= 1, got frame_size=0.
    """
    from vlmrb_torchrl.recipes.config import ConfigError

    try:
        return env_fn()
    except (ValueError, ImportError) as err:
        raise ConfigError(f"env={env_id!r}: {err}") from err


def make_batched_env(env_fn: Callable[[], Any], num_envs: int, *, parallel: bool = False):
    """``num_envs`` copies of ``env_fn``'s env stepped together.

    A factory from :func:`env_factory` whose family has a batched env class of its own
    (:attr:`~vlmrb_torchrl.envs.EnvFamily.batched_env`) gives that class: MiniGrid's
    :class:`~vlmrb_torchrl.envs.BatchedMiniGridEnv` (the data ``SerialEnv`` gives, with less overhead per
    step), Atari's :class:`~vlmrb_torchrl.envs.BatchedAtariEnv` (ale-py's vector env: the emulator in C++
    threads, one RGB screen per step for the agent's gray stack and the scorer's frame). Any other
    factory gives a ``SerialEnv``, or a ``ParallelEnv`` (one process per copy) with ``parallel=True``,
    which also replaces a batched class that steps its copies in one thread (a class with
    ``steps_in_parallel = True`` is kept). See :func:`has_batched_env`.

    Examples:
        >>> type(make_batched_env(env_factory("MiniGrid-DoorKey-5x5-v0"), 2)).__name__
        'BatchedMiniGridEnv'
    """
    from torchrl.envs import ParallelEnv, SerialEnv

    batched = _batched_env_class(env_fn)
    if batched is not None and not (parallel and not getattr(batched, "steps_in_parallel", False)):
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
    """Whether :func:`make_batched_env` steps ``env_fn``'s copies in an env class of its family's own (MiniGrid,
    Atari) rather than in a ``SerialEnv``. Such a class may preprocess frames its own way (Atari's,
    :class:`~vlmrb_torchrl.envs.BatchedAtariEnv`): evaluations and galleries use it, with one copy if
    need be, so that the agent sees what it saw in training.

    Examples:
        >>> has_batched_env(env_factory("MiniGrid-DoorKey-5x5-v0")), has_batched_env(lambda: None)
        (True, False)
    """
    return _batched_env_class(env_fn) is not None


def _env_family(env_fn: Any) -> EnvFamily | None:
    """The family of a factory :func:`env_factory` made (a ``functools.partial`` of its family's env factory)."""
    if not isinstance(env_fn, functools.partial) or not env_fn.args or not isinstance(env_fn.args[0], str):
        return None
    family = family_of(env_fn.args[0])
    return family if family is not None and env_fn.func is load(family.env_factory) else None


def _batched_env_class(env_fn):
    family = _env_family(env_fn)
    return None if family is None or family.batched_env is None else load(family.batched_env)


def make_collector(env_fn, policy, *, num_envs: int, frames_per_batch: int, total_frames: int, seed: int,
                   env_steps: int, parallel: bool = False, init_random_frames: int = 0):
    """A collector over ``num_envs`` copies of ``env_fn`` for the frames left after ``env_steps``.

    Env seeds derive from ``(seed, env_steps)``, in the uninterrupted run too, so a run resumed
    from a checkpoint re-creates exactly the collector the uninterrupted run re-created there.
    ``parallel=True`` steps each env in its own process (``ParallelEnv``).

    Copies stepped in this process in a family's batched env, with a policy that acts on tensors
    (``policy.act``, e.g. the DQN recipe's :class:`~vlmrb_torchrl.recipes.dqn.EGreedyQPolicy`), get the
    family's collector where it has one (MiniGrid's
    :class:`~vlmrb_torchrl.envs.minigrid.env.BatchedMiniGridCollector`: TorchRL's ``Collector``'s batches,
    ~4x less overhead per step); everything else TorchRL's ``Collector``.
    """
    env = make_batched_env(env_fn, num_envs, parallel=parallel)
    env.set_seed(seed * 1_000_003 + env_steps)
    remaining = total_frames - env_steps
    total = -(-remaining // frames_per_batch) * frames_per_batch
    family = _env_family(env_fn)
    if init_random_frames == 0 and callable(getattr(policy, "act", None)) and family is not None \
            and family.batched_collector is not None and isinstance(env, load(family.batched_env)):
        return load(family.batched_collector)(env, policy, frames_per_batch=frames_per_batch, total_frames=total)
    from torchrl.collectors import Collector

    kwargs = {"init_random_frames": init_random_frames} if init_random_frames > 0 else {}
    return Collector(env, policy, frames_per_batch=frames_per_batch, total_frames=total,
                     device="cpu", auto_register_policy_transforms=False, **kwargs)
