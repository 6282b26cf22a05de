"""TorchRL conformance: VLMPrioritizedSampler in the places TorchRL's PrioritizedSampler goes.

Modelled on TorchRL's own replay-buffer tests (writers, storages incl. ``ndim=2`` and memmap,
checkpointers, multiprocess sharing, schedulers, a collector with ``replay_buffer=``), each
case parametrised over ``PrioritizedSampler`` ("per") and ``VLMPrioritizedSampler`` ("vlm").

Where the semantics coincide the two must agree exactly: with no VLM scores,
``lambda_max=1, warmup=0, td_boost=True`` and the same ``eps``/``alpha``, the VLM sampler
follows PER's law: every unscored slot has priority 1 (``"mean"`` of no scores), so its
probability is ``(|td| + eps) ** alpha / sum``, new slots get the largest TD priority seen
(1.0 at first), and the importance weights are ``(p_i / p_min) ** -beta``.
"""

from __future__ import annotations

import multiprocessing.context
import pickle
import time

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import (
    Categorical,
    Composite,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    Unbounded,
)
from torchrl.data.replay_buffers.scheduler import LinearScheduler
from torchrl.envs import EnvBase

from vlmrb_torchrl import VLMPrioritizedSampler

KINDS = ["per", "vlm"]
ALPHA, BETA, EPS = 0.7, 0.5, 1e-3


def make_sampler(kind: str, capacity: int, **kwargs):
    """PER, or the VLM sampler in the setting where it follows PER's law."""
    alpha, beta, eps = kwargs.pop("alpha", ALPHA), kwargs.pop("beta", BETA), kwargs.pop("eps", EPS)
    if kind == "per":
        return PrioritizedSampler(capacity, alpha=alpha, beta=beta, eps=eps, **kwargs)
    return VLMPrioritizedSampler(
        capacity, lambda_max=1.0, warmup=0, td_boost=True, eps=eps, alpha=alpha, beta=beta,
        tree_backend="numpy", **kwargs,
    )


def make_rb(kind: str, capacity: int = 16, *, storage=None, writer=None, seed: int = 0, **kwargs):
    sampler = make_sampler(kind, capacity, **kwargs)
    rb = TensorDictReplayBuffer(
        storage=storage if storage is not None else LazyTensorStorage(capacity),
        sampler=sampler,
        writer=writer,
        generator=torch.Generator().manual_seed(seed),
    )
    return rb, sampler


def data(n: int, start: int = 0, **extra) -> TensorDict:
    return TensorDict(obs=torch.arange(start, start + n, dtype=torch.float32), **extra, batch_size=[n])


def probabilities(sampler, n: int) -> np.ndarray:
    """The sampling distribution over slots 0..n-1 (for PER: from its sum tree's leaves)."""
    if isinstance(sampler, VLMPrioritizedSampler):
        return sampler.probabilities(n).numpy()
    leaves = np.asarray([sampler._sum_tree[i] for i in range(n)], dtype=np.float64)
    return leaves / leaves.sum()


def td_update(rb, index: torch.Tensor, rng: np.random.Generator, width: int = 2) -> None:
    """What a loss module hands back: the batch's "index" and [B, width] TD errors.

    Several TD errors per row are reduced with the sampler's reduction ("max"); with an
    ``ndim > 1`` storage TorchRL flattens them instead, so those tests pass ``width=0``.
    """
    shape = (len(index), width) if width else (len(index),)
    td_error = torch.as_tensor(rng.uniform(0.0, 3.0, size=shape), dtype=torch.float32)
    rb.update_tensordict_priority(TensorDict(index=index, td_error=td_error, batch_size=[len(index)]))


def feed(rb, rng: np.random.Generator, rounds: int = 4, batch: int = 6):
    """Writes and TD-error updates through TorchRL's API, identical for every sampler.

    The updated slots are drawn here (not sampled), so that every sampler sees the same ones.
    """
    start = 0
    for _ in range(rounds):
        rb.extend(data(batch, start))
        start += batch
        td_update(rb, torch.as_tensor(rng.integers(0, len(rb), size=8)), rng)


# ---------------------------------------------------------------------- PER's law
class TestPERLaw:
    def test_probabilities_match(self):
        """The same writes and TD errors give the same distribution (incl. wrap-around)."""
        rbs = {kind: make_rb(kind, 16)[0] for kind in KINDS}
        for kind, rb in rbs.items():
            feed(rb, np.random.default_rng(1), rounds=5)  # 30 writes into 16 slots
        n = len(rbs["per"])
        assert n == len(rbs["vlm"]) == 16
        np.testing.assert_allclose(
            probabilities(rbs["vlm"].sampler, n), probabilities(rbs["per"].sampler, n), rtol=1e-5
        )

    def test_new_slots_get_the_largest_td_priority(self):
        rbs = {kind: make_rb(kind, 8)[0] for kind in KINDS}
        for rb in rbs.values():
            rb.extend(data(4))
            rb.update_priority(torch.tensor([0, 1]), torch.tensor([5.0, 0.5]))
            rb.extend(data(2, 4))  # slots 4, 5 get priority 5
        np.testing.assert_allclose(
            probabilities(rbs["vlm"].sampler, 6), probabilities(rbs["per"].sampler, 6), rtol=1e-5
        )
        q = probabilities(rbs["vlm"].sampler, 6)
        assert q[4] == pytest.approx(q[0]) and q[4] > q[2]

    def test_importance_weights_match(self):
        rb_per, per = make_rb("per", 16)
        rb_vlm, vlm = make_rb("vlm", 16)
        for rb in (rb_per, rb_vlm):
            feed(rb, np.random.default_rng(2), rounds=2)
        n = len(rb_vlm)
        leaves = np.asarray([per._sum_tree[i] for i in range(n)], dtype=np.float64)
        index, info = vlm.sample(rb_vlm.storage, 64)
        expected = (leaves[index.numpy()] / leaves.min()) ** -BETA
        np.testing.assert_allclose(info["priority_weight"].numpy(), expected, rtol=1e-4)


# ---------------------------------------------------------------------- writers
@pytest.mark.parametrize("kind", KINDS)
class TestWriters:
    def test_round_robin_wraps(self, kind):
        rb, sampler = make_rb(kind, 6, writer=RoundRobinWriter())
        rb.extend(data(4))
        rb.add(TensorDict(obs=torch.tensor(4.0), batch_size=[]))
        index = rb.extend(data(3, 5))  # 5, 0, 1
        assert index.tolist() == [5, 0, 1]
        assert len(rb) == 6
        assert rb.storage[:]["obs"].tolist() == [6.0, 7.0, 2.0, 3.0, 4.0, 5.0]
        sample = rb.sample(64)
        assert (sample["obs"] == rb.storage[sample["index"]]["obs"]).all()
        if kind == "vlm":
            assert sampler.generations(torch.arange(6)).tolist() == [2, 2, 1, 1, 1, 1]
            assert sampler.stats()["num_filled"] == 6

    def test_max_value_writer_skips_unwritten_rows(self, kind):
        """Rows TensorDictMaxValueWriter did not write come back as -1 and are skipped."""
        rb, sampler = make_rb(kind, 4, writer=TensorDictMaxValueWriter(rank_key="reward"))
        first = rb.extend(data(4, reward=torch.tensor([1.0, 2.0, 3.0, 4.0])))
        assert first.tolist() == [0, 1, 2, 3]
        if kind == "vlm":
            sampler.update_scores(first, torch.tensor([0.9, 0.8, 0.7, 0.6]), sampler.generations(first))
        # only the 5.0 row beats the current minimum (slot 0, reward 1.0)
        index = rb.extend(data(4, 10, reward=torch.tensor([0.0, 5.0, 0.5, 0.0])))
        assert index.tolist() == [-1, 0, -1, -1]
        assert rb.storage[:]["obs"].tolist() == [11.0, 1.0, 2.0, 3.0]
        sample = rb.sample(32)
        assert (sample["obs"] == rb.storage[sample["index"]]["obs"]).all()
        if kind == "vlm":
            # the replaced slot has a new generation and no score; the others are untouched
            assert sampler.generations(torch.arange(4)).tolist() == [2, 1, 1, 1]
            scores = sampler.scores(torch.arange(4))
            assert torch.isnan(scores[0]) and scores[1:].tolist() == pytest.approx([0.8, 0.7, 0.6])
        # priorities of a sample can be written back as usual
        sample.set("td_error", torch.rand(len(sample)))
        rb.update_tensordict_priority(sample)


def test_storage_larger_than_sampler_raises_after_recording_what_fits():
    sampler = VLMPrioritizedSampler(4)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(6), sampler=sampler)
    with pytest.raises(ValueError, match="max_capacity=4 .*storage holds 6"):
        rb.extend(data(6))
    assert sampler.generations(torch.arange(4)).tolist() == [1, 1, 1, 1]


# ---------------------------------------------------------------------- storages
STORAGES = {
    "tensor": lambda n, tmp: LazyTensorStorage(n),
    "memmap": lambda n, tmp: LazyMemmapStorage(n, scratch_dir=tmp),
    "list": lambda n, tmp: ListStorage(n),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("storage", list(STORAGES))
def test_storages(kind, storage, tmp_path):
    rb, sampler = make_rb(kind, 10, storage=STORAGES[storage](10, tmp_path))
    rb.extend(data(7))
    rb.extend(data(5, 7))  # wraps: slots 7, 8, 9, 0, 1
    assert len(rb) == 10
    sample = rb.sample(32)
    expected = torch.stack([rb.storage[int(i)]["obs"] for i in sample["index"]])
    assert (sample["obs"] == expected).all()
    rb.update_priority(sample["index"], torch.rand(32))
    assert len(rb.sample(8)) == 8
    if kind == "vlm":
        assert sampler.stats()["num_filled"] == 10


class TestNdim2Storage:
    """``LazyTensorStorage(N, ndim=2)`` extended with ``[envs, T]`` batches (stored time-major)."""

    ENVS, T = 2, 4

    def batch(self, start: int = 0) -> TensorDict:
        obs = torch.arange(start, start + self.ENVS * self.T, dtype=torch.float32).reshape(self.ENVS, self.T)
        return TensorDict(obs=obs, batch_size=[self.ENVS, self.T])

    def make(self, kind, capacity: int = 20):
        return make_rb(kind, capacity, storage=LazyTensorStorage(capacity, ndim=2))

    @pytest.mark.parametrize("kind", KINDS)
    def test_every_write_is_recorded(self, kind):
        rb, sampler = self.make(kind)
        index = rb.extend(self.batch())
        assert index.shape == (8, 2) and len(rb) == 8
        if kind == "vlm":
            assert sampler.stats()["num_filled"] == 8
            assert sampler.generations(index).tolist() == [1] * 8
        for k in range(1, 4):  # 32 writes into 20 slots
            rb.extend(self.batch(8 * k))
        assert len(rb) == 20
        if kind == "vlm":
            assert sampler.stats()["num_filled"] == 20
            # 16 storage rows of 2: rows 0..5 were written twice
            assert sampler.generations(index).tolist() == [2] * 8

    @pytest.mark.parametrize("kind", KINDS)
    def test_sample_returns_coordinates(self, kind):
        rb, _ = self.make(kind)
        rb.extend(self.batch())
        rb.extend(self.batch(100))
        sample = rb.sample(32)
        assert sample["index"].shape == (32, 2)
        stored = rb.storage[tuple(sample["index"].unbind(-1))]["obs"]
        assert (sample["obs"] == stored).all()
        # a plain ReplayBuffer hands out the tuple of coordinate tensors, as PER does
        plain = ReplayBuffer(storage=LazyTensorStorage(20, ndim=2), sampler=make_sampler(kind, 20), batch_size=5)
        plain.extend(self.batch())
        _, info = plain.sample(return_info=True)
        assert isinstance(info["index"], tuple) and len(info["index"]) == 2

    def test_priorities_follow_pers_law(self):
        """update_tensordict_priority with [B, 2] coordinates hits the same slots as in PER."""
        rbs = {k: self.make(k)[0] for k in KINDS}
        for rb in rbs.values():
            rng = np.random.default_rng(3)
            for k in range(3):
                rb.extend(self.batch(8 * k))
                rows = rng.integers(0, len(rb) // self.ENVS, size=8)
                envs = rng.integers(0, self.ENVS, size=8)
                td_update(rb, torch.as_tensor(np.stack([rows, envs], -1)), rng, width=0)
        n = len(rbs["per"])
        np.testing.assert_allclose(
            probabilities(rbs["vlm"].sampler, n), probabilities(rbs["per"].sampler, n), rtol=1e-5
        )

    def test_scores_by_coordinates(self):
        rb, sampler = self.make("vlm")
        index = rb.extend(self.batch())
        generation = sampler.generations(index)
        scores = torch.linspace(0.0, 1.0, 8)
        assert sampler.update_scores(index, scores, generation) == 8
        assert sampler.scores(index).tolist() == pytest.approx(scores.tolist())
        # rb.extend's coordinates are in storage order (time-major): look the rows up
        stored_obs = rb.storage[tuple(index.unbind(-1))]["obs"]
        assert stored_obs.tolist() == self.batch()["obs"].T.flatten().tolist()
        sample = rb.sample(16)  # the stacked [B, 2] index of a batch reads the same slots
        by_obs = dict(zip(stored_obs.tolist(), scores.tolist()))
        expected = [by_obs[o] for o in sample["obs"].tolist()]
        assert sampler.scores(sample["index"]).tolist() == pytest.approx(expected)
        for k in range(1, 3):  # the buffer wraps over the scored rows
            rb.extend(self.batch(8 * k))
        assert sampler.update_scores(index, scores, generation) == 4  # 4 rows overwritten: stale
        assert sampler.stats()["stale_drops"] == 4

    def test_checkpoint_keeps_the_coordinates(self, tmp_path):
        """A loaded sampler reads [M, 2] coordinates before its first write or sample."""
        rb, sampler = self.make("vlm")
        index = rb.extend(self.batch())
        sampler.update_scores(index[:3], torch.tensor([0.1, 0.2, 0.3]))
        rb.dumps(tmp_path / "ckpt")
        for restored in (pickle.loads(pickle.dumps(sampler)), None):
            if restored is None:
                other, restored = self.make("vlm")
                other.loads(tmp_path / "ckpt")
            assert restored.scores(index[:3]).tolist() == pytest.approx([0.1, 0.2, 0.3])
        flat = make_rb("vlm", 20)[1]  # a 1-D storage's checkpoint has no such entry
        assert "storage_trailing_shape" not in flat.state_dict()


# ---------------------------------------------------------------------- checkpointers
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("storage", ["tensor", "memmap"])
def test_dumps_loads(kind, storage, tmp_path):
    rb, sampler = make_rb(kind, 12, storage=STORAGES[storage](12, tmp_path / "scratch"))
    feed(rb, np.random.default_rng(4), rounds=3)
    if kind == "vlm":
        sampler.update_scores(torch.arange(5), torch.full((5,), 0.9))
    rb.dumps(tmp_path / "ckpt")
    other, other_sampler = make_rb(kind, 12, storage=STORAGES[storage](12, tmp_path / "scratch2"))
    other.loads(tmp_path / "ckpt")
    assert len(other) == len(rb) == 12
    assert (other.storage[:]["obs"] == rb.storage[:]["obs"]).all()
    np.testing.assert_allclose(probabilities(other_sampler, 12), probabilities(sampler, 12), rtol=1e-6)
    if kind == "vlm":
        np.testing.assert_array_equal(other_sampler.scores(torch.arange(12)), sampler.scores(torch.arange(12)))
    other.extend(data(3, 100))  # and the loaded buffer goes on
    assert len(other.sample(8)) == 8


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_round_trip(kind):
    rb, sampler = make_rb(kind, 12)
    feed(rb, np.random.default_rng(5), rounds=2)
    other, other_sampler = make_rb(kind, 12)
    other.load_state_dict(rb.state_dict())
    np.testing.assert_allclose(probabilities(other_sampler, 12), probabilities(sampler, 12), rtol=1e-6)


# ---------------------------------------------------------------------- sharing between processes
def _noop(*args) -> None:
    return None


@pytest.mark.parametrize("kind", KINDS)
class TestSharing:
    def test_pickling_for_a_spawned_process_is_refused(self, kind):
        sampler = make_sampler(kind, 8)
        multiprocessing.context.set_spawning_popen(object())
        try:
            with pytest.raises(RuntimeError, match="cannot be shared between processes"):
                pickle.dumps(sampler)
        finally:
            multiprocessing.context.set_spawning_popen(None)
        assert pickle.loads(pickle.dumps(sampler)).max_size == 8  # a plain copy still works

    def test_spawn_with_shared_buffer_is_refused(self, kind):
        """rb.share() then a spawned process: refused while pickling, before any child starts."""
        rb, _ = make_rb(kind, 8)
        rb.extend(data(4))
        rb.share()
        process = multiprocessing.get_context("spawn").Process(target=_noop, args=(rb,))
        with pytest.raises(RuntimeError, match="cannot be shared between processes"):
            process.start()
        assert process.pid is None


# ---------------------------------------------------------------------- properties and schedulers
@pytest.mark.parametrize("kind", KINDS)
def test_device(kind):
    assert make_sampler(kind, 8).device == torch.device("cpu")


@pytest.mark.parametrize("kind", KINDS)
def test_tensor_alpha_beta_and_schedulers(kind):
    sampler = make_sampler(kind, 8, alpha=torch.tensor(0.6), beta=torch.tensor(0.4))
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), sampler=sampler, batch_size=4)
    rb.extend(data(8))
    sampler.beta = torch.tensor(0.2)  # a scheduler built on a tensor start value steps in tensors
    scheduler = LinearScheduler(rb, "beta", final_value=1.0, num_steps=4)
    for _ in range(4):
        scheduler.step()
        rb.sample()
    assert float(sampler.beta) == pytest.approx(1.0)
    if kind == "vlm":
        assert type(sampler.beta) is float and type(sampler.alpha) is float
        sampler.alpha = torch.tensor(0.5)
        assert sampler.alpha == 0.5


# ---------------------------------------------------------------------- collectors
@pytest.mark.parametrize("kind", KINDS)
def test_collector_with_replay_buffer(kind):
    """``Collector(..., replay_buffer=rb)`` writes through rb.extend; every write is tracked."""
    pytest.importorskip("gymnasium")
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv

    rb, sampler = make_rb(kind, 64)
    env = GymEnv("CartPole-v1")
    collector = Collector(env, None, frames_per_batch=16, total_frames=48, replay_buffer=rb)
    for _ in collector:
        pass
    collector.shutdown()
    assert len(rb) == 48
    sample = rb.sample(16)
    assert ("next", "reward") in sample.keys(True)
    if kind == "vlm":
        assert sampler.stats()["num_filled"] == 48


# ---------------------------------------------------------------------- make_vlm_replay_buffer
def _sigmoid_first_obs(clips):  # module level: a scorer that pickles
    return torch.sigmoid(clips["observation"][:, 0, 0].float())


def _first_obs_scorer():
    """A clip's score is sigmoid(first observation entry of its first step): checks which slot got which clip."""
    from vlmrb_torchrl.scorers import CallableScorer

    return CallableScorer(_sigmoid_first_obs, in_keys=["observation"])


def _vlm_rb(capacity=64, storage=None, scorer=None, **kwargs):
    from vlmrb_torchrl import ClipSpec, make_vlm_replay_buffer

    return make_vlm_replay_buffer(capacity, scorer or _first_obs_scorer(), clip_spec=ClipSpec(clip_len=3),
                                  storage=storage, batch_size=8, generator=torch.Generator().manual_seed(0), **kwargs)


def _collector_batch(envs: int, steps: int, start: int = 0) -> TensorDict:
    obs = torch.arange(start, start + envs * steps, dtype=torch.float32).reshape(envs, steps, 1)
    return TensorDict({"observation": obs, ("collector", "traj_ids"): torch.arange(envs)[:, None].expand(envs, steps),
                       ("next", "done"): torch.zeros(envs, steps, 1, dtype=torch.bool)}, [envs, steps])


def _stored_scores_match(rb, slots, observations):
    """Every scored slot holds sigmoid(its own stored observation): scores went to the right slots."""
    scores = rb.sampler.scores(slots)
    assert not scores.isnan().all()
    scored = ~scores.isnan()
    torch.testing.assert_close(scores[scored], torch.sigmoid(observations.reshape(-1)[scored]))


class TestVLMReplayBuffer:
    def test_pickles_and_deep_copies_with_a_new_scorer_worker(self):
        import copy

        rb = _vlm_rb(on_scorer_error="skip", max_consecutive_scorer_errors=3)
        rb.extend(_collector_batch(2, 5))
        rb.async_scorer.drain(10)
        for clone in (pickle.loads(pickle.dumps(rb)), copy.deepcopy(rb)):
            try:
                worker = clone.async_scorer
                assert worker is not rb.async_scorer and worker._thread.is_alive()
                assert worker.sampler is clone.sampler and worker.transform is clone.scoring_transform
                assert (worker.on_error, worker.max_consecutive_errors) == ("skip", 3)
                torch.testing.assert_close(clone.sampler.scores(torch.arange(10)), rb.sampler.scores(torch.arange(10)),
                                           equal_nan=True)
                index = clone.extend(_collector_batch(2, 5, start=10))  # the copy scores into its own sampler
                clone.close()
                _stored_scores_match(clone, index, clone[index]["observation"])
                assert rb.sampler.scores(index).isnan().all()
            finally:
                clone.close()
        assert len(rb) == 10
        rb.close()

    @pytest.mark.parametrize("sync", [True, False])
    def test_empty_drops_the_pending_steps_of_the_clip_stream(self, sync):
        """After ``empty()`` a trajectory id seen before starts new clips: no clip joins rows from before."""
        from vlmrb_torchrl.scorers import CallableScorer

        rb = _vlm_rb(scorer=CallableScorer(_tick_score, in_keys=["observation"]), shared=not sync, sync=sync)
        rb.extend(_collector_batch(2, 5))  # trajectories 0 and 1 end with steps their clips still wait for
        rb.vlm_stats()  # (sync=False: the owner takes the rows in)
        rb.empty()
        rb.extend(_collector_batch(1, 4, start=50))  # trajectory 0 again
        rb.close()  # _tick_score fails on a clip [3, 4, 50]
        assert rb.prioritized_sampler.stats()["fraction_scored"] == 1.0
        torch.testing.assert_close(rb.prioritized_sampler.scores(torch.arange(4)), torch.tensor([0.5, 0.51, 0.52, 0.53]))

    def test_a_spawned_process_is_refused_like_per(self):
        """rb.share() then a spawned process: refused while pickling, before any child starts (as for PER)."""
        rb = _vlm_rb()
        rb.extend(_collector_batch(2, 4))
        rb.share()
        process = multiprocessing.get_context("spawn").Process(target=_noop, args=(rb,))
        try:
            with pytest.raises(RuntimeError, match="cannot be shared between processes.*make_vlm_replay_buffer\\(\\.\\.\\., "
                                                   "shared=True, sync=False\\)"):
                process.start()
            assert process.pid is None
        finally:
            rb.close()

    def test_collector_storing_through_add_feeds_scoring(self):
        """``Collector(..., replay_buffer=rb, extend_buffer=False)`` stores each step with rb.add()."""
        pytest.importorskip("gymnasium")
        from torchrl.collectors import Collector
        from torchrl.envs import GymEnv

        rb = _vlm_rb()
        collector = Collector(GymEnv("CartPole-v1"), None, frames_per_batch=16, total_frames=48, replay_buffer=rb,
                              extend_buffer=False)
        for _ in collector:
            pass
        collector.shutdown()
        rb.close()  # flushes the tail clips
        assert len(rb) == 48 and rb.sampler.stats()["fraction_scored"] == 1.0
        _stored_scores_match(rb, torch.arange(48), rb[:48]["observation"][:, 0])

    def test_add_scores_like_extend(self):
        batch = _collector_batch(1, 7)[0]
        by_add, by_extend = _vlm_rb(), _vlm_rb()
        for step in batch.unbind(0):
            assert isinstance(by_add.add(step), int)
        by_extend.extend(batch)
        by_add.close(), by_extend.close()
        torch.testing.assert_close(by_add.sampler.scores(torch.arange(7)), by_extend.sampler.scores(torch.arange(7)))
        assert "observation" in by_add[0].keys()

    def test_add_refuses_batches_and_ndim2_storages(self):
        rb = _vlm_rb()
        with pytest.raises(ValueError, match=r"add\(\) stores one transition \(batch_size=\[\]\), got batch_size=\[2\]"):
            rb.add(_collector_batch(2, 1)[:, 0])
        rb.close()
        rb = _vlm_rb(storage=LazyTensorStorage(64, ndim=2))
        rb.extend(_collector_batch(2, 4))
        with pytest.raises(ValueError, match=r"ndim=2 .*use extend\(\) with \[envs, T\] batches"):
            rb.add(_collector_batch(2, 1)[0, 0])
        rb.close()

    def test_ndim2_storage_end_to_end(self):
        """``[envs, T]`` batches into ``LazyTensorStorage(N, ndim=2)``: stored as TorchRL lays them out (time-major),
        each transition's clip score lands on its own slot, the same scores as a flat buffer, through a wrap-around."""
        flat, grid = _vlm_rb(24), _vlm_rb(24, storage=LazyTensorStorage(24, ndim=2))
        for start in (0, 16, 32):  # 48 transitions into 24 slots
            batch = _collector_batch(2, 8, start=start)
            flat_index, grid_index = flat.extend(batch), grid.extend(batch)
        flat.close(), grid.close()
        assert grid._storage.shape == torch.Size([12, 2]) and grid_index.shape == (16, 2)
        slots = grid.sampler.slots(grid_index)
        stored = grid._storage._storage["observation"][grid_index[:, 0], grid_index[:, 1]]
        _stored_scores_match(grid, slots, stored)
        # the same transitions (by observation) have the same scores in both buffers
        by_obs = dict(zip(flat[flat_index]["observation"].reshape(-1).tolist(), flat.sampler.scores(flat_index).tolist()))
        grid_scores = grid.sampler.scores(slots).tolist()
        assert [by_obs[o] for o in stored.reshape(-1).tolist()] == pytest.approx(grid_scores, nan_ok=True)
        assert grid.sampler.stats()["num_filled"] == 24
        sample = grid.sample()
        assert sample.batch_size == torch.Size([8]) and sample["index"].shape == (8, 2)

    def test_ndim2_storage_with_a_batched_collector(self):
        pytest.importorskip("gymnasium")
        from torchrl.collectors import Collector
        from torchrl.envs import GymEnv, SerialEnv

        rb = _vlm_rb(storage=LazyTensorStorage(64, ndim=2))
        collector = Collector(SerialEnv(2, lambda: GymEnv("CartPole-v1")), None, frames_per_batch=16, total_frames=48,
                              replay_buffer=rb)
        for _ in collector:
            pass
        collector.shutdown()
        rb.close()
        assert len(rb) == 48 and rb._storage.shape == torch.Size([24, 2])  # 24 time steps x 2 envs
        assert rb.sampler.stats()["fraction_scored"] == 1.0
        _stored_scores_match(rb, torch.arange(48), rb._storage._storage["observation"][:24, :, 0])


def _write_from_child(rb, start: int) -> None:
    """A writer process: what a collector's worker does with ``replay_buffer=rb``."""
    rb.extend(_collector_batch(2, 5, start=start))


class TestSharedSyncFalse:
    """TorchRL's multi-process pattern, ``shared=True, sync=False`` (as ``TensorDictPrioritizedReplayBuffer``):
    writers in other processes write the shared storage; the owner scores and samples."""

    def test_a_writer_copy_holds_storage_only_and_the_owner_catches_up(self):
        rb = _vlm_rb(shared=True, sync=False)
        rb.extend(_collector_batch(2, 5))  # the owner writes too (and initialises the shared storage)
        multiprocessing.context.set_spawning_popen(object())  # what pickling for a spawned process sees
        try:
            state = rb.__getstate__()  # (the shared locks and counters pickle only into a real child)
        finally:
            multiprocessing.context.set_spawning_popen(None)
        writer = object.__new__(type(rb))
        writer.__setstate__(state)
        assert writer.async_scorer is None and writer.clip_stream is None
        with pytest.raises(RuntimeError, match="sent to another process, which writes the shared storage only"):
            writer.sample()
        writer.close()  # nothing to close there
        # the owner's view: rows written by anyone are scored once it looks (sample, flush_clips, vlm_stats)
        assert rb.prioritized_sampler.stats()["num_filled"] == 0  # not seen yet
        rb.extend(_collector_batch(2, 5, start=10))
        batch = rb.sample()
        assert batch.batch_size == torch.Size([8]) and rb.prioritized_sampler.stats()["num_filled"] == 20
        rb.close()  # flushes, drains
        assert rb.prioritized_sampler.stats()["fraction_scored"] == 1.0
        _stored_scores_match_prioritized(rb, torch.arange(20), rb[torch.arange(20)]["observation"])
        sample = rb.sample()
        sample["td_error"] = torch.rand(8)
        rb.update_tensordict_priority(sample)  # routed to the owner's sampler
        assert not isinstance(rb.sampler, VLMPrioritizedSampler)  # every process may hold rb.sampler

    def test_clips_from_and_ndim2_are_refused(self):
        rb = _vlm_rb(shared=True, sync=False)
        with pytest.raises(ValueError, match="clips_from= is not available"):
            rb.extend(_collector_batch(2, 5), clips_from=_collector_batch(2, 5))
        rb.close()
        from torchrl.data import LazyTensorStorage

        with pytest.raises(ValueError, match="sync=False takes a 1-D storage"):
            _vlm_rb(storage=LazyTensorStorage(64, ndim=2), sync=False)

    @pytest.mark.slow
    def test_writers_in_spawned_processes(self):
        rb = _vlm_rb(shared=True, sync=False)
        rb.extend(_collector_batch(2, 5))  # initialises the shared storage here, before the children get it
        context = multiprocessing.get_context("spawn")
        children = [context.Process(target=_write_from_child, args=(rb, start)) for start in (100, 200)]
        for child in children:
            child.start()
        for child in children:
            child.join(300)
            assert child.exitcode == 0
        assert len(rb) == 30 and rb.write_count == 30
        rb.sample()
        rb.close()
        assert rb.prioritized_sampler.stats()["num_filled"] == 30
        assert rb.prioritized_sampler.stats()["fraction_scored"] == 1.0
        _stored_scores_match_prioritized(rb, torch.arange(30), rb[torch.arange(30)]["observation"])


def _stored_scores_match_prioritized(rb, slots, observations):
    scores = rb.prioritized_sampler.scores(slots)
    scored = ~scores.isnan()
    assert scored.any()
    torch.testing.assert_close(scores[scored], torch.sigmoid(observations.reshape(-1)[scored]))


class _TickEnv(EnvBase):
    """A one-entry env whose observation encodes the step: ``offset, offset + 1, ...`` within an episode of
    ``episode_len`` steps, one tick skipped at each reset, so every stored row is unique and a clip whose rows
    are not consecutive steps of one episode shows a gap. Picklable (no frames, no gym)."""

    def __init__(self, offset: int = 0, episode_len: int = 5) -> None:
        super().__init__(batch_size=[])
        self.observation_spec = Composite(observation=Unbounded((1,), dtype=torch.float32))
        self.action_spec = Categorical(2)
        self.reward_spec = Unbounded((1,))
        self._tick, self._t, self._episode_len = offset - 1, 0, episode_len

    def _reset(self, tensordict):
        self._tick, self._t = self._tick + 1, 0
        return TensorDict(observation=torch.tensor([float(self._tick)]))

    def _step(self, tensordict):
        self._tick, self._t = self._tick + 1, self._t + 1
        done = torch.tensor([self._t >= self._episode_len])
        return TensorDict(observation=torch.tensor([float(self._tick)]), reward=torch.zeros(1), done=done,
                          terminated=done.clone())

    def _set_seed(self, seed):
        return seed


def _tick_score(clips):
    """A clip's score is (first observation % 100) / 100; a clip whose steps are not consecutive ticks (rows of
    two workers or two episodes mixed) fails the scorer, which fails the test at ``rb.close()``."""
    obs, mask = clips["observation"][..., 0], clips["mask"]
    if not (obs.diff(dim=1)[mask[:, 1:]] == 1).all():
        raise ValueError(f"a clip mixes steps that do not follow each other: {obs.tolist()}")
    return (obs[:, 0] % 100) / 100


def _tick_rb(capacity: int = 256):
    from vlmrb_torchrl.scorers import CallableScorer

    return _vlm_rb(capacity, scorer=CallableScorer(_tick_score, in_keys=["observation"]), shared=True, sync=False)


def _check_every_row_scored(rb) -> None:
    """After ``rb.close()``: every stored row is in the VLM sampler, scored, with f(its own stored row)."""
    slots = torch.arange(len(rb))
    obs = rb[slots]["observation"][:, 0]
    assert obs.unique().numel() == len(rb)  # each step written once (the envs' ticks are unique)
    assert rb.prioritized_sampler.stats()["num_filled"] == len(rb)
    assert rb.prioritized_sampler.stats()["fraction_scored"] == 1.0
    torch.testing.assert_close(rb.prioritized_sampler.scores(slots), (obs % 100) / 100)


def _check_sample(rb, *, writers_stopped: bool = True) -> None:
    sample = rb.sample()
    assert sample.batch_size == torch.Size([8]) and ((sample["index"] >= 0) & (sample["index"] < len(rb))).all()
    if writers_stopped:  # (else a worker may have written over the slots since)
        torch.testing.assert_close(sample["observation"], rb[sample["index"]]["observation"])


class TestMultiProcessCollectors:
    """TorchRL's multi-process collectors writing a ``shared=True, sync=False`` VLM buffer (``replay_buffer=rb``):
    the workers write the shared storage, the learner scores every row and samples."""

    def test_the_collectors_storage_init_and_the_generator_reach_the_owners_sampler(self):
        """What ``MultiCollector`` does with an uninitialised storage (one fake row written, then ``empty()``,
        ``torchrl/collectors/_multi_base.py:1056``) leaves nothing for the learner to score; the buffer's
        generator draws the VLM sampler's samples."""
        samples = []
        for _ in range(2):
            rb = _tick_rb(64)
            rb.extend(_collector_batch(1, 1).reshape(-1))  # the collector's fake row
            rb.empty()
            assert rb.prioritized_sampler.stats()["num_filled"] == 0 and rb.write_count == 0
            rb.extend(_collector_batch(2, 5, start=10))
            samples.append(rb.sample()["observation"])
            assert rb.prioritized_sampler.stats()["num_filled"] == 10
            rb.empty()  # after the learner took the rows in: the VLM sampler forgets them too
            rb.extend(_collector_batch(1, 4, start=50))
            assert set(rb.sample()["observation"].reshape(-1).tolist()) <= {50.0, 51.0, 52.0, 53.0}
            assert rb.prioritized_sampler.stats()["num_filled"] == 4
            rb.close()
        torch.testing.assert_close(samples[0], samples[1])  # same seed, same draws (the global RNG aside)

    def test_a_writer_copy_adds_steps_without_priorities(self):
        """What a worker of a collector with ``extend_buffer=False`` calls for each step: ``add``, which stores
        the step only (TorchRL's ``TensorDictReplayBuffer.add`` would update its priority, which a writer
        process cannot: it has no prioritized sampler)."""
        rb = _tick_rb(64)
        rb.extend(_collector_batch(1, 2))  # initialises the storage
        multiprocessing.context.set_spawning_popen(object())  # what pickling for a spawned process sees
        try:
            state = rb.__getstate__()
        finally:
            multiprocessing.context.set_spawning_popen(None)
        writer = object.__new__(type(rb))
        writer.__setstate__(state)
        steps = _collector_batch(1, 4, start=20).reshape(-1)
        steps["collector", "traj_ids"] = torch.ones(4, dtype=torch.long)  # a new trajectory
        assert [writer.add(step) for step in steps.unbind(0)] == [2, 3, 4, 5]
        sample = rb.sample()  # the owner takes the steps in
        assert rb.prioritized_sampler.stats()["num_filled"] == 6
        rb.update_tensordict_priority(sample)  # no "td_error" entry: the default priority, as TorchRL's
        writer.empty()  # emptied in another process: the owner forgets what it took in, when it next looks
        writer.add(_collector_batch(1, 1, start=30).reshape(-1)[0])
        rb.sample()
        assert rb.prioritized_sampler.stats()["num_filled"] == len(rb) == 1
        rb.close()
        _check_every_row_scored(rb)

    @pytest.mark.slow  # spawns two collector workers per case
    @pytest.mark.parametrize("collector, extend_buffer", [("MultiSyncCollector", True),
                                                          ("MultiSyncCollector", False),
                                                          ("MultiAsyncCollector", True)])
    def test_the_workers_write_and_the_learner_scores_every_row(self, collector, extend_buffer):
        import functools

        import torchrl.collectors
        from torchrl.envs.utils import RandomPolicy

        rb = _tick_rb()
        envs = [functools.partial(_TickEnv, offset=0), functools.partial(_TickEnv, offset=1000)]
        collector = getattr(torchrl.collectors, collector)(
            envs, RandomPolicy(_TickEnv().action_spec), replay_buffer=rb, frames_per_batch=16, total_frames=96,
            extend_buffer=extend_buffer)
        frames = 0
        try:
            for batch in collector:
                assert batch is None  # the workers wrote it
                frames += 16
                if isinstance(collector, torchrl.collectors.MultiSyncCollector):
                    assert rb.write_count == len(rb) == frames  # both workers' halves, nothing else
                else:
                    assert rb.write_count >= frames  # the other worker may be a batch ahead
                _check_sample(rb, writers_stopped=isinstance(collector, torchrl.collectors.MultiSyncCollector))
        finally:
            collector.shutdown()
        assert all(not proc.is_alive() for proc in collector.procs)
        assert frames == 96 and len(rb) == rb.write_count >= 96
        rb.close()  # flushes the tails, scores every clip
        _check_every_row_scored(rb)
        _check_sample(rb)
        both = rb[torch.arange(len(rb))]["observation"]
        assert (both < 1000).any() and (both >= 1000).any()

    @pytest.mark.slow  # spawns two collector workers
    def test_started_workers_write_while_the_learner_samples(self):
        """``collector.start()``: the workers write without waiting for the learner, which samples meanwhile;
        the buffer wraps (capacity 48) and rows overwritten before the learner saw them are not scored."""
        import functools

        from torchrl.collectors import MultiAsyncCollector
        from torchrl.envs.utils import RandomPolicy

        rb = _tick_rb(48)
        envs = [functools.partial(_TickEnv, offset=0), functools.partial(_TickEnv, offset=1000)]
        collector = MultiAsyncCollector(envs, RandomPolicy(_TickEnv().action_spec), replay_buffer=rb,
                                        frames_per_batch=8, total_frames=-1)
        try:
            collector.start()
            deadline = time.monotonic() + 120
            while rb.write_count < 200 and time.monotonic() < deadline:
                if len(rb) >= 8:
                    _check_sample(rb, writers_stopped=False)
            assert rb.write_count >= 200
        finally:
            collector.async_shutdown(timeout=60)
        assert all(not proc.is_alive() for proc in collector.procs)
        written = rb.write_count
        rb.close()
        assert len(rb) == 48 and rb.write_count == written  # nothing written after the shutdown
        _check_every_row_scored(rb)
