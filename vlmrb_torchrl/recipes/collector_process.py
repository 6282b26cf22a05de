"""Collection in a child process, one batch ahead of the learner, reproducibly.

:class:`CollectorProcess` runs the recipe's own TorchRL ``Collector`` (built by
:func:`~vlmrb_torchrl.recipes.envs.make_collector`) in a child process, so the envs (and their
rendering) use one core while the learner uses the other. While the learner trains on batch
``k``, the child collects batch ``k + 1`` with the policy weights the learner had when batch ``k``
was handed over (after its updates on batch ``k - 1``): the one-batch lag TorchRL's
``AsyncCollector(update_at_each_batch=True)`` has.

Why not ``AsyncCollector`` itself: for a CPU policy it puts the policy's own parameters in shared
memory, so the learner's optimizer steps reach the child *while* it acts, at moments that depend
on timing, and two runs of one seed differ. Here weights travel by value, at fixed points (each
batch request), and the child's RNG is seeded from ``(seed, env_steps)`` whenever a collector
starts: a run is reproducible for its seed and settings, and a run resumed from a checkpoint
continues exactly as the uninterrupted one (checkpoints start a new collector in both).
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import signal
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

__all__ = ["CollectorProcess"]

#: Seconds the parent waits for the child to answer a command before it checks the child is alive.
_POLL_S = 5.0


def _worker(conn, payload: bytes, threads: int) -> None:
    """The child: builds a collector per ``start`` and hands out one batch per ``next``."""
    # Ctrl-C reaches the whole process group: the parent decides when to stop (after a batch, with a checkpoint)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    factory, policy = pickle.loads(payload)  # the child's own copy (see CollectorProcess.__init__)
    collector = batches = None
    try:
        while True:
            command, arg = pickle.loads(conn.recv_bytes())
            if command == "start":  # arg: (env_steps, seed)
                if collector is not None:
                    collector.shutdown()
                env_steps, seed = arg
                torch.manual_seed(seed)  # the policy's exploration noise and random actions
                collector = factory(env_steps=env_steps)
                batches = iter(collector)
            elif command == "next":  # arg: the policy's weights (a state dict) or None
                if arg is not None:
                    policy.load_state_dict(arg)
                batch = next(batches, None)
                conn.send_bytes(pickle.dumps(("batch", batch), protocol=pickle.HIGHEST_PROTOCOL))
            elif command == "close":
                break
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        try:
            conn.send_bytes(pickle.dumps(("error", traceback.format_exc())))
        except OSError:
            pass
    finally:
        if collector is not None:
            collector.shutdown()
        conn.close()


class CollectorProcess:
    """A child process that collects for a learner, one batch ahead (see the module docstring).

    Args:
        factory (Callable[..., Collector]): ``factory(env_steps=n)`` builds the collector for the
            frames after ``n`` (picklable: e.g. a ``functools.partial`` of
            :func:`~vlmrb_torchrl.recipes.envs.make_collector` over ``policy``, an env factory and
            ints). It is called in the child.
        policy (nn.Module): the learner's policy module. A copy travels to the child with
            ``factory`` (pickled together, so the collector's policy *is* the copy); its weights
            (``state_dict()``) are sent with every batch request.

    Keyword Args:
        seed (int): with ``env_steps``, seeds the child's torch RNG whenever a collector starts.
        threads (int): torch intra-op threads in the child. Defaults to ``1``.

    :meth:`collector` gives what :class:`~vlmrb_torchrl.recipes.loop.Training` expects of a
    collector. A context manager: leaving it stops the child. Errors in the child are raised in
    the parent with the child's traceback.

    Examples:
        >>> from functools import partial
        >>> from torchrl.data import Categorical
        >>> from torchrl.modules import QValueActor
        >>> from vlmrb_torchrl.recipes.envs import env_factory, make_collector
        >>> policy = QValueActor(nn.Linear(984, 7), in_keys=["observation"], spec=Categorical(7))  # MiniGrid's 7 actions
        >>> factory = partial(make_collector, env_factory("MiniGrid-Empty-5x5-v0"), policy, num_envs=2,
        ...                   frames_per_batch=8, total_frames=24, seed=0)
        >>> with CollectorProcess(factory, policy, seed=0) as process:
        ...     [batch.shape for batch in process.collector(0)]
        [torch.Size([2, 4]), torch.Size([2, 4]), torch.Size([2, 4])]
    """

    def __init__(self, factory: Callable[..., Any], policy: nn.Module, *, seed: int, threads: int = 1) -> None:
        self.policy = policy
        self.seed = int(seed)
        ctx = mp.get_context("spawn")  # no fork of a process with threads and GL contexts
        self._conn, child = ctx.Pipe()
        # pickled here, by value: handed to Process as objects, torch's multiprocessing pickler would move the
        # policy's parameters to shared memory, and the child would act with (and its load_state_dict overwrite)
        # the learner's live weights; factory and policy in one pickle keep the collector's policy the copy
        payload = pickle.dumps((factory, policy), protocol=pickle.HIGHEST_PROTOCOL)
        self._process = ctx.Process(target=_worker, args=(child, payload, threads), daemon=True,
                                    name="vlmrb-collector")
        self._process.start()
        child.close()
        self._pending = 0  # requests sent whose batch was not received

    # ------------------------------------------------------------------ protocol
    def _send(self, command: str, arg: Any = None) -> None:
        self._conn.send_bytes(pickle.dumps((command, arg), protocol=pickle.HIGHEST_PROTOCOL))

    def _weights(self) -> dict[str, torch.Tensor]:
        return {key: value.detach().clone() for key, value in self.policy.state_dict().items()}

    def _request(self) -> None:
        self._send("next", self._weights())
        self._pending += 1

    def _receive(self) -> TensorDictBase | None:
        while not self._conn.poll(_POLL_S):
            if not self._process.is_alive():
                raise RuntimeError(f"the collector process died (exit code {self._process.exitcode}).")
        kind, payload = pickle.loads(self._conn.recv_bytes())
        self._pending -= 1
        if kind == "error":
            raise RuntimeError(f"the collector process failed:\n{payload}")
        return payload

    def _drain(self) -> None:
        while self._pending:
            self._receive()

    # ------------------------------------------------------------------ public
    def collector(self, env_steps: int) -> _Segment:
        """A collector for the frames after ``env_steps``: the child builds it (``factory(env_steps)``)
        with its torch RNG seeded from ``(seed, env_steps)``, as a run resumed at ``env_steps`` does."""
        self._drain()
        self._send("start", (env_steps, self.seed * 1_000_003 + env_steps))
        return _Segment(self)

    def close(self) -> None:
        """Stops the child (a batch it is still collecting is dropped)."""
        if self._process.is_alive():
            try:
                self._send("close")
            except OSError:
                pass
            self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()
        self._conn.close()

    def __enter__(self) -> CollectorProcess:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class _Segment:
    """One collector's batches, as :class:`~vlmrb_torchrl.recipes.loop.Training` iterates them.

    Iterating yields batch ``k`` after requesting batch ``k + 1`` (with the weights the learner has
    now); :meth:`shutdown` drops the batch requested last.
    """

    def __init__(self, process: CollectorProcess) -> None:
        self._process = process

    def __iter__(self) -> Iterator[TensorDictBase]:
        process = self._process
        process._request()
        while True:
            batch = process._receive()
            if batch is None:
                return
            process._request()  # collected while the learner trains on `batch`
            yield batch

    def update_policy_weights_(self) -> None:
        """Nothing to do: every batch request carries the learner's weights at that moment."""

    def shutdown(self) -> None:
        self._process._drain()

