"""Tests for the Ray backend of AsyncScorer and the VLM-RB buffer served by Ray.

The default tier needs no cluster (argument checks, the missing-extra message, the recipe keys,
the remote buffer class in-process). Everything that starts the local cluster (~5-15 s) is
``slow``: one cluster per module (``num_cpus=2``, its own temp dir), shut down and removed after.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import time

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage

from test_worker import MaxObsScorer, expected_start_scores, make_batches
from vlmrb_torchrl import AsyncScorer, ClipSpec, ClipStream, VLMPrioritizedSampler, VLMScoreTransform, make_async_scorer
from vlmrb_torchrl.replay.ray_buffer import RemoteSampler, VLMRemoteReplayBuffer
from vlmrb_torchrl.scoring.ray_pool import RayAsyncScorer

CLIP_LEN = 5


def make_transform(delay: float = 0.0) -> VLMScoreTransform:
    return VLMScoreTransform(MaxObsScorer(delay=delay), clip_len=CLIP_LEN, in_keys=())


def clip_batches(sampler, data, chunk=13):
    """Stores the collector batches of ``data`` (slot = row) and returns (flat data, clip batches)."""
    stream = ClipStream(ClipSpec(clip_len=CLIP_LEN), frame_key=None, extra_keys=["obs"])
    flats, batches, start = [], [], 0
    for part in data.split(chunk, dim=1):
        flat = part.reshape(-1)
        index = torch.arange(start, start + len(flat))
        start += len(flat)
        sampler.mark_update(index)
        batches.append(stream.push(flat, index, sampler.generations(index)))
        flats.append(flat)
    batches.append(stream.flush())
    return torch.cat(flats), batches


# --------------------------------------------------------------------- default tier: no cluster
class TestWithoutCluster:
    @pytest.mark.parametrize("kwargs, error, match", [
        ({"num_workers": 0}, ValueError, "num_workers must be an int >= 1"),
        ({"batches_per_worker": True}, ValueError, "batches_per_worker must be an int >= 1"),
        ({"worker_options": [("num_gpus", 1)]}, TypeError, "worker_options must be a dict"),
        ({"worker_options": {"max_task_retries": 2}}, ValueError, "must not set max_task_retries"),
        ({"worker_options": {"max_restarts": -2}}, ValueError, r"max_restarts'\] must be an int >= -1"),
        ({"scorer_factory": 3}, TypeError, "scorer_factory must be a scorer spec string"),
        ({"max_pending": 0}, ValueError, "max_pending must be an int >= 1"),
        ({"on_full": "wait"}, ValueError, "on_full must be one of"),
        ({"on_error": "ignore"}, ValueError, "on_error must be one of"),
    ])
    def test_bad_arguments_before_ray_starts(self, kwargs, error, match, monkeypatch):
        monkeypatch.setitem(sys.modules, "ray", None)  # nothing may touch Ray before the checks pass
        with pytest.raises(error, match=match):
            make_async_scorer(make_transform(), VLMPrioritizedSampler(8), backend="ray", **kwargs)

    def test_missing_ray_names_the_extra(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "ray", None)
        with pytest.raises(ImportError, match=r"pip install 'vlmrb-torchrl\[ray\]'"):
            make_async_scorer(make_transform(), VLMPrioritizedSampler(8), backend="ray", num_workers=2)

    def test_each_class_runs_its_own_backends(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "ray", None)
        with make_async_scorer(make_transform(), VLMPrioritizedSampler(8)) as worker:
            assert type(worker) is AsyncScorer
        with pytest.raises(ValueError, match=r"AsyncScorer runs backend 'thread' or 'process', got backend='ray'; "
                                             r"backend='ray' is built by make_async_scorer"):
            AsyncScorer(make_transform(), VLMPrioritizedSampler(8), backend="ray")  # no class swap behind the call
        with pytest.raises(ValueError, match="RayAsyncScorer is the backend='ray' pool"):
            RayAsyncScorer(make_transform(), VLMPrioritizedSampler(8), backend="thread")
        with pytest.raises(ValueError, match=r"backend must be one of \('thread', 'process', 'ray'\), got backend='gpu'"):
            make_async_scorer(make_transform(), VLMPrioritizedSampler(8), backend="gpu")

    def test_remote_buffer_methods_and_remote_sampler_in_process(self):
        """The buffer class exposes the sampler's score API; RemoteSampler forwards to it (here in-process)."""
        rb = VLMRemoteReplayBuffer(storage=LazyTensorStorage(8), sampler=VLMPrioritizedSampler(8, threshold=None))
        data = TensorDict({"obs": torch.arange(6.0)}, batch_size=[6])
        index, generation = rb.extend_with_generations(data)
        assert index.tolist() == list(range(6)) and generation.tolist() == [1] * 6
        remote = RemoteSampler(rb)  # no .client(): used as is
        with make_async_scorer(make_transform(), remote) as worker:
            stream = ClipStream(ClipSpec(clip_len=CLIP_LEN), frame_key=None, extra_keys=["obs"])
            batch = data.set(("collector", "traj_ids"), torch.zeros(6, dtype=torch.long)).set(
                ("next", "done"), torch.arange(6) == 5)
            worker.submit(stream.push(batch, index, generation))
            assert worker.drain(timeout=30)
        assert remote.scores(index).tolist() == pytest.approx([0.004, 0.005, 0.005, 0.005, 0.005, 0.005])
        rb.extend(data[:2])  # slots 6, 7
        assert rb.generations(torch.arange(8)).tolist() == [1] * 8
        assert rb.update_scores(torch.tensor([6]), torch.tensor([0.9]), torch.tensor([0])) == 0  # stale: dropped
        assert remote.stats()["stale_drops"] == 1 and np.isnan(rb.scores(torch.tensor([6]))).all()

    @pytest.mark.parametrize("death", ["ActorDiedError", "OutOfMemoryError", "NodeDiedError"])
    def test_a_batch_lost_with_its_actor_is_retried_however_the_actor_died(self, death):
        """Ray's memory monitor kills an actor with an OutOfMemoryError, a lost node gives NodeDiedError:
        neither is a RayActorError, and both must be handled like one (retry once, probe), not fail the pool."""
        exceptions = pytest.importorskip("ray.exceptions")
        from collections import deque

        from vlmrb_torchrl.scoring.ray_pool import _Flight, _Worker

        class FakeRay:  # ray.get raises the death, as it does for a call whose actor was killed under it
            def __init__(self, err):
                self.exceptions, self.err = exceptions, err

            def get(self, ref):
                raise self.err

        sampler = VLMPrioritizedSampler(64)
        _, batches = clip_batches(sampler, make_batches(1, 12))
        batch = batches[0]
        pool = object.__new__(RayAsyncScorer)  # the dispatcher's state, without actors or a cluster
        pool._cond, pool._workers = __import__("threading").Condition(), [_Worker(actor=None)]
        pool._in_flight, pool._dropped, pool._busy_mark, pool._score_time = len(batch), 0, 0.0, 0.0
        pool._abandoned, pool.num_workers, pool.max_restarts = False, 1, 1
        pool._workers[0].batches, pool._workers[0].in_flight = 1, len(batch)
        retry = deque()
        err = exceptions.ActorDiedError() if death == "ActorDiedError" else getattr(exceptions, death)("killed")
        assert pool._finish(FakeRay(err), None, _Flight(0, batch, [(len(batch), 0.0)]), retry)
        worker = pool._workers[0]
        assert len(retry) == 1 and worker.paused and worker.alive and pool._dropped == 0
        assert (worker.batches, worker.in_flight, pool._in_flight) == (0, 0, len(batch))  # the retry still counts
        worker.probe = "probe"
        if death == "ActorDiedError":  # dead for good (out of max_restarts), or killed during the probe itself:
            pool._probed(FakeRay(err), "probe", 0)  # probed once more before it is retired
            assert worker.alive and worker.paused and worker.probe is None
            worker.probe = "probe"
            with pytest.raises(RuntimeError, match="every Ray scorer worker died"):
                pool._probed(FakeRay(err), "probe", 0)
            assert not worker.alive
        else:  # a probe caught by the kill itself: the actor may be restarting, ask again later
            pool._probed(FakeRay(err), "probe", 0)
            assert worker.alive and worker.paused and worker.probe is None


class TestRecipeKeys:
    @pytest.mark.parametrize("overrides, match", [
        (["scorer_backend=gpu"], "scorer_backend='gpu' is invalid: expected one of"),
        (["scorer_workers=2"], "scorer_workers=2 is invalid: expected an integer >= 1, above 1 only with scorer_backend=ray"),
        (["scorer_backend=ray", "scorer_workers=0"], "scorer_workers=0 is invalid"),
        (["scorer_gpus=0.5"], "scorer_gpus=0.5 is invalid: expected a number >= 0, above 0 only with scorer_backend=ray"),
        (["scorer_backend=ray", "scorer_gpus=-1"], "scorer_gpus=-1.0 is invalid"),
    ])
    def test_bad_values(self, overrides, match):
        from vlmrb_torchrl.recipes.config import ConfigError, DQNConfig, apply_overrides

        with pytest.raises(ConfigError, match=match):
            apply_overrides(DQNConfig(), overrides).validate()

    def test_good_values(self):
        from vlmrb_torchrl.recipes.config import DQNConfig, apply_overrides

        cfg = apply_overrides(DQNConfig(), ["scorer_backend=ray", "scorer_workers=4", "scorer_gpus=0.25",
                                            "ray_address=auto"]).validate()
        assert (cfg.scorer_backend, cfg.scorer_workers, cfg.scorer_gpus, cfg.ray_address) == ("ray", 4, 0.25, "auto")
        default = DQNConfig().validate()
        assert (default.scorer_backend, default.scorer_workers, default.scorer_gpus, default.ray_address) == (
            "thread", 1, 0.0, "")


# --------------------------------------------------------------------- slow tier: a local cluster
@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray runtime is already running in this process")
    temp_dir = tempfile.mkdtemp(prefix="vlmrb_ray_")
    # the scorers and helpers live in test modules the actors cannot import: ship them by value
    for module in ("test_worker", __name__):
        ray.cloudpickle.register_pickle_by_value(sys.modules[module])
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir)
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        for signum, handler in handlers.items():  # ray.init's SIGTERM handler outlives ray.shutdown
            signal.signal(signum, handler)


def _wait_until_workers_take_work(pool, timeout: float = 60.0) -> None:
    """Until every actor of ``pool`` has answered its first ready() probe (no batch goes to it before)."""
    deadline = time.monotonic() + timeout
    while any(w.paused for w in pool._workers):
        assert time.monotonic() < deadline, "the Ray actors did not start"
        time.sleep(0.05)


def thread_scores(data_seed=0, **kwargs):
    sampler = VLMPrioritizedSampler(10_000, threshold=None)
    flat, batches = clip_batches(sampler, make_batches(num_envs=4, steps=60, seed=data_seed))
    with make_async_scorer(make_transform(), sampler, **kwargs) as worker:
        for b in batches:
            worker.submit(b)
        assert worker.drain(timeout=60)
    return flat, sampler


@pytest.mark.slow
def test_ray_scores_equal_thread_scores(ray_cluster):
    flat, thread_sampler = thread_scores(batch_size=7)
    sampler = VLMPrioritizedSampler(10_000, threshold=None)
    _, batches = clip_batches(sampler, make_batches(num_envs=4, steps=60))
    # 0.35 s a batch: the next batch arrives while the first worker is still busy, even when submitting is slow
    pool = make_async_scorer(make_transform(delay=0.05), sampler, backend="ray", num_workers=2, batch_size=7)
    assert isinstance(pool, RayAsyncScorer)
    with pool:
        _wait_until_workers_take_work(pool)  # on a loaded machine one actor can start after the other has done it all
        for b in batches:
            pool.submit(b)
        assert pool.drain(timeout=120)
        stats = pool.stats()
    n = len(flat)
    expected = expected_start_scores(flat, CLIP_LEN)
    got = sampler.scores(torch.arange(n))
    np.testing.assert_array_equal(got.numpy(), thread_sampler.scores(torch.arange(n)).numpy())
    np.testing.assert_allclose(got, [expected[i] for i in range(n)], rtol=1e-6)
    assert stats["scored"] == stats["submitted"] == n and stats["dropped"] == 0 and stats["backlog"] == 0
    assert stats["workers"] == 2 and stats["restarts"] == 0
    assert stats["worker0/clips_per_s"] > 0 and stats["worker1/clips_per_s"] > 0  # both did work
    assert stats["worker0/in_flight"] == stats["worker1/in_flight"] == 0


@pytest.mark.slow
def test_stale_generations_are_dropped(ray_cluster):
    sampler = VLMPrioritizedSampler(10_000, threshold=None)
    flat, batches = clip_batches(sampler, make_batches(num_envs=4, steps=20))
    n = len(flat)
    rewritten = torch.arange(0, n, 3)
    sampler.mark_update(rewritten)  # recycled after their clips were cut: their scores are stale
    with make_async_scorer(make_transform(), sampler, backend="ray", num_workers=2, batch_size=4,
                     scorer_factory=lambda: MaxObsScorer()) as pool:
        for b in batches:
            pool.submit(b)
        assert pool.drain(timeout=120)
    scores = sampler.scores(torch.arange(n))
    expected = expected_start_scores(flat, CLIP_LEN)
    kept = torch.ones(n, dtype=torch.bool)
    kept[rewritten] = False
    assert torch.isnan(scores[rewritten]).all()
    np.testing.assert_allclose(scores[kept], [expected[i] for i in kept.nonzero().flatten().tolist()], rtol=1e-6)
    assert sampler.stats()["stale_drops"] == len(rewritten)


@pytest.mark.slow
def test_killed_worker_is_restarted_and_nothing_is_corrupted(ray_cluster):
    ray = ray_cluster
    sampler = VLMPrioritizedSampler(10_000, threshold=None)
    flat, batches = clip_batches(sampler, make_batches(num_envs=4, steps=60))
    n = len(flat)
    with make_async_scorer(make_transform(delay=0.05), sampler, backend="ray", num_workers=2, batch_size=8,
                     worker_options={"max_restarts": 1}) as pool:
        for b in batches:
            pool.submit(b)
        deadline = time.monotonic() + 60
        while pool.stats()["worker0/in_flight"] == 0 or pool.stats()["scored"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        ray.kill(pool._workers[0].actor, no_restart=False)  # dies with batches in flight; Ray restarts it
        assert pool.drain(timeout=180)
        while pool.stats()["worker0/restarts"] == 0:  # the restarted actor answers its probe
            assert time.monotonic() < deadline + 300  # generous: a restart took > 2 min on a loaded 2-core machine
            time.sleep(0.05)
        stats = pool.stats()
    assert stats["worker0/restarts"] == 1 and stats["worker1/restarts"] == 0 and stats["workers"] == 2
    # the lost batches went once more to the live worker: nothing dropped
    assert stats["scored"] == stats["submitted"] == n and stats["dropped"] == 0
    scores = sampler.scores(torch.arange(n))
    by_slot = expected_start_scores(flat, CLIP_LEN)
    expected = torch.tensor([by_slot[i] for i in range(n)])
    written = ~torch.isnan(scores)
    np.testing.assert_allclose(scores[written], expected[written], rtol=1e-6)  # never a wrong slot
    assert int(written.sum()) == stats["scored"]  # one clip per transition (stride 1, assign="start")


@pytest.mark.slow
def test_every_worker_dead_raises_instead_of_hanging(ray_cluster):
    ray = ray_cluster
    sampler = VLMPrioritizedSampler(10_000, threshold=None)
    _, batches = clip_batches(sampler, make_batches(num_envs=4, steps=60))
    pool = make_async_scorer(make_transform(delay=0.05), sampler, backend="ray", num_workers=2, batch_size=8,
                       worker_options={"max_restarts": 0})
    for b in batches:
        pool.submit(b)
    for w in pool._workers:
        ray.kill(w.actor, no_restart=False)
    with pytest.raises(RuntimeError, match="AsyncScorer's worker failed") as info:
        pool.drain(timeout=120)
    assert "every Ray scorer worker died" in str(info.value.__cause__)
    with pytest.raises(RuntimeError):
        pool.close()
    assert not pool._thread.is_alive()


@pytest.mark.slow
def test_a_scorer_error_is_raised_in_the_caller(ray_cluster):
    sampler = VLMPrioritizedSampler(10_000, threshold=None)
    _, batches = clip_batches(sampler, make_batches(num_envs=4, steps=10))
    pool = make_async_scorer(VLMScoreTransform(MaxObsScorer(fail_after=0), clip_len=CLIP_LEN, in_keys=()), sampler,
                       backend="ray", num_workers=1)
    for b in batches:
        pool.submit(b)
    with pytest.raises(RuntimeError, match="AsyncScorer's worker failed") as info:
        pool.drain(timeout=120)
    assert isinstance(info.value.__cause__, ValueError) and "scorer exploded" in str(info.value.__cause__)
    with pytest.raises(RuntimeError):
        pool.close()
    assert not pool._thread.is_alive() and pool.stats()["workers"] == 0  # actors killed all the same


@pytest.mark.slow
def test_on_error_skip_keeps_the_pool_going_and_a_copy_keeps_its_settings(ray_cluster):
    import copy

    sampler = VLMPrioritizedSampler(10_000, threshold=None)
    flat, batches = clip_batches(sampler, make_batches(num_envs=4, steps=10))
    # the actor's scorer fails on every call after its first: skipped, counted, the pool goes on
    pool = make_async_scorer(VLMScoreTransform(MaxObsScorer(fail_after=1), clip_len=CLIP_LEN, in_keys=()), sampler,
                       backend="ray", num_workers=1, batch_size=8, on_error="skip", max_consecutive_errors=None)
    try:
        for b in batches:
            pool.submit(b)
        assert pool.drain(timeout=120)
        stats = pool.stats()
        assert stats["errors"] >= 1 and 0 < stats["scored"] <= 8  # only the first call (<= batch_size clips) scored
        assert stats["scored"] + stats["error_clips"] == stats["submitted"] and stats["backlog"] == 0
        assert int((~torch.isnan(sampler.scores(torch.arange(len(flat))))).sum()) > 0
        state = pool.__getstate__()
        assert (state["num_workers"], state["on_error"], state["max_consecutive_errors"]) == (1, "skip", None)
    finally:
        pool.close()
    clone = copy.deepcopy(pool)  # a new pool (new actors) with the same settings
    try:
        assert type(clone) is RayAsyncScorer and clone.num_workers == 1 and clone.on_error == "skip"
    finally:
        clone.close()


@pytest.mark.slow
def test_close_stops_everything(ray_cluster):
    ray = ray_cluster
    sampler = VLMPrioritizedSampler(10_000, threshold=None)
    _, batches = clip_batches(sampler, make_batches(num_envs=4, steps=60))
    pool = make_async_scorer(make_transform(delay=0.2), sampler, backend="ray", num_workers=2, batch_size=8)
    actors = [w.actor for w in pool._workers]
    for b in batches:
        pool.submit(b)
    deadline = time.monotonic() + 120
    while pool.stats()["scored"] == 0:  # the actors are up and busy
        assert time.monotonic() < deadline
        time.sleep(0.01)
    t0 = time.monotonic()
    pool.close(drain=False)  # queued and in-flight clips abandoned, counted
    assert time.monotonic() - t0 < 10
    stats = pool.stats()
    assert not pool._thread.is_alive()
    assert stats["scored"] + stats["dropped"] == stats["submitted"] and stats["dropped"] > 0
    assert stats["backlog"] == 0 and stats["worker0/in_flight"] == stats["worker1/in_flight"] == 0
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.ready.remote(), timeout=30)
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(batches[0])
    assert ray.is_initialized()  # the tests' cluster is not the pool's to shut down


@pytest.mark.slow
def test_infeasible_worker_options_are_refused(ray_cluster):
    with pytest.raises(ValueError, match=r"num_gpus=1 for num_workers=2 asks for 2 GPU but the Ray cluster has 0"):
        make_async_scorer(make_transform(), VLMPrioritizedSampler(8), backend="ray", num_workers=2,
                    worker_options={"num_gpus": 1})


@pytest.mark.slow
def test_collector_actors_share_a_remote_buffer_scored_by_the_pool(ray_cluster):
    ray = ray_cluster
    from vlmrb_torchrl.replay.ray_buffer import make_ray_vlm_replay_buffer

    rb = make_ray_vlm_replay_buffer(1000, batch_size=16, sampler_kwargs={"threshold": None})
    client = rb.client()

    @ray.remote(num_cpus=0)
    def collect(client, seed):
        # a collector actor: stores through the client, cuts clips with its own stream
        stream = ClipStream(ClipSpec(clip_len=CLIP_LEN), frame_key=None, extra_keys=["obs"])
        flat = make_batches(num_envs=2, steps=30, seed=seed, traj_offset=100 * seed).reshape(-1)
        index, generation = client.extend_with_generations(flat)
        return flat, index, [stream.push(flat, index, generation), stream.flush()]

    try:
        results = ray.get([collect.remote(client, seed) for seed in (1, 2)], timeout=120)
        with make_async_scorer(make_transform(), RemoteSampler(rb), backend="ray", num_workers=2, batch_size=8) as pool:
            for _, _, batches in results:
                for b in batches:
                    pool.submit(b)
            assert pool.drain(timeout=120)
        for flat, index, _ in results:
            expected = expected_start_scores(flat, CLIP_LEN)
            np.testing.assert_allclose(client.scores(index), [expected[i] for i in range(len(flat))], rtol=1e-6)
        assert client.vlm_stats()["fraction_scored"] == 1.0
        assert rb.sample().batch_size == torch.Size([16])
    finally:
        rb.close()


@pytest.mark.slow
def test_dqn_recipe_scores_on_ray_workers(ray_cluster, tmp_path):
    pytest.importorskip("minigrid")
    import csv
    import json
    import math

    from vlmrb_torchrl.recipes.config import DQNConfig, apply_overrides
    from vlmrb_torchrl.recipes.dqn import main as dqn_main

    cfg = apply_overrides(DQNConfig(), dict(
        total_frames=512, num_envs=2, frames_per_batch=64, learning_starts=128, eval_every=256, eval_episodes=2,
        buffer_size=2_000, checkpoint_every=512, clip_len=4, batch_size=16, progress=False, hidden=32, n_steps=2,
        gallery_clips=0, tensorboard=False, scorer_backend="ray", scorer_workers=2, output_dir=str(tmp_path / "run"),
        # the checkpoint waits for every score; on a loaded 2-core machine the pool's actors can take longer than
        # the default 60 s to load their scorers and catch up (the wait ends as soon as they are done)
        scorer_drain_timeout=300.0))
    summary = dqn_main(cfg)
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_steps"]) for r in rows] == [256, 512] and summary["env_steps"] == 512
    # (the rows may come before the actors have loaded their scorers: scoring is asynchronous)
    assert all(math.isfinite(float(r["scorer_clips_per_s"])) for r in rows)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["scorer_backend"] == "ray"
    import torch

    from vlmrb_torchrl.recipes.replay_checkpoint import expand

    replay_dir = tmp_path / "run" / "checkpoints" / "step_512" / "replay"
    sampler = json.loads((replay_dir / "replay.json").read_text())["sampler"]
    scored = expand(torch.load(replay_dir / "replay.pt", weights_only=True)["sampler"]["scored"],
                    sampler["notes"]["scored"])
    assert sampler["used"] == 512 and scored.all()  # the checkpoint waited for every score from the pool


_OWN_CLUSTER = """
import ray, torch
from test_worker import MaxObsScorer
from vlmrb_torchrl import AsyncScorer, ClipSpec, ClipStream, VLMPrioritizedSampler, VLMScoreTransform, make_async_scorer
from tensordict import TensorDict
ray.cloudpickle.register_pickle_by_value(__import__("test_worker"))
sampler = VLMPrioritizedSampler(10, threshold=None)
sampler.mark_update(torch.arange(10))
stream = ClipStream(ClipSpec(clip_len=3), frame_key=None, extra_keys=["obs"])
batch = TensorDict({"obs": torch.arange(10), ("collector", "traj_ids"): torch.zeros(10, dtype=torch.long),
                    ("next", "done"): torch.arange(10) == 9}, batch_size=[10])
assert not ray.is_initialized()
with make_async_scorer(VLMScoreTransform(MaxObsScorer(), clip_len=3, in_keys=()), sampler, backend="ray",
                 ray_address="") as pool:
    assert ray.is_initialized()
    pool.submit(stream.push(batch, torch.arange(10), sampler.generations(torch.arange(10))))
    assert pool.drain(timeout=120)
print("scores", [round(float(s), 3) for s in sampler.scores(torch.arange(10))], "after close:", ray.is_initialized())
"""


@pytest.mark.slow
def test_a_pool_that_started_ray_shuts_it_down():
    """ray_address="" with no Ray running: the pool starts a local cluster and close() stops it."""
    pytest.importorskip("ray")
    import os
    import subprocess
    from pathlib import Path

    tests = Path(__file__).parent
    temp_dir = tempfile.mkdtemp(prefix="vlmrb_ray_")  # short: Ray's socket paths must fit in 107 bytes
    env = {**os.environ, "RAY_TMPDIR": temp_dir,
           "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")])}
    try:
        out = subprocess.run([sys.executable, "-c", _OWN_CLUSTER], env=env, capture_output=True, text=True,
                             timeout=300)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "scores [0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.009, 0.009] after close: False" in out.stdout
