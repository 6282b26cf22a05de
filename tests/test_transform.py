"""Tests for VLMScoreTransform and pack_frames."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

from vlmrb_torchrl import ClipSpec, VLMScoreTransform
from vlmrb_torchrl.scoring.transform import pack_frames


class RecordingScorer:
    """Scores a clip by the value of its last real frame (frames encode their step / 100)."""

    prompt = "test"
    provenance = {"backend": "test"}

    def __init__(self, in_keys=("pixels",)):
        self.in_keys = list(in_keys)
        self.seen = []

    def score(self, clips):
        self.seen.append(clips.clone())
        px = clips["pixels"].float()[..., 0, 0, 0]  # [B, T]
        last_real = clips["mask"].long().cumsum(1).argmax(1)
        return px.gather(1, last_real[:, None]).squeeze(1) / 100


def step_frames(n: int, size: int = 6) -> torch.Tensor:
    return torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, size, size, 3).clone()


class TestConstruction:
    def test_scorer_without_score(self):
        with pytest.raises(TypeError, match="scorer must have a score"):
            VLMScoreTransform(object(), clip_len=4)

    @pytest.mark.parametrize("kwargs, match", [
        ({"clip_len": 0}, "clip_len"),
        ({"clip_len": 4, "frames": 5}, "frames"),
        ({"clip_len": 4, "frame_size": 0}, "frame_size"),
        ({"clip_len": 4, "out_keys": ("a", "b")}, "one score key"),
    ])
    def test_bad_arguments(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            VLMScoreTransform(RecordingScorer(), **kwargs)

    def test_scorer_not_in_state_dict(self):
        class ModuleScorer(torch.nn.Module, RecordingScorer):
            def __init__(self):
                torch.nn.Module.__init__(self)
                RecordingScorer.__init__(self)
                self.weight = torch.nn.Parameter(torch.zeros(1000))

        t = VLMScoreTransform(ModuleScorer(), clip_len=4)
        assert t.state_dict() == {} or all("weight" not in k for k in t.state_dict())


class TestForward:
    @pytest.mark.parametrize("layout", ["flat", "bt"])
    def test_one_score_per_clip_keeps_shape(self, layout):
        scorer = RecordingScorer()
        t = VLMScoreTransform(scorer, clip_len=4)
        td = TensorDict(pixels=step_frames(12), batch_size=[12])
        if layout == "bt":
            td = td.reshape(3, 4)
        out = t(td)
        assert out.shape == td.shape
        scores = out["vlm_score"].reshape(3, 4)
        assert torch.allclose(scores, torch.tensor([[0.03], [0.07], [0.11]]).expand(3, 4))

    def test_mask_respected(self):
        scorer = RecordingScorer()
        t = VLMScoreTransform(scorer, clip_len=4)
        td = TensorDict(pixels=step_frames(8), mask=torch.tensor([1, 1, 0, 0, 1, 1, 1, 1]).bool(),
                        batch_size=[8])
        out = t(td)
        assert out["vlm_score"].tolist() == pytest.approx([0.01] * 4 + [0.07] * 4)

    def test_missing_key(self):
        t = VLMScoreTransform(RecordingScorer(), clip_len=2)
        with pytest.raises(KeyError, match="needs \\['pixels'\\]"):
            t(TensorDict(obs=torch.zeros(4), batch_size=[4]))

    def test_not_whole_clips(self):
        t = VLMScoreTransform(RecordingScorer(), clip_len=4)
        with pytest.raises(ValueError, match="not a whole number of clips"):
            t(TensorDict(pixels=step_frames(6), batch_size=[6]))

    def test_bad_scorer_output(self):
        class Bad(RecordingScorer):
            def score(self, clips):
                return torch.full((clips.shape[0],), 2.0)

        with pytest.raises(ValueError, match="Bad returned scores outside \\[0, 1\\] \\(min=2, max=2\\)"):
            VLMScoreTransform(Bad(), clip_len=2)(TensorDict(pixels=step_frames(4), batch_size=[4]))

        class WrongShape(RecordingScorer):
            def score(self, clips):
                return torch.zeros(clips.shape[0] + 1)

        with pytest.raises(ValueError, match="WrongShape returned scores of shape \\[3\\]; expected one score per clip"):
            VLMScoreTransform(WrongShape(), clip_len=2)(TensorDict(pixels=step_frames(4), batch_size=[4]))

    def test_bad_frames(self):
        t = VLMScoreTransform(RecordingScorer(), clip_len=2)
        with pytest.raises(ValueError, match="uint8 frames"):
            t(TensorDict(pixels=torch.zeros(4, 3, 6, 6), batch_size=[4]))

    def test_env_step_refused(self):
        t = VLMScoreTransform(RecordingScorer(), clip_len=2)
        with pytest.raises(RuntimeError, match="not inside an environment"):
            t._call(TensorDict(pixels=step_frames(1)[0], batch_size=[]))


class TestPacking:
    @pytest.mark.parametrize("clip_len, frames", [(8, 3), (32, 8), (5, 1), (4, None)])
    def test_frame_subsampling_matches_spec(self, clip_len, frames):
        scorer = RecordingScorer()
        t = VLMScoreTransform(scorer, clip_len=clip_len, frames=frames)
        # no ("next", "pixels") in the slices: shown without the outcome frame
        t(TensorDict(pixels=step_frames(clip_len), batch_size=[clip_len]))
        got = scorer.seen[0]["pixels"][0, :, 0, 0, 0].long()
        assert got.tolist() == ClipSpec(clip_len=clip_len, frames=frames, final_frame=False).frame_indices().tolist()
        # with it: clip_len + 1 frames, subsampled keeping the last, the outcome (frame clip_len)
        t(TensorDict({"pixels": step_frames(clip_len), ("next", "pixels"): step_frames(clip_len + 1)[1:]},
                     batch_size=[clip_len]))
        got = scorer.seen[1]["pixels"][0, :, 0, 0, 0].long()
        assert got.tolist() == ClipSpec(clip_len=clip_len, frames=frames).frame_indices().tolist()
        assert got[-1] == clip_len and scorer.seen[1]["mask"].all()

    def test_outcome_frame_of_the_last_real_step(self):
        # slices with padding: the outcome is the "next" frame of the last real step
        scorer = RecordingScorer()
        t = VLMScoreTransform(scorer, clip_len=4)
        td = TensorDict({"pixels": step_frames(8), ("next", "pixels"): step_frames(8) + 50,
                         "mask": torch.tensor([1, 1, 0, 0, 1, 1, 1, 1]).bool()}, batch_size=[8])
        out = t(td)
        assert out["vlm_score"].tolist() == pytest.approx([0.51] * 4 + [0.57] * 4)
        seen = scorer.seen[0]
        assert seen["pixels"][:, :, 0, 0, 0].tolist() == [[0, 1, 2, 3, 51], [4, 5, 6, 7, 57]]
        assert seen["mask"].tolist() == [[True, True, False, False, True], [True] * 5]
        t_off = VLMScoreTransform(RecordingScorer(), clip_len=4, final_frame=False)
        assert t_off(td.clone())["vlm_score"].tolist() == pytest.approx([0.01] * 4 + [0.07] * 4)

    def test_events_with_the_outcome_position(self):
        # the outcome position stands for no step of its own: every event counted once
        clips = TensorDict(pixels=step_frames(9).unsqueeze(0), mask=(torch.arange(9) < 8).unsqueeze(0),
                           event=(torch.arange(9) == 7).unsqueeze(0), batch_size=[1, 9])
        packed = pack_frames(clips, positions=torch.tensor([0, 4, 8]), frame_keys=["pixels"], final_frame=True)
        assert packed["event"].tolist() == [[False, False, True]] and packed["mask"].all()
        packed = pack_frames(clips, positions=torch.arange(9), frame_keys=["pixels"], final_frame=True)
        assert packed["event"].tolist() == [[False] * 7 + [True, False]]
        assert packed["mask"].tolist() == [[True] * 9]

    def test_event_between_frames_not_lost(self):
        clips = TensorDict(pixels=step_frames(8).unsqueeze(0), mask=torch.ones(1, 8, dtype=torch.bool),
                           event=(torch.arange(8) == 5).unsqueeze(0), batch_size=[1, 8])
        packed = pack_frames(clips, positions=torch.tensor([0, 3, 7]), frame_keys=["pixels"])
        assert packed["event"].tolist() == [[False, False, True]]
        assert packed["pixels"][0, :, 0, 0, 0].tolist() == [0, 3, 7]

    def test_resize_without_torchvision(self):
        scorer = RecordingScorer()
        t = VLMScoreTransform(scorer, clip_len=2, frame_size=(3, 4))
        t(TensorDict(pixels=torch.full((2, 12, 16, 3), 50, dtype=torch.uint8), batch_size=[2]))
        px = scorer.seen[0]["pixels"]
        assert px.shape == (1, 2, 3, 4, 3) and px.dtype == torch.uint8 and (px == 50).all()

    def test_grid_composite(self):
        scorer = RecordingScorer()
        t = VLMScoreTransform(scorer, clip_len=5, grid=True)
        mask = torch.tensor([1, 1, 1, 0, 0]).bool()
        t(TensorDict(pixels=step_frames(5, size=2) + 1, mask=mask, batch_size=[5]))
        seen = scorer.seen[0]
        assert seen.batch_size == (1, 1) and seen["mask"].tolist() == [[True]]
        img = seen["pixels"][0, 0, ..., 0]  # 3x2 grid of 2x2 tiles -> [6, 4]? rows=3, cols=2
        assert img.shape == (6, 4)
        tiles = img.view(3, 2, 2, 2).permute(0, 2, 1, 3).reshape(6, 2, 2)[:, 0, 0].tolist()
        assert tiles == [1, 2, 3, 0, 0, 0]  # padding and empty cells are black


def test_as_replay_buffer_transform_over_slices():
    # 3 trajectories of 6 steps; slices of 3; every record of a slice gets the slice's score
    n = 18
    data = TensorDict({"pixels": step_frames(n), "episode": torch.arange(n) // 6}, batch_size=[n])
    scorer = RecordingScorer()
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n), sampler=SliceSampler(slice_len=3, traj_key="episode"),
                                batch_size=12, transform=VLMScoreTransform(scorer, clip_len=3))
    rb.extend(data)
    sample = rb.sample()
    assert sample.shape == (12,)
    per_slice = sample.reshape(4, 3)
    assert (per_slice["vlm_score"] == per_slice["vlm_score"][:, :1]).all()
    expected = per_slice["pixels"][:, -1, 0, 0, 0].float() / 100
    assert torch.allclose(per_slice["vlm_score"][:, 0], expected)


@pytest.mark.parametrize("frames", [None, 3])
def test_frame_pool_scores_equal_inline(frames):
    """A stream with pool_frames=True scores exactly like one that copies frames per clip."""
    from vlmrb_torchrl import ClipStream

    n = 40
    batch = TensorDict({"pixels": step_frames(n), ("collector", "traj_ids"): torch.arange(n) // 13,
                        ("next", "done"): torch.arange(n) % 13 == 12,
                        ("next", "pixels"): step_frames(n) + 50}, batch_size=[n])
    spec = ClipSpec(clip_len=6, frames=frames)
    inline = ClipStream(spec).push(batch, torch.arange(n))
    pooled = ClipStream(spec, pool_frames=True).push(batch, torch.arange(n))
    # each frame once: the steps' frames and the ended trajectories' last "next" frames
    assert "pixels" not in pooled.clips.keys() and pooled.frames.shape[0] <= n + 3
    assert (pooled.gather_frames()["pixels"] == inline.clips["pixels"]).all()
    assert (pooled.materialize()["pixels"] == inline.clips["pixels"]).all()  # the earlier name
    t = VLMScoreTransform(RecordingScorer(), clip_len=6, frames=frames)
    expected = t.score_clips(inline.clips)
    assert torch.equal(t.score_clips(pooled.clips, frames=pooled.frames), expected)
    # split and re-concatenated (what the worker does) still scores the same
    from vlmrb_torchrl import ClipBatch

    head, rest = pooled.split(5)
    again = ClipBatch.cat([rest, head])
    got = t.score_clips(again.clips, frames=again.frames)
    assert torch.equal(got, torch.cat([expected[5:], expected[:5]]))


class TestTorchRLTransform:
    def test_clip_spec(self):
        t = VLMScoreTransform(RecordingScorer(), clip_len=8, frames=3)
        assert t.clip_spec == ClipSpec(clip_len=8, frames=3)
        assert not hasattr(t, "spec")  # the old alias (a ClipSpec, not a TorchRL spec) is gone

    def test_observation_spec_gets_the_score(self):
        from torchrl.data import Composite, Unbounded

        t = VLMScoreTransform(RecordingScorer(), clip_len=4, out_keys=[("vlm", "score")])
        spec = t.transform_observation_spec(Composite(pixels=Unbounded(shape=[5, 6, 6, 3], dtype=torch.uint8),
                                                      shape=[5]))
        assert spec["vlm", "score"].shape == (5,) and spec["vlm", "score"].dtype == torch.float32
        assert "pixels" in spec.keys()

    def test_environment_use_fails_clearly(self):
        from torchrl.envs import TransformedEnv
        from torchrl.testing.mocking_classes import CountingEnv

        env = TransformedEnv(CountingEnv(), VLMScoreTransform(RecordingScorer(["observation"]), clip_len=2, in_keys=()))
        assert "vlm_score" in env.observation_spec.keys()  # the specs describe the output
        with pytest.raises(RuntimeError, match="not inside an environment"):
            env.reset()
        with pytest.raises(RuntimeError, match="not inside an environment"):
            env.rollout(3)

    def test_append_transform_scores_samples_and_stores_untouched(self):
        n = 12
        data = TensorDict({"pixels": step_frames(n), "episode": torch.arange(n) // 6}, batch_size=[n])
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n), batch_size=6,
                                    sampler=SliceSampler(slice_len=3, traj_key="episode"))
        rb.append_transform(VLMScoreTransform(RecordingScorer(), clip_len=3))
        rb.extend(data)
        assert "vlm_score" not in rb.storage[:].keys()  # inv passes data through
        per_slice = rb.sample().reshape(2, 3)
        expected = per_slice["pixels"][:, -1, 0, 0, 0].float() / 100
        assert torch.allclose(per_slice["vlm_score"], expected[:, None].expand(2, 3))


class FramesSeen:
    """A frame-reading scorer like the VLM backends: shows at most ``max_frames`` real frames per clip."""

    prompt = "seen"
    provenance = {"backend": "test"}
    in_keys = ["pixels", "mask"]

    def __init__(self, max_frames=None):
        self.max_frames = max_frames
        self.seen = []

    def score(self, clips):
        from vlmrb_torchrl.scorers._frames import clip_frames

        frames = clip_frames(clips, "pixels", "mask", max_frames=self.max_frames)
        self.seen += [f[:, 0, 0, 0].tolist() for f in frames]
        return torch.zeros(clips.shape[0])


class TestMakeClipScoring:
    def batch(self, n=40, traj_len=13):
        return TensorDict({"pixels": step_frames(n), ("collector", "traj_ids"): torch.arange(n) // traj_len,
                           ("next", "done"): torch.zeros(n, dtype=torch.bool),
                           ("next", "pixels"): step_frames(n + 1)[1:],
                           ("next", "progress_event"): torch.arange(n) % 7 == 3}, batch_size=[n])

    def test_frame_scorer(self):
        from vlmrb_torchrl import ClipScoring, ClipStream, make_clip_scoring

        pair = make_clip_scoring(RecordingScorer(["pixels", "mask", ("next", "progress_event")]),
                                 ClipSpec(clip_len=6, frames=3), frame_size=4)
        assert isinstance(pair, ClipScoring) and isinstance(pair.stream, ClipStream) and pair.needs_frames
        stream, transform = pair
        assert stream.frame_key == "pixels" and stream.pool_frames
        assert stream.extra_keys == [("next", "progress_event")]
        assert transform.in_keys == ["pixels"] and transform.clip_spec == ClipSpec(clip_len=6, frames=3)
        assert transform.frame_size == (4, 4)
        out = stream.push(self.batch(), torch.arange(40))
        assert transform.score_clips(out.clips, frames=out.frames).shape == (len(out),)

    def test_frameless_scorer_and_stream_kwargs(self):
        from vlmrb_torchrl import make_clip_scoring

        stream, transform = make_clip_scoring("oracle:minigrid", ClipSpec(clip_len=4), done_key=None,
                                              extra_keys=["obs", ("next", "progress_event")], pool_frames=False)
        assert stream.frame_key is None and stream.done_key is None and not stream.pool_frames
        assert stream.extra_keys == [("next", "progress_event"), "obs"]  # the scorer's first, no duplicates
        # no frames read, so no outcome frame: the oracle sees exactly the steps it saw before
        assert transform.in_keys == [] and transform.clip_spec == ClipSpec(clip_len=4, final_frame=False)

    def test_default_clip_spec(self):
        from vlmrb_torchrl import make_clip_scoring

        assert make_clip_scoring(RecordingScorer()).transform.clip_spec == ClipSpec()

    def test_transform_subsampled_clips_are_not_subsampled_again(self):
        from vlmrb_torchrl import make_clip_scoring

        spec = ClipSpec(clip_len=32, frames=8)
        scorer = FramesSeen(max_frames=8)
        stream, transform = make_clip_scoring(scorer, spec)
        n = 50  # one trajectory: full clips, then padded tail clips
        batch = TensorDict({"pixels": step_frames(n), ("collector", "traj_ids"): torch.zeros(n, dtype=torch.long),
                            ("next", "done"): torch.arange(n) == n - 1,
                            ("next", "pixels"): step_frames(n + 1)[1:]}, batch_size=[n])
        out = stream.push(batch, torch.arange(n))
        transform.score_clips(out.clips, frames=out.frames)
        positions = spec.frame_indices().tolist()
        assert positions[-1] == 32  # the outcome frame, kept by the subsampling
        assert scorer.seen[0] == positions  # exactly the transform's frames
        assert len(scorer.seen) == n
        for start, seen in enumerate(scorer.seen):  # padded clips: the real ones among them, untouched
            # ... ending with the outcome: the frame after the last real step (the "next" one at the end)
            assert seen == [start + p for p in positions[:-1] if start + p < n] + [min(start + 32, n)]

    def test_double_subsampling_warns(self):
        from vlmrb_torchrl import make_clip_scoring

        with pytest.warns(UserWarning, match="subsampled twice"):
            make_clip_scoring(FramesSeen(max_frames=4), ClipSpec(clip_len=16, frames=8))
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            make_clip_scoring(FramesSeen(max_frames=8), ClipSpec(clip_len=16, frames=8))
            make_clip_scoring(FramesSeen(max_frames=2), ClipSpec(clip_len=16, frames=8), grid=True)

    @pytest.mark.parametrize("frames, grid, max_frames, warns", [
        (1, False, None, True), (None, True, None, True), (None, False, 1, True),
        (2, False, None, False), (None, False, None, False)])
    def test_change_checks_that_see_one_frame_warn(self, frames, grid, max_frames, warns):
        """'progress'/'rise' compare frames: with one frame per clip (grid, frames=1, max_frames=1) they score 0."""
        import warnings

        from vlmrb_torchrl import make_clip_scoring
        from vlmrb_torchrl.scorers.prompts import PromptCheck

        scorer = FramesSeen(max_frames=max_frames)
        scorer.prompt_set = [PromptCheck("the agent holds the key", ["the key is on the floor"], "progress"),
                             PromptCheck("the agent is on the goal", ["the agent is far from the goal"], "max")]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            make_clip_scoring(scorer, ClipSpec(clip_len=16, frames=frames), grid=grid)
        messages = [str(w.message) for w in caught if "score a change between frames" in str(w.message)]
        assert bool(messages) == warns
        if warns:
            assert "'the agent holds the key'" in messages[0] and "on the goal" not in messages[0]

    def test_scorer_subsampling_rule_is_the_clip_spec_rule(self):
        from vlmrb_torchrl.scorers._frames import subsample

        for length in range(1, 70):
            for frames in range(1, length + 1):
                assert subsample(length, frames) == ClipSpec(
                    clip_len=length, frames=frames, final_frame=False).frame_indices().tolist()
                # with the outcome frame: the same rule over the clip's length + 1 frames
                assert subsample(length + 1, frames) == ClipSpec(clip_len=length, frames=frames).frame_indices().tolist()
            assert subsample(length, None) == subsample(length, length + 3) == list(range(length))


class TestOutcomeFrameThroughTheStream:
    def batch(self, n=60):
        # 3 episodes of 20 steps, an event on the last step of each; frames encode the step
        step = torch.arange(n) % 20
        return TensorDict({"pixels": step_frames(n), ("next", "pixels"): step_frames(n) + 1,
                           ("collector", "traj_ids"): torch.arange(n) // 20,
                           ("next", "done"): step == 19, ("next", "progress_event"): step == 19},
                          batch_size=[n])

    def scores(self, scorer, spec):
        from vlmrb_torchrl import make_clip_scoring

        stream, transform = make_clip_scoring(scorer, spec)
        out = stream.push(self.batch(), torch.arange(60))
        return out.index, out.scores_for_targets(transform.score_clips(out.clips, frames=out.frames))

    @pytest.mark.parametrize("frames", [None, 3])
    def test_oracle_labels_unchanged(self, frames):
        index, on = self.scores("oracle:minigrid", ClipSpec(clip_len=5, frames=frames))
        index_off, off = self.scores("oracle:minigrid", ClipSpec(clip_len=5, frames=frames, final_frame=False))
        assert torch.equal(index, index_off) and torch.equal(on, off)
        if frames is None:
            assert on.sum() == 15  # 5 clips per episode hold its last step

    def test_a_frame_scorer_sees_the_goal_frame(self):
        # the frame after the goal step (value 20) exists only as ("next", "pixels") of step 19
        # (RecordingScorer scores a clip by its last real frame / 100; episode 0's frames are 0..19)
        index, on = self.scores(RecordingScorer(), ClipSpec(clip_len=5))
        first = index < 20
        assert on[first].max() == pytest.approx(0.20)
        torch.testing.assert_close(on[first & (index >= 15)], torch.full((5,), 0.20))
        _, off = self.scores(RecordingScorer(), ClipSpec(clip_len=5, final_frame=False))
        assert off[first].max() == pytest.approx(0.19)  # without it, the goal frame is never shown
