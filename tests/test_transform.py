"""Tests for VLMScoreTransform and pack_frames."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

from vlmrb_torchrl import ClipSpec, VLMScoreTransform
from vlmrb_torchrl.transform import pack_frames


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

        with pytest.raises(ValueError, match="finite values in \\[0, 1\\]"):
            VLMScoreTransform(Bad(), clip_len=2)(TensorDict(pixels=step_frames(4), batch_size=[4]))

        class WrongShape(RecordingScorer):
            def score(self, clips):
                return torch.zeros(clips.shape[0] + 1)

        with pytest.raises(ValueError, match="returned shape"):
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
        t(TensorDict(pixels=step_frames(clip_len), batch_size=[clip_len]))
        got = scorer.seen[0]["pixels"][0, :, 0, 0, 0].long()
        assert got.tolist() == ClipSpec(clip_len=clip_len, frames=frames).frame_indices().tolist()

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
    from vlmrb_torchrl.worker import _split

    n = 40
    batch = TensorDict({"pixels": step_frames(n), ("collector", "traj_ids"): torch.arange(n) // 13,
                        ("next", "done"): torch.zeros(n, dtype=torch.bool)}, batch_size=[n])
    spec = ClipSpec(clip_len=6, frames=frames)
    inline = ClipStream(spec).push(batch, torch.arange(n))
    pooled = ClipStream(spec, pool_frames=True).push(batch, torch.arange(n))
    assert "pixels" not in pooled.clips.keys() and pooled.frames.shape[0] <= n
    assert (pooled.materialize()["pixels"] == inline.clips["pixels"]).all()
    t = VLMScoreTransform(RecordingScorer(), clip_len=6, frames=frames)
    expected = t.score_clips(inline.clips)
    assert torch.equal(t.score_clips(pooled.clips, frames=pooled.frames), expected)
    # split and re-concatenated (what the worker does) still scores the same
    from vlmrb_torchrl import ClipBatch

    head, rest = _split(pooled, 5)
    again = ClipBatch.cat([rest, head])
    got = t.score_clips(again.clips, frames=again.frames)
    assert torch.equal(got, torch.cat([expected[5:], expected[:5]]))
