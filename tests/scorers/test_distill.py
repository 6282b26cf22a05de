"""DistilledScorer: contract, learning a rule, routing budget, fallback with hysteresis, checkpoints, staleness."""

from __future__ import annotations

import io
import pickle
import time

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from vlmrb_torchrl import ClipSpec, make_vlm_replay_buffer
from vlmrb_torchrl.scorers import (
    CallableScorer,
    ClipStudent,
    DistilledScorer,
    OracleScorer,
    make_scorer,
    prompt_hash,
    registered_scorer_forms,
)

from vlmrb_torchrl.testing import ScorerContract, make_clips
from ._shared import mean_pixel_score


def rule_clips(n: int, g: torch.Generator, *, steps: int = 4, size: int = 16, share: float = 0.3):
    """Dark noisy clips; in a ``share`` of them a bright 4x4 square appears in the last frame."""
    pixels = torch.randint(0, 60, (n, steps, size, size, 3), generator=g, dtype=torch.uint8)
    positive = torch.rand(n, generator=g) < share
    for i in positive.nonzero().flatten().tolist():
        r, c = torch.randint(0, size - 4, (2,), generator=g).tolist()
        pixels[i, -1, r : r + 4, c : c + 4] = 255
    return TensorDict(pixels=pixels, mask=torch.ones(n, steps, dtype=torch.bool), batch_size=[n, steps])


def square_appears(clips):
    return (clips["pixels"][:, -1].amax((1, 2, 3)) > 200).float()


class FixedStudent(nn.Module):
    """A student that does not learn: logit = (first pixel value - 100) / 10 (positive above 100)."""

    def __init__(self):
        super().__init__()
        self.in_keys = ["pixels"]
        self.unused = nn.Parameter(torch.zeros(()))  # Adam needs a parameter; its gradient is always 0

    def prepare(self, clips):
        return clips["pixels"][:, 0, 0, 0, :1].float()

    def forward(self, x):
        return (x[:, 0] - 100) / 10 + 0 * self.unused


class RecordingTeacher:
    """Labels clips by their first pixel value (``value > cut``); records the values it is asked about."""

    prompt = "above the cut?"
    in_keys = ["pixels", "mask"]
    provenance = {"backend": "recording", "prompt_hash": prompt_hash("above the cut?")}

    def __init__(self, cut: int = 100):
        self.cut = cut
        self.seen: list[list[int]] = []

    def score(self, clips):
        values = clips["pixels"][:, 0, 0, 0, 0].long()
        self.seen.append(values.tolist())
        return (values > self.cut).float()


def valued_clips(values) -> TensorDict:
    """One clip per value; every pixel of clip b holds ``values[b]``."""
    values = torch.as_tensor(values, dtype=torch.uint8)
    n = len(values)
    pixels = values.view(n, 1, 1, 1, 1).expand(n, 2, 4, 4, 3).contiguous()
    return TensorDict(pixels=pixels, mask=torch.ones(n, 2, dtype=torch.bool), batch_size=[n, 2])


class TestDistilledScorerContract(ScorerContract):
    def make_scorer(self):
        return DistilledScorer(CallableScorer(mean_pixel_score, prompt="bright?"), min_audits=8, agreement_window=16)


def test_student_learns_a_rule_and_is_trusted():
    g = torch.Generator().manual_seed(0)
    teacher = CallableScorer(square_appears, name="square")
    scorer = DistilledScorer(teacher, teacher_fraction=0.1, min_agreement=0.9, min_audits=100, agreement_window=200,
                             seed=0)
    assert not scorer.trusted
    for _ in range(40):
        scorer.score(rule_clips(32, g))
    stats = scorer.stats()
    assert stats["trusted"] and stats["recoveries"] == 1 and stats["fallbacks"] == 0
    assert stats["agreement_f1"] >= scorer.recover_agreement > scorer.min_agreement
    # trusted: the teacher scores exactly teacher_fraction of the clips (5% audits + 5% least confident)
    before = stats["teacher_calls"]
    held_out = [rule_clips(40, g) for _ in range(10)]
    scores = torch.cat([scorer.score(c) for c in held_out])
    assert scorer.stats()["teacher_calls"] - before == 40
    truth = torch.cat([square_appears(c) for c in held_out]).bool()
    predicted = scores > 0.5
    tp = int((predicted & truth).sum())
    f1 = 2 * tp / (2 * tp + int((predicted & ~truth).sum()) + int((~predicted & truth).sum()))
    assert f1 > 0.95


def test_routing_respects_the_budget_and_picks_the_least_confident():
    teacher = RecordingTeacher()
    # trusted after the first (all-teacher) call; an F1 >= 0 never falls back
    scorer = DistilledScorer(teacher, student=FixedStudent(), teacher_fraction=0.5, audit_share=0.5,
                             min_agreement=0.0, recover_agreement=0.0, min_audits=1)
    values = list(range(0, 200, 10))  # 20 clips; p = sigmoid((v - 100) / 10): v = 100 is the least sure
    scorer.score(valued_clips(values))
    assert teacher.seen == [values] and scorer.trusted
    margin = {v: abs(torch.sigmoid(torch.tensor((v - 100) / 10)).item() - 0.5) for v in values}
    for _ in range(10):
        audited = scorer.counters["audited"]
        out = scorer.score(valued_clips(values))
        routed = teacher.seen[-1]
        assert len(routed) == 10 and scorer.counters["audited"] - audited == 5  # 5 audits + 5 least confident
        assert len(set(routed)) == 10
        for v in set(values) - set(routed):  # the 5 least-confident non-audited clips all went to the teacher
            assert sum(margin[r] <= margin[v] for r in routed) >= 5
            assert out[values.index(v)].item() == pytest.approx(torch.sigmoid(torch.tensor((v - 100) / 10)).item())
        for r in routed:  # teacher-scored clips carry the teacher's score
            assert out[values.index(r)].item() == float(r > 100)
    confusion = [scorer.counters[f"trusted_audit_{k}"] for k in ("tp", "fp", "fn", "tn")]
    assert sum(confusion) == 50 and confusion[1] == confusion[2] == 0 and scorer.stats()["trusted_audit_f1"] == 1.0
    # fractional budgets carry over between calls: 7 clips a call at 10% -> 0.35 audits + 0.35 others a call
    teacher.seen.clear()
    scorer.teacher_fraction = 0.1
    for _ in range(100):
        scorer.score(valued_clips(values[:7]))
    assert sum(len(s) for s in teacher.seen) in (69, 70)  # floor(35) + floor(35), up to float rounding
    assert scorer.stats()["teacher_calls"] + scorer.stats()["student_calls"] == 20 * 11 + 700


def test_fallback_below_min_agreement_and_hysteresis():
    teacher = RecordingTeacher(cut=100)
    scorer = DistilledScorer(teacher, student=FixedStudent(), teacher_fraction=0.2, audit_share=1.0,
                             min_agreement=0.9, recover_agreement=0.95, agreement_window=40, min_audits=20)
    g = torch.Generator().manual_seed(1)

    def batch():
        return valued_clips(torch.randint(0, 20, (5,), generator=g) * 10)

    history = []  # (trusted before, F1 after, trusted after, teacher calls in the call)
    for cut in [100] * 10 + [150] * 20 + [100] * 40:  # the teacher changes its mind, then changes it back
        teacher.cut = cut
        before, calls = scorer.trusted, scorer.counters["teacher_calls"]
        scorer.score(batch())
        history.append((before, scorer.agreement()["f1"], scorer.trusted, scorer.counters["teacher_calls"] - calls))
    stats = scorer.stats()
    assert stats["fallbacks"] == 1 and stats["recoveries"] == 2 and scorer.trusted
    assert stats["trusted_audit_fp"] > 0 and stats["trusted_audit_fn"] == 0  # the cut moved up: false positives
    for before, f1, after, calls in history:
        assert calls == (1 if before else 5)  # trusted: the budget; untrusted: the teacher scores everything
        if before and not after:
            assert f1 < 0.9
        if after and not before:
            assert f1 >= 0.95
        if before and after:
            assert f1 >= 0.9
    # the hysteresis band was crossed: untrusted at an F1 above the floor but below the recovery level
    assert any(not before and not after and 0.9 <= f1 < 0.95 for before, f1, after, _ in history)


def test_checkpoint_resume_restores_the_student_exactly():
    g = torch.Generator().manual_seed(2)
    batches = [rule_clips(24, g) for _ in range(20)]

    def build(seed):
        return DistilledScorer(CallableScorer(square_appears, name="square"), teacher_fraction=0.2, min_audits=50,
                               agreement_window=100, seed=seed)

    run = build(0)
    for clips in batches[:12]:
        run.score(clips)
    buffer = io.BytesIO()
    torch.save(run.state_dict(), buffer)
    buffer.seek(0)
    resumed = build(seed=123)  # other initial weights and generator: everything must come from the state
    resumed.load_state_dict(torch.load(buffer, weights_only=False))
    assert resumed.counters == run.counters and resumed.trusted == run.trusted
    for clips in batches[12:]:
        assert torch.equal(run.score(clips), resumed.score(clips))
    for a, b in zip(run.student.state_dict().values(), resumed.student.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert run.counters == resumed.counters and run.trusted == resumed.trusted
    assert run.agreement() == resumed.agreement()


def test_state_dict_is_a_snapshot_and_shares_no_tensor():
    # the optimiser's state_dict holds its live moments: a checkpoint written while the scoring thread
    # trains on, or a second scorer loaded from the same state, must not see later steps
    g = torch.Generator().manual_seed(3)
    batches = [rule_clips(24, g) for _ in range(8)]
    run = DistilledScorer(CallableScorer(square_appears, name="square"), min_audits=50, agreement_window=100)
    for clips in batches[:4]:
        run.score(clips)
    state = run.state_dict()
    saved = {i: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
             for i, s in state["optimizer"]["state"].items()}
    a, b = (DistilledScorer(CallableScorer(square_appears, name="square"), min_audits=50, agreement_window=100)
            for _ in range(2))
    a.load_state_dict(state)
    b.load_state_dict(state)
    for clips in batches[4:]:
        run.score(clips)  # trains the original after the snapshot
        a.score(clips)  # and one of the two clones
    for i, s in state["optimizer"]["state"].items():
        for k, v in s.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(saved[i][k])), (i, k)
    b_moments = [s["exp_avg"] for s in b._optimizer.state_dict()["state"].values()]
    assert all(torch.equal(m, saved[i]["exp_avg"]) for i, m in enumerate(b_moments))  # b did not move with a


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7])
def test_student_scores_cross_the_threshold_where_its_probability_crosses_one_half(threshold):
    # the sampler cuts at its threshold; the student's agreement counts p > 0.5: the two must agree
    teacher = RecordingTeacher()
    scorer = DistilledScorer(teacher, student=FixedStudent(), teacher_fraction=0.01, min_agreement=0.0,
                             recover_agreement=0.0, min_audits=1, threshold=threshold)
    values = list(range(0, 200, 10))
    scorer.score(valued_clips(values))  # the first call: the teacher scores all, and the student is trusted
    teacher.seen.clear()
    scores = scorer.score(valued_clips(values))
    assert teacher.seen == []  # 20 clips at 1%: no whole teacher call yet, the student scored every clip
    probs = torch.sigmoid((torch.tensor(values, dtype=torch.float32) - 100) / 10)
    assert torch.equal(scores > threshold, probs > 0.5)
    assert bool((scores.diff() >= 0).all()) and 0.0 <= float(scores.min()) and float(scores.max()) <= 1.0
    if threshold == 0.5:
        assert torch.allclose(scores, probs)  # the default: scores are the probabilities


def test_load_state_dict_refuses_a_state_that_does_not_fit():
    scorer = DistilledScorer(OracleScorer())
    other = DistilledScorer(OracleScorer(), student=ClipStudent(channels=8))
    weights = [p.clone() for p in other.student.parameters()]
    with pytest.raises(ValueError, match="the saved student does not fit"):
        other.load_state_dict(scorer.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(weights, other.student.parameters(), strict=True))
    with pytest.raises(ValueError, match="expected a DistilledScorer state of version 1"):
        scorer.load_state_dict({"student": {}})
    small = DistilledScorer(OracleScorer(), agreement_window=10, min_audits=10)
    state = scorer.state_dict()
    state["window"] = [(True, True)] * 11
    with pytest.raises(ValueError, match="agreement_window=10"):
        small.load_state_dict(state)


def test_stale_generations_are_still_dropped():
    """Through the VLM sampler: a slow teacher, a buffer that wraps; late scores never land on new data."""
    capacity, clip_len = 40, 4

    def slow_brightness(clips):
        time.sleep(0.02)
        return clips["pixels"][:, :, 0, 0, 0].float().masked_fill(~clips["mask"], 0).amax(1) / 255

    teacher = CallableScorer(slow_brightness, in_keys=["pixels", "mask"], name="slow")
    scorer = DistilledScorer(teacher, min_audits=500, agreement_window=500)  # stays untrusted: teacher scores
    rb = make_vlm_replay_buffer(capacity, scorer, clip_spec=ClipSpec(clip_len=clip_len, final_frame=False),
                                scorer_batch_size=8)
    total = 0
    rows = []
    with rb:
        for chunk in range(20):  # 200 transitions into 40 slots
            value = (torch.arange(10) + 10 * chunk) % 250
            batch = TensorDict({"obs": value.float().view(1, 10, 1),
                                "pixels": value.to(torch.uint8).view(1, 10, 1, 1, 1).expand(1, 10, 2, 2, 3).clone(),
                                ("collector", "traj_ids"): torch.zeros(1, 10, dtype=torch.long),
                                ("next", "done"): torch.zeros(1, 10, 1, dtype=torch.bool)}, [1, 10])
            rb.extend(batch)
            rows.append(value)
            total += 10
        rb.flush_clips()
        rb.async_scorer.drain(timeout=60)
        sampler = rb.sampler
        assert sampler.stats()["stale_drops"] > 0
        written = torch.cat(rows)
        for slot in np.nonzero(~np.isnan(sampler.scores(torch.arange(capacity)).numpy()))[0]:
            row = total - capacity + int(slot)  # the last 40 rows fill slots 0..39
            assert rb.storage[int(slot)]["obs"].item() == written[row].item()
            # clip_len=4, assign="start": the max over the row and the 3 after it (within the data)
            expected = written[row : row + clip_len].max().item() / 255
            assert sampler.scores(int(slot)).item() == pytest.approx(expected)
    assert scorer.stats()["teacher_calls"] > 0


def test_make_scorer_spec_and_provenance():
    scorer = make_scorer("distill:oracle:minigrid", teacher_fraction=0.25, seed=3, prompt="events?")
    assert isinstance(scorer, DistilledScorer) and isinstance(scorer.teacher, OracleScorer)
    assert scorer.teacher_fraction == 0.25 and scorer.prompt == "events?"
    assert scorer.in_keys == [("next", "progress_event"), "mask", "pixels"]
    prov = scorer.provenance
    assert prov["backend"] == "distill" and prov["teacher"] == scorer.teacher.provenance
    assert prov["prompt_hash"] == prompt_hash("events?")
    assert prov["student"]["class"] == "vlmrb_torchrl.scorers.distill.ClipStudent"
    assert prov["student"]["parameters"] == sum(p.numel() for p in scorer.student.parameters())
    with pytest.raises(ValueError, match="'distill:<teacher spec>'"):
        make_scorer("distill:")
    assert "distill:<teacher spec>" in registered_scorer_forms()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"teacher_fraction": 0.0}, ValueError, r"teacher_fraction must be in \(0, 1\]"),
        ({"min_agreement": 1.5}, ValueError, r"min_agreement must be in \[0, 1\]"),
        ({"min_agreement": 0.9, "recover_agreement": 0.8}, ValueError, "recover_agreement must be >= min_agreement"),
        ({"min_audits": 600}, ValueError, "min_audits must be <= agreement_window=500"),
        ({"threshold": 1.0}, ValueError, r"threshold must be a float in \[0, 1\)"),
        ({"student": nn.Linear(2, 1)}, TypeError, "student must be an nn.Module with in_keys"),
    ],
)
def test_construction_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        DistilledScorer(OracleScorer(), **kwargs)


def test_wraps_only_scorers():
    with pytest.raises(TypeError, match="DistilledScorer distils a Scorer"):
        DistilledScorer(mean_pixel_score)


def test_pickle_and_no_grad_callers():
    scorer = DistilledScorer(CallableScorer(mean_pixel_score, prompt="bright?"), min_audits=4, agreement_window=8,
                             train_batch=4)
    clips = make_clips(6, 3)
    weights = [p.clone() for p in scorer.student.parameters()]
    with torch.inference_mode():  # e.g. a gallery or a benchmark scoring under no_grad: the student still learns
        scorer.score(clips)
    assert scorer.counters["train_steps"] == 6  # 6 labels * replay_ratio 4 / train_batch 4
    assert any(not torch.equal(a, b) for a, b in zip(weights, scorer.student.parameters(), strict=True))
    clone = pickle.loads(pickle.dumps(scorer))
    assert torch.equal(clone.score(clips), scorer.score(clips))
    assert clone.counters == scorer.counters


def test_recipe_keys_build_a_distilled_scorer():
    from vlmrb_torchrl.recipes.config import ConfigError, DQNConfig
    from vlmrb_torchrl.recipes.replay import make_scorer_from_config, needs_frames

    cfg = DQNConfig(scorer="oracle:minigrid", distill=True, teacher_fraction=0.2, min_agreement=0.8,
                    label_noise=0.1).validate()
    scorer = make_scorer_from_config(cfg)
    assert isinstance(scorer, DistilledScorer) and scorer.teacher.provenance["backend"] == "noisy"
    assert (scorer.teacher_fraction, scorer.min_agreement, scorer.recover_agreement) == (0.2, 0.8, 0.9)
    assert needs_frames(scorer)  # the student reads frames: the envs render even for the oracle teacher
    assert not isinstance(make_scorer_from_config(DQNConfig(scorer="oracle:minigrid").validate()), DistilledScorer)
    with pytest.raises(ConfigError, match=r"teacher_fraction=0.0 is invalid: expected a number in \(0, 1\]"):
        DQNConfig(distill=True, teacher_fraction=0.0).validate()
