"""Tests for AsyncScorer and make_vlm_replay_buffer: write-back, staleness, errors, shutdown."""

from __future__ import annotations

import multiprocessing
import threading
import time
import warnings

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from vlmrb_torchrl import (
    AsyncScorer,
    ClipSpec,
    ClipStream,
    VLMPrioritizedSampler,
    VLMScoreTransform,
    make_vlm_replay_buffer,
)


class MaxObsScorer:
    """Deterministic: a clip's score is max(obs over its real steps) / 1000."""

    prompt = "max obs"
    in_keys = ["obs", "mask"]
    provenance = {"backend": "test", "model": "max-obs"}

    def __init__(self, delay: float = 0.0, fail_after: int | None = None):
        self.delay = delay
        self.fail_after = fail_after
        self.calls = 0

    def score(self, clips):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise ValueError("scorer exploded")
        if self.delay:
            time.sleep(self.delay)
        obs = clips["obs"].float().masked_fill(~clips["mask"], -1.0)
        return obs.amax(1) / 1000


class FramesScorer(MaxObsScorer):
    """Uses the frames: score = max(first pixel over real steps) / 255."""

    in_keys = ["pixels", "mask"]

    def score(self, clips):
        px = clips["pixels"][..., 0, 0, 0].float().masked_fill(~clips["mask"], 0.0)
        return px.amax(1) / 255


def make_batches(num_envs: int, steps: int, seed: int = 0, traj_offset: int = 0):
    """[E, T] collector-like batches: obs = a global counter, random episode ends."""
    g = torch.Generator().manual_seed(seed)
    traj = torch.arange(num_envs) + traj_offset
    next_traj = num_envs + traj_offset
    obs, trajs, dones = [], [], []
    counter = 0
    for _ in range(steps):
        done = torch.rand(num_envs, generator=g) < 0.08
        obs.append(torch.arange(counter, counter + num_envs))
        counter += num_envs
        trajs.append(traj.clone())
        dones.append(done)
        for e in torch.nonzero(done).flatten().tolist():
            traj[e] = next_traj
            next_traj += 1
    obs = torch.stack(obs, 1) % 1000
    return TensorDict({"obs": obs, ("collector", "traj_ids"): torch.stack(trajs, 1),
                       ("next", "done"): torch.stack(dones, 1)}, batch_size=[num_envs, steps])


def expected_start_scores(flat: TensorDict, clip_len: int) -> dict[int, float]:
    """Brute force: transition t of a trajectory gets max(obs[t : t + L]) / 1000 (flat order)."""
    out = {}
    trajs = flat["collector", "traj_ids"]
    for tid in trajs.unique().tolist():
        rows = torch.nonzero(trajs == tid).flatten()
        obs = flat["obs"][rows]
        for k, row in enumerate(rows.tolist()):
            out[row] = obs[k : k + clip_len].max().item() / 1000
    return out


def build(capacity=10_000, delay=0.0, fail_after=None, clip_len=5, **kwargs):
    scorer = MaxObsScorer(delay=delay, fail_after=fail_after)
    sampler = VLMPrioritizedSampler(capacity, threshold=None)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler)
    stream = ClipStream(ClipSpec(clip_len=clip_len), frame_key=None, extra_keys=["obs"])
    worker = AsyncScorer(VLMScoreTransform(scorer, clip_len=clip_len, in_keys=()), sampler, **kwargs)
    return rb, sampler, stream, worker, scorer


class TestConstruction:
    @pytest.mark.parametrize("kwargs, match", [
        ({"backend": "ray2"}, "AsyncScorer runs backend 'thread' or 'process', got backend='ray2'"),
        ({"on_full": "drop_newest"}, "on_full must be one of"),
        ({"max_pending": 0}, "max_pending must be an int >= 1"),
        ({"batch_size": -1}, "batch_size must be an int >= 1"),
    ])
    def test_bad_arguments(self, kwargs, match):
        sampler = VLMPrioritizedSampler(8)
        with pytest.raises(ValueError, match=match):
            AsyncScorer(VLMScoreTransform(MaxObsScorer(), clip_len=2, in_keys=()), sampler, **kwargs)

    def test_submit_type(self):
        rb, sampler, stream, worker, _ = build()
        with worker, pytest.raises(TypeError, match="submit takes a ClipBatch"):
            worker.submit(TensorDict({}, batch_size=[]))


@pytest.mark.parametrize("scorer_batch", [1, 7, 64])
def test_every_transition_gets_its_clip_score(scorer_batch):
    clip_len = 5
    rb, sampler, stream, worker, _ = build(clip_len=clip_len, batch_size=scorer_batch)
    data = make_batches(num_envs=4, steps=60)
    flat_all = []
    with worker:
        for chunk in data.split(13, dim=1):  # collector batches of 4 x 13
            flat = chunk.reshape(-1)
            index = rb.extend(flat)
            worker.submit(stream.push(flat, index, sampler.generations(index)))
            flat_all.append(flat)
        worker.submit(stream.flush())
        assert worker.drain(timeout=30)
    flat = torch.cat(flat_all)
    expected = expected_start_scores(flat, clip_len)
    got = sampler.scores(torch.arange(len(flat)))
    assert sampler.stats()["fraction_scored"] == 1.0
    np.testing.assert_allclose(got, [expected[i] for i in range(len(flat))], rtol=1e-6)
    stats = worker.stats()
    assert stats["scored"] == stats["submitted"] == len(flat) and stats["dropped"] == 0
    assert stats["backlog"] == 0


def test_wraparound_with_slow_scorer_drops_stale_scores():
    capacity, clip_len = 40, 4
    rb, sampler, stream, worker, scorer = build(capacity=capacity, delay=0.05, clip_len=clip_len, batch_size=8)
    data = make_batches(num_envs=2, steps=100, seed=1)
    chunks = [c.reshape(-1) for c in data.split(10, dim=1)]
    with worker:
        for flat in chunks:  # 200 transitions into 40 slots: wraps 5 times
            index = rb.extend(flat)
            worker.submit(stream.push(flat, index, sampler.generations(index)))
        worker.submit(stream.flush())
        worker.drain(timeout=60)
    assert sampler.stats()["stale_drops"] > 0
    written = torch.cat(chunks)  # write order; row r went to slot r % 40
    expected = expected_start_scores(written, clip_len)
    slots = np.nonzero(~np.isnan(sampler.scores(torch.arange(capacity)).numpy()))[0]
    assert len(slots) > 0
    for slot in slots:  # every score that landed belongs to the data now in its slot
        row = len(written) - capacity + slot  # 200 % 40 == 0: the last 40 rows fill slots 0..39
        assert rb.storage[int(slot)]["obs"] == written[row]["obs"]
        assert sampler.scores(int(slot)).item() == pytest.approx(expected[row])
    assert worker.stats()["scored"] == worker.stats()["submitted"]


def test_scorer_exception_is_reraised():
    rb, sampler, stream, worker, _ = build(fail_after=1, batch_size=4)
    data = make_batches(num_envs=2, steps=30).reshape(-1)
    index = rb.extend(data)
    worker.submit(stream.push(data, index, sampler.generations(index)))
    with pytest.raises(RuntimeError, match="worker failed") as info:
        worker.drain(timeout=10)
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(RuntimeError, match="worker failed"):
        worker.submit(stream.flush())
    with pytest.raises(RuntimeError, match="worker failed"):
        worker.close()
    assert not worker._thread.is_alive()


def test_drop_oldest_counts_dropped_clips():
    gate = threading.Event()

    class Gated(MaxObsScorer):
        def score(self, clips):
            gate.wait(10)
            return super().score(clips)

    sampler = VLMPrioritizedSampler(1000)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler)
    stream = ClipStream(ClipSpec(clip_len=3), frame_key=None, extra_keys=["obs"])
    worker = AsyncScorer(VLMScoreTransform(Gated(), clip_len=3, in_keys=()), sampler,
                         max_pending=10, batch_size=5)
    data = make_batches(1, 100).reshape(-1)
    index = rb.extend(data)
    worker.submit(stream.push(data, index, sampler.generations(index)))
    gate.set()
    worker.close()
    stats = worker.stats()
    assert stats["dropped"] > 0
    assert stats["scored"] + stats["dropped"] == stats["submitted"]
    assert stats["scored"] <= 10 + 5  # at most max_pending waiting + one batch in flight


def test_block_applies_back_pressure():
    started, release = threading.Event(), threading.Event()
    gated = GatedScorer(release, started)  # holds each call until release is set

    sampler = VLMPrioritizedSampler(1000)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler)
    stream = ClipStream(ClipSpec(clip_len=2), frame_key=None, extra_keys=["obs"])
    worker = AsyncScorer(VLMScoreTransform(gated, clip_len=2, in_keys=()), sampler,
                         max_pending=4, batch_size=4, on_full="block")
    data = make_batches(1, 40, seed=3).reshape(-1)
    index = rb.extend(data)
    clips = stream.push(data, index, sampler.generations(index))
    first, rest = clips.split(4)
    pieces = []
    while len(rest):
        head, rest = rest.split(2)
        pieces.append(head)

    worker.submit(first)
    assert started.wait(10)  # the worker holds these 4 clips in the gated scorer
    worker.submit(pieces[0])
    worker.submit(pieces[1])  # 4 waiting = max_pending: accepted without blocking
    assert worker.backlog == 8
    returned = threading.Event()

    def producer():
        for piece in pieces[2:]:
            worker.submit(piece)
        returned.set()

    thread = threading.Thread(target=producer)
    thread.start()
    # the queue is full and the scorer is held: submit cannot return until the gate opens
    assert not returned.wait(0.2)
    assert worker.backlog == 8 and worker.stats()["submitted"] == 8
    release.set()
    thread.join(10)
    worker.close()
    assert returned.is_set() and worker.stats()["dropped"] == 0
    assert worker.stats()["scored"] == worker.stats()["submitted"] == len(clips)


def _blocking_worker(scorer, *, max_pending: int, clip_len: int = 2, steps: int = 40):
    sampler = VLMPrioritizedSampler(1000)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler)
    stream = ClipStream(ClipSpec(clip_len=clip_len), frame_key=None, extra_keys=["obs"])
    worker = AsyncScorer(VLMScoreTransform(scorer, clip_len=clip_len, in_keys=()), sampler,
                         max_pending=max_pending, batch_size=4, on_full="block")
    data = make_batches(1, steps, seed=4).reshape(-1)
    index = rb.extend(data)
    return worker, sampler, stream.push(data, index, sampler.generations(index)), index


def test_block_never_drops_a_batch_larger_than_max_pending():
    worker, sampler, clips, index = _blocking_worker(MaxObsScorer(), max_pending=4)
    assert len(clips) > 4
    worker.submit(clips)  # accepted whole into the empty queue
    worker.close()
    stats = worker.stats()
    assert stats["dropped"] == 0 and stats["scored"] == stats["submitted"] == len(clips)
    assert not np.isnan(sampler.scores(index[: len(clips)].numpy())).any()


def test_a_submit_waiting_for_room_is_refused_when_the_worker_closes():
    started, release = threading.Event(), threading.Event()
    gated = GatedScorer(release, started)  # holds each call until release is set

    worker, _, clips, _ = _blocking_worker(gated, max_pending=4)
    first, rest = clips.split(4)
    second, rest = rest.split(4)
    worker.submit(first)
    assert started.wait(10)  # 4 clips held by the scorer
    worker.submit(second)  # 4 waiting: the queue is full
    outcome = []

    def producer():
        try:
            worker.submit(rest)
            outcome.append("returned")
        except RuntimeError as err:
            outcome.append(str(err))

    thread = threading.Thread(target=producer)
    thread.start()
    time.sleep(0.2)  # the producer is waiting for room
    closer = threading.Thread(target=worker.close, kwargs={"drain": False})
    closer.start()
    thread.join(10)
    release.set()
    closer.join(10)
    assert outcome and "closed while submit() waited" in outcome[0]
    stats = worker.stats()
    assert stats["submitted"] == 8 and stats["scored"] == 4 and stats["dropped"] == 4 and worker.backlog == 0


def test_close_leaves_no_threads():
    # only this test's threads: earlier tests may leave a deliberately hung scorer's daemon behind
    before = set(threading.enumerate())
    for _ in range(3):
        rb, sampler, stream, worker, _ = build()
        with worker:
            data = make_batches(2, 10).reshape(-1)
            index = rb.extend(data)
            worker.submit(stream.push(data, index, sampler.generations(index)))
    assert not [t for t in threading.enumerate() if t not in before]  # close() joined each worker


def test_process_backend_scores_and_shuts_down():
    rb, sampler, stream, worker, _ = build(backend="process", batch_size=16)
    data = make_batches(3, 20, seed=5)
    flat = data.reshape(-1)
    index = rb.extend(flat)
    with worker:
        worker.submit(stream.push(flat, index, sampler.generations(index)))
        worker.submit(stream.flush())
        assert worker.drain(timeout=120)
    expected = expected_start_scores(flat, 5)
    np.testing.assert_allclose(sampler.scores(torch.arange(len(flat))), [expected[i] for i in range(len(flat))], rtol=1e-6)
    assert multiprocessing.active_children() == []


class TestMakeVLMReplayBuffer:
    def test_frames_stripped_scores_land(self):
        data = make_batches(2, 30, seed=2)
        frames = (data["obs"] % 256).to(torch.uint8)[..., None, None, None].expand(2, 30, 4, 4, 3)
        data["pixels"] = frames.clone()
        data["next", "pixels"] = frames.clone()
        rb = make_vlm_replay_buffer(100, FramesScorer(), clip_spec=ClipSpec(clip_len=4), batch_size=16,
                                    generator=torch.Generator().manual_seed(0),
                                    sampler_kwargs={"threshold": None, "warmup": 0})
        assert isinstance(rb, TensorDictReplayBuffer)
        index = rb.extend(data)
        assert "pixels" not in rb.storage[0].keys() and ("next", "pixels") not in rb.storage[0].keys(True)
        rb.close()
        flat = data.reshape(-1)
        exp = {}
        trajs = flat["collector", "traj_ids"]
        for tid in trajs.unique().tolist():
            rows = torch.nonzero(trajs == tid).flatten()
            px = flat["pixels"][rows][..., 0, 0, 0].float()
            for k, row in enumerate(rows.tolist()):
                # 4 steps and the outcome frame: the next step's, or at the end ("next" here = the step's own)
                exp[row] = px[k : k + 5].max().item() / 255
        np.testing.assert_allclose(rb.sampler.scores(index), [exp[i] for i in range(60)], rtol=1e-6)
        assert rb.sample().shape == (16,)
        stats = rb.vlm_stats()
        assert stats["fraction_scored"] == 1.0 and stats["scorer/scored"] == 60
        assert stats["clip_stream/frames_held"] == 0
        assert rb.sampler.provenance == {"backend": "test", "model": "max-obs"}

    def test_store_frames(self):
        data = make_batches(1, 8).reshape(-1)
        data["pixels"] = data["next", "pixels"] = torch.zeros(8, 2, 2, 3, dtype=torch.uint8)
        rb = make_vlm_replay_buffer(16, FramesScorer(), clip_spec=ClipSpec(clip_len=2), store_frames=True)
        rb.extend(data)
        rb.close()
        assert "pixels" in rb.storage[0].keys() and ("next", "pixels") in rb.storage[0].keys(True)

    def test_batches_without_next_frames_fail_clearly(self):
        # the outcome frame of a clip ending an episode is ("next", "pixels"): needed in every batch
        data = make_batches(1, 8).reshape(-1)
        data["pixels"] = torch.zeros(8, 2, 2, 3, dtype=torch.uint8)
        rb = make_vlm_replay_buffer(16, FramesScorer(), clip_spec=ClipSpec(clip_len=2))
        with pytest.raises(KeyError, match=r"outcome frames \('next', 'pixels'\).*final_frame=False"):
            rb.extend(data)
        rb.close(flush=False)
        off = make_vlm_replay_buffer(16, FramesScorer(), clip_spec=ClipSpec(clip_len=2, final_frame=False))
        off.extend(data)
        off.close()
        assert off.sampler.stats()["fraction_scored"] == 1.0

    def test_only_needed_keys_travel(self):
        # a scorer that does not read frames: the stream holds no frames at all
        data = make_batches(2, 50).reshape(-1)
        data["pixels"] = torch.zeros(100, 8, 8, 3, dtype=torch.uint8)
        with make_vlm_replay_buffer(200, MaxObsScorer(), clip_spec=ClipSpec(clip_len=8)) as rb:
            rb.extend(data)
            assert rb.clip_stream.frame_key is None
        assert rb.sampler.stats()["fraction_scored"] == 1.0


# ---------------------------------------------------------------------- on_error="skip"
class FlakyScorer(MaxObsScorer):
    """MaxObsScorer whose calls numbered in ``failing`` (1-based) raise, like a flaky remote VLM."""

    def __init__(self, failing):
        super().__init__()
        self.failing = set(failing)

    def score(self, clips):
        if self.calls + 1 in self.failing:
            self.calls += 1
            raise ConnectionError(f"server hiccup on call {self.calls}")
        return super().score(clips)


def build_flaky(failing, clip_len=5, **kwargs):
    sampler = VLMPrioritizedSampler(1000, threshold=None)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler)
    stream = ClipStream(ClipSpec(clip_len=clip_len), frame_key=None, extra_keys=["obs"])
    worker = AsyncScorer(VLMScoreTransform(FlakyScorer(failing), clip_len=clip_len, in_keys=()), sampler,
                         batch_size=4, **kwargs)
    return rb, sampler, stream, worker


def test_skip_leaves_failed_batches_unscored_counts_and_warns_once():
    rb, sampler, stream, worker = build_flaky({2, 3}, on_error="skip")
    data = make_batches(num_envs=2, steps=20, seed=3).reshape(-1)
    index = rb.extend(data)
    clips = stream.push(data, index, sampler.generations(index))
    assert len(clips) > 16  # one submit: calls take clips 0-3, 4-7, 8-11, ... in order
    with pytest.warns(RuntimeWarning, match=r"scorer call failed \(1 so far, 1 in a row.*its 4 clips keep the "
                                            r"default priority\): ConnectionError\('server hiccup on call 2'\)") as seen:
        worker.submit(clips)
        assert worker.drain(timeout=30)
    assert len([w for w in seen if "scorer call failed" in str(w.message)]) == 1  # not once per failure
    failed = torch.isin(clips.target_clip, torch.arange(4, 12))
    scores = sampler.scores(clips.index)
    assert scores[failed].isnan().all()  # the two failed calls' transitions keep the unscored priority
    expected = expected_start_scores(data, 5)
    np.testing.assert_allclose(scores[~failed], [expected[int(i)] for i in clips.index[~failed]], rtol=1e-6)
    stats = worker.stats()
    assert (stats["errors"], stats["error_clips"], stats["consecutive_errors"]) == (2, 8, 0)
    assert stats["scored"] == len(clips) - 8 and stats["backlog"] == 0
    worker.close()  # skipped failures are not raised


def test_skip_raises_after_max_consecutive_errors():
    rb, sampler, stream, worker = build_flaky(range(1, 100), on_error="skip", max_consecutive_errors=3)
    data = make_batches(num_envs=2, steps=30).reshape(-1)
    index = rb.extend(data)
    with pytest.warns(RuntimeWarning, match="scorer call failed"):
        worker.submit(stream.push(data, index, sampler.generations(index)))
        with pytest.raises(RuntimeError, match=r"3 scorer calls failed in a row \(on_error='skip', "
                                               r"max_consecutive_errors=3\); the last: ConnectionError") as info:
            worker.drain(timeout=30)
    assert isinstance(info.value.__cause__, ConnectionError)
    assert (worker.stats()["errors"], worker.stats()["consecutive_errors"]) == (3, 3)
    with pytest.raises(RuntimeError, match="failed in a row"):
        worker.close()


def test_a_success_resets_the_consecutive_count():
    # F F S F F S ...: never 3 in a row
    rb, sampler, stream, worker = build_flaky({1, 2, 4, 5, 7, 8}, on_error="skip", max_consecutive_errors=3)
    data = make_batches(num_envs=2, steps=30).reshape(-1)
    index = rb.extend(data)
    with pytest.warns(RuntimeWarning, match="scorer call failed"):
        worker.submit(stream.push(data, index, sampler.generations(index)))
        assert worker.drain(timeout=30)
    assert worker.stats()["errors"] == 6 and worker.stats()["consecutive_errors"] == 0
    worker.close()


def test_raise_is_the_default_and_stops_at_the_first_failure():
    rb, sampler, stream, worker = build_flaky({2})
    assert worker.on_error == "raise"
    data = make_batches(num_envs=2, steps=30).reshape(-1)
    index = rb.extend(data)
    worker.submit(stream.push(data, index, sampler.generations(index)))
    with pytest.raises(RuntimeError, match=r"worker failed: ConnectionError\('server hiccup on call 2'\)"):
        worker.drain(timeout=30)
    assert worker.stats()["errors"] == 0  # "errors" counts skipped failures only
    with pytest.raises(RuntimeError):
        worker.close()


@pytest.mark.parametrize("kwargs, match", [
    ({"on_error": "ignore"}, "on_error must be one of"),
    ({"max_consecutive_errors": 0}, "max_consecutive_errors must be an int >= 1"),
    ({"max_consecutive_errors": 2.5}, "max_consecutive_errors must be an int >= 1"),
])
def test_bad_error_policy_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AsyncScorer(VLMScoreTransform(MaxObsScorer(), clip_len=2, in_keys=()), VLMPrioritizedSampler(8), **kwargs)


# ---------------------------------------------------------------------- bounded close
class GatedScorer(MaxObsScorer):
    """Blocks in score() until ``gate`` is set (a hung VLM call); ``entered`` is set on entry."""

    def __init__(self, gate, entered):
        super().__init__()
        self.gate, self.entered = gate, entered

    def score(self, clips):
        self.entered.set()
        self.gate.wait(30)
        return super().score(clips)


def test_close_with_timeout_abandons_a_hung_thread_call():
    gate, entered = threading.Event(), threading.Event()
    sampler = VLMPrioritizedSampler(1000, threshold=None)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler)
    stream = ClipStream(ClipSpec(clip_len=5), frame_key=None, extra_keys=["obs"])
    worker = AsyncScorer(VLMScoreTransform(GatedScorer(gate, entered), clip_len=5, in_keys=()), sampler, batch_size=4)
    data = make_batches(num_envs=2, steps=20).reshape(-1)
    index = rb.extend(data)
    clips = stream.push(data, index, sampler.generations(index))
    worker.submit(clips)
    assert entered.wait(10)
    start = time.perf_counter()
    try:
        with pytest.warns(RuntimeWarning, match=r"close\(timeout=0.3\): a scorer call did not return in time; "
                                                r"its daemon thread is left behind"):
            worker.close(timeout=0.3)
        assert time.perf_counter() - start < 3
        assert worker._thread.daemon and worker._thread.is_alive()
        assert worker.stats()["dropped"] == len(clips) and worker.stats()["backlog"] == 0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            worker.close(timeout=0.1)  # closing again: no second warning, no second count
        assert worker.stats()["dropped"] == len(clips)
    finally:
        gate.set()
    worker._thread.join(10)
    assert not worker._thread.is_alive()
    assert sampler.scores(index).isnan().all()  # the abandoned call's late scores are not written


def test_close_with_timeout_after_a_normal_drain_scores_everything():
    rb, sampler, stream, worker, _ = build()
    data = make_batches(num_envs=2, steps=20).reshape(-1)
    index = rb.extend(data)
    worker.submit(stream.push(data, index, sampler.generations(index)))
    worker.submit(stream.flush())
    worker.close(timeout=30)
    assert not worker._thread.is_alive()
    assert worker.stats()["scored"] == worker.stats()["submitted"] and not sampler.scores(index).isnan().any()


def _child_pid(worker) -> int:
    """The pid of a process backend's child (concurrent.futures keeps its pool's processes by pid)."""
    deadline = time.monotonic() + 60
    while not (getattr(worker._executor, "_processes", None) or {}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return next(iter(worker._executor._processes))


def _score_round(rb, sampler, stream, worker, seed):
    data = make_batches(2, 10, seed=seed).reshape(-1)
    index = rb.extend(data)
    worker.submit(stream.push(data, index, sampler.generations(index)))
    worker.submit(stream.flush())
    return index


@pytest.mark.slow  # spawns child processes
def test_a_dead_child_is_restarted_within_the_error_budget():
    # issue 64: a dead process-backend scorer child was never restarted, even with on_scorer_error=skip
    import os
    import signal

    rb, sampler, stream, worker, _ = build(backend="process", on_error="skip", max_consecutive_errors=3)
    with worker:
        first = _score_round(rb, sampler, stream, worker, seed=1)
        assert worker.drain(timeout=120) and not sampler.scores(first).isnan().any()
        dead = _child_pid(worker)
        os.kill(dead, signal.SIGKILL)
        with pytest.warns(RuntimeWarning, match="scorer's child process died .*a new child was started"):
            lost = _score_round(rb, sampler, stream, worker, seed=2)
            assert worker.drain(timeout=120)
        assert sampler.scores(lost).isnan().all()  # that call's clips stay unscored, counted as errors
        third = _score_round(rb, sampler, stream, worker, seed=3)
        assert worker.drain(timeout=120) and not sampler.scores(third).isnan().any()  # the new child scores
        assert _child_pid(worker) != dead
        stats = worker.stats()
        assert stats["child_restarts"] == 1 and stats["errors"] >= 1 and stats["consecutive_errors"] == 0
    assert multiprocessing.active_children() == []
    # on_error="raise": the run stops, saying how to have it restarted
    rb, sampler, stream, worker, _ = build(backend="process")
    with pytest.raises(RuntimeError, match="worker failed") as info:
        with worker:
            _score_round(rb, sampler, stream, worker, seed=1)
            worker.drain(timeout=120)
            os.kill(_child_pid(worker), signal.SIGKILL)
            _score_round(rb, sampler, stream, worker, seed=2)
            worker.drain(timeout=120)
    assert "on_error='skip' (on_scorer_error=skip) would start a new one" in str(info.value.__cause__)
    assert worker.stats()["child_restarts"] == 0 and multiprocessing.active_children() == []


def test_a_dead_childs_pool_is_replaced_once_and_never_after_close():
    # the restart's bookkeeping (no child is spawned: a pool starts its process at its first call)
    rb, sampler, stream, worker, _ = build(backend="process", on_error="skip")
    dead = worker._executor
    assert worker._restart_child(dead) and worker._executor is not dead
    assert not worker._restart_child(dead)  # another call already replaced it
    worker.close()
    assert not worker._restart_child(worker._executor) and worker.stats()["child_restarts"] == 1


def _hang(clips):  # module level: pickled to the process backend's child
    time.sleep(600)
    return torch.zeros(clips.shape[0])


@pytest.mark.slow  # spawns a child process
def test_close_with_timeout_terminates_a_hung_child_process():
    from vlmrb_torchrl.scorers import CallableScorer

    sampler = VLMPrioritizedSampler(1000, threshold=None)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler)
    stream = ClipStream(ClipSpec(clip_len=5), frame_key=None, extra_keys=["obs"])
    worker = AsyncScorer(VLMScoreTransform(CallableScorer(_hang, in_keys=["obs"]), clip_len=5, in_keys=()), sampler,
                         backend="process")
    data = make_batches(num_envs=2, steps=20).reshape(-1)
    index = rb.extend(data)
    worker.submit(stream.push(data, index, sampler.generations(index)))
    deadline = time.monotonic() + 60
    while not worker._in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(5)  # the child starts (spawn, imports) and takes the call
    start = time.perf_counter()
    with pytest.warns(RuntimeWarning, match="its child process was terminated"):
        worker.close(timeout=1.0)
    assert time.perf_counter() - start < 10
    worker._thread.join(10)
    assert not worker._thread.is_alive()
    assert multiprocessing.active_children() == []


_EXIT_SCRIPT = """
import sys, threading, time, torch
sys.path[:0] = {paths!r}
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from vlmrb_torchrl import AsyncScorer, ClipSpec, ClipStream, VLMPrioritizedSampler, VLMScoreTransform
from vlmrb_torchrl.scorers import CallableScorer
from test_worker import _hang, make_batches

if __name__ == "__main__":
    sampler = VLMPrioritizedSampler(1000)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler)
    stream = ClipStream(ClipSpec(clip_len=5), frame_key=None, extra_keys=["obs"])
    worker = AsyncScorer(VLMScoreTransform(CallableScorer(_hang, in_keys=["obs"]), clip_len=5, in_keys=()), sampler,
                         backend={backend!r})
    data = make_batches(num_envs=2, steps=20).reshape(-1)
    index = rb.extend(data)
    worker.submit(stream.push(data, index, sampler.generations(index)))
    while not worker._in_flight:
        time.sleep(0.05)
    time.sleep(0.5)
    print("exiting with a hung scorer call", flush=True)
"""


@pytest.mark.slow  # a subprocess (and, for "process", its child)
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_hung_scorer_does_not_block_interpreter_exit(tmp_path, backend):
    import os
    import subprocess
    import sys

    script = tmp_path / "hung_at_exit.py"
    here = os.path.dirname(os.path.abspath(__file__))
    script.write_text(_EXIT_SCRIPT.format(paths=[here, os.path.dirname(here)], backend=backend))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exiting with a hung scorer call" in done.stdout
    assert time.perf_counter() - start < 90  # not the scorer's 600 s


def test_pickled_worker_is_a_new_worker_with_the_same_settings():
    import copy
    import pickle

    rb, sampler, stream, worker, _ = build(batch_size=7, on_error="skip", max_consecutive_errors=4)
    worker.error_warn_every = 3
    for clone in (pickle.loads(pickle.dumps(worker)), copy.deepcopy(worker)):
        try:
            assert clone._thread is not worker._thread and clone._thread.is_alive()
            assert (clone.batch_size, clone.on_error, clone.max_consecutive_errors, clone.error_warn_every) == (
                7, "skip", 4, 3)
            assert clone.stats()["submitted"] == 0
        finally:
            clone.close()
    worker.close()
