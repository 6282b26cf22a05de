"""HFContrastiveScorer on tiny CLIP and SigLIP models."""

from __future__ import annotations

import pickle

import pytest
import torch

from vlmrb_torchrl.scorers import HFContrastiveScorer, contrastive_prompts, make_scorer, prompt_hash

from . import tiny_vlms
from ._shared import ScorerContract
from .tiny_vlms import noise_clips

pytestmark = pytest.mark.skipif(not tiny_vlms._has_transformers, reason="needs transformers and pillow")

#: for conftest: shared_scorer loads "clip:<dir>"; family_dir runs a test once per family
BACKEND = "clip"
FAMILIES = tiny_vlms.CONTRASTIVE_FAMILIES


class TestClipContract(ScorerContract):
    family = "clip"  # conftest's _tiny_contract gives it make_scorer()


class TestSiglipContract(ScorerContract):
    family = "siglip"


class TestHFContrastiveScorer:
    def test_loads_through_make_scorer(self, family_dir, shared_scorer):
        family, directory = family_dir
        scorer = shared_scorer(directory)
        assert isinstance(scorer, HFContrastiveScorer) and scorer.model.config.model_type == family
        positive, negatives = contrastive_prompts()
        assert scorer.prompt == positive and scorer.negatives == negatives
        assert isinstance(make_scorer(str(directory)), HFContrastiveScorer)  # bare directory: detected from config

    def test_scores_deterministic_batched_equals_single(self, family_dir, shared_scorer):
        _, directory = family_dir
        scorer = shared_scorer(directory)
        clips = noise_clips(5, 3)
        scores = scorer.score(clips)
        assert scores.shape == (5,) and scores.dtype == torch.float32
        assert ((scores >= 0) & (scores <= 1)).all() and scores.unique().numel() > 1
        assert torch.equal(scores, scorer.score(clips))
        single = torch.cat([scorer.score(clips[i : i + 1]) for i in range(5)])
        torch.testing.assert_close(scores, single, atol=1e-5, rtol=0)
        small_batches = shared_scorer(directory, batch_size=2)  # frames embedded 2 at a time
        torch.testing.assert_close(small_batches.score(clips), scores, atol=1e-5, rtol=0)

    def test_prompt_changes_scores(self, family_dir, shared_scorer):
        _, directory = family_dir
        clips = noise_clips(5, 3)
        other = shared_scorer(directory, prompt="a bright red square")
        assert (other.score(clips) - shared_scorer(directory).score(clips)).abs().max() > 1e-4
        assert other.provenance["prompt_hash"] == prompt_hash("a bright red square")

    def test_aggregations(self, family_dir, shared_scorer):
        _, directory = family_dir
        clips = noise_clips(5, 3)
        clips["mask"][1, 2:] = False
        per_frame = shared_scorer(directory).frame_probabilities(clips)
        assert [len(p) for p in per_frame] == [3, 2, 3, 3, 3]
        expected = {
            "max": torch.stack([p.max() for p in per_frame]),
            "mean": torch.stack([p.mean() for p in per_frame]),
            "progress": torch.stack([(p[-1] - p[0]).clamp(min=0) for p in per_frame]),
        }
        for name, want in expected.items():
            torch.testing.assert_close(shared_scorer(directory, aggregation=name).score(clips), want)
        assert (expected["max"] >= expected["mean"]).all()

    def test_probability_is_the_softmax_over_prompts(self, family_dir, shared_scorer):
        _, directory = family_dir
        clips = noise_clips(2, 1)
        negatives = ["a dark room", "nothing happens"]
        scorer = shared_scorer(directory, prompt="a bright red square", negatives=negatives, aggregation="mean")
        assert scorer.text_embeds.shape[0] == 3
        # with logit_scale -> 0 the softmax tends to uniform over the three texts
        flat = shared_scorer(directory, prompt="a bright red square", negatives=negatives, logit_scale=1e-6)
        torch.testing.assert_close(flat.score(clips), torch.full((2,), 1 / 3), atol=1e-5, rtol=0)
        assert flat.provenance["logit_scale"] == 1e-6
        assert scorer.provenance["logit_scale"] == pytest.approx(float(scorer.model.logit_scale.detach().exp()))

    def test_padded_frames_are_ignored(self, family_dir, shared_scorer):
        _, directory = family_dir
        scorer = shared_scorer(directory, aggregation="mean")
        real = noise_clips(2, 2)
        padded = noise_clips(2, 4, seed=1)
        padded["pixels"][:, :2] = real["pixels"]
        padded["mask"][:, 2:] = False
        torch.testing.assert_close(scorer.score(padded), scorer.score(real), atol=1e-6, rtol=0)

    def test_provenance(self, family_dir, shared_scorer):
        family, directory = family_dir
        prov = shared_scorer(directory).provenance
        assert prov["backend"] == "clip" and prov["model_type"] == family and prov["source"] == "local"
        assert prov["aggregation"] == "max" and prov["dtype"] == "float32" and len(prov["weights_hash"]) == 16
        assert prov["negatives"] == contrastive_prompts()[1]

    def test_pickle_reloads(self, tiny_model_dir, shared_scorer):
        scorer = shared_scorer(tiny_model_dir("clip"), negatives=["a dark room", "nothing happens"])
        clone = pickle.loads(pickle.dumps(scorer))
        assert clone.negatives == scorer.negatives and clone.provenance == scorer.provenance
        clips = noise_clips(3, 2)
        torch.testing.assert_close(clone.score(clips), scorer.score(clips), atol=1e-6, rtol=0)

    def test_env_family_and_task(self, tiny_model_dir, shared_scorer):
        scorer = shared_scorer(tiny_model_dir("clip"), env_family="minigrid", task="open the door")
        assert (scorer.prompt, scorer.negatives) == contrastive_prompts("minigrid", task="open the door")

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"aggregation": "median"}, r"aggregation must be one of \['max', 'mean', 'progress'\]"),
            ({"negatives": []}, "negatives must be a non-empty list"),
            ({"negatives": ["ok", ""]}, "negatives must be a non-empty list"),
            ({"logit_scale": 0.0}, "logit_scale must be a finite float > 0"),
            ({"logit_scale": float("nan")}, "logit_scale must be a finite float > 0"),
            ({"batch_size": 0}, "batch_size must be an int >= 1"),
            ({"max_frames": 0}, "max_frames must be an int >= 1"),
            ({"env_family": "doom"}, "Unknown env_family='doom'"),
        ],
    )
    def test_construction_errors(self, tiny_model_dir, kwargs, match):
        with pytest.raises(ValueError, match=match):
            HFContrastiveScorer(str(tiny_model_dir("clip")), **kwargs)

    def test_not_a_contrastive_model(self, tiny_model_dir):
        with pytest.raises(ValueError, match="is not a contrastive image-text model .* make_scorer\\('hf:"):
            make_scorer(f"clip:{tiny_model_dir('idefics3')}")
