"""Tests for vlmrb_torchrl.scoring.clips: ClipSpec, ClipBatch, ClipStream.

Test data encodes where it comes from: the fake "pixels" of a step hold (trajectory id, step in
trajectory), so every clip can be checked exactly against a brute-force reference.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections import defaultdict

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl.scoring.clips import ClipBatch, ClipSpec, ClipStream

from _clip_stream_loop import LoopClipStream  # tests/: the per-trajectory stream ClipStream replaced

# --------------------------------------------------------------------------- helpers


def make_batch(traj, done=None, *, step=None, reward=None):
    """A collector-like batch of any batch shape; pixels[..., :] = (traj id, step).

    ("next", "pixels") is the frame after the step, (traj id, step + 1), as a collector writes it.
    """
    traj = torch.as_tensor(traj, dtype=torch.long)
    shape = traj.shape
    done = torch.zeros(shape, dtype=torch.bool) if done is None else torch.as_tensor(done).bool()
    step = torch.zeros(shape, dtype=torch.long) if step is None else torch.as_tensor(step).long()
    reward = step.float() * 10 if reward is None else torch.as_tensor(reward).float()
    return TensorDict(
        pixels=torch.stack([traj, step], -1),
        collector=TensorDict(traj_ids=traj, batch_size=shape),
        next=TensorDict(done=done[..., None], reward=reward[..., None],
                        pixels=torch.stack([traj, step + 1], -1), batch_size=shape),
        batch_size=shape,
    )


def one_traj(n, *, traj_id=0, done=True, first_step=0):
    """Flat batch of one trajectory: steps first_step .. first_step + n - 1."""
    steps = torch.arange(first_step, first_step + n)
    d = torch.zeros(n, dtype=torch.bool)
    d[-1] = done
    return make_batch(torch.full((n,), traj_id), d, step=steps)


def check_outcome(cb: ClipBatch) -> ClipBatch:
    """Checks the outcome position of clips from a stream with ``final_frame`` and drops it.

    The outcome frame is the frame after the clip's last real step, (traj, last step + 1); the
    position is no step (mask False, index -1) and its other entries repeat the last real step.
    """
    clips = cb.gather_frames()
    length = clips.shape[1] - 1
    mask = clips["mask"]
    assert not mask[:, length].any() and (clips["clip", "index"][:, length] == -1).all()
    last = mask[:, :length].sum(-1) - 1
    rows = torch.arange(len(cb))
    outcome, last_frame = clips["pixels"][:, length], clips["pixels"][rows, last]
    assert torch.equal(outcome[:, 0], last_frame[:, 0]) and torch.equal(outcome[:, 1], last_frame[:, 1] + 1)
    for key in clips.keys(include_nested=True, leaves_only=True):
        if key not in ("pixels", "mask", ("clip", "index")):
            assert torch.equal(clips[key][:, length], clips[key][rows, last]), key
    return ClipBatch(clips[:, :length], cb.target_clip, cb.index, cb.generation, cb.reduce)


def clip_records(cb: ClipBatch | None, final_frame: bool = True) -> list[tuple]:
    """One hashable record per clip: (traj, frames, mask, clip index, targets, generations).

    Clips showing the outcome frame (``final_frame``) are checked (:func:`check_outcome`) and
    recorded without it.
    """
    if cb is None:
        return []
    assert cb.clips.batch_dims == 2
    if final_frame:
        cb = check_outcome(cb)
    out = []
    for b in range(len(cb)):
        px = cb.clips["pixels"][b]
        sel = cb.target_clip == b
        out.append(
            (
                int(px[0, 0]),
                tuple(px[:, 1].tolist()),
                tuple(cb.clips["mask"][b].tolist()),
                tuple(cb.clips["clip", "index"][b].tolist()),
                tuple(cb.index[sel].tolist()),
                tuple(cb.generation[sel].tolist()),
            )
        )
    return out


def reference_records(trajs: dict[int, list[int]], spec: ClipSpec, gen=lambda i: i + 1000):
    """Brute-force clips for ended trajectories given as {traj id: storage indices by step}."""
    length, stride = spec.clip_len, spec.stride
    span = stride if spec.assign == "start" else max(length, stride)
    out = []
    for tid, idx in trajs.items():
        n = len(idx)
        for s in range(0, n, stride):
            pos = [min(s + j, n - 1) for j in range(length)]
            mask = tuple(s + j < n for j in range(length))
            cidx = tuple(idx[p] if m else -1 for p, m in zip(pos, mask))
            targets = tuple(idx[s : min(s + span, n)])
            out.append((tid, tuple(pos), mask, cidx, targets, tuple(gen(i) for i in targets)))
    return sorted(out)


class Recorder:
    """Pushes batches like a training loop would (storage indices from a running counter)."""

    def __init__(self, stream: ClipStream):
        self.stream = stream
        self.count = 0
        self.trajs: dict[int, list[int]] = defaultdict(list)  # traj id -> indices by step
        self.records: list[tuple] = []

    def push(self, batch):
        flat = batch.reshape(-1)
        index = torch.arange(self.count, self.count + flat.numel())
        self.count += flat.numel()
        for i, (tid, st) in zip(index.tolist(), flat["pixels"].tolist()):
            assert len(self.trajs[tid]) == st, "test data must be in time order"
            self.trajs[tid].append(i)
        out = self.stream.push(batch, index, index + 1000)
        self.records += clip_records(out, self.stream.final_frame)
        return out

    def flush(self):
        out = self.stream.flush()
        self.records += clip_records(out, self.stream.final_frame)
        return out


def env_data(episode_lengths: list[list[int]], steps: int):
    """[E, steps] traj ids / step numbers / dones for E envs with the given episode lengths.

    Env e's k-th trajectory has id e + E * k (unique, like a collector's). The last episode is
    cut at ``steps`` and left unfinished (no done).
    """
    num_envs = len(episode_lengths)
    traj = torch.empty(num_envs, steps, dtype=torch.long)
    step = torch.empty_like(traj)
    done = torch.zeros(num_envs, steps, dtype=torch.bool)
    for e, lengths in enumerate(episode_lengths):
        t = 0
        for k, n in enumerate(lengths):
            stop = min(t + n, steps)
            traj[e, t:stop] = e + num_envs * k
            step[e, t:stop] = torch.arange(stop - t)
            if t + n <= steps:
                done[e, t + n - 1] = True
            t = stop
            if t == steps:
                break
        assert t == steps, "episode lengths too short for the requested steps"
    return traj, step, done


def check_clip_integrity(records):
    """Real steps of a clip: one trajectory, consecutive steps; padding repeats the last one."""
    for tid, frames, mask, cidx, targets, _ in records:
        num_real = sum(mask)
        assert num_real >= 1 and all(mask[:num_real]) and not any(mask[num_real:])
        real = frames[:num_real]
        assert list(real) == list(range(real[0], real[0] + num_real))
        assert all(f == real[-1] for f in frames[num_real:])
        assert all(c == -1 for c in cidx[num_real:]) and all(c >= 0 for c in cidx[:num_real])
        assert len(targets) >= 1


# --------------------------------------------------------------------------- ClipSpec


class TestClipSpec:
    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"clip_len": 0}, ValueError, r"ClipSpec.clip_len must be an int >= 1, got clip_len=0\."),
            ({"clip_len": -3}, ValueError, r"clip_len=-3"),
            ({"clip_len": 2.0}, TypeError, r"ClipSpec.clip_len must be an int.*clip_len=2.0"),
            ({"clip_len": True}, TypeError, r"clip_len=True of type bool"),
            ({"clip_len": "8"}, TypeError, r"clip_len='8'"),
            ({"stride": 0}, ValueError, r"ClipSpec.stride must be an int >= 1, got stride=0\."),
            ({"stride": False}, TypeError, r"stride=False"),
            ({"frames": 0}, ValueError, r"ClipSpec.frames must be None or an int in \[1, clip_len=32\], got frames=0"),
            ({"clip_len": 4, "frames": 5}, ValueError, r"\[1, clip_len=4\], got frames=5"),
            ({"frames": 2.5}, TypeError, r"frames=2.5"),
            ({"frames": True}, TypeError, r"frames=True"),
            ({"assign": "end"}, ValueError, r"ClipSpec.assign must be one of \['start', 'cover_max'\], got assign='end'"),
            ({"assign": None}, TypeError, r"assign=None"),
            ({"final_frame": 1}, TypeError, r"ClipSpec.final_frame must be a bool, got final_frame=1"),
        ],
    )
    def test_bad_args(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            ClipSpec(**kwargs)

    def test_defaults_and_properties(self):
        spec = ClipSpec()
        assert (spec.clip_len, spec.stride, spec.frames, spec.assign) == (32, 1, None, "start")
        assert spec.final_frame and spec.clip_frames == 33 and spec.num_frames == 33  # 32 steps + outcome
        assert spec.reduce == "replace"
        assert ClipSpec(clip_len=8, frames=3).num_frames == 3
        assert ClipSpec(clip_len=8, final_frame=False).num_frames == 8
        assert ClipSpec(assign="cover_max").reduce == "max"
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.clip_len = 4

    def test_numpy_ints_are_normalised(self):
        spec = ClipSpec(clip_len=np.int64(8), stride=np.int32(2), frames=np.int64(4))
        assert type(spec.clip_len) is int and type(spec.stride) is int and type(spec.frames) is int
        assert spec == ClipSpec(clip_len=8, stride=2, frames=4)

    @pytest.mark.parametrize(
        "clip_len, frames, expected",
        [
            (1, None, [0]),
            (1, 1, [0]),
            (4, None, [0, 1, 2, 3]),
            (5, 5, [0, 1, 2, 3, 4]),
            (8, 1, [7]),
            (8, 2, [0, 7]),
            (8, 3, [0, 4, 7]),
            (10, 4, [0, 3, 6, 9]),
            (16, 5, [0, 4, 8, 11, 15]),
            (32, 4, [0, 10, 21, 31]),
            (32, 8, [0, 4, 9, 13, 18, 22, 27, 31]),
        ],
    )
    def test_frame_indices(self, clip_len, frames, expected):
        idx = ClipSpec(clip_len=clip_len, frames=frames, final_frame=False).frame_indices()
        assert idx.dtype == torch.int64
        assert idx.tolist() == expected

    @pytest.mark.parametrize(
        "clip_len, frames, expected",
        [
            (1, None, [0, 1]),
            (1, 1, [1]),  # one frame: the outcome
            (4, None, [0, 1, 2, 3, 4]),
            (8, 1, [8]),
            (8, 2, [0, 8]),
            (8, 3, [0, 4, 8]),
            (8, 8, [0, 1, 2, 3, 5, 6, 7, 8]),  # 8 of the 9 frames: the outcome stays
            (16, 5, [0, 4, 8, 12, 16]),
        ],
    )
    def test_frame_indices_with_the_outcome_frame(self, clip_len, frames, expected):
        assert ClipSpec(clip_len=clip_len, frames=frames).frame_indices().tolist() == expected

    @pytest.mark.parametrize("final_frame", [True, False])
    def test_frame_indices_invariants(self, final_frame):
        for clip_len in range(1, 41):
            for frames in range(1, clip_len + 1):
                idx = ClipSpec(clip_len=clip_len, frames=frames, final_frame=final_frame).frame_indices()
                assert idx.shape == (frames,)
                assert (idx.diff() > 0).all(), (clip_len, frames, idx)
                # the last frame is always kept: the outcome (position clip_len) when shown
                assert int(idx[-1]) == clip_len - 1 + final_frame
                if frames >= 2:
                    assert int(idx[0]) == 0


# --------------------------------------------------------------------------- ClipBatch


def tiny_clip_batch(num_clips, targets, reduce="replace", clip_len=3, offset=0):
    clips = TensorDict(
        pixels=torch.arange(num_clips * clip_len).reshape(num_clips, clip_len, 1) + offset,
        mask=torch.ones(num_clips, clip_len, dtype=torch.bool),
        batch_size=[num_clips, clip_len],
    )
    target_clip = torch.tensor(targets)
    index = torch.arange(len(targets)) + offset
    return ClipBatch(clips, target_clip, index, index * 2, reduce)


class TestClipBatch:
    def test_len_fields_unpack_replace(self):
        cb = tiny_clip_batch(4, [0, 1, 1, 3])
        assert len(cb) == 4 and cb.num_clips == 4 and cb.num_targets == 4
        clips, target_clip, index, generation, reduce, frames = cb
        assert clips is cb.clips and reduce == "replace" and frames is None
        assert ClipBatch._fields == ("clips", "target_clip", "index", "generation", "reduce", "frames")
        replaced = cb._replace(reduce="max")
        assert isinstance(replaced, ClipBatch) and replaced.reduce == "max" and len(replaced) == 4
        # the process backend of the async worker pickles clip batches
        restored = pickle.loads(pickle.dumps(cb))
        assert isinstance(restored, ClipBatch) and len(restored) == 4
        assert torch.equal(restored.clips["pixels"], cb.clips["pixels"])
        assert torch.equal(restored.target_clip, cb.target_clip)
        with pytest.raises(TypeError, match="ClipBatch takes 6 fields"):
            ClipBatch._make([clips, target_clip])

    def test_scores_for_targets(self):
        cb = tiny_clip_batch(3, [2, 0, 0, 1])
        scores = torch.tensor([0.1, 0.2, 0.3])
        assert cb.scores_for_targets(scores).tolist() == pytest.approx([0.3, 0.1, 0.1, 0.2])
        with pytest.raises(ValueError, match=r"one score per clip, i.e. shape \[3\], got clip_scores.shape=\[2\]"):
            cb.scores_for_targets(torch.zeros(2))

    def test_cat(self):
        a = tiny_clip_batch(2, [0, 1, 1])
        b = tiny_clip_batch(3, [2, 0], offset=100)
        both = ClipBatch.cat([a, b])
        assert len(both) == 5
        assert both.target_clip.tolist() == [0, 1, 1, 4, 2]
        assert both.index.tolist() == [0, 1, 2, 100, 101]
        assert both.generation.tolist() == [0, 2, 4, 200, 202]
        assert torch.equal(both.clips["pixels"][2:], b.clips["pixels"])
        # targets still point at the clips that scored them
        sources = [p.clips["pixels"][p.target_clip[k]] for p in (a, b) for k in range(p.num_targets)]
        for j, src in enumerate(sources):
            assert torch.equal(both.clips["pixels"][both.target_clip[j]], src)
        assert ClipBatch.cat([a]) is a

    def test_split(self):
        cb = tiny_clip_batch(4, [0, 1, 1, 3, 2])
        head, rest = cb.split(2)
        assert isinstance(head, ClipBatch) and (len(head), len(rest)) == (2, 2)
        assert head.target_clip.tolist() == [0, 1, 1] and rest.target_clip.tolist() == [1, 0]
        assert head.index.tolist() == cb.index[:3].tolist() and rest.index.tolist() == cb.index[3:].tolist()
        assert torch.equal(rest.clips["pixels"], cb.clips["pixels"][2:])
        again = ClipBatch.cat([head, rest])
        assert again.target_clip.tolist() == cb.target_clip.tolist()
        assert torch.equal(again.clips["pixels"], cb.clips["pixels"])
        empty, whole = cb.split(0)
        assert len(empty) == 0 and empty.num_targets == 0 and whole.index.tolist() == cb.index.tolist()

    def test_frame_pool_layout(self):
        n = 9
        batch = make_batch([0] * 5 + [1] * 4)
        batch["pixels"] = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 2, 2, 3).clone()
        batch["next", "pixels"] = batch["pixels"] + 100
        inline_stream = ClipStream(ClipSpec(clip_len=3))
        pooled_stream = ClipStream(ClipSpec(clip_len=3), pool_frames=True)
        inline = inline_stream.push(batch, torch.arange(n))
        pooled = pooled_stream.push(batch, torch.arange(n))
        assert pooled.frames.shape == (n,)  # each frame once (the outcomes are the next steps' frames)
        assert ClipBatch.FRAME_ROW_KEY in pooled.clips.keys(True) and "pixels" not in pooled.clips.keys()
        assert ClipBatch.MASK_KEY == "mask" and ClipBatch.INDEX_KEY == ("clip", "index")
        full = pooled.gather_frames()
        assert ClipBatch.FRAME_ROW_KEY not in full.keys(True)
        assert torch.equal(full["pixels"], inline.clips["pixels"])
        at = torch.tensor([0, 2])
        assert torch.equal(pooled.gather_frames(at)["pixels"], inline.clips["pixels"][:, at])
        assert torch.equal(ClipBatch.inline_frames(pooled.clips, pooled.frames, at)["mask"], inline.clips["mask"][:, at])
        assert inline.gather_frames(at).batch_size == (len(inline), 2)  # no pool: a slice
        # split halves share the pool; cat re-bases their rows
        head, rest = pooled.split(1)
        assert head.frames is pooled.frames is rest.frames
        assert torch.equal(ClipBatch.cat([rest, head]).gather_frames()["pixels"],
                           torch.cat([inline.clips["pixels"][1:], inline.clips["pixels"][:1]]))
        # flushed tails: the trajectories' last "next" frames join the pool, once each
        inline, pooled = inline_stream.flush(), pooled_stream.flush()
        assert torch.equal(pooled.gather_frames()["pixels"], inline.clips["pixels"])
        held = sorted(set(pooled.frames["pixels"][:, 0, 0, 0].tolist()))
        assert held == [2, 3, 4, 6, 7, 8, 104, 108] and pooled.frames.shape == (len(held),)

    @pytest.mark.parametrize(
        "parts, match",
        [
            ([], "at least one ClipBatch"),
            ([("replace", 3), ("max", 3)], r"one reduce mode, got \['max', 'replace'\]"),
            ([("replace", 3), ("replace", 4)], r"one length, got clip lengths \[3, 4\]"),
            ([("replace", 3), ("replace", "other_keys")], "same keys, frame shapes and dtypes"),
        ],
    )
    def test_cat_errors(self, parts, match):
        batches = []
        for reduce, clip_len in parts:
            if clip_len == "other_keys":
                cb = tiny_clip_batch(2, [0], reduce)
                cb = cb._replace(clips=cb.clips.rename_key_("pixels", "rgb"))
            else:
                cb = tiny_clip_batch(2, [0], reduce, clip_len=clip_len)
            batches.append(cb)
        with pytest.raises(ValueError, match=match):
            ClipBatch.cat(batches)


# --------------------------------------------------------------------------- ClipStream


class TestClipStream:
    # ---- construction and input errors

    @pytest.mark.parametrize(
        "args, kwargs, error, match",
        [
            ((32,), {}, TypeError, "ClipStream needs spec to be a ClipSpec, got int"),
            ((ClipSpec(),), {"frame_key": 3}, TypeError, r"frame_key must be a non-empty str.*got frame_key=3"),
            ((ClipSpec(),), {"frame_key": ""}, TypeError, "frame_key=''"),
            ((ClipSpec(),), {"traj_key": ("collector", 1)}, TypeError, r"traj_key=\('collector', 1\)"),
            ((ClipSpec(),), {"frame_key": "mask"}, ValueError, "frame_key='mask' would shadow"),
            ((ClipSpec(),), {"extra_keys": [("clip", "index")]}, ValueError, r"extra_keys=\('clip', 'index'\) would shadow"),
            ((ClipSpec(),), {"extra_keys": ["pixels"]}, ValueError, "duplicated keys"),
            ((ClipSpec(),), {"extra_keys": ["a", ("a",)]}, ValueError, "duplicated keys"),
        ],
    )
    def test_construction_errors(self, args, kwargs, error, match):
        with pytest.raises(error, match=match):
            ClipStream(*args, **kwargs)

    def test_keys_are_normalised(self):
        stream = ClipStream(ClipSpec(), frame_key=("pixels",), extra_keys="obs")
        assert stream.frame_key == "pixels" and stream.extra_keys == ["obs"]
        assert "num_trajectories=0" in repr(stream)

    @pytest.mark.parametrize(
        "case, error, match",
        [
            ("no_pixels", KeyError, r"ClipStream needs 'pixels' in the batch; found \[.*'collector', 'traj_ids'.*\]\. Render frames at collection time or pass frame_key="),
            ("no_traj", KeyError, r"needs trajectory ids \('collector', 'traj_ids'\) in the batch.*track_traj_ids=True"),
            ("no_done", KeyError, r"needs \('next', 'done'\) in the batch.*done_key=None"),
            ("no_extra", KeyError, r"needs extra key 'obs' in the batch.*extra_keys="),
            ("short_index", ValueError, r"one index per step: got 3 for a batch of 4 steps \(batch_size=\[2, 2\]\)"),
            ("short_generation", ValueError, r"one generation per step: got 5 for a batch of 4 steps"),
            ("float_index", TypeError, r"needs integer index \(storage slots\), got dtype=torch.float32"),
            ("not_td", TypeError, "needs a TensorDict batch, got dict"),
            ("zero_dim", ValueError, r"at least one batch dimension.*batch_size=\[\]"),
            ("traj_shape", ValueError, r"one trajectory id per step in \('collector', 'traj_ids'\), got shape \[2, 2, 2\]"),
        ],
    )
    def test_push_errors(self, case, error, match):
        extra = ["obs"] if case == "no_extra" else []
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=2), extra_keys=extra)
        batch = make_batch([[0, 0], [1, 1]])
        index, generation = torch.arange(4), None
        if case == "no_pixels":
            del batch["pixels"]
        elif case == "no_traj":
            del batch["collector", "traj_ids"]
        elif case == "no_done":
            del batch["next", "done"]
        elif case == "short_index":
            index = torch.arange(3)
        elif case == "short_generation":
            generation = torch.arange(5)
        elif case == "float_index":
            index = torch.arange(4.0)
        elif case == "not_td":
            batch = batch.to_dict()
        elif case == "zero_dim":
            batch = batch[0, 0]
            index = torch.arange(1)
        elif case == "traj_shape":
            batch["collector"] = TensorDict(
                traj_ids=torch.zeros(2, 2, 2, dtype=torch.long), batch_size=[2, 2]
            )
        with pytest.raises(error, match=match):
            stream.push(batch, index, generation)

    def test_frame_shape_change_mid_trajectory(self):
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=4))
        stream.push(one_traj(2, done=False), torch.arange(2))
        bad = one_traj(2, done=False, first_step=2)
        bad["pixels"] = bad["pixels"][:, :1]
        with pytest.raises(ValueError, match=r"'pixels' with per-step shape \[1\].*live trajectories hold shape \[2\]"):
            stream.push(bad, torch.arange(2, 4))
        stream.flush()
        assert stream.push(bad, torch.arange(2)) is None  # fine once nothing is live

    # ---- exact hand-built cases

    def test_single_trajectory_exact(self):
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=3), extra_keys=[("next", "reward")])
        out = stream.push(one_traj(5), torch.arange(10, 15), torch.arange(20, 25))
        assert out.clips.batch_size == (5, 3) and out.reduce == "replace"
        assert out.clips["pixels"][..., 1].tolist() == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 4], [4, 4, 4]]
        assert out.clips["mask"].tolist() == [[True] * 3] * 3 + [[True, True, False], [True, False, False]]
        assert out.clips["clip", "index"].tolist() == [
            [10, 11, 12], [11, 12, 13], [12, 13, 14], [13, 14, -1], [14, -1, -1],
        ]
        assert out.clips["next", "reward"][..., 0].tolist() == [
            [0, 10, 20], [10, 20, 30], [20, 30, 40], [30, 40, 40], [40, 40, 40],
        ]
        assert out.target_clip.tolist() == [0, 1, 2, 3, 4]
        assert out.index.tolist() == [10, 11, 12, 13, 14]
        assert out.generation.tolist() == [20, 21, 22, 23, 24]
        assert stream.num_trajectories == 0 and stream.num_frames_held == 0
        assert stream.flush() is None

    @pytest.mark.parametrize("assign", ["start", "cover_max"])
    def test_short_trajectory_exact(self, assign):
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=4, stride=1, assign=assign))
        out = stream.push(one_traj(2), torch.tensor([7, 8]))
        assert out.clips["pixels"][..., 1].tolist() == [[0, 1, 1, 1], [1, 1, 1, 1]]
        assert out.clips["mask"].tolist() == [[True, True, False, False], [True, False, False, False]]
        if assign == "start":
            assert (out.target_clip.tolist(), out.index.tolist()) == ([0, 1], [7, 8])
        else:
            assert out.reduce == "max"
            assert (out.target_clip.tolist(), out.index.tolist()) == ([0, 0, 1], [7, 8, 8])

    @pytest.mark.parametrize("assign", ["start", "cover_max"])
    def test_stride_two_exact(self, assign):
        # L=3, stride=2, n=6: starts 0, 2, 4
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=3, stride=2, assign=assign))
        out = stream.push(one_traj(6), torch.arange(6))
        assert out.clips["pixels"][..., 1].tolist() == [[0, 1, 2], [2, 3, 4], [4, 5, 5]]
        assert out.clips["mask"].sum(-1).tolist() == [3, 3, 2]
        pairs = list(zip(out.target_clip.tolist(), out.index.tolist()))
        if assign == "start":
            assert pairs == [(0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 5)]
        else:
            assert pairs == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 3), (1, 4), (2, 4), (2, 5)]

    @pytest.mark.parametrize("assign", ["start", "cover_max"])
    def test_stride_longer_than_clip_exact(self, assign):
        # L=2, stride=3: windows [0,1], [3,4], [6]; steps 2 and 5 are shown by no clip and
        # belong to the preceding clip in both modes.
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=2, stride=3, assign=assign))
        out = stream.push(one_traj(5, done=False), torch.arange(5))
        # clip 0 needs its stride block (steps 0..2) before it can be emitted
        assert out.clips["pixels"][..., 1].tolist() == [[0, 1]]
        assert out.index.tolist() == [0, 1, 2]
        # frames of steps 3, 4 are held; step 2 (in no window) is not
        assert stream.num_frames_held == 2
        assert stream.push(one_traj(1, done=False, first_step=5), torch.tensor([5])).index.tolist() == [3, 4, 5]
        assert stream.num_frames_held == 0
        out = stream.push(one_traj(1, done=True, first_step=6), torch.tensor([6]))
        assert out.clips["pixels"][..., 1].tolist() == [[6, 6]]
        assert out.clips["mask"].tolist() == [[True, False]]
        assert out.index.tolist() == [6]

    def test_emitted_as_soon_as_complete(self):
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=3))
        starts = []
        for t in range(6):
            out = stream.push(one_traj(1, done=False, first_step=t), torch.tensor([t]))
            starts.append(None if out is None else out.clips["pixels"][:, 0, 1].tolist())
            assert stream.num_frames_held == min(t + 1, 2)
        assert starts == [None, None, [0], [1], [2], [3]]
        out = stream.push(one_traj(1, done=True, first_step=6), torch.tensor([6]))
        assert out.clips["pixels"][:, 0, 1].tolist() == [4, 5, 6]
        assert out.index.tolist() == [4, 5, 6]

    def test_flat_blocks_touching_without_done_never_mix(self):
        # [E=2, T=4] reshaped to [8]: trajectory 0's last step touches trajectory 1's first,
        # with no done in between.
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=3))
        batch = make_batch([[0, 0, 0, 0], [1, 1, 1, 1]], step=[[0, 1, 2, 3], [5, 6, 7, 8]])
        out = stream.push(batch, torch.arange(8))
        assert out.clips["pixels"].tolist() == [
            [[0, 0], [0, 1], [0, 2]], [[0, 1], [0, 2], [0, 3]],
            [[1, 5], [1, 6], [1, 7]], [[1, 6], [1, 7], [1, 8]],
        ]
        flat = stream.push(batch.reshape(-1), torch.arange(8, 16))  # same data flat: same ids
        assert flat is not None and (flat.clips["pixels"][:, :, 0] == flat.clips["pixels"][:, :1, 0]).all()

    def test_interleaved_time_major(self):
        # a0 b0 a1 b1 ...: two trajectories interleaved step by step in a flat batch
        batch = make_batch([[3, 3, 3], [9, 9, 9]], step=[[0, 1, 2], [0, 1, 2]]).transpose(0, 1)
        flat = batch.contiguous().reshape(-1)
        assert flat["collector", "traj_ids"].tolist() == [3, 9, 3, 9, 3, 9]
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=2))
        out = stream.push(flat, torch.arange(6))
        assert out.clips["pixels"].tolist() == [
            [[3, 0], [3, 1]], [[3, 1], [3, 2]], [[9, 0], [9, 1]], [[9, 1], [9, 2]],
        ]
        assert out.clips["clip", "index"].tolist() == [[0, 2], [2, 4], [1, 3], [3, 5]]
        assert out.index.tolist() == [0, 2, 1, 3]

    def test_done_then_same_id_starts_a_new_trajectory(self):
        # set_truncated-style data: a done, then more steps under the same id
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=2))
        batch = make_batch([0, 0, 0, 0, 0], [False, True, False, False, False], step=[0, 1, 0, 1, 2])
        out = stream.push(batch, torch.arange(5))
        assert out.clips["pixels"][..., 1].tolist() == [[0, 1], [1, 1], [0, 1], [1, 2]]
        assert out.clips["clip", "index"].tolist() == [[0, 1], [1, -1], [2, 3], [3, 4]]
        assert stream.num_trajectories == 1 and stream.num_frames_held == 1

    def test_done_key_none_ends_only_at_flush(self):
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=3), done_key=None)
        batch = make_batch([0, 0, 0, 0], [True, True, True, True], step=[0, 1, 2, 3])
        del batch["next", "done"]
        assert stream.push(batch, torch.arange(4)).index.tolist() == [0, 1]
        assert stream.flush().index.tolist() == [2, 3]

    def test_uint8_hwc_frames_keep_dtype_and_shape(self):
        batch = make_batch([[0, 0, 0], [1, 1, 1]])
        batch["rgb"] = torch.arange(6, dtype=torch.uint8).reshape(2, 3, 1, 1, 1).expand(2, 3, 4, 5, 3)
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=2), frame_key="rgb")
        out = stream.push(batch, torch.arange(6))
        assert out.clips["rgb"].dtype == torch.uint8
        assert out.clips["rgb"].shape == (4, 2, 4, 5, 3)
        assert out.clips["rgb"][:, :, 2, 3, 1].tolist() == [[0, 1], [1, 2], [3, 4], [4, 5]]
        assert set(out.clips.keys(include_nested=True, leaves_only=True)) == {
            "rgb", "mask", ("clip", "index"),
        }

    def test_tensordict_extra_key(self):
        # a whole sub-TensorDict can ride along; it is padded like the frames
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=3), extra_keys=["next"])
        out = stream.push(one_traj(2), torch.tensor([4, 5]))
        assert out.clips["next"].batch_size == (2, 3)
        assert out.clips["next", "reward"][..., 0].tolist() == [[0, 10, 10], [10, 10, 10]]
        assert out.clips["next", "done"][..., 0].tolist() == [[False, True, True], [True] * 3]

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    @pytest.mark.parametrize("layout", ["env_time", "time_major_flat"])
    def test_cuda_batch_cpu_index(self, layout):
        # frames on the GPU, storage indices on the CPU (what rb.extend returns)
        traj, step, done = env_data([[3, 9, 2, 7], [5, 5, 5, 5], [1] * 20], steps=20)
        results = []
        for device in ("cpu", "cuda"):
            stream = ClipStream(ClipSpec(final_frame=False, clip_len=4, stride=2, assign="cover_max"))
            outs = []
            for lo, hi in ((0, 7), (7, 20)):
                batch = make_batch(traj[:, lo:hi], done[:, lo:hi], step=step[:, lo:hi]).to(device)
                if layout == "time_major_flat":
                    batch = batch.transpose(0, 1).contiguous().reshape(-1)
                index = torch.arange(batch.numel()) + 100 * lo
                outs.append(stream.push(batch, index, index + 1))
            outs.append(stream.flush())
            cb = ClipBatch.cat([o for o in outs if o is not None])
            assert cb.clips.device is not None and cb.clips.device.type == device
            assert cb.clips["pixels"].device.type == device and cb.clips["mask"].device.type == device
            assert cb.index.device.type == "cpu" and cb.target_clip.device.type == "cpu"
            scores = torch.arange(len(cb), dtype=torch.float32, device=device)
            assert cb.scores_for_targets(scores).device.type == device
            results.append(sorted(clip_records(cb.__class__(cb.clips.cpu(), *cb[1:]))))
        assert results[0] == results[1]

    def test_without_frames(self):
        # frame_key=None: clips carry only extras (a state-based scorer), or only indices
        batch = TensorDict(
            {"obs": torch.arange(10.0), ("collector", "traj_ids"): torch.zeros(10, dtype=torch.long),
             ("next", "done"): torch.arange(10) == 9},  # done without the trailing [1]
            batch_size=[10],
        )
        out = ClipStream(ClipSpec(final_frame=False, clip_len=3), frame_key=None, extra_keys=["obs"]).push(
            batch, torch.arange(10)
        )
        assert set(out.clips.keys(include_nested=True, leaves_only=True)) == {
            "obs", "mask", ("clip", "index"),
        }
        assert out.clips["obs"].amax(1).tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 9, 9]
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=4, stride=5), frame_key=None)
        out = stream.push(batch[:7], torch.arange(7))
        assert out.clips["clip", "index"].tolist() == [[0, 1, 2, 3]]
        assert stream.num_frames_held == 2  # steps 5, 6: buffered positions, no frames
        out = stream.push(batch[7:], torch.arange(7, 10))
        assert out.clips["clip", "index"].tolist() == [[5, 6, 7, 8]]
        assert set(out.clips.keys(include_nested=True, leaves_only=True)) == {"mask", ("clip", "index")}
        assert out.index.tolist() == [5, 6, 7, 8, 9]

    def test_generation_defaults_to_zeros(self):
        out = ClipStream(ClipSpec(final_frame=False, clip_len=2)).push(one_traj(3), torch.arange(3))
        assert out.generation.tolist() == [0, 0, 0] and out.generation.dtype == torch.int64

    def test_none_when_nothing_complete_and_reset(self):
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=4))
        assert stream.push(one_traj(3, done=False), torch.arange(3)) is None
        assert (stream.num_trajectories, stream.num_frames_held) == (1, 3)
        stream.reset()
        assert (stream.num_trajectories, stream.num_frames_held) == (0, 0)
        assert stream.flush() is None

    def test_flush_then_traj_ids_restart(self):
        # A recreated collector restarts ids at 0: flush first, so nothing is stitched.
        stream = ClipStream(ClipSpec(final_frame=False, clip_len=3))
        stream.push(one_traj(2, done=False), torch.arange(2))
        out = stream.flush()
        assert out.clips["pixels"][..., 1].tolist() == [[0, 1, 1], [1, 1, 1]]
        assert (stream.num_trajectories, stream.num_frames_held) == (0, 0)
        out = stream.push(one_traj(3, done=False), torch.arange(2, 5))
        assert out.clips["clip", "index"].tolist() == [[2, 3, 4]]

    # ---- against a brute-force reference

    @pytest.mark.parametrize("final_frame", [True, False])
    @pytest.mark.parametrize("stride", [1, 2, 3, 4, 6])
    @pytest.mark.parametrize("assign", ["start", "cover_max"])
    @pytest.mark.parametrize("layout", ["env_time", "time_major_flat"])
    def test_matches_reference(self, stride, assign, layout, final_frame):
        # with final_frame, Recorder checks every clip's outcome frame (check_outcome)
        spec = ClipSpec(clip_len=4, stride=stride, assign=assign, final_frame=final_frame)
        gen = torch.Generator().manual_seed(stride * 10 + len(assign))
        lengths = [[int(x) for x in torch.randint(1, 12, (40,), generator=gen)] for _ in range(3)]
        traj, step, done = env_data(lengths, steps=60)
        results = {}
        for chunking in ("whole", "chunks"):
            rec = Recorder(ClipStream(spec))
            bounds = [0, 60] if chunking == "whole" else [0, 1, 8, 9, 26, 31, 47, 60]
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                batch = make_batch(traj[:, lo:hi], done[:, lo:hi], step=step[:, lo:hi])
                if layout == "time_major_flat":
                    batch = batch.transpose(0, 1).contiguous().reshape(-1)
                rec.push(batch)
                # clips wait for their steps: frames bounded by clip_len per live trajectory
                # (+2 with the outcome: one more step, the buffered next frame)
                bound = spec.clip_len + 2 * final_frame
                assert rec.stream.num_frames_held <= rec.stream.num_trajectories * bound
                assert rec.stream.num_trajectories <= 3
            rec.flush()
            records = sorted(rec.records)
            assert records == reference_records(dict(rec.trajs), spec)
            check_clip_integrity(records)
            # each transition: exactly the clips whose target window holds it
            window = stride if assign == "start" else max(4, stride)
            per_index = defaultdict(list)
            for tid, frames, *_, targets, _ in records:
                for i in targets:
                    per_index[i].append(frames[0])
            for tid, idx in rec.trajs.items():
                for t, i in enumerate(idx):
                    expected = [s for s in range(0, len(idx), stride) if s <= t < s + window]
                    assert sorted(per_index[i]) == expected
                    if assign == "start":
                        assert len(expected) == 1
            # storage indices depend on the chunking; (traj, step) does not
            step_of = {i: t for idx in rec.trajs.values() for t, i in enumerate(idx)}
            results[chunking] = sorted(
                (tid, frames, mask, tuple(step_of.get(c, -1) for c in cidx),
                 tuple(step_of[i] for i in targets))
                for tid, frames, mask, cidx, targets, _ in records
            )
        assert results["whole"] == results["chunks"]

    @pytest.mark.parametrize("clip_len, stride, assign", [(8, 1, "start"), (8, 3, "cover_max"), (4, 11, "start")])
    def test_bounded_memory_long_stream(self, clip_len, stride, assign):
        spec = ClipSpec(clip_len=clip_len, stride=stride, assign=assign)
        gen = torch.Generator().manual_seed(clip_len + stride)
        num_envs, steps, chunk = 4, 5000, 37
        lengths = [[int(x) for x in torch.randint(1, 150, (400,), generator=gen)] for _ in range(num_envs)]
        traj, step, done = env_data(lengths, steps)
        stream = ClipStream(spec)
        counts = torch.zeros(num_envs * steps, dtype=torch.long)
        max_held, offset = 0, 0
        for lo in range(0, steps, chunk):
            hi = min(lo + chunk, steps)
            batch = make_batch(traj[:, lo:hi], done[:, lo:hi], step=step[:, lo:hi])
            index = torch.arange(offset, offset + batch.numel())
            offset += batch.numel()
            out = stream.push(batch, index)
            if out is not None:
                counts += torch.bincount(out.index, minlength=counts.numel())
                check_clip_integrity(clip_records(out))
            assert stream.num_trajectories <= num_envs
            # with the outcome frame: one more step per trajectory and its buffered next frame
            assert stream.num_frames_held <= stream.num_trajectories * (clip_len + 2)
            max_held = max(max_held, stream.num_frames_held)
        counts += torch.bincount(stream.flush().index, minlength=counts.numel())
        assert max_held <= num_envs * (clip_len + 2)  # whatever the 20,000-step stream length
        if assign == "start":
            assert (counts == 1).all()
        else:
            assert (counts >= 1).all()


# --------------------------------------------------------------------------- vectorised = per-trajectory


def assert_same_clip_batch(new: ClipBatch | None, old: ClipBatch | None) -> None:
    """Field by field, bit for bit: clips (every entry, dtype included), frame pool, targets."""
    assert (new is None) == (old is None)
    if new is None:
        return
    assert new.reduce == old.reduce
    for a, b in ((new.target_clip, old.target_clip), (new.index, old.index), (new.generation, old.generation)):
        assert a.dtype == b.dtype and torch.equal(a, b)
    pairs = [(new.clips, old.clips)] + ([] if old.frames is None else [(new.frames, old.frames)])
    assert (new.frames is None) == (old.frames is None)
    for a, b in pairs:
        assert a.batch_size == b.batch_size
        keys = sorted(b.keys(include_nested=True, leaves_only=True), key=str)
        assert sorted(a.keys(include_nested=True, leaves_only=True), key=str) == keys
        for key in keys:
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


def random_stream_batches(seed: int, num_envs: int, steps: int, *, reuse_ids: bool, max_len: int):
    """Random collector batches: episode ends, chunk sizes, layouts ([E, T], env-major or
    time-major flat); with ``reuse_ids`` an id goes on after a done (a new trajectory)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [[int(x) for x in torch.randint(1, max_len, (steps,), generator=gen)] for _ in range(num_envs)]
    traj, step, done = env_data(lengths, steps)
    if reuse_ids:  # episodes 2k and 2k + 1 of an env share an id
        traj = traj % num_envs + num_envs * (traj // (2 * num_envs))
    bounds = sorted({0, steps, *torch.randint(1, steps, (steps // 5,), generator=gen).tolist()})
    batches = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        batch = make_batch(traj[:, lo:hi], done[:, lo:hi], step=step[:, lo:hi])
        batch["extra"] = torch.randn(batch.shape, generator=gen)
        layout = int(torch.randint(3, (1,), generator=gen))
        if layout == 1:
            batch = batch.reshape(-1)
        elif layout == 2:
            batch = batch.transpose(0, 1).contiguous().reshape(-1)
        batches.append(batch)
    return batches


class TestVectorisedMatchesPerTrajectory:
    """ClipStream cuts every segment's clips at once; it must return exactly what the
    per-trajectory stream it replaced (tests/_clip_stream_loop.py) returned: same clips in the
    same order, same frame pool layout, same targets, same state after every push."""

    @pytest.mark.parametrize(
        "clip_len, stride, assign",
        [(1, 1, "start"), (4, 1, "start"), (4, 3, "cover_max"), (3, 4, "start"), (3, 4, "cover_max"),
         (4, 11, "start"), (4, 11, "cover_max"), (16, 1, "start"), (5, 2, "start")],
    )
    @pytest.mark.parametrize("final_frame, pool_frames, frame_key", [
        (True, True, "pixels"), (True, False, "pixels"), (False, True, "pixels"), (False, False, None)])
    def test_same_clip_batches(self, clip_len, stride, assign, final_frame, pool_frames, frame_key):
        spec = ClipSpec(clip_len=clip_len, stride=stride, assign=assign, final_frame=final_frame)
        seed = clip_len * 100 + stride * 10 + len(assign) + 2 * final_frame + pool_frames
        gen = torch.Generator().manual_seed(seed)
        num_envs = 1 + seed % 4
        kwargs = dict(frame_key=frame_key, pool_frames=pool_frames, extra_keys=["extra", ("next", "reward")])
        new, old = ClipStream(spec, **kwargs), LoopClipStream(spec, **kwargs)
        batches = random_stream_batches(seed, num_envs, 50, reuse_ids=bool(seed % 2), max_len=3 * clip_len + 2)
        offset, emitted = 0, 0
        for i, batch in enumerate(batches):
            index = torch.arange(offset, offset + batch.numel()) % 97  # a small ring buffer
            generation = torch.randint(0, 5, (batch.numel(),), generator=gen)
            offset += batch.numel()
            out = new.push(batch, index, generation)
            assert_same_clip_batch(out, old.push(batch, index, generation))
            emitted += 0 if out is None else len(out)
            assert (new.num_trajectories, new.num_frames_held) == (old.num_trajectories, old.num_frames_held)
            if i == len(batches) // 2:  # a flush mid-stream (collector recreated): ids go on
                assert_same_clip_batch(new.flush(), old.flush())
        assert_same_clip_batch(new.flush(), old.flush())
        assert emitted > 0 and new.num_trajectories == 0 and new.num_frames_held == 0

    def test_interleaved_ids_and_untouched_trajectories(self):
        # steps of several trajectories interleaved in one flat batch, ids reappearing in a
        # later batch after other ids, a trajectory untouched for a while
        spec = ClipSpec(clip_len=3, stride=2, assign="cover_max")
        new, old = ClipStream(spec, pool_frames=True), LoopClipStream(spec, pool_frames=True)
        rows = [(5, 0, 0), (2, 0, 0), (5, 1, 0), (9, 0, 0), (2, 1, 1), (5, 2, 0), (2, 0, 0), (9, 1, 0)]
        pushes = [rows, [(9, 2, 0), (9, 3, 0), (9, 4, 0), (9, 5, 0)], [(5, 3, 0), (2, 1, 0), (5, 4, 1)]]
        offset = 0
        for push in pushes:
            traj, step, done = (list(x) for x in zip(*push))
            batch = make_batch(torch.tensor(traj, dtype=torch.long), torch.tensor(done, dtype=torch.bool),
                               step=torch.tensor(step, dtype=torch.long))
            index = torch.arange(offset, offset + len(push))
            offset += len(push)
            assert_same_clip_batch(new.push(batch, index), old.push(batch, index))
            assert (new.num_trajectories, new.num_frames_held) == (old.num_trajectories, old.num_frames_held)
        assert_same_clip_batch(new.flush(), old.flush())


# --------------------------------------------------------------------------- real collector


def test_real_collector_serial_env():
    """Clips from a real Collector over a SerialEnv never mix ("collector", "traj_ids")."""
    pytest.importorskip("gymnasium")
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv

    def make_env():
        return TransformedEnv(GymEnv("CartPole-v1"), StepCounter())

    env = SerialEnv(3, make_env)
    env.set_seed(0)
    torch.manual_seed(0)
    collector = Collector(env, None, frames_per_batch=3 * 20, total_frames=3 * 20 * 5)
    rb = ReplayBuffer(storage=LazyTensorStorage(1000))
    # the step counter stands in for pixels: a per-step tensor that encodes its step
    stream = ClipStream(
        ClipSpec(clip_len=8, stride=2),
        frame_key="step_count",
        extra_keys=[("collector", "traj_ids")],
    )
    outs = []
    try:
        for batch in collector:
            assert batch.batch_size == (3, 20)
            index = rb.extend(batch.reshape(-1))
            out = stream.push(batch, index)
            if out is not None:
                outs.append(out)
    finally:
        collector.shutdown()
        if not env.is_closed:
            env.close()
    outs.append(stream.flush())
    cb = ClipBatch.cat(outs)
    assert cb.num_clips > 0
    stored = rb.storage.get(torch.arange(len(rb)))
    counts = torch.bincount(cb.index, minlength=len(rb))
    assert (counts == 1).all()  # every stored transition is scored exactly once
    for b in range(len(cb)):
        mask = cb.clips["mask"][b]
        ids = cb.clips["collector", "traj_ids"][b]
        steps = cb.clips["step_count"][b, :, 0]
        idx = cb.clips["clip", "index"][b]
        num_real = int(mask.sum())
        assert (ids == ids[0]).all()
        assert steps[:num_real].tolist() == list(range(int(steps[0]), int(steps[0]) + num_real))
        # the storage agrees: same trajectory, same steps at the clip's storage indices
        real_idx = idx[:num_real]
        assert (stored["collector", "traj_ids"][real_idx] == ids[0]).all()
        assert torch.equal(stored["step_count"][real_idx, 0], steps[:num_real])
        targets = cb.index[cb.target_clip == b]
        assert set(targets.tolist()) <= set(real_idx.tolist())
    # several envs and several episodes really were seen
    assert len(set(stored["collector", "traj_ids"].tolist())) > 3


# --------------------------------------------------------------------------- the outcome frame


class TestOutcomeFrame:
    def test_outcome_is_the_frame_after_the_last_real_step(self):
        # one trajectory of 5 steps that ends (done): its last "next" frame is the terminal one
        stream = ClipStream(ClipSpec(clip_len=3), extra_keys=[("next", "reward")])
        out = stream.push(one_traj(5), torch.arange(5))
        px = out.clips["pixels"][..., 1].tolist()
        # full clips end with the next step's frame; padded tails with the "next" of step 4
        assert px == [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 4, 5], [4, 4, 4, 5]]
        assert out.clips["mask"].tolist()[3] == [True, True, False, False]
        assert out.clips["clip", "index"][:, 3].tolist() == [-1] * 5
        assert out.clips["next", "reward"][:, 3, 0].tolist() == [20.0, 30.0, 40.0, 40.0, 40.0]  # last real step's

    def test_emitted_once_the_next_frame_arrived_and_flush_uses_the_last_next_frame(self):
        stream = ClipStream(ClipSpec(clip_len=3))
        assert stream.push(one_traj(3, done=False), torch.arange(3)) is None  # step 3's frame not there yet
        out = stream.push(one_traj(1, done=False, first_step=3), torch.arange(3, 4))
        assert out.clips["pixels"][..., 1].tolist() == [[0, 1, 2, 3]]
        rest = stream.flush()  # no step 4 yet: the outcome of clips ending at step 3 is its "next" frame
        assert rest.clips["pixels"][..., 1].tolist() == [[1, 2, 3, 4], [2, 3, 3, 4], [3, 3, 3, 4]]
        assert stream.num_frames_held == 0

    def test_pooled_stores_each_frame_once_and_equals_inline(self):
        batch = make_batch(torch.tensor([[0] * 7 + [2] * 5, [1] * 12]),
                           done=torch.tensor([[0] * 6 + [1] + [0] * 5, [0] * 12]),
                           step=torch.tensor([list(range(7)) + list(range(5)), list(range(12))]))
        for stride in (1, 2, 5):
            spec = ClipSpec(clip_len=4, stride=stride)
            inline, pooled = ClipStream(spec), ClipStream(spec, pool_frames=True)
            for a, b in ((inline.push(batch, torch.arange(24)), pooled.push(batch, torch.arange(24))),
                         (inline.flush(), pooled.flush())):
                assert torch.equal(b.gather_frames()["pixels"], a.clips["pixels"])
                rows = b.frames["pixels"]
                assert len({tuple(r) for r in rows.tolist()}) == rows.shape[0]  # no frame twice

    def test_stride_longer_than_the_clip_keeps_the_outcome_step(self):
        stream = ClipStream(ClipSpec(clip_len=2, stride=4))
        out = stream.push(one_traj(10), torch.arange(10))
        assert out.clips["pixels"][..., 1].tolist() == [[0, 1, 2], [4, 5, 6], [8, 9, 10]]
        assert out.index.tolist() == list(range(10))

    def test_next_frame_needed(self):
        batch = one_traj(4).exclude(("next", "pixels"))
        with pytest.raises(KeyError, match=r"outcome frames \('next', 'pixels'\).*final_frame=False"):
            ClipStream(ClipSpec(clip_len=2)).push(batch, torch.arange(4))
        assert ClipStream(ClipSpec(clip_len=2, final_frame=False)).push(batch, torch.arange(4)) is not None
        assert ClipStream(ClipSpec(clip_len=2), frame_key=None).final_frame is False  # no frames, no outcome
        bad = one_traj(4)
        bad["next", "pixels"] = bad["next", "pixels"].float()
        with pytest.raises(ValueError, match=r"\('next', 'pixels'\) with the per-step shape and dtype"):
            ClipStream(ClipSpec(clip_len=2)).push(bad, torch.arange(4))

    def test_collector_batches_carry_the_next_frame(self):
        # a rendered MiniGrid env under a TorchRL collector: ("next", "pixels") is in every batch
        pytest.importorskip("minigrid")
        from torchrl.collectors import Collector

        from vlmrb_torchrl.envs import make_minigrid_env

        env = make_minigrid_env("MiniGrid-Empty-5x5-v0", render=True, frame_size=16)
        collector = Collector(env, None, frames_per_batch=30, total_frames=30)
        batch = next(iter(collector))
        collector.shutdown()
        assert ("next", "pixels") in batch.keys(True)
        cont = ~batch["next", "done"].reshape(-1)[:-1]
        assert torch.equal(batch["next", "pixels"][:-1][cont], batch["pixels"][1:][cont])  # next = next step's
        out = ClipStream(ClipSpec(clip_len=4), pool_frames=True).push(batch, torch.arange(30))
        assert out is not None and out.clips.shape[1] == 5


class EventsAndFrames:
    """A scorer reading frames and event flags: records what it was shown, scores 1.0 when a
    real (``mask`` True) position carries an event, as the oracle does."""

    in_keys = ["pixels", ("next", "progress_event"), "mask"]

    def __init__(self):
        self.seen = []

    def score(self, clips):
        self.seen.append(clips)
        hit = clips["next", "progress_event"].reshape(*clips.shape, -1).any(-1) & clips["mask"]
        return hit.any(1).float()


def event_episodes(lengths, seed):
    """One flat batch of episodes of the given lengths, one trajectory each; frames [1, 1, 1]
    uint8 holding the step; events on random steps and always on the last one (the goal)."""
    gen = torch.Generator().manual_seed(seed)
    traj = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    step = torch.cat([torch.arange(n) for n in lengths])
    last = torch.cat([torch.arange(n) == n - 1 for n in lengths])
    event = (torch.rand(len(step), generator=gen) < 0.1) | last
    return TensorDict({
        "pixels": step.to(torch.uint8).view(-1, 1, 1, 1),
        ("collector", "traj_ids"): traj,
        ("next", "pixels"): (step + 1).to(torch.uint8).view(-1, 1, 1, 1),
        ("next", "done"): last[:, None],
        ("next", "progress_event"): event[:, None],
    }, batch_size=[len(step)])


class TestSubsampledClipsKeepEvents:
    """``ClipSpec.frames`` subsampling never hides an event of a real step: on a padded tail
    clip a kept position can fall on padding while the step it covers is real (oracle,
    clip_len 5, frames 3 lost 2 of the 5 clips covering an episode's last step)."""

    def test_the_reported_case(self):
        from vlmrb_torchrl.scoring.clip_scoring import make_clip_scoring

        batch = event_episodes([7], seed=0)
        batch["next", "progress_event"] = batch["next", "done"].clone()  # one event: the last step
        labels = {}
        for frames in (None, 3):
            stream, transform = make_clip_scoring("oracle:minigrid", ClipSpec(clip_len=5, frames=frames))
            out = stream.push(batch, torch.arange(7))
            labels[frames] = transform.score_clips(out.clips, out.frames).tolist()
        assert labels[None] == [0, 0, 1, 1, 1, 1, 1]  # clips starting at 2..6 show step 6
        assert labels[3] == labels[None]

    @pytest.mark.parametrize("clip_len, frames", [(5, 3), (5, 1), (5, 2), (8, 3), (16, 4), (16, 8)])
    @pytest.mark.parametrize("scorer", ["oracle", "frames_and_events"])
    def test_subsampled_labels_equal_unsubsampled(self, clip_len, frames, scorer):
        from vlmrb_torchrl.scoring.clip_scoring import make_clip_scoring

        lengths = [1, 2, 3, 4, 5, 6, 7, 9, 12, 17, 23]
        batch = event_episodes(lengths, seed=clip_len * 10 + frames)
        labels = {}
        for f in (None, frames):
            spec = ClipSpec(clip_len=clip_len, frames=f)
            score = "oracle:minigrid" if scorer == "oracle" else EventsAndFrames()
            stream, transform = make_clip_scoring(score, spec)
            out = stream.push(batch, torch.arange(len(batch)))
            labels[f] = transform.score_clips(out.clips, out.frames)
            if scorer == "frames_and_events":
                # frames are still the spec's positions, real where their own step is real
                seen = score.seen[-1]
                positions = spec.frame_indices()
                real = out.clips["mask"].clone()
                real[:, clip_len] = real.any(1)  # the outcome frame
                assert torch.equal(seen["mask"], real[:, positions])
                shown = seen["pixels"][:, :, 0, 0, 0].long()
                expected = out.gather_frames()["pixels"][:, positions, 0, 0, 0].long()
                assert torch.equal(shown, expected)
        # brute force: a clip is positive when one of its real steps has an event
        clips = out.clips
        real = clips["mask"][:, :clip_len]
        expected = (clips["next", "progress_event"][:, :clip_len, 0] & real).any(1).float()
        assert torch.equal(labels[None], expected)
        assert torch.equal(labels[frames], expected)
