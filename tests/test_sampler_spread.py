"""Episode credit (``VLMPrioritizedSampler(spread=rho)``): a positive slot lifts the slots before it in its
episode to ``p * rho**d``; exact priorities against a reference, sampling frequencies, broken links, checkpoints,
the links a clip stream and the one-call buffer make."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from vlmrb_torchrl import ClipSpec, ClipStream, VLMPrioritizedSampler, make_vlm_replay_buffer

from test_sampler import assert_matches, draw_counts


def reference_priorities(scores, episodes, *, rho, eps=0.01, threshold=0.5):
    """Independent reference: each slot's priority is max(own, max over later positives in its episode of
    p_pos * rho**d), credit kept only above eps."""
    scores = np.asarray(scores, dtype=np.float64)
    own = scores if threshold is None else (scores > threshold).astype(np.float64)
    own = np.maximum(own, eps)
    out = own.copy()
    for episode in episodes:  # slots in time order
        for i, slot in enumerate(episode):
            for j in range(i + 1, len(episode)):
                later = own[episode[j]]
                if later > eps:
                    credit = later * rho ** (j - i)
                    if credit > eps:
                        out[slot] = max(out[slot], credit)
    return out


def chain(sampler, slots):
    """Links ``slots`` (time order) as one episode."""
    slots = torch.as_tensor(slots)
    previous = torch.cat([torch.tensor([-1]), slots[:-1]])
    sampler.link(slots, previous)


def priorities(sampler, n):
    """The priorities of slots 0..n-1 as the trees see them (credit included)."""
    p, _, _, _ = sampler._state.leaves(slice(0, n))
    return p


@pytest.mark.parametrize("threshold", [0.5, None])
def test_priorities_match_the_reference_for_interleaved_episodes_and_any_score_order(threshold):
    rng = np.random.default_rng(0)
    n, rho = 60, 0.8
    sampler = VLMPrioritizedSampler(n, spread=rho, threshold=threshold, lambda_max=1.0, warmup=0)
    sampler.mark_update(torch.arange(n))
    # three interleaved episodes over the slots
    owner = rng.integers(0, 3, n)
    episodes = [np.flatnonzero(owner == e).tolist() for e in range(3)]
    for episode in episodes:
        chain(sampler, episode)
    scores = np.where(rng.random(n) < 0.15, rng.uniform(0.6, 1.0, n), rng.uniform(0.0, 0.4, n)).astype(np.float32)
    order = rng.permutation(n)  # scores arrive in any order, in batches
    for part in np.array_split(order, 7):
        sampler.update_scores(torch.from_numpy(part), torch.from_numpy(scores[part]))
    expected = reference_priorities(scores, episodes, rho=rho, threshold=threshold)
    np.testing.assert_allclose(priorities(sampler, n), expected, rtol=1e-6)
    q = sampler.probabilities().numpy()
    np.testing.assert_allclose(q, expected / expected.sum(), rtol=1e-6)


def test_sampling_follows_the_credited_priorities():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), generator=torch.Generator().manual_seed(1),
                                sampler=VLMPrioritizedSampler(20, spread=0.7, lambda_max=0.5, warmup=0))
    sampler = rb.sampler
    rb.extend(TensorDict(obs=torch.arange(20.0), batch_size=[20]))
    chain(sampler, range(10))
    chain(sampler, range(10, 20))
    scores = torch.zeros(20)
    scores[9] = 1.0  # the first episode ends with a positive; the second has none
    sampler.update_scores(torch.arange(20), scores)
    expected = reference_priorities(scores.numpy(), [list(range(10)), list(range(10, 20))], rho=0.7)
    q = 0.5 * expected / expected.sum() + 0.5 / 20
    np.testing.assert_allclose(sampler.probabilities().numpy(), q, rtol=1e-6)
    assert_matches(draw_counts(rb, 20), q)


def test_a_rewritten_slot_breaks_the_chain_and_loses_its_credit():
    sampler = VLMPrioritizedSampler(10, spread=0.5, lambda_max=1.0, warmup=0)
    sampler.mark_update(torch.arange(6))
    chain(sampler, range(6))
    sampler.mark_update(torch.tensor([2]))  # slot 2 rewritten (the ring buffer wrapped) before the goal is scored
    sampler.update_scores(torch.arange(6), torch.tensor([0, 0, 0, 0, 0, 1.0]))
    np.testing.assert_allclose(priorities(sampler, 6), [0.01, 0.01, 0.01, 0.25, 0.5, 1.0])
    sampler.mark_update(torch.tensor([4]))  # a credited slot rewritten: back to unscored, no credit
    assert sampler._state.credit[4] == 0 and not sampler._state.scored[4]


def test_credit_stops_at_eps_and_a_later_positive_does_not_lower_it():
    sampler = VLMPrioritizedSampler(40, spread=0.5, eps=0.01, lambda_max=1.0, warmup=0)
    sampler.mark_update(torch.arange(40))
    chain(sampler, range(40))
    scores = torch.zeros(40)
    scores[[20, 39]] = 1.0
    sampler.update_scores(torch.tensor([39]), scores[[39]])  # the later positive first
    sampler.update_scores(torch.arange(39), scores[:39])
    p = priorities(sampler, 40)
    # 0.5**7 = 0.0078 <= eps: slots more than 6 steps before a positive keep eps
    np.testing.assert_allclose(p[13:21], [0.01, 0.5 ** 6, 0.5 ** 5, 0.5 ** 4, 0.5 ** 3, 0.25, 0.5, 1.0])
    np.testing.assert_allclose(p[:14], 0.01)
    assert sampler.stats()["credited_fraction"] == pytest.approx(12 / 40)  # 6 before each positive


def test_without_spread_links_are_ignored_and_the_state_keeps_its_layout():
    sampler = VLMPrioritizedSampler(8)
    sampler.mark_update(torch.arange(3))
    chain(sampler, range(3))
    sampler.update_scores(torch.arange(3), torch.tensor([0.0, 0.0, 1.0]))
    np.testing.assert_allclose(priorities(sampler, 3), [0.01, 0.01, 1.0])
    state = sampler.state_dict()
    assert "credit" not in state and "spread" not in state["config"] and "credited_fraction" not in sampler.stats()


def test_checkpoints_keep_credit_and_links(tmp_path):
    def build():
        return VLMPrioritizedSampler(16, spread=0.9, lambda_max=1.0, warmup=0)

    sampler = build()
    sampler.mark_update(torch.arange(8))
    chain(sampler, range(8))
    sampler.update_scores(torch.arange(4), torch.zeros(4))
    from_dict = build()
    from_dict.load_state_dict(sampler.state_dict())
    sampler.dumps(tmp_path / "s")
    from_disk = build()
    from_disk.loads(tmp_path / "s")
    for copy in (sampler, from_dict, from_disk):  # the goal is scored after the checkpoint: links must be there
        copy.update_scores(torch.arange(4, 8), torch.tensor([0.0, 0.0, 0.0, 1.0]))
    for copy in (from_dict, from_disk):
        assert copy.spread == 0.9
        torch.testing.assert_close(copy.probabilities(), sampler.probabilities())
    np.testing.assert_allclose(priorities(from_disk, 8), [0.9 ** d for d in range(7, -1, -1)], rtol=1e-6)


def test_a_state_with_broken_link_arrays_is_refused():
    sampler = VLMPrioritizedSampler(4, spread=0.5)
    state = sampler.state_dict()
    state["link"] = torch.full((4,), 9, dtype=torch.int64)
    with pytest.raises(ValueError, match="'link' must be in \\[0, 4\\], got 9 at slot 0"):
        VLMPrioritizedSampler(4, spread=0.5).load_state_dict(state)


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.1])
def test_spread_outside_zero_one_is_refused(bad):
    with pytest.raises(ValueError, match="spread must be None .* or a per-step decay in \\(0, 1\\]"):
        VLMPrioritizedSampler(4, spread=bad)


def test_link_checks_its_arguments():
    sampler = VLMPrioritizedSampler(4, spread=0.5)
    with pytest.raises(ValueError, match="previous has 1 values but index has 2 entries"):
        sampler.link(torch.tensor([0, 1]), torch.tensor([-1]))
    with pytest.raises(ValueError, match="previous must hold slots in \\[0, 4\\) or -1"):
        sampler.link(torch.tensor([0, 1]), torch.tensor([-1, 7]))


def test_the_clip_stream_forgets_trajectories_at_flush_and_reset():
    batch = TensorDict({("collector", "traj_ids"): torch.tensor([[4, 4]]),
                        ("next", "done"): torch.zeros(1, 2, 1, dtype=torch.bool)}, [1, 2])
    stream = ClipStream(ClipSpec(clip_len=2), frame_key=None)
    assert stream.predecessors(batch, torch.tensor([0, 1])).tolist() == [-1, 0]
    assert stream.predecessors(batch, torch.tensor([2, 3])).tolist() == [1, 2]
    stream.flush()  # a new collector: trajectory ids start again and mean other episodes
    assert stream.predecessors(batch, torch.tensor([5, 6])).tolist() == [-1, 5]
    stream.reset()
    assert stream.predecessors(batch, torch.tensor([7, 8])).tolist() == [-1, 7]


def test_the_buffer_links_its_episodes_and_the_oracle_goal_lifts_the_path():
    """One-call buffer, oracle scorer: an episode whose step 9 is the event; clips of 4 steps (start-assigned)
    make slots 6..9 positive, and the credit lifts 0..5 by 0.5**d (d counted from slot 6)."""
    def episode(length, event_at, traj):
        step = torch.arange(length)
        return TensorDict({"observation": torch.zeros(length, 2),
                           ("collector", "traj_ids"): torch.full((length,), traj),
                           ("next", "done"): step == length - 1,
                           ("next", "progress_event"): step == event_at}, batch_size=[length])

    with make_vlm_replay_buffer(64, "oracle:minigrid", clip_spec=ClipSpec(clip_len=4), batch_size=8,
                                sampler_kwargs={"spread": 0.5, "lambda_max": 1.0, "warmup": 0}) as rb:
        rb.extend(episode(6, -1, traj=0)[:3])   # an episode split over two extends, then a second one
        rb.extend(episode(6, -1, traj=0)[3:])
        rb.extend(episode(12, 9, traj=1))
    p = priorities(rb.sampler, 18)
    np.testing.assert_allclose(p[:6], 0.01)  # no event in the first episode
    np.testing.assert_allclose(p[6:12], [0.5 ** d for d in range(6, 0, -1)])
    np.testing.assert_allclose(p[12:16], 1.0)  # the clips that show the event
    np.testing.assert_allclose(p[16:], 0.01)  # after the event
