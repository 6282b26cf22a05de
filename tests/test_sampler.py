"""Tests for VLMPrioritizedSampler (distribution, weights, schedule, generations, state)
and for its lock-free slot state and trees (vlmrb_torchrl.replay._slot_state)."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import threading

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers.scheduler import LinearScheduler

from vlmrb_torchrl import VLMPrioritizedSampler
from vlmrb_torchrl.replay._slot_state import PriorityConfig, SlotState
from vlmrb_torchrl.replay._sumtree import torchrl_trees_available

import _slot_state_reference as reference  # tests/: the statistics' scans over every slot, before issue 38

BACKENDS = [
    "numpy",
    pytest.param(
        "torchrl",
        marks=pytest.mark.skipif(
            not torchrl_trees_available(), reason="TorchRL's C++ trees do not load with this torch"
        ),
    ),
]


def make_rb(capacity: int, seed: int = 0, storage=None, **kwargs):
    sampler = VLMPrioritizedSampler(capacity, **kwargs)
    rb = TensorDictReplayBuffer(
        storage=storage if storage is not None else LazyTensorStorage(capacity),
        sampler=sampler,
        generator=torch.Generator().manual_seed(seed),
    )
    return rb, sampler


def fill(rb, n: int, start: int = 0):
    data = TensorDict(obs=torch.arange(start, start + n, dtype=torch.float32), batch_size=[n])
    return rb.extend(data)


def expected_q(scores, scored, lam, *, threshold=0.5, eps=0.01, default="mean", td=None, alpha=0.6):
    """Independent reference implementation of q_t over the filled slots."""
    scores = np.asarray(scores, dtype=np.float64)
    scored = np.asarray(scored, dtype=bool)
    p = scores if threshold is None else (scores > threshold).astype(np.float64)
    p = np.maximum(p, eps)
    if default == "mean":
        p_bar = max(p[scored].mean(), eps) if scored.any() else 1.0
    elif default == "max":
        p_bar = p[scored].max() if scored.any() else 1.0
    else:
        p_bar = max(default, eps)
    v = np.where(scored, p, p_bar)
    if td is not None:
        v = v * (np.asarray(td, dtype=np.float64) + eps) ** alpha
    n = len(scores)
    return lam * v / v.sum() + (1 - lam) / n


def assert_matches(counts: np.ndarray, q: np.ndarray):
    """Per-slot binomial bounds (5 sigma) plus a chi-square bound (Wilson-Hilferty, z=4)."""
    n = counts.sum()
    expected = n * q
    sd = np.sqrt(n * q * (1 - q))
    assert np.all(np.abs(counts - expected) <= 5 * sd + 1), (counts, expected)
    chi2 = ((counts - expected) ** 2 / expected).sum()
    df = len(q) - 1
    crit = df * (1 - 2 / (9 * df) + 4 * math.sqrt(2 / (9 * df))) ** 3
    assert chi2 < crit, (chi2, crit)


def draw_counts(rb, n_slots: int, draws: int = 200_000, batch: int = 10_000) -> np.ndarray:
    counts = np.zeros(n_slots, dtype=np.int64)
    for _ in range(draws // batch):
        idx = rb.sample(batch)["index"]
        counts += np.bincount(idx.numpy(), minlength=n_slots)[:n_slots]
    return counts


class TestConstruction:
    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"lambda_max": 1.5}, ValueError, "lambda_max must be in \\[0, 1\\]"),
            ({"lambda_max": -0.1}, ValueError, "lambda_max"),
            ({"lambda_max": float("nan")}, ValueError, "lambda_max"),
            ({"eps": -1e-3}, ValueError, "eps must be a finite number >= 0"),
            ({"alpha": -1.0}, ValueError, "alpha"),
            ({"beta": -0.5}, ValueError, "beta"),
            ({"warmup": -1}, ValueError, "warmup must be an int >= 0"),
            ({"warmup": 1.5}, ValueError, "warmup"),
            ({"threshold": 2.0}, ValueError, "threshold"),
            ({"unscored_priority": "median"}, ValueError, "unscored_priority must be 'mean', 'max'"),
            ({"unscored_priority": -1.0}, ValueError, "unscored_priority"),
            ({"td_boost": 1}, TypeError, "td_boost must be a bool"),
            ({"reduction": "avg"}, ValueError, "reduction"),
            ({"tree_backend": "cuda"}, ValueError, "tree_backend"),
            ({"max_oversampling": 0.5}, ValueError, "max_oversampling must be None \\(no ceiling\\) or a finite number >= 1"),
            ({"max_oversampling": float("inf")}, ValueError, "max_oversampling"),
            ({"max_oversampling": "4"}, TypeError, "max_oversampling must be None or a number"),
        ],
    )
    def test_bad_arguments(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            VLMPrioritizedSampler(10, **kwargs)

    @pytest.mark.parametrize("capacity", [0, -3, 2.5, True])
    def test_bad_capacity(self, capacity):
        with pytest.raises(ValueError, match="max_capacity must be an int >= 1"):
            VLMPrioritizedSampler(capacity)

    def test_is_a_torchrl_prioritized_sampler(self):
        from torchrl.data.replay_buffers import PrioritizedSampler, Sampler

        s = VLMPrioritizedSampler(4)
        assert isinstance(s, Sampler) and isinstance(s, PrioritizedSampler)

    def test_empty_storage_raises(self):
        rb, _ = make_rb(10)
        with pytest.raises(RuntimeError, match="empty storage"):
            rb.sample(4)

    def test_settings_are_checked_on_assignment(self):
        s = VLMPrioritizedSampler(8)
        for name, value, error in [("lambda_max", 1.5, ValueError), ("warmup", -1, ValueError),
                                   ("beta", -1.0, ValueError), ("alpha", "x", TypeError),
                                   ("unscored_priority_mode", "median", ValueError),
                                   ("max_oversampling", 0.9, ValueError)]:
            with pytest.raises(error, match=name):
                setattr(s, name, value)
        s.beta = np.float64(0.25)  # schedulers may assign NumPy floats
        assert s.beta == 0.25 and type(s.beta) is float
        for name in ("threshold", "eps", "td_boost"):
            with pytest.raises(AttributeError, match=f"{name} is fixed at construction"):
                setattr(s, name, getattr(s, name))
        assert (s.threshold, s.eps, s.td_boost, s.alpha, s.max_size) == (0.5, 0.01, False, 0.6, 8)

    def test_tensor_and_numpy_scalars_become_floats(self):
        """What TorchRL's schedulers assign when started from a tensor or NumPy value."""
        s = VLMPrioritizedSampler(8, alpha=torch.tensor(0.5), beta=torch.tensor(0.25, dtype=torch.float64),
                                  lambda_max=np.float32(0.75))
        assert (s.alpha, s.beta, s.lambda_max) == (0.5, 0.25, 0.75)
        assert all(type(v) is float for v in (s.alpha, s.beta, s.lambda_max))
        s.beta, s.alpha, s.lambda_ = torch.tensor(1.0), torch.tensor([0.3]), torch.tensor(0.5)
        assert (s.beta, s.alpha, s.lambda_) == (1.0, pytest.approx(0.3), 0.5)
        with pytest.raises(TypeError, match="beta must be a number"):
            s.beta = torch.tensor([0.1, 0.2])
        with pytest.raises(TypeError, match="alpha must be a number"):
            VLMPrioritizedSampler(8, alpha=torch.tensor(True))
        with pytest.raises(ValueError, match="beta must be a finite number >= 0"):
            s.beta = torch.tensor(-1.0)

    def test_eps_zero_beta_and_lambda_one_refused(self):
        """eps=0 lets priorities be 0; at lambda 1 their q is 0 and the weights are undefined."""
        with pytest.raises(ValueError, match="eps=0 with beta=0.4 > 0 and lambda reaching 1"):
            VLMPrioritizedSampler(8, eps=0.0, lambda_max=1.0, beta=0.4)
        s = VLMPrioritizedSampler(8, eps=0.0, lambda_max=1.0, beta=0.0)  # no weights: fine
        with pytest.raises(ValueError, match="importance weights"):
            s.beta = 0.4
        assert s.beta == 0.0
        s = VLMPrioritizedSampler(8, eps=0.0, lambda_max=0.5, beta=0.4, warmup=0)
        for name in ("lambda_max", "lambda_"):
            with pytest.raises(ValueError, match="importance weights"):
                setattr(s, name, 1.0)
        assert (s.lambda_max, s.lambda_) == (0.5, 0.5)
        s.lambda_ = 0.9  # lambda < 1: q >= (1 - lambda) / N > 0, the weights are finite
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), sampler=s, batch_size=64)
        index = fill(rb, 8)
        s.update_scores(index, torch.tensor([1.0, 0.0] * 4))
        weight = rb.sample()["priority_weight"]
        assert torch.isfinite(weight).all() and (weight > 0).all()
        # a checkpoint with such settings is refused too, before anything is replaced
        state = s.state_dict()
        state["config"]["lambda_max"], state["lambda_override"] = 1.0, None
        with pytest.raises(ValueError, match="importance weights"):
            s.load_state_dict(state)
        assert s.lambda_ == 0.9 and s.scores(index).tolist()[:2] == [1.0, 0.0]

    def test_probabilities_when_every_priority_is_zero(self):
        """eps=0 and no positive: the prioritised half has no mass and is uniform, in probabilities() as in sample()."""
        s = VLMPrioritizedSampler(8, eps=0.0, beta=0.0, warmup=0, lambda_max=0.5)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), sampler=s, batch_size=4_000)
        s.update_scores(fill(rb, 8), torch.zeros(8))
        q = s.probabilities()
        assert q.shape == (8,) and torch.allclose(q, torch.full((8,), 1 / 8, dtype=q.dtype))
        counts = torch.bincount(rb.sample()["index"], minlength=8)
        assert counts.min() > 400  # 500 expected per slot; a draw that ignores a slot would show 0

    def test_device_is_cpu(self):
        assert VLMPrioritizedSampler(4).device == torch.device("cpu")

    def test_probabilities_of_an_empty_buffer(self):
        s = VLMPrioritizedSampler(4)
        assert s.probabilities().shape == (0,)
        assert s.probabilities(0).shape == (0,)
        for bad in (-1, 5, 2.0, True):
            with pytest.raises(ValueError, match="storage_len must be an int in \\[0, 4\\]"):
                s.probabilities(bad)


class TestRenamedNames:
    """``default_priority`` was both the constructor's unscored-slot mode and TorchRL's TD default;
    the old spellings are gone (pre-1.0), checkpoints keep the old key."""

    def test_the_old_spellings_are_gone(self):
        with pytest.raises(TypeError, match="default_priority"):
            VLMPrioritizedSampler(8, default_priority="max")
        s = VLMPrioritizedSampler(8, unscored_priority=0.3)
        assert not hasattr(s, "default_priority_mode") and s.unscored_priority_mode == 0.3
        assert repr(s).count("unscored_priority=0.3") == 1

    def test_a_checkpoint_keeps_reading_the_old_key(self):
        s = VLMPrioritizedSampler(8, unscored_priority="max")
        state = s.state_dict()
        assert state["config"]["default_priority"] == "max"  # schema 1's name of unscored_priority
        other = VLMPrioritizedSampler(8)
        other.load_state_dict(state)
        assert other.unscored_priority_mode == "max"

    def test_each_name_means_one_thing(self):
        rb, s = make_rb(8, unscored_priority="mean", warmup=0)
        index = fill(rb, 4)
        s.update_scores(index[:2], torch.tensor([1.0, 0.0]))
        s.update_priority(index, torch.tensor([0.5, 3.0, 0.1, 0.2]))
        assert s.unscored_priority_mode == "mean"  # the setting
        assert s.unscored_priority == pytest.approx((1 + 0.01) / 2)  # its current value
        assert s.stats()["unscored_priority"] == s.unscored_priority
        assert s.default_priority == 3.0  # TorchRL's: TD priority of new slots
        s.unscored_priority_mode = 0.25  # takes effect at once
        assert s.unscored_priority == 0.25


class TestUpdateScoresErrors:
    @pytest.fixture
    def sampler(self):
        rb, sampler = make_rb(8)
        fill(rb, 8)
        return sampler

    @pytest.mark.parametrize(
        "index, scores, match",
        [
            (torch.arange(3), torch.tensor([0.1, 1.2, 0.3]), "scores must lie in \\[0, 1\\]"),
            (torch.arange(3), torch.tensor([0.1, -0.2, 0.3]), "scores must lie in \\[0, 1\\]"),
            (torch.arange(3), torch.tensor([0.1, float("nan"), 0.3]), "scores must be finite"),
            (torch.arange(3), torch.tensor([0.1, 0.2]), "scores has 2 values but index has 3"),
            (torch.tensor([0, 8]), torch.tensor([0.1, 0.2]), "index out of range"),
            (torch.tensor([-1]), torch.tensor([0.1]), "index out of range"),
        ],
    )
    def test_bad_input(self, sampler, index, scores, match):
        with pytest.raises(ValueError, match=match):
            sampler.update_scores(index, scores)

    def test_float_index(self, sampler):
        with pytest.raises(TypeError, match="index must hold integers"):
            sampler.update_scores(torch.tensor([0.0]), torch.tensor([0.5]))

    @pytest.mark.parametrize(
        "generation", [torch.tensor([1.0, 1.0]), np.array([1.5, 1.0]), [1.0, 1.0], torch.tensor([True, True])]
    )
    def test_float_generation(self, sampler, generation):
        """A float generation would be truncated to a (possibly current) slot generation."""
        with pytest.raises(TypeError, match="generation must hold integers"):
            sampler.update_scores(torch.arange(2), torch.ones(2), generation)
        assert sampler.stats()["fraction_scored"] == 0.0

    def test_coordinates_before_an_ndim2_storage_was_seen(self, sampler):
        with pytest.raises(ValueError, match="2-tuple index .* has seen only 1-D storages"):
            sampler.generations((torch.tensor([0]), torch.tensor([1])))

    def test_negative_writes_are_skipped(self, sampler):
        before = sampler.generations(torch.arange(8))
        sampler.mark_update(torch.tensor([-1, 3, -1]))
        assert (sampler.generations(torch.arange(8)) - before).tolist() == [0, 0, 0, 1, 0, 0, 0, 0]

    def test_generation_length(self, sampler):
        with pytest.raises(ValueError, match="generation has 1 values but index has 2"):
            sampler.update_scores(torch.arange(2), torch.ones(2), torch.ones(1, dtype=torch.long))

    def test_bad_priority(self, sampler):
        with pytest.raises(ValueError, match="priority must be finite"):
            sampler.update_priority(torch.arange(2), torch.tensor([1.0, float("nan")]))


@pytest.mark.parametrize("backend", BACKENDS)
class TestDistribution:
    @pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
    @pytest.mark.parametrize("threshold", [0.5, None])
    def test_partially_scored(self, backend, lam, threshold):
        n = 20
        rb, sampler = make_rb(64, lambda_max=lam, warmup=0, threshold=threshold, tree_backend=backend)
        index = fill(rb, n)
        rng = np.random.default_rng(1)
        scores = rng.random(n).astype(np.float32)
        scored = np.zeros(n, dtype=bool)
        scored[rng.permutation(n)[:12]] = True
        sampler.update_scores(index[scored], torch.from_numpy(scores[scored]))
        q = expected_q(scores, scored, lam, threshold=threshold)
        np.testing.assert_allclose(sampler.probabilities().numpy(), q, rtol=1e-6)
        assert_matches(draw_counts(rb, n), q)

    @pytest.mark.parametrize("default", ["mean", "max", 0.3])
    def test_default_priority(self, backend, default):
        n = 16
        rb, sampler = make_rb(16, lambda_max=1.0, warmup=0, threshold=None, unscored_priority=default,
                              tree_backend=backend)
        index = fill(rb, n)
        scores = np.linspace(0.05, 0.9, 6).astype(np.float32)
        scored = np.zeros(n, dtype=bool)
        scored[:6] = True
        sampler.update_scores(index[:6], torch.from_numpy(scores))
        all_scores = np.zeros(n, dtype=np.float32)
        all_scores[:6] = scores
        q = expected_q(all_scores, scored, 1.0, threshold=None, default=default)
        assert_matches(draw_counts(rb, n), q)

    def test_unscored_default_follows_current_mean(self, backend):
        # slots inserted before any score must follow the *current* mean, not a stale one
        rb, sampler = make_rb(8, lambda_max=1.0, warmup=0, tree_backend=backend)
        index = fill(rb, 8)
        assert sampler.unscored_priority == 1.0
        sampler.update_scores(index[:4], torch.tensor([1.0, 0.0, 0.0, 0.0]))
        assert sampler.unscored_priority == pytest.approx((1 + 3 * 0.01) / 4)
        scores = np.array([1, 0, 0, 0, 0, 0, 0, 0], dtype=np.float32)
        scored = np.arange(8) < 4
        assert_matches(draw_counts(rb, 8), expected_q(scores, scored, 1.0))

    def test_td_boost(self, backend):
        n = 12
        rb, sampler = make_rb(32, lambda_max=0.7, warmup=0, td_boost=True, alpha=0.8, tree_backend=backend)
        index = fill(rb, n)
        scores = np.array([0.9, 0.1] * 6, dtype=np.float32)
        scored = np.arange(n) < 8
        sampler.update_scores(index[:8], torch.from_numpy(scores[:8]))
        td = np.linspace(0.0, 3.0, n)
        sample = TensorDict(index=index, td_error=torch.from_numpy(td).float(), batch_size=[n])
        rb.update_tensordict_priority(sample)  # the path DQNLoss/SACLoss td_error takes
        q = expected_q(scores, scored, 0.7, td=td.astype(np.float32), alpha=0.8)
        np.testing.assert_allclose(sampler.probabilities().numpy(), q, rtol=1e-5)
        assert_matches(draw_counts(rb, n), q)

    def test_partially_filled_storage(self, backend):
        # 10 of 1000 slots filled: nothing may come from the empty ones
        rb, sampler = make_rb(1000, lambda_max=0.5, warmup=0, tree_backend=backend)
        index = fill(rb, 10)
        sampler.update_scores(index[:3], torch.tensor([1.0, 1.0, 0.0]))
        counts = draw_counts(rb, 1000, draws=100_000)
        assert counts[10:].sum() == 0
        scores = np.array([1, 1, 0] + [0] * 7, dtype=np.float32)
        assert_matches(counts[:10], expected_q(scores, np.arange(10) < 3, 0.5))

    def test_wrapped_storage(self, backend):
        cap = 10
        rb, sampler = make_rb(cap, lambda_max=1.0, warmup=0, tree_backend=backend)
        first = fill(rb, cap)
        sampler.update_scores(first, torch.ones(cap))
        second = fill(rb, 4, start=cap)  # overwrites slots 0..3: unscored again
        assert second.tolist() == [0, 1, 2, 3]
        sampler.update_scores(second[:2], torch.tensor([0.0, 1.0]))
        scores = np.ones(cap, dtype=np.float32)
        scores[0] = 0.0
        scored = np.ones(cap, dtype=bool)
        scored[2:4] = False
        q = expected_q(scores, scored, 1.0)
        assert_matches(draw_counts(rb, cap), q)
        assert sampler.stats()["fraction_scored"] == pytest.approx(0.8)

    def test_zero_scores_eps_zero(self, backend):
        # all priorities zero with eps=0: the prioritized part falls back to uniform
        rb, sampler = make_rb(8, lambda_max=1.0, warmup=0, eps=0.0, tree_backend=backend)
        index = fill(rb, 8)
        sampler.update_scores(index, torch.zeros(8))
        assert_matches(draw_counts(rb, 8, draws=40_000), np.full(8, 1 / 8))

    def test_large_capacity(self, backend):
        # 2**20 slots (a 20-level tree): three hot slots near the first, middle and last
        # leaves scored 1, 10_000 slots scored 0 (priority eps), and ~1M unscored slots at
        # the mean scored priority; lambda = 1, so every draw follows the trees
        cap, eps = 1 << 20, 0.01
        sampler = VLMPrioritizedSampler(cap, lambda_max=1.0, warmup=0, tree_backend=backend)
        storage = LazyTensorStorage(cap)
        rb = TensorDictReplayBuffer(storage=storage, sampler=sampler, generator=torch.Generator().manual_seed(0))
        rb.extend(TensorDict(obs=torch.zeros(cap, dtype=torch.uint8), batch_size=[cap]))
        hot = [5, cap // 2, cap - 1]
        sampler.update_scores(torch.tensor(hot), torch.ones(3))
        sampler.update_scores(torch.arange(100, 10_100), torch.zeros(10_000))
        p_bar = (3 * 1.0 + 10_000 * eps) / 10_003
        mass = np.array([1.0, 1.0, 1.0, 10_000 * eps, (cap - 10_003) * p_bar])
        q = mass / mass.sum()  # each hot slot, the zero-scored block, the unscored rest
        np.testing.assert_allclose(sampler.probabilities().numpy()[hot], q[:3], rtol=1e-9)
        counts = np.zeros(5, dtype=np.int64)
        for _ in range(8):  # 2**21 draws: ~194 per hot slot (q ~ 9.3e-5), 5 sigma ~ 70
            idx = rb.sample(1 << 18)["index"].numpy()
            assert idx.min() >= 0 and idx.max() < cap
            zero = (idx >= 100) & (idx < 10_100)
            counts += [*(np.count_nonzero(idx == h) for h in hot), zero.sum(), (~zero & ~np.isin(idx, hot)).sum()]
        # a hot slot treated as unscored would get p_bar / 1 ~ 1% of its share: ~2 draws
        assert_matches(counts, q)


def expected_q_capped(scores, scored, lam, ceiling, **kwargs):
    """Reference q_t under the over-sampling ceiling: the largest lambda <= lam with N max q <= ceiling."""
    v = expected_q(scores, scored, 1.0, **kwargs)  # v_i / V
    r = len(v) * v.max()
    lam_eff = lam if r <= ceiling else min(lam, (ceiling - 1) / (r - 1))
    return expected_q(scores, scored, lam_eff, **kwargs), lam_eff


@pytest.mark.parametrize("backend", BACKENDS)
class TestOversamplingCeiling:
    def test_hand_computed_rare_positive(self, backend):
        # 1 positive among 100: V = 1 + 99 * 0.01, r = 100 / V; lambda 0.5 would give it 0.5 r + 0.5 = 25.6x
        rb, sampler = make_rb(100, lambda_max=0.5, warmup=0, max_oversampling=4.0, tree_backend=backend)
        index = fill(rb, 100)
        sampler.update_scores(index, (torch.arange(100) == 0).float())
        r = 100 / 1.99
        assert sampler.lambda_ == 0.5
        assert sampler.lambda_effective == pytest.approx(3 / (r - 1), rel=1e-12)
        q = sampler.probabilities().numpy()
        assert q[0] * 100 == pytest.approx(4.0, rel=1e-12)
        np.testing.assert_allclose(q[1:], (sampler.lambda_effective * 0.01 / 1.99 + (1 - sampler.lambda_effective) / 100))
        stats = sampler.stats()
        assert stats["lambda"] == 0.5 and stats["lambda_effective"] == sampler.lambda_effective
        assert stats["max_oversampling_ratio"] == pytest.approx(4.0, rel=1e-12)
        # without the ceiling: the paper's sampler
        sampler.max_oversampling = None
        assert sampler.lambda_effective == 0.5
        assert sampler.stats()["max_oversampling_ratio"] == pytest.approx(0.5 * r + 0.5, rel=1e-12)

    @pytest.mark.parametrize("case", ["binary", "td_boost", "unscored", "continuous"])
    def test_exact_and_sampled_distribution(self, backend, case):
        n, lam, ceiling = 40, 0.8, 3.0
        kwargs = {"td_boost": case == "td_boost", "threshold": None if case == "continuous" else 0.5}
        rb, sampler = make_rb(64, lambda_max=lam, warmup=0, max_oversampling=ceiling, tree_backend=backend, **kwargs)
        index = fill(rb, n)
        rng = np.random.default_rng(2)
        scores = (rng.random(n) ** 4).astype(np.float32)  # few above 0.5: rare positives
        scored = np.ones(n, dtype=bool) if case != "unscored" else rng.random(n) < 0.6
        sampler.update_scores(index[scored], torch.from_numpy(scores[scored]))
        td = None
        if case == "td_boost":
            td = (rng.random(n) * 2).astype(np.float32)
            rb.update_tensordict_priority(TensorDict(index=index, td_error=torch.from_numpy(td), batch_size=[n]))
        q, lam_eff = expected_q_capped(scores, scored, lam, ceiling, threshold=kwargs["threshold"], td=td)
        assert lam_eff < lam  # the ceiling binds in every case
        assert sampler.lambda_effective == pytest.approx(lam_eff, rel=1e-9)
        got = sampler.probabilities().numpy()
        np.testing.assert_allclose(got, q, rtol=1e-6)
        assert got.max() * n == pytest.approx(ceiling, rel=1e-9) and got.sum() == pytest.approx(1.0)
        assert_matches(draw_counts(rb, n), q)

    def test_not_binding_samples_as_without(self, backend):
        def build(ceiling):
            rb, sampler = make_rb(32, seed=5, lambda_max=0.5, warmup=0, td_boost=True, max_oversampling=ceiling,
                                  tree_backend=backend)
            index = fill(rb, 32)
            sampler.update_scores(index, torch.linspace(0, 1, 32))  # half positive: at most ~2x
            return rb, sampler

        (rb_a, a), (rb_b, b) = build(None), build(10.0)
        assert b.lambda_effective == a.lambda_effective == 0.5
        np.testing.assert_array_equal(a.probabilities().numpy(), b.probabilities().numpy())
        for _ in range(3):
            assert torch.equal(rb_a.sample(64)["index"], rb_b.sample(64)["index"])

    def test_ceiling_one_is_uniform(self, backend):
        rb, sampler = make_rb(10, lambda_max=1.0, warmup=0, max_oversampling=1.0, tree_backend=backend)
        index = fill(rb, 10)
        sampler.update_scores(index, torch.tensor([1.0] + [0.0] * 9))
        assert sampler.lambda_effective == 0.0
        np.testing.assert_allclose(sampler.probabilities().numpy(), np.full(10, 0.1))

    def test_importance_weights_use_the_effective_lambda(self, backend):
        n = 50
        rb, sampler = make_rb(n, lambda_max=0.5, warmup=0, beta=0.7, max_oversampling=2.0, tree_backend=backend)
        index = fill(rb, n)
        sampler.update_scores(index, (torch.arange(n) < 2).float())
        q = sampler.probabilities().numpy()
        out = rb.sample(500)
        expected = (q[out["index"].numpy()] / q.min()) ** -0.7
        np.testing.assert_allclose(out["priority_weight"].numpy(), expected, rtol=1e-5)
        assert q.max() * n == pytest.approx(2.0)

    def test_follows_the_buffer_and_survives_checkpoints(self, backend, tmp_path):
        def build(**kw):
            return make_rb(64, seed=1, lambda_max=0.5, warmup=20, td_boost=True, tree_backend=backend, **kw)

        rb, sampler = build(max_oversampling=3.0)
        index = fill(rb, 80)  # wraps around
        sampler.update_scores(index[-64:], (torch.rand(64, generator=torch.Generator().manual_seed(0)) > 0.9).float())
        for _ in range(25):  # lambda reaches 0.5; the ceiling follows TD updates and rewrites
            out = rb.sample(16)
            rb.update_tensordict_priority(out.set("td_error", torch.rand(16) * 3))
            assert sampler.probabilities().max().item() * 64 <= 3.0 + 1e-9
        fill(rb, 5, start=100)
        assert sampler.probabilities().max().item() * 64 <= 3.0 + 1e-9
        state = sampler.state_dict()
        assert state["config"]["max_oversampling"] == 3.0
        other = VLMPrioritizedSampler(64)  # the checkpoint's ceiling wins
        other.load_state_dict(state)
        assert other.max_oversampling == 3.0 and other.lambda_effective == sampler.lambda_effective
        np.testing.assert_array_equal(other.probabilities().numpy(), sampler.probabilities().numpy())
        clone = pickle.loads(pickle.dumps(sampler))
        assert clone.max_oversampling == 3.0
        rb.dumps(tmp_path / "ckpt")
        expected = [rb.sample(32)["index"] for _ in range(4)]
        rb2, sampler2 = build()  # built without a ceiling
        rb2.loads(tmp_path / "ckpt")
        assert sampler2.max_oversampling == 3.0
        assert all(torch.equal(e, rb2.sample(32)["index"]) for e in expected)
        assert "max_oversampling" not in VLMPrioritizedSampler(4).state_dict()["config"]  # schema 1's layout


class TestImportanceWeights:
    def test_beta_zero_gives_ones(self):
        rb, sampler = make_rb(8, lambda_max=1.0, warmup=0)
        index = fill(rb, 8)
        sampler.update_scores(index, torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0]))
        assert (rb.sample(32)["priority_weight"] == 1).all()

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_closed_form(self, backend):
        # 4 slots, scores [1, 0, 0, unscored], eps .01, threshold .5, lambda .5, beta .5
        rb, sampler = make_rb(4, lambda_max=0.5, warmup=0, beta=0.5, tree_backend=backend)
        index = fill(rb, 4)
        sampler.update_scores(index[:3], torch.tensor([1.0, 0.0, 0.0]))
        p_bar = (1 + 0.01 + 0.01) / 3
        v = np.array([1.0, 0.01, 0.01, p_bar])
        q = 0.5 * v / v.sum() + 0.5 / 4
        w = (4 * q) ** -0.5
        w = w / w.max()
        out = rb.sample(200)
        got = out["priority_weight"].numpy()
        np.testing.assert_allclose(got, w[out["index"].numpy()], rtol=1e-6)
        assert got.min() > 0.5  # no collapse although two scores are 0

    def test_hand_computed_numbers(self):
        # lambda=1, beta=1, p = [1, .01]: q = [1/1.01, .01/1.01]; w = q_min / q
        rb, sampler = make_rb(2, lambda_max=1.0, warmup=0, beta=1.0)
        index = fill(rb, 2)
        sampler.update_scores(index, torch.tensor([0.8, 0.2]))
        out = rb.sample(2000)
        w = out["priority_weight"][out["index"] == 0]
        assert torch.allclose(w, torch.tensor(0.01), rtol=1e-6)
        assert (out["priority_weight"][out["index"] == 1] == 1).all()

    def test_weights_reach_dqn_loss_key(self):
        rb, sampler = make_rb(4, lambda_max=0.5, warmup=0, beta=0.4)
        fill(rb, 4)
        assert "priority_weight" in rb.sample(8).keys()


class TestDrawnStats:
    @pytest.mark.parametrize("threshold", [0.5, None])
    def test_counts_positives_among_sampled_indices_exactly(self, threshold):
        rb, sampler = make_rb(20, lambda_max=0.5, warmup=0, threshold=threshold)
        index = fill(rb, 20)
        scores = torch.tensor([0.9, 0.2, 0.7, 0.5] + [0.1] * 12 + [0.0] * 4)
        sampler.update_scores(index[:16], scores[:16])  # the last 4 stay unscored: never positive
        positive = torch.zeros(20, dtype=torch.bool)
        positive[:16] = scores[:16] > 0.5  # 0.5 itself is not above the cut
        drawn = hits = 0
        for _ in range(30):
            out = rb.sample(16)
            drawn += 16
            hits += int(positive[out["index"]].sum())
        stats = sampler.stats()
        assert (stats["drawn"], stats["drawn_positive"]) == (drawn, hits)
        # 2 of 20 stored slots are positive, but prioritised draws favour them
        assert hits / drawn > 2 / 20

    def test_counts_survive_state_dict(self):
        rb, sampler = make_rb(8, lambda_max=1.0, warmup=0)
        index = fill(rb, 8)
        sampler.update_scores(index, torch.tensor([1.0] + [0.0] * 7))
        rb.sample(10)
        other = VLMPrioritizedSampler(8)
        other.load_state_dict(sampler.state_dict())
        assert other.stats()["drawn"] == 10 and other.stats()["drawn_positive"] == sampler.stats()["drawn_positive"]


class TestSchedule:
    def test_linear_warmup(self):
        rb, sampler = make_rb(8, lambda_max=0.5, warmup=10)
        fill(rb, 8)
        seen = []
        for _ in range(15):
            seen.append(sampler.lambda_)
            rb.sample(2)
        assert seen[:11] == pytest.approx([0.05 * k for k in range(11)])
        assert seen[11:] == pytest.approx([0.5] * 4)
        assert sampler.stats()["sample_calls"] == 15

    def test_lambda_zero_is_uniform_even_if_scored(self):
        rb, sampler = make_rb(8, lambda_max=0.5, warmup=10**9)
        index = fill(rb, 8)
        sampler.update_scores(index, torch.tensor([1.0] + [0.0] * 7))
        assert_matches(draw_counts(rb, 8, draws=40_000, batch=40_000), np.full(8, 1 / 8))

    def test_linear_scheduler_drives_lambda(self):
        rb, sampler = make_rb(8, lambda_max=1.0, warmup=1000)
        fill(rb, 8)
        sampler.lambda_ = 0.0
        sched = LinearScheduler(rb, "lambda_", final_value=0.8, num_steps=4)
        values = []
        for _ in range(6):
            sched.step()
            values.append(sampler.lambda_)
        assert values == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.8, 0.8])
        with pytest.raises(ValueError, match="lambda_ must be in \\[0, 1\\]"):
            sampler.lambda_ = 1.2


class TestGenerations:
    def test_stale_scores_are_dropped(self):
        rb, sampler = make_rb(6, lambda_max=1.0, warmup=0)
        index = fill(rb, 6)
        gen = sampler.generations(index)
        assert gen.tolist() == [1] * 6
        index2 = fill(rb, 3, start=6)  # wraps: slots 0..2 rewritten
        gen2 = sampler.generations(index2)
        assert gen2.tolist() == [2, 2, 2]
        # late scores for the first insertion: slots 0..2 stale, 3..5 current
        applied = sampler.update_scores(index, torch.ones(6), gen)
        assert applied == 3
        assert sampler.stats()["stale_drops"] == 3
        assert sampler.stats()["fraction_scored"] == pytest.approx(0.5)
        # current scores for the second insertion land
        assert sampler.update_scores(index2, torch.zeros(3), gen2) == 3
        assert sampler.stats()["fraction_scored"] == 1.0
        assert sampler.stats()["stale_drops"] == 3
        np.testing.assert_allclose(sampler.scores(torch.arange(6)), [0, 0, 0, 1, 1, 1])

    def test_an_extend_larger_than_the_storage_drops_the_overwritten_rows_scores(self):
        """9 rows into 6 slots: rows 0-2 are overwritten by rows 6-8 within the same extend."""
        rb, sampler = make_rb(6, lambda_max=1.0, warmup=0)
        index = fill(rb, 9)
        assert index.tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2]
        gen = sampler.generations(index)
        assert gen.tolist()[:3] == [-1, -1, -1] and (gen[3:] >= 1).all()
        # the rows' scores arrive: rows 0-2 (gone) said 1, rows 6-8 (stored) said 0
        assert sampler.update_scores(index, torch.tensor([1.0] * 3 + [0.5] * 3 + [0.0] * 3), gen) == 6
        assert sampler.stats()["stale_drops"] == 3
        np.testing.assert_allclose(sampler.scores(torch.arange(6)), [0, 0, 0, 0.5, 0.5, 0.5])

    def test_reduce_max(self):
        rb, sampler = make_rb(4)
        index = fill(rb, 4)
        sampler.update_scores(torch.tensor([0, 0, 1]), torch.tensor([0.2, 0.7, 0.4]), reduce="max")
        sampler.update_scores(torch.tensor([1, 2]), torch.tensor([0.1, 0.3]), reduce="max")
        np.testing.assert_allclose(sampler.scores(torch.arange(3)), [0.7, 0.4, 0.3])
        sampler.update_scores(torch.tensor([0]), torch.tensor([0.1]))  # replace
        assert sampler.scores(0).item() == pytest.approx(0.1)

    def test_scores_nan_without_a_score(self):
        rb, sampler = make_rb(6)
        index = fill(rb, 4)
        sampler.update_scores(index[:3], torch.tensor([0.0, 0.6, 1.0]))
        fill(rb, 2, start=4)
        fill(rb, 1, start=6)  # wraps: slot 0 rewritten, its score gone
        got = sampler.scores(torch.arange(6))
        assert got.dtype == torch.float32 and got.shape == (6,)
        np.testing.assert_array_equal(got.numpy(), np.array([np.nan, 0.6, 1.0, np.nan, np.nan, np.nan], np.float32))
        assert sampler.scores(torch.tensor([[2, 1]])).tolist() == [1.0, pytest.approx(0.6)]  # flattened
        with pytest.raises(ValueError, match="index out of range"):
            sampler.scores(6)

    def test_empty_keeps_generations(self):
        rb, sampler = make_rb(4)
        index = fill(rb, 4)
        gen = sampler.generations(index)
        rb.empty()
        assert sampler.update_scores(index, torch.ones(4), gen) == 0
        index = fill(rb, 4)
        assert sampler.generations(index).tolist() == [2] * 4


@pytest.mark.parametrize("samples", [200, pytest.param(2000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_updates_while_sampling(backend, samples):
    cap = 4096
    rb, sampler = make_rb(cap, lambda_max=0.5, warmup=100, td_boost=True, tree_backend=backend)
    index = fill(rb, cap)
    gen = sampler.generations(index)
    stop = threading.Event()
    errors = []
    rounds = [0]

    def writer():
        g = torch.Generator().manual_seed(1)
        try:
            while not stop.is_set():
                sel = torch.randint(0, cap, (256,), generator=g)
                sampler.update_scores(sel, torch.rand(256, generator=g), gen[sel])
                rb.extend(TensorDict(obs=torch.zeros(32), batch_size=[32]))  # bumps generations
                rounds[0] += 1
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        done = 0
        # a few writer rounds at least, so stale write-backs happen whatever the thread timing
        while (done < samples or rounds[0] < 3) and not errors:
            out = rb.sample(64)
            rb.update_tensordict_priority(out.set("td_error", torch.rand(64)))
            done += 1
    finally:
        stop.set()
        thread.join()
    assert not errors
    state = sampler._state
    p, g, is_scored, is_unscored = state.leaves(slice(None))
    assert state.tree_v.root() == pytest.approx(np.where(is_scored, p * g, 0).sum(), rel=1e-9)
    assert state.tree_u.root() == pytest.approx(np.where(is_unscored, g, 0).sum(), rel=1e-9)
    assert state.n_scored == int(is_scored.sum())
    assert sampler.stats()["stale_drops"] > 0


class TestCheckpoint:
    @pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage])
    def test_dumps_loads_same_samples(self, tmp_path, storage_cls):
        cap = 64

        def build():
            return make_rb(cap, storage=storage_cls(cap), lambda_max=0.6, warmup=50, td_boost=True,
                           beta=0.3, seed=3)

        rb, sampler = build()
        index = fill(rb, 80)  # wraps around
        sampler.update_scores(index[-40:], torch.rand(40, generator=torch.Generator().manual_seed(0)))
        for _ in range(7):
            out = rb.sample(16)
            rb.update_tensordict_priority(out.set("td_error", torch.rand(16)))
        sampler.provenance = {"backend": "oracle", "prompt_hash": "abc"}
        rb.dumps(tmp_path / "ckpt")
        expected = [rb.sample(32) for _ in range(5)]

        rb2, sampler2 = build()
        rb2.loads(tmp_path / "ckpt")
        got = [rb2.sample(32) for _ in range(5)]
        for a, b in zip(expected, got):
            assert torch.equal(a["index"], b["index"])
            assert torch.equal(a["priority_weight"], b["priority_weight"])
            assert torch.equal(a["obs"], b["obs"])
        assert sampler2.provenance == {"backend": "oracle", "prompt_hash": "abc"}
        assert sampler2.stats() == sampler.stats()
        assert sampler2.generations(torch.arange(cap)).tolist() == sampler.generations(torch.arange(cap)).tolist()

    def test_state_dict_round_trip_and_pickle(self):
        rb, sampler = make_rb(16, lambda_max=0.5, warmup=5, threshold=None)
        index = fill(rb, 16)
        sampler.update_scores(index, torch.linspace(0, 1, 16))
        for _ in range(3):
            rb.sample(4)
        state = sampler.state_dict()
        other = VLMPrioritizedSampler(16)  # different config: the checkpoint's wins
        other.load_state_dict(state)
        assert other.threshold is None and other.warmup == 5 and other.lambda_ == sampler.lambda_
        np.testing.assert_allclose(other.probabilities().numpy(), sampler.probabilities().numpy())
        clone = pickle.loads(pickle.dumps(sampler))
        np.testing.assert_allclose(clone.probabilities().numpy(), sampler.probabilities().numpy())

    def test_a_subclass_with_its_own_signature_pickles(self):
        """Unpickling rebuilds with this class's __init__ (a subclass taking PrioritizedSampler's arguments, as
        benchmarks/torchrl_rb_suite does, failed with "unexpected keyword argument 'tree_backend'")."""
        sampler = _PERSignature(16, 0.7, 0.5)
        fill(TensorDictReplayBuffer(storage=LazyTensorStorage(16), sampler=sampler), 16)
        clone = pickle.loads(pickle.dumps(sampler))
        assert type(clone) is _PERSignature and clone.alpha == 0.7
        np.testing.assert_allclose(clone.probabilities().numpy(), sampler.probabilities().numpy())

    @pytest.mark.parametrize("name, value, match", [
        ("score", float("nan"), "'score' holds NaN or infinite values \\(first at slot 2\\)"),
        ("td", float("inf"), "'td' holds NaN or infinite values"),
        ("td", -1.0, "'td' must be >= 0, got -1.0 at slot 2"),
        ("score", 1.5, "'score' must be in \\[0, 1\\]"),
        ("scored", 2, "'scored' must be 0 or 1"),
        ("generation", -3, "'generation' must be >= 0"),
        ("max_td", float("nan"), "max_td=nan and max_p=.* must be finite"),
    ])
    def test_load_state_dict_refuses_values_no_sampler_writes(self, name, value, match):
        # issue 35: load_state_dict accepted NaN tensors
        rb, sampler = make_rb(8)
        fill(rb, 8)
        state = sampler.state_dict()
        if name == "max_td":
            state[name] = value
        else:
            state[name] = state[name].to(torch.float32 if isinstance(value, float) else torch.int64).clone()
            state[name][2] = value
        before = sampler.state_dict()
        with pytest.raises(ValueError, match=match):
            VLMPrioritizedSampler(8).load_state_dict(state)
        with pytest.raises(ValueError, match=match):
            sampler.load_state_dict(state)
        assert all(torch.equal(v, sampler.state_dict()[k]) for k, v in before.items() if torch.is_tensor(v))

    def test_capacity_mismatch(self):
        state = VLMPrioritizedSampler(8).state_dict()
        with pytest.raises(ValueError, match="max_capacity=8"):
            VLMPrioritizedSampler(16).load_state_dict(state)


def v1_checkpoint() -> dict:
    """A schema-1 state as ``state_dict()`` wrote it before the slot state was split out.

    Frozen here on purpose: checkpoints written by earlier versions must keep loading and
    sampling the same (the expected numbers below come from that earlier code).
    """
    return {
        "_schema_version": 1,
        "config": {"max_capacity": 6, "lambda_max": 0.6, "warmup": 10, "default_priority": "max",
                   "threshold": 0.5, "eps": 0.01, "td_boost": True, "alpha": 0.5, "beta": 0.3,
                   "reduction": "max"},
        "sample_calls": 4, "drawn": 40, "drawn_positive": 12, "lambda_override": None,
        "stale_drops": 3, "max_p": 1.0, "max_td": 2.0, "provenance": {"backend": "oracle"},
        "score": torch.tensor([0.9, 0.2, 0.0, 0.7, 0.0, 0.0]),
        "scored": torch.tensor([True, True, False, True, False, False]),
        "filled": torch.tensor([True, True, True, True, True, False]),
        "td": torch.tensor([0.5, 1.0, 2.0, 0.1, 2.0, 0.0]),
        "generation": torch.tensor([2, 1, 1, 1, 1, 0]),
    }


class TestSchemaV1:
    def check_restored(self, sampler):
        assert sampler.unscored_priority_mode == "max" and sampler.td_boost and sampler.alpha == 0.5
        assert sampler.provenance == {"backend": "oracle"}
        assert sampler.stats() == {
            "num_filled": 5, "fraction_scored": 0.6, "mean_score": pytest.approx(0.6), "positive_fraction": 2 / 3,
            "lambda": pytest.approx(0.24), "lambda_effective": pytest.approx(0.24),
            "max_oversampling_ratio": pytest.approx(5 * 0.23943988574840758, rel=1e-12),
            "unscored_priority": 1.0, "stale_drops": 3, "sample_calls": 4, "drawn": 40, "drawn_positive": 12,
        }
        np.testing.assert_allclose(
            sampler.probabilities(5).numpy(),
            [0.19604500268717834, 0.1526198294965317, 0.23943988574840758, 0.1724553963194748, 0.23943988574840758],
            rtol=1e-12,
        )
        np.testing.assert_array_equal(sampler.scores(torch.arange(6)).numpy(),
                                      np.array([0.9, 0.2, np.nan, 0.7, np.nan, np.nan], np.float32))
        assert sampler.generations(torch.arange(6)).tolist() == [2, 1, 1, 1, 1, 0]
        storage = LazyTensorStorage(6)
        storage.set(torch.arange(5), TensorDict(obs=torch.arange(5.0), batch_size=[5]))
        sampler._rng = torch.Generator().manual_seed(0)
        index, info = sampler.sample(storage, 12)
        assert index.tolist() == [1, 3, 2, 2, 2, 1, 4, 3, 1, 3, 0, 2]
        np.testing.assert_allclose(
            info["priority_weight"].numpy(),
            [1.0, 0.9640071392059326, 0.8736235499382019, 0.8736235499382019, 0.8736235499382019, 1.0,
             0.8736235499382019, 0.9640071392059326, 1.0, 0.9640071392059326, 0.9276337623596191,
             0.8736235499382019],
            rtol=1e-7,
        )

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_load_state_dict(self, backend):
        sampler = VLMPrioritizedSampler(6, tree_backend=backend)
        sampler.load_state_dict(v1_checkpoint())
        self.check_restored(sampler)

    def test_state_dict_still_writes_schema_1(self):
        sampler = VLMPrioritizedSampler(6)
        sampler.load_state_dict(v1_checkpoint())
        written, expected = sampler.state_dict(), v1_checkpoint()
        assert list(written) == list(expected)
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert written[key].dtype == value.dtype and torch.equal(written[key], value), key
            else:
                assert written[key] == value, key

    def test_loads_directory_in_the_v1_layout(self, tmp_path):
        # what dumps() wrote: per-slot arrays as a memory-mapped TensorDict, the rest as JSON
        state = v1_checkpoint()
        arrays = {k: state.pop(k) for k in ("score", "scored", "filled", "td", "generation")}
        TensorDict(arrays, batch_size=[6]).memmap(tmp_path / "slots")
        (tmp_path / "sampler_metadata.json").write_text(json.dumps(state, indent=2))
        sampler = VLMPrioritizedSampler(6)
        sampler.loads(tmp_path)
        sampler.dumps(tmp_path / "again")  # and dumps() writes the same layout back
        assert json.loads((tmp_path / "again" / "sampler_metadata.json").read_text()) == state
        again = TensorDict.load_memmap(tmp_path / "again" / "slots")
        assert sorted(again.keys()) == sorted(arrays) and all(torch.equal(again[k], v) for k, v in arrays.items())
        self.check_restored(sampler)
        sampler2 = VLMPrioritizedSampler(6)
        sampler2.loads(tmp_path / "again")
        self.check_restored(sampler2)

    def test_unpickles_v1_pickle_state(self):
        sampler = VLMPrioritizedSampler.__new__(VLMPrioritizedSampler)
        sampler.__setstate__({"state": v1_checkpoint(), "tree_backend": "numpy"})
        self.check_restored(sampler)

    def test_other_schema_rejected(self):
        state = v1_checkpoint()
        state["_schema_version"] = 2
        with pytest.raises(ValueError, match="Unsupported VLMPrioritizedSampler state schema 2"):
            VLMPrioritizedSampler(6).load_state_dict(state)


def test_prefilled_storage():
    storage = LazyTensorStorage(10)
    storage.set(torch.arange(6), TensorDict(obs=torch.zeros(6), batch_size=[6]))
    sampler = VLMPrioritizedSampler(10, lambda_max=1.0, warmup=0)
    rb = TensorDictReplayBuffer(storage=storage, sampler=sampler)
    idx = rb.sample(500)["index"]
    assert idx.max() < 6
    assert sampler.stats()["num_filled"] == 6


# ---------------------------------------------------------------------- the slot state itself
def tree_snapshot(tree) -> tuple:
    """What a tree answers: its root and the leaf found for a grid of masses."""
    root = tree.root()
    if tree.kind == "min" or not root > 0:
        return (root,)
    return root, tree.find(np.linspace(0.0, root, 257)[:-1]).tolist()


def snapshot(state: SlotState) -> list:
    trees = [state.tree_v, state.tree_u, state.tree_p, *(state.min_trees or ()), *(state.max_trees or ())]
    return [None if t is None else tree_snapshot(t) for t in trees]


def random_workload(state: SlotState, rng: np.random.Generator, steps: int = 60) -> None:
    cap = state.capacity
    for _ in range(steps):
        op = rng.integers(0, 4)
        index = rng.integers(0, cap, int(rng.integers(1, 24)))  # with duplicates
        if op == 0:
            state.write(index)
        elif op == 1:
            generation = state.generation[index] - (rng.random(index.size) < 0.2)  # some stale
            state.set_scores(index, rng.random(index.size), generation, "max" if rng.random() < 0.5 else "replace")
        elif op == 2:
            state.set_td(index, rng.random(index.size) * 3)
        else:
            state.fill(np.unique(index))


class TestSlotState:
    def test_priority_config(self):
        scores = np.array([0.0, 0.5, 0.6, 1.0], dtype=np.float32)
        assert PriorityConfig(threshold=0.5, eps=0.01).priority(scores).tolist() == [0.01, 0.01, 1.0, 1.0]
        np.testing.assert_array_equal(PriorityConfig(threshold=None, eps=0.1).priority(scores),
                                      np.maximum(scores.astype(np.float64), 0.1))
        config = PriorityConfig(eps=0.5, alpha=2.0)
        assert config.td_factor(np.array([0.5, 1.5], np.float32)).tolist() == [1.0, 4.0]
        assert (PriorityConfig(threshold=0.3).cut, PriorityConfig(threshold=None).cut) == (0.3, 0.5)
        with pytest.raises(dataclasses.FrozenInstanceError):
            config.alpha = 1.0

    def test_leaves_and_counts(self):
        state = SlotState(6, PriorityConfig(td_boost=True, alpha=1.0, eps=0.5))
        state.write(np.array([0, 1, 2, 3, 3]))
        assert (state.n_filled, state.n_scored, state.generation.tolist()) == (4, 0, [1, 1, 1, 1, 0, 0])
        assert state.set_scores(np.array([0, 1, 5]), np.array([0.9, 0.1, 0.9])) == 2  # slot 5 never written
        assert (state.n_scored, state.stale_drops, state.max_p) == (2, 1, 1.0)
        state.set_td(np.array([2, 4]), np.array([1.5, 0.5]))  # slot 4 gets filled
        assert state.n_filled == 5 and state.max_td == 1.5
        p, g, is_scored, is_unscored = state.leaves(slice(None))
        assert p.tolist() == [1.0, 0.5, 0.5, 0.5, 0.5, 0.5]
        assert g.tolist() == [1.5, 1.5, 2.0, 1.5, 1.0, 0.5]  # td (1 for new slots, PER) + eps
        assert is_scored.tolist() == [True, True, False, False, False, False]
        assert is_unscored.tolist() == [False, False, True, True, True, False]
        assert state.tree_v.root() == 1.0 * 1.5 + 0.5 * 1.5
        assert state.tree_u.root() == 2.0 + 1.5 + 1.0
        assert state.tree_p.root() == 1.5
        state.write(np.array([0]))  # rewritten: unscored again, with the largest TD seen
        assert (state.n_scored, state.td[0], np.isnan(state.scores(np.array([0]))[0])) == (1, 1.5, True)

    @pytest.mark.parametrize("mode, expected", [("mean", (1.0 + 0.01 + 0.01) / 3), ("max", 1.0), (0.3, 0.3),
                                                (0.001, 0.01)])
    def test_unscored_priority(self, mode, expected):
        state = SlotState(8, PriorityConfig(unscored=mode))
        state.write(np.arange(6))
        assert state.unscored_priority() == (1.0 if isinstance(mode, str) else expected)  # nothing scored yet
        state.set_scores(np.arange(3), np.array([0.9, 0.2, 0.1]))
        assert state.unscored_priority() == pytest.approx(expected)

    def test_dedupe(self):
        state = SlotState(8)
        index, values = state.dedupe(np.array([3, 1, 3, 2]), np.array([0.1, 0.2, 0.3, 0.4]))
        assert sorted(zip(index.tolist(), values.tolist())) == [(1, 0.2), (2, 0.4), (3, 0.3)]  # last wins
        index, values = state.dedupe(np.array([3, 1, 3]), np.array([0.5, 0.2, 0.3]), "max")
        assert (index.tolist(), values.tolist()) == ([1, 3], [0.2, 0.5])

    def test_reduce_max_and_generations(self):
        state = SlotState(4)
        state.write(np.arange(4))
        gen = state.generation[:2].copy()
        state.set_scores(np.array([0, 1]), np.array([0.7, 0.4]), gen)
        assert state.set_scores(np.array([0, 1]), np.array([0.2, 0.9]), gen, "max") == 2
        np.testing.assert_allclose(state.scores(np.arange(2)), [0.7, 0.9])
        state.write(np.array([1]))
        assert state.set_scores(np.array([0, 1]), np.array([0.1, 0.1]), gen) == 1  # slot 1 is stale
        assert state.stale_drops == 1

    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("config", [PriorityConfig(), PriorityConfig(threshold=None, td_boost=True, alpha=0.7),
                                        PriorityConfig(unscored="max", td_boost=True)])
    def test_incremental_trees_equal_rebuild(self, backend, config):
        rng = np.random.default_rng(0)
        live = SlotState(37, config, backend)
        live.ensure_min_trees()
        live.ensure_max_trees()
        random_workload(live, rng)
        fresh = SlotState(37, config, backend)
        fresh.load(live.arrays(), max_p=live.max_p, max_td=live.max_td, stale_drops=live.stale_drops)
        fresh.ensure_min_trees()
        fresh.ensure_max_trees()
        assert (fresh.n_filled, fresh.n_scored) == (live.n_filled, live.n_scored)
        assert snapshot(fresh) == snapshot(live)
        if backend == "numpy":  # every node recomputed from its children: bit-identical arrays
            for name in ("tree_v", "tree_u", "tree_p"):
                if getattr(live, name) is not None:
                    np.testing.assert_array_equal(getattr(live, name).tree, getattr(fresh, name).tree)
            for a, b in zip((*live.min_trees, *live.max_trees), (*fresh.min_trees, *fresh.max_trees)):
                np.testing.assert_array_equal(a.tree, b.tree)
        p, g, is_scored, is_unscored = live.leaves(slice(None))
        assert live.tree_v.root() == pytest.approx(np.where(is_scored, p * g, 0).sum(), rel=1e-12)
        assert live.tree_u.root() == pytest.approx(np.where(is_unscored, g, 0).sum(), rel=1e-12)
        assert live.unscored_priority() == fresh.unscored_priority()
        # the max trees' answer equals the O(N) scan of the arrays
        p_bar = live.unscored_priority()
        scan = SlotState(37, config, backend)
        scan.load(live.arrays(), max_p=live.max_p, max_td=live.max_td, stale_drops=live.stale_drops)
        assert scan.max_trees is None and live.max_leaf(p_bar) == scan.max_leaf(p_bar)

    def test_refresh_of_rescored_slots_leaves_unscored_tree_alone(self):
        state = SlotState(8)
        state.write(np.arange(8))
        state.set_scores(np.arange(4), np.full(4, 0.9))
        before = state.tree_u.tree.copy()
        state.set_scores(np.arange(4), np.full(4, 0.1))  # re-scores: no unscored leaf changes
        np.testing.assert_array_equal(state.tree_u.tree, before)
        assert state.tree_v.root() == pytest.approx(4 * 0.01)

    def test_reconfigure(self):
        state = SlotState(8, PriorityConfig(td_boost=True, alpha=0.5))
        state.write(np.arange(8))
        state.set_td(np.arange(8), np.linspace(0, 2, 8))
        state.reconfigure(alpha=2.0)  # leaves depend on alpha with td_boost: rebuilt
        assert state.tree_u.root() == pytest.approx(((np.linspace(0, 2, 8).astype(np.float32) + 0.01) ** 2).sum())
        state.reconfigure(td_boost=False)  # no TD factor, no tree_p
        assert state.tree_p is None and state.tree_u.root() == 8.0
        state.reconfigure(unscored=0.5)
        assert state.unscored_priority() == 0.5 and state.tree_u.root() == 8.0

    def test_draw(self):
        state = SlotState(8, PriorityConfig(threshold=None, eps=0.0, unscored=1.0))
        state.write(np.arange(4))  # 4 of 8 filled
        state.set_scores(np.arange(3), np.array([0.5, 0.0, 0.25]))  # v = [.5, 0, .25], slot 3 unscored: 1
        u = np.array([0.0, 0.2, 0.4, 0.5, 0.99])
        index, total, p_bar = state.draw(np.stack([np.ones(5), u]), lam=0.5, n=4)  # no draw prioritized
        assert (index.tolist(), total, p_bar) == ([0, 0, 1, 2, 3], 1.75, 1.0)
        index, _, _ = state.draw(np.stack([np.zeros(5), u]), lam=0.5, n=4)  # all by mass in [0, 1.75)
        assert index.tolist() == [0, 0, 2, 3, 3]  # mass .35 -> slot 0, .7 -> slot 2, .875+ -> slot 3
        assert state.count_positive(np.array([0, 0, 2, 3])) == 0  # 0.5 is not above the cut
        state.set_scores(np.array([3]), np.array([0.75]))
        assert state.count_positive(np.array([0, 3, 3])) == 2

    def test_probabilities_and_weights(self):
        state = SlotState(4)
        state.write(np.arange(4))
        state.set_scores(np.arange(3), np.array([1.0, 0.0, 0.0]))
        p_bar = (1 + 0.01 + 0.01) / 3
        v = np.array([1.0, 0.01, 0.01, p_bar])
        q = 0.5 * v / v.sum() + 0.5 / 4
        np.testing.assert_allclose(state.probabilities(4, 0.5), q, rtol=1e-12)
        w = state.importance_weights(np.arange(4), 0.5, 4, v.sum(), p_bar, 0.5)
        np.testing.assert_allclose(w, (q / q.min()) ** -0.5, rtol=1e-12)

    def test_reset(self):
        state = SlotState(4)
        state.write(np.arange(4))
        state.set_scores(np.arange(4), np.ones(4))
        state.reset(keep_generations=True)
        assert (state.n_filled, state.n_scored, state.generation.tolist(), state.tree_v.root()) == (0, 0, [1] * 4, 0.0)
        state.reset()
        assert state.generation.tolist() == [0] * 4


# ---------------------------------------------------------------------- statistics over [0, end) (issue 38)
class TestStatisticsMatchReference:
    """The statistics that read the slots below the highest filled one only return what the scans over every
    slot they replaced returned (``tests/_slot_state_reference.py``), bit for bit."""

    CONFIGS = [PriorityConfig(), PriorityConfig(threshold=None, td_boost=True, alpha=0.7),
               PriorityConfig(unscored="max", td_boost=True), PriorityConfig(unscored=0.2, eps=0.0)]

    @staticmethod
    def states(backend, config, capacity, rng):
        """States along a random workload: empty, filled below a quarter, one slot filled far beyond, nothing
        scored, partly scored, everything scored, reset."""
        state = SlotState(capacity, config, backend)
        yield state
        state.write(np.arange(capacity // 4))
        yield state
        state.set_td(np.array([capacity - 1]), np.array([2.0]))  # fills a slot beyond the written ones
        yield state
        state.write(rng.integers(0, capacity, capacity // 2))
        yield state
        for _ in range(6):
            random_workload(state, rng, steps=10)
            yield state
        filled = np.flatnonzero(state.filled)
        state.set_scores(filled, rng.random(filled.size))
        yield state
        state.reset(keep_generations=True)
        yield state

    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("config", CONFIGS)
    def test_statistics(self, backend, config):
        rng = np.random.default_rng(1)
        for state in self.states(backend, config, 300, rng):
            filled = np.flatnonzero(state.filled)
            assert state.end == (int(filled[-1]) + 1 if filled.size else 0)
            np.testing.assert_array_equal(state.score_summary(), reference.score_summary(state))
            p_bar = state.unscored_priority()
            assert state.max_trees is None and state.max_leaf(p_bar) == reference.max_leaf_scan(state, p_bar)
            loaded = SlotState(300, config, backend)
            loaded.load(state.arrays(), max_p=state.max_p, max_td=state.max_td, stale_drops=state.stale_drops)
            assert loaded.end == state.end


class _PERSignature(VLMPrioritizedSampler):
    def __init__(self, max_capacity, alpha, beta):
        super().__init__(max_capacity, lambda_max=1.0, warmup=0, td_boost=True, alpha=alpha, beta=beta)
