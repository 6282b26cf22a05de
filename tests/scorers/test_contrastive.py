"""HFContrastiveScorer on tiny CLIP and SigLIP models."""

from __future__ import annotations

import pickle

import pytest
import torch

from vlmrb_torchrl.scorers import HFContrastiveScorer, contrastive_prompts, make_scorer, prompt_hash
from vlmrb_torchrl.scorers.prompts import PromptCheck, prompt_set_text

from . import tiny_vlms
from vlmrb_torchrl.testing import ScorerContract
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
            "rise": torch.stack([max(p[t] - p[s] for t in range(len(p)) for s in range(t + 1)) for p in per_frame]),
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
            ({"aggregation": "median"}, r"aggregation must be one of \['max', 'mean', 'progress', 'rise'\]"),
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


# --------------------------------------------------------------------------- lazy loading


class TestLazyLoading:
    def test_loads_on_first_score_with_the_same_provenance_and_scores(self, family_dir, shared_scorer):
        _, directory = family_dir
        eager = shared_scorer(directory)
        lazy = HFContrastiveScorer(str(directory), lazy=True)
        assert not lazy.loaded and "model" not in vars(lazy)
        assert lazy.provenance == eager.provenance and list(lazy.provenance) == list(eager.provenance)
        assert lazy.in_keys == eager.in_keys and lazy.prompt == eager.prompt
        clips = noise_clips(4, 3)
        assert torch.equal(lazy.score(clips), eager.score(clips))
        assert lazy.loaded and lazy.provenance == eager.provenance

    def test_reading_the_model_or_a_new_prompt_set_loads_it(self, tiny_model_dir):
        directory = str(tiny_model_dir("clip"))
        lazy = HFContrastiveScorer(directory, lazy=True)
        assert lazy.model.config.model_type == "clip" and lazy.loaded
        other = HFContrastiveScorer(directory, lazy=True).with_prompt_set([CHECKS[0]])
        assert other.loaded and len(other.prompt_set) == 1
        clone = pickle.loads(pickle.dumps(HFContrastiveScorer(directory, lazy=True)))
        assert not clone.loaded  # pickled as its arguments: lazy again
        with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
            lazy.no_such_thing

    def test_models_whose_provenance_needs_loading_load_now(self, tiny_model_dir, tmp_path):
        import shutil

        from safetensors.torch import load_file, save_file

        directory = tmp_path / "model"
        shutil.copytree(tiny_model_dir("clip"), directory)
        weights = load_file(directory / "model.safetensors")
        save_file({k: v for k, v in weights.items() if k != "logit_scale"}, directory / "model.safetensors")
        assert HFContrastiveScorer(str(directory), lazy=True).loaded  # no logit_scale to read: loaded now
        assert not HFContrastiveScorer(str(directory), lazy=True, logit_scale=10.0).loaded  # given: still lazy

    def test_a_model_that_fails_to_load_fails_its_first_use_clearly(self, tiny_model_dir, tmp_path):
        import shutil

        directory = tmp_path / "model"
        shutil.copytree(tiny_model_dir("clip"), directory)
        lazy = HFContrastiveScorer(str(directory), lazy=True)
        (directory / "model.safetensors").write_bytes(b"not safetensors")  # broken after the scorer was built
        clips = noise_clips(2, 2)
        for _ in range(2):  # and again, without retrying the load
            with pytest.raises(RuntimeError, match=r"loading '.*model' failed on first use \(lazy=True\)"):
                lazy.score(clips)
        assert not lazy.loaded

    def test_a_model_changed_since_construction_is_refused(self, tiny_model_dir, tmp_path):
        import shutil

        from safetensors.torch import load_file, save_file

        directory = tmp_path / "model"
        shutil.copytree(tiny_model_dir("clip"), directory)
        lazy = HFContrastiveScorer(str(directory), lazy=True)
        weights = load_file(directory / "model.safetensors")
        weights["logit_scale"] = weights["logit_scale"] + 1.0
        save_file(weights, directory / "model.safetensors")
        with pytest.raises(RuntimeError, match=r"provenance differs .*'logit_scale'.*'weights_hash'"):
            lazy.score(noise_clips(2, 2))
        assert not lazy.loaded

    def test_a_load_error_in_the_scoring_thread_reaches_the_learner(self, tiny_model_dir, tmp_path):
        import shutil

        from vlmrb_torchrl import AsyncScorer, ClipSpec, ClipStream, VLMPrioritizedSampler, VLMScoreTransform

        directory = tmp_path / "model"
        shutil.copytree(tiny_model_dir("clip"), directory)
        lazy = HFContrastiveScorer(str(directory), lazy=True)
        (directory / "model.safetensors").write_bytes(b"not safetensors")
        stream = ClipStream(ClipSpec(clip_len=2, final_frame=False))
        sampler = VLMPrioritizedSampler(8, lambda_max=0.5)
        worker = AsyncScorer(VLMScoreTransform(lazy, clip_len=2, in_keys=["pixels"], final_frame=False), sampler)
        clips = noise_clips(1, 4)
        from tensordict import TensorDict

        batch = TensorDict({"pixels": clips["pixels"], ("collector", "traj_ids"): torch.zeros(1, 4, dtype=torch.long),
                            ("next", "done"): torch.zeros(1, 4, 1, dtype=torch.bool)}, [1, 4])
        worker.submit(stream.push(batch, torch.arange(4)))
        for stop in (worker.drain, worker.close):  # the worker's error names the model and the load's error
            with pytest.raises(RuntimeError, match="AsyncScorer's worker failed: .*failed on first use .*header"):
                stop()


# --------------------------------------------------------------------------- prompt sets

CHECKS = [
    PromptCheck("a bright red square", ["a dark room", "nothing happens"], "progress"),
    ("an agent achieving its goal", ["an agent doing nothing useful"], "max"),  # a plain tuple works too
    PromptCheck("the red triangle", "the green square", "mean"),
]


def count_vision_frames(scorer):
    """Wraps the model's vision tower: returns a list that gets the batch size of every call."""
    calls = []
    inner = scorer.model.get_image_features

    def counted(*args, **kwargs):
        calls.append(int(kwargs["pixel_values"].shape[0]))
        return inner(*args, **kwargs)

    scorer.model.get_image_features = counted
    return calls


class TestPromptSet:
    def test_score_is_the_max_of_the_single_prompt_scorers(self, family_dir):
        _, directory = family_dir
        scorer = make_scorer(f"clip:{directory}", prompt_set=CHECKS)
        assert scorer.prompt_set == tuple(PromptCheck.coerce(c) for c in CHECKS)
        clips = noise_clips(6, 4)
        clips["mask"][2, 2:] = False
        singles = [make_scorer(f"clip:{directory}", prompt=c.positive, negatives=list(c.negatives),
                               aggregation=c.aggregation) for c in scorer.prompt_set]
        single_scores = torch.stack([s.score(clips) for s in singles])
        got = scorer.score(clips)
        torch.testing.assert_close(got, single_scores.max(0).values, atol=1e-6, rtol=0)
        # the checks really disagree, so the max is not one of them everywhere
        assert (single_scores.argmax(0).unique().numel() > 1) or (single_scores.std(0) > 1e-3).any()
        per_frame = scorer.frame_probabilities(clips)
        assert [tuple(p.shape) for p in per_frame][:3] == [(4, 3), (4, 3), (2, 3)]

    def test_one_check_set_is_the_single_prompt_scorer(self, tiny_model_dir):
        directory = tiny_model_dir("clip")
        clips = noise_clips(4, 3)
        single = HFContrastiveScorer(str(directory), prompt="a bright red square", negatives=["a dark room"],
                                     aggregation="progress")
        one = HFContrastiveScorer(str(directory), prompt_set=[("a bright red square", ["a dark room"], "progress")])
        assert torch.equal(one.score(clips), single.score(clips))
        assert one.prompt != single.prompt  # the set is named by its canonical text
        assert single.provenance["aggregation"] == "progress" and "prompt_set" not in single.provenance

    def test_each_frame_embedded_once_per_call_whatever_the_checks(self, tiny_model_dir):
        clips = noise_clips(5, 4)
        clips["mask"][0, 3:] = False
        real = int(clips["mask"].sum())
        for cache in (0, 4096):
            scorer = HFContrastiveScorer(str(tiny_model_dir("clip")), prompt_set=CHECKS, embedding_cache=cache,
                                         batch_size=8)
            calls = count_vision_frames(scorer)
            scorer.score(clips)
            assert sum(calls) == real and len(calls) == -(-real // 8)
            assert scorer.stats()["frames_embedded"] == real

    def test_provenance_names_the_whole_set(self, tiny_model_dir):
        directory = str(tiny_model_dir("clip"))
        scorer = HFContrastiveScorer(directory, prompt_set=CHECKS)
        text = prompt_set_text(scorer.prompt_set)
        assert scorer.prompt == text and scorer.provenance["prompt_hash"] == prompt_hash(text)
        assert scorer.provenance["prompt_set"][0] == ["a bright red square", ["a dark room", "nothing happens"],
                                                      "progress"]
        assert scorer.provenance["aggregation"] == "max of checks"
        assert HFContrastiveScorer(directory, prompt_set=list(CHECKS)).provenance == scorer.provenance  # stable
        other = HFContrastiveScorer(directory, prompt_set=CHECKS[:2])
        assert other.provenance["prompt_hash"] != scorer.provenance["prompt_hash"]
        clone = pickle.loads(pickle.dumps(scorer))
        assert clone.prompt_set == scorer.prompt_set and clone.provenance == scorer.provenance

    def test_hold_is_applied_recorded_and_kept(self, tiny_model_dir):
        from vlmrb_torchrl.scorers.prompts import aggregate

        directory = str(tiny_model_dir("clip"))
        checks = [PromptCheck("a bright red square", ["a dark room"], "rise", hold=3),
                  PromptCheck("the red triangle", ["the green square"], "max", hold=2)]
        scorer = HFContrastiveScorer(directory, prompt_set=checks)
        clips = noise_clips(6, 8)
        clips["mask"][1, 5:] = False
        expected = torch.stack([torch.stack([aggregate(p[:, c], check.aggregation, check.hold)
                                             for c, check in enumerate(checks)]).max()
                                for p in scorer.frame_probabilities(clips)])
        assert torch.equal(scorer.score(clips), expected)
        plain = HFContrastiveScorer(directory, prompt_set=[c._replace(hold=1) for c in checks])
        assert (plain.score(clips) >= scorer.score(clips) - 1e-6).all()  # holding only removes rises and maxima
        assert not torch.equal(plain.score(clips), scorer.score(clips))  # ... and these noise clips have some
        assert scorer.provenance["prompt_set"][0] == ["a bright red square", ["a dark room"], "rise", 3]
        assert plain.provenance["prompt_set"][0] == ["a bright red square", ["a dark room"], "rise"]
        assert scorer.provenance["prompt_hash"] != plain.provenance["prompt_hash"]
        assert pickle.loads(pickle.dumps(scorer)).prompt_set == scorer.prompt_set
        assert plain.with_prompt_set(checks).prompt_set == scorer.prompt_set
        assert HFContrastiveScorer(directory, prompt_set=scorer.provenance["prompt_set"]).prompt_set == scorer.prompt_set

    def test_task_fills_the_checks(self, tiny_model_dir):
        scorer = HFContrastiveScorer(str(tiny_model_dir("clip")), task="open the door",
                                     prompt_set=[("an agent that {task}", ["{task} fails"], "max")])
        assert scorer.prompt_set[0] == PromptCheck("an agent that open the door", ["open the door fails"], "max")

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"prompt_set": CHECKS, "prompt": "x"}, ValueError, "pass either prompt_set= or prompt=, not both"),
            ({"prompt_set": CHECKS, "aggregation": "max"}, ValueError, "prompt_set= or aggregation="),
            ({"prompt_set": []}, ValueError, "at least one check"),
            ({"prompt_set": "a bright red square"}, TypeError, "prompt_set must be a sequence"),
            ({"prompt_set": [("a", ["b"])]}, TypeError, r"a \(positive, negatives, aggregation\[, hold\]\) tuple"),
            ({"prompt_set": [("a", ["b"], "median")]}, ValueError, "aggregation must be one of"),
            ({"embedding_cache": -1}, ValueError, "embedding_cache must be an int >= 0"),
        ],
    )
    def test_errors(self, tiny_model_dir, kwargs, error, match):
        with pytest.raises(error, match=match):
            HFContrastiveScorer(str(tiny_model_dir("clip")), **kwargs)


# --------------------------------------------------------------------------- frame embedding reuse


def trajectory_batch(lengths, size=12, seed=0):
    """A flat collector-like batch of random frames: trajectories of the given lengths, in order."""
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    # each step's "next" frame is the next step's frame; at an episode end a fresh one
    frames = torch.randint(0, 256, (n + len(lengths), size, size, 3), generator=g, dtype=torch.uint8)
    pixels, next_pixels, traj, done, row = [], [], [], [], 0
    for tid, length in enumerate(lengths):
        pixels.append(frames[row : row + length])
        next_pixels.append(frames[row + 1 : row + length + 1])
        traj += [tid] * length
        done += [False] * (length - 1) + [True]
        row += length + 1
    return TensorDict({"pixels": torch.cat(pixels), ("next", "pixels"): torch.cat(next_pixels),
                       ("collector", "traj_ids"): torch.tensor(traj), ("next", "done"): torch.tensor(done)[:, None]},
                      batch_size=[n])


class TestEmbeddingReuse:
    def test_reuse_scores_equal_embedding_every_clip(self, tiny_model_dir):
        from vlmrb_torchrl import ClipSpec, make_clip_scoring

        directory = str(tiny_model_dir("clip"))
        batch = trajectory_batch([23, 9])
        scores = {}
        for cache in (0, 4096, 7):  # no reuse, reuse, a cache too small to hold a clip's frames
            scorer = HFContrastiveScorer(directory, prompt_set=CHECKS, embedding_cache=cache)
            stream, transform = make_clip_scoring(scorer, ClipSpec(clip_len=6))
            out = stream.push(batch, torch.arange(batch.numel()))
            scores[cache] = torch.cat([transform.score_clips(part.clips, frames=part.frames)
                                       for part in _splits(out, 5)])
            stats = scorer.stats()
            assert stats["embedding_cache_size"] <= cache
            if cache == 4096:  # every distinct frame once: 23 + 9 steps and 2 outcome frames
                assert stats["frames_embedded"] == 34 and stats["embedding_cache_hits"] > 0
        torch.testing.assert_close(scores[4096], scores[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(scores[7], scores[0], atol=1e-6, rtol=0)

    def test_pooled_frames_digested_once_per_row_bit_identical(self, tiny_model_dir, monkeypatch):
        # pack_frames keeps ("clip", "frame_row") on pooled clips: the scorer looks each row's frame up once,
        # and must compute exactly what it computes from the frames alone
        from vlmrb_torchrl import ClipSpec, make_clip_scoring
        from vlmrb_torchrl._keys import FRAME_ROW_KEY
        from vlmrb_torchrl.scorers import contrastive

        directory = str(tiny_model_dir("clip"))
        batch = trajectory_batch([23, 9])
        digested, digests = [], contrastive._frame_digests
        monkeypatch.setattr(contrastive, "_frame_digests", lambda frames: digested.append(len(frames)) or digests(frames))
        results = {}
        for rows in (True, False):
            scorer = HFContrastiveScorer(directory, prompt_set=CHECKS, batch_size=4)
            stream, transform = make_clip_scoring(scorer, ClipSpec(clip_len=6))
            out = stream.push(batch, torch.arange(batch.numel()))
            score, packed = scorer.score, []

            def without_rows(clips, score=score, rows=rows):
                packed.append(clips)
                return score(clips if rows else clips.exclude(FRAME_ROW_KEY))

            scorer.score = without_rows
            digested.clear()
            scores = torch.cat([transform.score_clips(part.clips, frames=part.frames) for part in _splits(out, 5)])
            assert all(FRAME_ROW_KEY in clips.keys(include_nested=True) for clips in packed)
            results[rows] = scores, scorer.stats(), sum(digested)
        assert torch.equal(results[True][0], results[False][0])
        assert results[True][1] == results[False][1]  # the same frames embedded, the same cache
        assert results[True][1]["frames_embedded"] == 34
        assert results[True][2] * 2 < results[False][2]  # each row once a call, not once per clip that shows it

    def test_forwards_per_transition_through_stream_worker_transform(self, tiny_model_dir):
        # the real path: ClipStream -> AsyncScorer -> VLMScoreTransform -> HFContrastiveScorer
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

        from vlmrb_torchrl import AsyncScorer, ClipSpec, VLMPrioritizedSampler, make_clip_scoring

        scorer = HFContrastiveScorer(str(tiny_model_dir("clip")), prompt_set=CHECKS)
        calls = count_vision_frames(scorer)
        stream, transform = make_clip_scoring(scorer, ClipSpec(clip_len=16, stride=1))
        lengths = [70, 45, 90]
        batch = trajectory_batch(lengths)
        sampler = VLMPrioritizedSampler(1000)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), sampler=sampler)
        with AsyncScorer(transform, sampler, batch_size=16) as worker:
            for chunk in range(0, batch.numel(), 50):  # collector-sized pushes
                part = batch[chunk : chunk + 50]
                index = rb.extend(part.exclude("pixels", ("next", "pixels")))
                worker.submit(stream.push(part, index, sampler.generations(index)))
            worker.submit(stream.flush())
        transitions = sum(lengths)
        assert not sampler.scores(torch.arange(transitions)).isnan().any()  # every transition scored
        assert sum(calls) / transitions <= 1.2  # ~1 + 1/episode length; 17 without reuse
        assert sum(calls) == transitions + len(lengths)


def _splits(out, size):
    rest = out
    while len(rest):
        head, rest = rest.split(min(size, len(rest)))
        yield head
