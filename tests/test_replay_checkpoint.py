"""Compact replay checkpoints (issue 35): only the filled slots, in lossless compact dtypes, read back
without pickle, and a resumed buffer that samples and reads exactly what the saved one would have."""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("minigrid")

from vlmrb_torchrl.recipes.config import DQNConfig, apply_overrides  # noqa: E402
from vlmrb_torchrl.recipes.replay import make_replay  # noqa: E402
from vlmrb_torchrl.recipes.replay_checkpoint import compact, expand, load_replay, save_replay  # noqa: E402

MODES = ["uniform", "per", "vlm", "vlm_td"]


def _replay(mode: str, capacity: int):
    cfg = apply_overrides(DQNConfig(), {"replay": mode, "buffer_size": capacity, "batch_size": 8, "clip_len": 4,
                                        "frames_per_batch": 16, "async_scoring": False})
    scorer = None
    if mode.startswith("vlm"):
        from vlmrb_torchrl.scorers import make_scorer

        scorer = make_scorer("oracle:minigrid")
    return make_replay(cfg, generator=torch.Generator().manual_seed(0), updates=100, scorer=scorer)


def _batch(step: int, envs: int = 2, steps: int = 8) -> TensorDict:
    """A collector batch ``[envs, time]`` of one-hot float observations (what MiniGrid recipes store)."""
    n = envs * steps
    gen = torch.Generator().manual_seed(step)
    obs = torch.nn.functional.one_hot(torch.randint(0, 20, (envs, steps), generator=gen), 20).float()
    return TensorDict({"observation": obs, "action": torch.randint(0, 3, (envs, steps), generator=gen),
                       "reward": torch.rand(envs, steps, 1, generator=gen).double(),
                       ("collector", "traj_ids"): torch.arange(envs).repeat_interleave(steps).reshape(envs, steps),
                       ("next", "done"): (torch.arange(n).reshape(envs, steps) % 5 == 4).unsqueeze(-1),
                       ("next", "progress_event"): torch.rand(envs, steps, 1, generator=gen) < 0.2}, [envs, steps])


def _fill(replay, batches: int) -> None:
    for step in range(batches):
        batch = _batch(step)
        replay.store(batch, batch)
        sample = replay.sample()
        sample["td_error"] = torch.rand(sample.shape[0], generator=torch.Generator().manual_seed(step))
        replay.update_priority(sample)
    replay.before_checkpoint()


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.uint8) if x.dtype != torch.bool else x


@pytest.mark.parametrize("mode", MODES)
def test_a_partly_filled_buffer_resumes_exactly(tmp_path, mode):
    saved, fresh = _replay(mode, 2_000), _replay(mode, 2_000)
    with saved, fresh:
        _fill(saved, 5)
        save_replay(saved.buffer, tmp_path / "replay")
        load_replay(fresh.buffer, tmp_path / "replay")
        assert len(fresh.buffer) == len(saved.buffer) == 80
        n = len(saved.buffer)
        a, b = saved.buffer.storage._storage[:n], fresh.buffer.storage._storage[:n]
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            assert a[key].dtype == b[key].dtype and torch.equal(_bits(a[key]), _bits(b[key])), key
        assert fresh.buffer._writer.state_dict() == saved.buffer._writer.state_dict()
        for _ in range(3):  # the same draws, the same rows, the same priorities afterwards
            x, y = saved.sample(), fresh.sample()
            assert torch.equal(x["index"], y["index"]) and torch.equal(x["observation"], y["observation"])
            for key in ("priority_weight", "_weight"):
                if key in x.keys():
                    assert torch.equal(x[key], y[key])
            td = torch.rand(x.shape[0], generator=torch.Generator().manual_seed(7))
            x["td_error"], y["td_error"] = td, td.clone()
            saved.update_priority(x)
            fresh.update_priority(y)
        batch = _batch(99)
        saved.store(batch, batch)
        fresh.store(batch, batch)
        saved.before_checkpoint()
        fresh.before_checkpoint()
        if mode.startswith("vlm"):
            sa, sb = saved.buffer.sampler.state_dict(), fresh.buffer.sampler.state_dict()
            for key, value in sa.items():
                if torch.is_tensor(value):
                    assert torch.equal(value, sb[key]), key
                else:  # (settings and provenance went through JSON: tuples come back as lists)
                    assert json.loads(json.dumps(value)) == json.loads(json.dumps(sb[key])), key
        assert torch.equal(saved.sample()["index"], fresh.sample()["index"])


def test_the_checkpoint_follows_what_the_buffer_holds_not_its_capacity(tmp_path):
    # issue 35: a 6,000-frame SAC run with a 1M-slot buffer wrote 575 MB; DQN ~790 MB at 100k one-hot frames
    sizes = {}
    for capacity in (1_000, 100_000):
        with _replay("vlm_td", capacity) as replay:
            _fill(replay, 5)  # 80 transitions
            save_replay(replay.buffer, tmp_path / str(capacity))
        sizes[capacity] = sum(p.stat().st_size for p in (tmp_path / str(capacity)).iterdir())
    # the full storage's float32 observations alone would be 100_000 * 20 * 4 = 8 MB; 80 rows of everything,
    # the sampler's state and torch.save's framing (~0.7 kB a tensor) take ~12 kB
    assert sizes[100_000] < 20_000
    assert sizes[100_000] - sizes[1_000] < 2_000  # the capacity costs (almost) nothing
    meta = json.loads((tmp_path / "100000" / "replay.json").read_text())
    notes = dict(zip(map(tuple, meta["storage_keys"]), meta["storage_notes"]))
    assert notes[("observation",)]["encoding"] == "bits"  # one-hot floats: one bit each, restored exactly


@pytest.mark.parametrize("values", [
    torch.tensor([0.0, 1.0, -0.0]),                        # -0.0 must come back as -0.0
    torch.tensor([float("nan"), 1.0, float("inf")]),
    torch.tensor([3.0, -200.0, 70_000.0]),                 # integral floats: the smallest integer that holds them
    torch.tensor([0.1, 0.2], dtype=torch.float64),         # float64 that float32 cannot hold: raw
    torch.tensor([0.5, 0.25], dtype=torch.float64),        # float64 that float32 holds exactly
    torch.tensor([2**40, -1]),                             # int64 beyond int32
    torch.tensor([1, 0, 1, 1, 0, 0, 0, 1, 1], dtype=torch.bool),
    torch.arange(12, dtype=torch.uint8).reshape(3, 4),
    torch.zeros(0, 3),
])
def test_compaction_is_lossless(values):
    stored, note = compact(values)
    back = expand(stored, note)
    assert back.dtype == values.dtype and back.shape == values.shape
    assert torch.equal(_bits(back), _bits(values))
    assert stored.numel() * stored.element_size() <= values.numel() * values.element_size()


def test_a_checkpoint_of_another_buffer_size_is_refused(tmp_path):
    with _replay("vlm", 1_000) as small, _replay("vlm", 2_000) as large:
        _fill(small, 1)
        save_replay(small.buffer, tmp_path / "replay")
        with pytest.raises(ValueError, match="holds 1000 slots, this run's 2000 \\(buffer_size must match\\)"):
            load_replay(large.buffer, tmp_path / "replay")
