"""PanelScorer: a model per camera panel of side-by-side frames, readings combined by the mean of logits."""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl.scorers import HFContrastiveScorer, PanelScorer, mean_logit
from vlmrb_torchrl.scorers.prompts import PromptCheck, aggregate
from vlmrb_torchrl.testing import ScorerContract

from . import tiny_vlms

pytestmark = pytest.mark.skipif(not tiny_vlms._has_transformers, reason="needs transformers and pillow")

CHECKS = [PromptCheck("a bright red square", ["a dark room"], "max", 2),
          PromptCheck("the red triangle", ["the green square", "nothing happens"], "progress")]


def _panels(tiny_model_dir, checks=CHECKS) -> tuple[PanelScorer, list[HFContrastiveScorer]]:
    """Two different tiny models (CLIP, SigLIP) as the two panels' members."""
    members = [HFContrastiveScorer(str(tiny_model_dir(family)), prompt_set=checks) for family in ("clip", "siglip")]
    return PanelScorer(members), members


def _wide_clips(batch: int = 3, steps: int = 4, size: int = 12, panels: int = 2, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (batch, steps, size, panels * size, 3), generator=g, dtype=torch.uint8)
    return TensorDict(pixels=pixels, mask=torch.ones(batch, steps, dtype=torch.bool), batch_size=[batch, steps])


def test_mean_logit_is_the_sigmoid_of_the_mean_log_odds():
    p = torch.tensor([[0.9, 0.2, 0.5], [0.6, 0.2, 0.999]])
    logit = lambda x: torch.log(x / (1 - x))  # noqa: E731
    expected = torch.sigmoid((logit(p[0].double()) + logit(p[1].double())) / 2).float()
    torch.testing.assert_close(mean_logit(p), expected, atol=1e-7, rtol=0)
    assert mean_logit(p)[1].item() == pytest.approx(0.2)  # agreement is kept
    # certainties are clamped: a sure yes and a sure no cancel out; two sure yeses stay sure, not inf/nan
    out = mean_logit(torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]))
    assert out[0].item() == pytest.approx(0.5) and out[1].item() > 0.999 and out[2].item() < 1e-3
    assert torch.isfinite(out).all()


def test_each_member_reads_its_panel_and_the_readings_are_combined_frame_by_frame(tiny_model_dir):
    scorer, (left, right) = _panels(tiny_model_dir)
    clips = _wide_clips()
    clips["mask"][1, 2:] = False
    left_clips = TensorDict(pixels=clips["pixels"][..., :12, :], mask=clips["mask"], batch_size=clips.batch_size)
    right_clips = TensorDict(pixels=clips["pixels"][..., 12:, :], mask=clips["mask"], batch_size=clips.batch_size)
    assert torch.equal(scorer.panel_clips(clips, 1)["pixels"], right_clips["pixels"])
    got = scorer.frame_probabilities(clips)
    expected = [mean_logit(torch.stack([a, b]))
                for a, b in zip(left.frame_probabilities(left_clips), right.frame_probabilities(right_clips))]
    assert [tuple(p.shape) for p in got] == [(4, 2), (2, 2), (4, 2)]  # padded steps are not shown
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-6, rtol=0)
    # then each check is aggregated as one model's would be (hold, progress), max over checks
    per_check = torch.stack([torch.stack([aggregate(p[:, c], check.aggregation, check.hold)
                                          for c, check in enumerate(scorer.prompt_set)]) for p in expected])
    torch.testing.assert_close(scorer.check_scores(clips), per_check, atol=1e-6, rtol=0)
    torch.testing.assert_close(scorer.score(clips), per_check.max(-1).values, atol=1e-6, rtol=0)
    # the panels matter: swapping them changes the scores (each model reads the other camera)
    swapped = clips.clone()
    swapped["pixels"] = torch.cat([clips["pixels"][..., 12:, :], clips["pixels"][..., :12, :]], dim=-2)
    assert not torch.allclose(scorer.score(swapped), scorer.score(clips))


def test_provenance_prompt_set_and_stats(tiny_model_dir):
    scorer, members = _panels(tiny_model_dir)
    assert scorer.prompt_set == tuple(CHECKS) and scorer.prompt == members[0].prompt
    assert scorer.in_keys == ["pixels", "mask"]
    assert scorer.provenance["backend"] == "panels" and scorer.provenance["combine"] == "mean_logit"
    assert scorer.provenance["prompt_hash"] == members[0].provenance["prompt_hash"]
    assert [p["model"] for p in scorer.provenance["panels"]] == [m.provenance["model"] for m in members]
    scorer.score(_wide_clips())
    stats = scorer.stats()
    assert stats["panel0_frames_embedded"] == stats["panel1_frames_embedded"] == 12
    other = scorer.with_prompt_set(CHECKS[:1])
    assert isinstance(other, PanelScorer) and other.prompt_set == (CHECKS[0],)
    assert other.members[0].model is members[0].model  # the models are shared
    assert other.provenance["prompt_hash"] != scorer.provenance["prompt_hash"]


def test_lazy_members_load_on_first_use_and_the_scorer_pickles(tiny_model_dir):
    lazy = PanelScorer([HFContrastiveScorer(str(tiny_model_dir("clip")), prompt_set=CHECKS, lazy=True)
                        for _ in range(2)])
    assert not lazy.loaded
    clips = _wide_clips()
    scores = lazy.score(clips)
    assert lazy.loaded
    again = pickle.loads(pickle.dumps(lazy))
    assert torch.equal(again.score(clips), scores) and again.provenance == lazy.provenance


def test_errors(tiny_model_dir):
    scorer, members = _panels(tiny_model_dir)
    # issue 64: a one-panel or three-panel frame was read as two panels (only width % n was checked)
    for width, found in ((11, "0.916667"), (12, "1"), (36, "3"), (30, "2.5")):
        with pytest.raises(ValueError, match=f"must be frames \\[B, T, H, W, C\\] of exactly 2 square panels side "
                                             f"by side, W = 2 \\* H .*got shape \\(1, 2, 12, {width}, 3\\): a width "
                                             f"of {found} panels of 12 px"):
            scorer.score(TensorDict(pixels=torch.zeros(1, 2, 12, width, 3, dtype=torch.uint8),
                                    mask=torch.ones(1, 2, dtype=torch.bool), batch_size=[1, 2]))
    with pytest.raises(KeyError, match="needs"):
        scorer.score(TensorDict(mask=torch.ones(1, 2, dtype=torch.bool), batch_size=[1, 2]))
    with pytest.raises(ValueError, match="at least two"):
        PanelScorer(members[:1])
    with pytest.raises(ValueError, match="share one prompt set"):
        PanelScorer([members[0], members[1].with_prompt_set(CHECKS[:1])])
    with pytest.raises(TypeError, match="frame_probabilities"):
        PanelScorer([members[0], object()])


class TestPanelContract(ScorerContract):
    picklable = True

    @pytest.fixture(autouse=True)
    def _members(self, tiny_model_dir):
        self._dir = tiny_model_dir("clip")

    @pytest.fixture
    def tiny_clips(self):
        return _wide_clips(batch=5, steps=4, size=6)

    def make_scorer(self):
        return PanelScorer([HFContrastiveScorer(str(self._dir), prompt_set=CHECKS) for _ in range(2)])
