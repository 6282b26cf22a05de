"""Run-directory safety: reused output dirs, verified checkpoints and fallback, resume config checks,
bounded scorer waits, Ctrl-C, and the config checks the command line and config files share."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("minigrid")

from vlmrb_torchrl.cli import _train_parser, build_config  # noqa: E402
from vlmrb_torchrl.cli import main as cli_main  # noqa: E402
from vlmrb_torchrl.recipes.config import ConfigError, DQNConfig, apply_overrides  # noqa: E402
from vlmrb_torchrl.recipes.replay import make_replay  # noqa: E402
from vlmrb_torchrl.recipes.checkpoint import (  # noqa: E402
    MANIFEST,
    CheckpointError,
    _manifest,
    RunWarning,
    check_checkpoint,
    checkpoint_now,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    truncate_metrics,
)
from vlmrb_torchrl.recipes.replay_checkpoint import expand  # noqa: E402
from vlmrb_torchrl.recipes.run import Run, prepare_run_dir  # noqa: E402
from vlmrb_torchrl.recipes.run_dir import release_run_dir  # noqa: E402

TINY = dict(total_frames=512, num_envs=2, frames_per_batch=64, learning_starts=128, eval_every=256,
            eval_episodes=2, buffer_size=2_000, checkpoint_every=512, clip_len=4, batch_size=16,
            progress=False, hidden=32, n_steps=2, gallery_clips=0, tensorboard=False)


# ---------------------------------------------------------------------------------- helpers
RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def _release_run_dir_locks():
    """prepare_run_dir takes the run directory's lock for the run that would follow; these tests never
    run it, so the locks are released here (else their files stay open until the process ends)."""
    yield
    from vlmrb_torchrl.recipes import run_dir

    for path in list(run_dir._HELD):
        run_dir.release_run_dir(path)


class FailingScorer:
    """A scorer whose every call fails (a VLM server that is down); scores 0.5 while ``FailingScorer.up``."""

    prompt = ""
    up = False

    def __init__(self) -> None:
        self.in_keys = ["mask"]
        self.provenance = {"backend": "failing"}

    def score(self, clips):
        if not FailingScorer.up:
            raise ConnectionError("VLM server unreachable")
        return torch.full((clips.shape[0],), 0.5)


class HangingScorer:
    """A scorer whose calls do not return until the test releases them (at most 60 s): a hung VLM server."""

    prompt = ""

    def __init__(self) -> None:
        self.in_keys = ["mask"]
        self.provenance = {"backend": "hanging"}

    def score(self, clips):
        RELEASE.wait(60)
        return torch.zeros(clips.shape[0])


@pytest.fixture
def release_scorer():
    RELEASE.clear()
    yield RELEASE
    RELEASE.set()


class _Planted:
    """A pickled object whose loading writes a file: what a planted ``__reduce__`` in a checkpoint does."""

    def __init__(self, witness: str) -> None:
        self.witness = witness

    def __reduce__(self):
        return open, (self.witness, "w")


def _replay(replay="vlm", **overrides):
    cfg = apply_overrides(DQNConfig(), {**TINY, "replay": replay, "buffer_size": 64, "clip_len": 4, **overrides})
    scorer = None
    if replay.startswith("vlm"):
        from vlmrb_torchrl.scorers import make_scorer

        scorer = make_scorer("oracle:minigrid")
    return make_replay(cfg, generator=torch.Generator().manual_seed(0), updates=10, scorer=scorer)


def _batch(envs=2, steps=8):
    n = envs * steps
    return TensorDict({"observation": torch.arange(n * 3.0).reshape(envs, steps, 3),
                       ("collector", "traj_ids"): torch.arange(envs).repeat_interleave(steps).reshape(envs, steps),
                       ("next", "done"): torch.zeros(envs, steps, 1, dtype=torch.bool),
                       ("next", "progress_event"): torch.ones(envs, steps, 1, dtype=torch.bool)}, [envs, steps])


def _checkpoint(tmp_path, step, replay=None, module=None):
    replay = replay or _replay()
    if len(replay.buffer) == 0:
        batch = _batch()
        replay.store(batch, batch)
        replay.before_checkpoint()
    module = module or torch.nn.Linear(2, 2)
    path = tmp_path / "run" / "checkpoints" / f"step_{step}"
    save_checkpoint(path, modules={"net": module}, rb=replay.buffer, counters={"env_steps": step})
    return path, replay, module


# ---------------------------------------------------------------------------------- reused output_dir
class TestRunDirectory:
    def test_a_non_empty_output_dir_is_refused_naming_both_options(self, tmp_path):
        (tmp_path / "metrics.csv").write_text("env_steps\n1\n")
        cfg = DQNConfig(output_dir=str(tmp_path))
        with pytest.raises(ConfigError) as info:
            prepare_run_dir(cfg, recipe="dqn")
        msg = str(info.value)
        assert str(tmp_path) in msg and "overwrite=true" in msg and f"resume={tmp_path}" in msg
        assert (tmp_path / "metrics.csv").exists()  # nothing touched

    @pytest.mark.parametrize("rows", [0, 1])
    def test_a_start_killed_before_its_first_row_is_taken_again(self, tmp_path, rows):
        # kill -9 (or a machine stop) right after the start: the run could not delete what it wrote, and the same
        # command must just work; once it logged a row, its files are kept and the refusal says why
        from vlmrb_torchrl.recipes.run_dir import run_id

        cfg = DQNConfig(output_dir=str(tmp_path / "run"))
        prepare_run_dir(cfg, recipe="dqn")
        out = Path(cfg.output_dir)
        (out / "config.json").write_text(json.dumps({"seed": 0, "run_id": run_id(out)}))
        (out / "metrics.csv").write_text("env_steps,loss\n" + "2048,0.5\n" * rows)
        (out / "checkpoints" / ".step_2048.partial").mkdir()  # a checkpoint write cut short
        release_run_dir(out)  # the lock goes with the killed process; its files stay
        first = run_id(out)
        again = DQNConfig(output_dir=str(out))
        if rows:
            with pytest.raises(ConfigError, match="stopped before its first checkpoint: there is nothing to resume"):
                prepare_run_dir(again, recipe="dqn")
            assert (out / "metrics.csv").exists()
            return
        prepare_run_dir(again, recipe="dqn")
        assert sorted(p.name for p in out.iterdir()) == [".vlmrb-run", ".vlmrb-run.lock", "checkpoints"]
        assert not any((out / "checkpoints").iterdir()) and run_id(out) != first
        release_run_dir(out)

    def test_overwrite_deletes_the_old_runs_files_and_keeps_others(self, tmp_path):
        old = tmp_path / "checkpoints" / "step_100"
        old.mkdir(parents=True)
        (old / "DONE").write_text("{}")
        for name in ("metrics.csv", "summary.json", "notes.txt"):
            (tmp_path / name).write_text("old")
        (tmp_path / "tensorboard").mkdir()
        old_id = "0123456789abcdef0123456789abcdef"
        (tmp_path / ".vlmrb-run").write_text(json.dumps({"run_id": old_id}))  # a run wrote them: its id ...
        (tmp_path / "config.json").write_text(json.dumps({"seed": 0, "run_id": old_id}))  # ... in its config
        prepare_run_dir(DQNConfig(output_dir=str(tmp_path), overwrite=True), recipe="dqn")
        assert sorted(p.name for p in tmp_path.iterdir()) == [".vlmrb-run", ".vlmrb-run.lock", "checkpoints",
                                                              "notes.txt"]
        assert not any((tmp_path / "checkpoints").iterdir())  # no old checkpoint survives
        from vlmrb_torchrl.recipes.run_dir import run_id

        assert run_id(tmp_path) not in (None, old_id)  # the new run's own id

    @pytest.mark.parametrize("marker", ["", "{}", '{"run_id": "fedcba9876543210fedcba9876543210"}'])
    def test_a_planted_or_copied_marker_deletes_nothing(self, tmp_path, marker):
        # issue 64: an empty planted .vlmrb-run counted as a marker, and overwrite=true deleted a user's file inside
        # checkpoints/
        (tmp_path / "checkpoints").mkdir()
        (tmp_path / "checkpoints" / "mine.txt").write_text("mine")
        (tmp_path / "config.json").write_text(json.dumps({"run_id": "0123456789abcdef0123456789abcdef"}))
        (tmp_path / ".vlmrb-run").write_text(marker)
        before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
        why = "holds no run id" if "run_id" not in marker else "is not the one in config.json"
        with pytest.raises(ConfigError, match=f"overwrite=true deletes only a run's own files, and its .vlmrb-run "
                                              f"marker.* {why}.*nothing was deleted"):
            prepare_run_dir(DQNConfig(output_dir=str(tmp_path), overwrite=True), recipe="dqn")
        assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before

    def test_the_run_id_is_in_the_marker_and_the_runs_config(self, tmp_path):
        from vlmrb_torchrl.recipes.run_dir import run_id

        cfg = DQNConfig(output_dir=str(tmp_path / "run"), tensorboard=False, progress=False)
        prepare_run_dir(cfg, recipe="dqn")
        with Run(cfg, recipe="dqn", total=10):
            pass
        marked = run_id(cfg.output_dir)
        assert len(marked) == 32 and json.loads((tmp_path / "run" / "config.json").read_text())["run_id"] == marked
        # a start that stopped before config.json leaves empty run directories only: overwrite takes them
        (tmp_path / "run" / "config.json").unlink()
        (tmp_path / "run" / "metrics.csv").unlink()
        prepare_run_dir(apply_overrides(cfg, {"overwrite": True}), recipe="dqn")
        assert run_id(cfg.output_dir) != marked

    @pytest.mark.parametrize("where", ["a project", "the current directory"])
    def test_overwrite_deletes_nothing_in_a_directory_no_run_wrote(self, tmp_path, monkeypatch, where):
        # issue 35: output_dir=$HOME overwrite=true deleted its checkpoints/, gallery/ and config.json
        for name in ("config.json", "notes.txt"):
            (tmp_path / name).write_text("mine")
        (tmp_path / "checkpoints").mkdir()
        (tmp_path / "gallery").mkdir()
        output_dir = str(tmp_path)
        if where == "the current directory":
            monkeypatch.chdir(tmp_path)
            output_dir = "."
        before = sorted(p.name for p in tmp_path.iterdir())
        with pytest.raises(ConfigError, match="holds files no vlmrb run wrote .*no .vlmrb-run marker.*nothing was "
                                              "deleted"):
            prepare_run_dir(DQNConfig(output_dir=output_dir, overwrite=True), recipe="dqn")
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # not even a lock file left

    def test_a_run_directory_is_locked_against_a_second_process(self, tmp_path):
        # issue 35: two processes resuming one run were both accepted (duplicate metrics rows, clashing checkpoints)
        import dataclasses
        import fcntl

        from vlmrb_torchrl.recipes.run_dir import LOCK, MARKER, release_run_dir

        out = tmp_path / "run"
        prepare_run_dir(DQNConfig(output_dir=str(out)), recipe="dqn")
        assert (out / MARKER).is_file() and f"pid {os.getpid()}" in (out / LOCK).read_text()
        release_run_dir(out)
        _checkpoint(tmp_path, 64)[1].close()  # the run wrote a checkpoint (into tmp_path / "run")
        from vlmrb_torchrl.recipes.run_dir import run_id

        (out / "config.json").write_text(json.dumps({**dataclasses.asdict(DQNConfig(output_dir=str(out))),
                                                     "run_id": run_id(out)}))  # what the run's Run writes
        # another process's run (flock on its own open file: what a second process holds)
        with open(out / LOCK, "a+") as other:
            fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            other.seek(0), other.truncate(), other.write("pid 4242, since today\n"), other.flush()
            for again in (DQNConfig(resume=str(out)), DQNConfig(output_dir=str(out), overwrite=True)):
                with pytest.raises(ConfigError, match="is in use by another vlmrb run \\(pid 4242, since today\\)"):
                    prepare_run_dir(again, recipe="dqn")
            assert (out / "checkpoints" / "step_64").exists()  # nothing deleted
        assert prepare_run_dir(DQNConfig(resume=str(out)), recipe="dqn").name == "step_64"  # the lock went with it
        release_run_dir(out)

    def test_the_lock_follows_the_directory_not_the_path_or_the_file(self, tmp_path):
        import fcntl

        from vlmrb_torchrl.recipes.run_dir import LOCK, release_run_dir

        out = tmp_path / "run"
        out.mkdir()
        (out / LOCK).write_text("pid 999999, since yesterday\n")  # left by a run that died: no flock held
        prepare_run_dir(DQNConfig(output_dir=str(out)), recipe="dqn")
        assert f"pid {os.getpid()}" in (out / LOCK).read_text()
        release_run_dir(out)
        alias = tmp_path / "alias"
        alias.symlink_to(out)
        with open(out / LOCK, "a+") as other:  # another process runs in the directory
            fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            other.seek(0), other.truncate(), other.write("pid 4242, since today\n"), other.flush()
            with pytest.raises(ConfigError, match="is in use by another vlmrb run \\(pid 4242"):
                prepare_run_dir(DQNConfig(output_dir=str(alias), overwrite=True), recipe="dqn")

    def test_resume_continues_its_own_directory_and_refuses_overwrite_there(self, tmp_path):
        path, *_ = _checkpoint(tmp_path, 64)
        run_dir = path.parent.parent
        (run_dir / "config.json").write_text(json.dumps({"seed": 0}))
        assert prepare_run_dir(DQNConfig(resume=str(run_dir)), recipe="dqn") == path
        with pytest.raises(ConfigError, match="would delete the checkpoint it resumes"):
            prepare_run_dir(DQNConfig(resume=str(run_dir), output_dir=str(run_dir), overwrite=True), recipe="dqn")
        # resuming into another, non-empty directory is a reuse like any other
        other = tmp_path / "other"
        other.mkdir()
        (other / "metrics.csv").write_text("x")
        with pytest.raises(ConfigError, match="is not empty"):
            prepare_run_dir(DQNConfig(resume=str(run_dir), output_dir=str(other)), recipe="dqn")

    def test_a_disk_without_room_for_a_checkpoint_fails_at_start(self, tmp_path, monkeypatch, capsys):
        # issue 64: a full disk at start was found only at the first checkpoint, after the training was done
        import collections

        from vlmrb_torchrl.recipes import run_dir

        usage = collections.namedtuple("usage", "total used free")
        seen = []
        monkeypatch.setattr(run_dir.shutil, "disk_usage", lambda path: seen.append(path) or usage(10**9, 10**9, 10**6))
        out = tmp_path / "runs" / "full"
        args = [f"{k}={v}" for k, v in TINY.items()] + ["replay=uniform", f"output_dir={out}"]
        assert cli_main(["train", "dqn", *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"output_dir={str(out)!r}: 1 MB free on its disk, and the next checkpoint " \
            "needs about 0 MB (512 transitions of " in err and "lower buffer_size or checkpoint_every" in err
        assert seen == [tmp_path] and not out.exists()  # asked of the nearest directory that exists; nothing written

    def test_an_unwritable_checkpoints_dir_fails_at_start(self, tmp_path):
        (tmp_path / "file").write_text("a file where a directory should be")
        with pytest.raises(ConfigError, match="cannot write checkpoints in .*checkpoints"):
            prepare_run_dir(DQNConfig(output_dir=str(tmp_path / "file" / "run")), recipe="dqn")

    @pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes anywhere")
    def test_a_read_only_output_dir_fails_at_start(self, tmp_path):
        tmp_path.chmod(0o555)
        try:
            with pytest.raises(ConfigError, match="cannot write checkpoints in .*checkpoints"):
                prepare_run_dir(DQNConfig(output_dir=str(tmp_path)), recipe="dqn")
        finally:
            tmp_path.chmod(0o755)

    def test_the_recipe_refuses_before_building_anything(self, tmp_path, monkeypatch):
        from vlmrb_torchrl.recipes import dqn

        (tmp_path / "config.json").write_text("{}")
        monkeypatch.setattr(dqn, "start_run", lambda cfg: pytest.fail("start_run reached"))
        with pytest.raises(ConfigError, match="is not empty"):
            dqn.main(apply_overrides(DQNConfig(), {**TINY, "output_dir": str(tmp_path)}))


    @pytest.mark.parametrize("override, said", [
        ("scorer=orcale:minigrid", "vlmrb train dqn: scorer='orcale:minigrid': Unknown scorer spec 'orcale:minigrid'"),
        ("env=MiniGrid-DoorKy-5x5-v0", "vlmrb train dqn: env='MiniGrid-DoorKy-5x5-v0' is invalid: "),
        ("env=CartPole-v1", "vlmrb train dqn: env='CartPole-v1' is invalid: expected a MiniGrid or BabyAI id"),
        ("scorer=python:no_such_scorer_module:fn",
         "vlmrb train dqn: scorer='python:no_such_scorer_module:fn': cannot import module 'no_such_scorer_module'"),
        ("scorer_kwargs={\"foo\": 1}",
         "vlmrb train dqn: scorer='oracle:minigrid': unknown keyword argument 'foo'"),
    ])
    def test_a_failed_start_says_one_line_and_writes_nothing(self, tmp_path, capsys, override, said):
        """A typo fails before the run directory exists, so the corrected command is not refused."""
        out = tmp_path / "run"
        args = [f"{k}={v}" for k, v in TINY.items()] + ["scorer=oracle:minigrid", f"output_dir={out}", override]
        assert cli_main(["train", "dqn", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(said), err
        assert not out.exists()


def _fails_after_the_run_dir_is_made(monkeypatch):
    """A failure between the run directory's making and the first checkpoint: tqdm missing (progress=true)."""
    import sys

    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # `from tqdm.auto import tqdm` raises ImportError


@pytest.mark.parametrize("made", [True, False], ids=["new directory", "existing empty directory"])
def test_a_run_that_fails_before_its_first_checkpoint_leaves_nothing(tmp_path, monkeypatch, made):
    # issue 63: a failure after the directory was written (a missing optional package, a scorer error in the
    # worker) left config.json and an empty metrics.csv, and the corrected command was refused as "not empty"
    from vlmrb_torchrl.recipes import dqn
    from vlmrb_torchrl.recipes.run_dir import _HELD

    out = tmp_path / "run"
    if not made:
        out.mkdir()
    cfg = apply_overrides(DQNConfig(), {**TINY, "replay": "uniform", "output_dir": str(out), "progress": True})
    _fails_after_the_run_dir_is_made(monkeypatch)
    with pytest.raises(ImportError):
        dqn.main(cfg)
    assert out.exists() == (not made) and (made or not any(out.iterdir()))
    assert out.resolve() not in _HELD  # released
    monkeypatch.undo()
    corrected = apply_overrides(cfg, {"progress": False})
    assert prepare_run_dir(corrected, recipe="dqn", write=False) is None  # the corrected command is accepted


@pytest.mark.slow  # trains the corrected command
def test_the_corrected_command_just_works_after_a_scorer_failure(tmp_path, capsys):
    out = tmp_path / "run"
    args = [f"{k}={v}" for k, v in TINY.items()] + [f"output_dir={out}"]
    with pytest.raises(RuntimeError, match="ConnectionError"):  # the worker's error ends the run
        cli_main(["train", "dqn", *args, "scorer=python:test_run_safety:FailingScorer"])
    assert not out.exists()
    assert cli_main(["train", "dqn", *args, "scorer=oracle:minigrid"]) == 0
    assert (out / "summary.json").exists()


def test_a_run_with_a_checkpoint_keeps_its_files_when_it_fails(tmp_path):
    from vlmrb_torchrl.recipes.run_dir import release_run_dir

    cfg = DQNConfig(output_dir=str(tmp_path / "run"))
    prepare_run_dir(cfg, recipe="dqn")
    (tmp_path / "run" / "checkpoints" / "step_64").mkdir()
    (tmp_path / "run" / "metrics.csv").write_text("env_steps\n64\n")
    release_run_dir(cfg.output_dir, failed=True)
    assert (tmp_path / "run" / "metrics.csv").exists() and (tmp_path / "run" / ".vlmrb-run").exists()


# ---------------------------------------------------------------------------------- checkpoints
class TestCheckpoints:
    def test_written_atomically_with_a_manifest_last(self, tmp_path):
        path, *_ = _checkpoint(tmp_path, 64)
        files = json.loads((path / MANIFEST).read_text())["files"]
        assert {"state.pt", "DONE"} <= set(files) and any(name.startswith("replay/") for name in files)
        assert check_checkpoint(path) == (True, "")
        assert [p.name for p in path.parent.iterdir()] == ["step_64"]  # no partial directory left

    @pytest.mark.parametrize("failure", [
        OSError(28, "No space left on device"),
        # what tensordict raises when a memory map cannot grow on a full disk (the first of ~30 lines)
        RuntimeError("unable to mmap 1048576 bytes from file </x/storage.memmap>: No space left on device (28)\n"
                     "Exception raised from ... (most recent call first):\n" + "frame #1: ...\n" * 28),
    ])
    def test_a_failed_write_leaves_nothing_that_looks_complete(self, tmp_path, monkeypatch, failure):
        from vlmrb_torchrl.recipes import replay_checkpoint

        replay = _replay()
        batch = _batch()
        replay.store(batch, batch)

        def full_disk(rb, path):
            Path(path).mkdir(parents=True)
            (Path(path) / "replay.pt").write_bytes(b"x" * 10)
            raise failure

        monkeypatch.setattr(replay_checkpoint, "save_replay", full_disk)
        path = tmp_path / "run" / "checkpoints" / "step_64"
        with pytest.raises(CheckpointError, match=f"could not write checkpoint .*step_64: {type(failure).__name__}: "
                                                  ".*No space left on device[^\n]*earlier checkpoints") as info:
            save_checkpoint(path, modules={}, rb=replay.buffer, counters={"env_steps": 64})
        assert "\n" not in str(info.value)  # one line naming the path and the cause, not a traceback
        assert list(path.parent.iterdir()) == []
        replay.close()

    def test_a_truncated_storage_file_is_skipped_for_the_previous_checkpoint(self, tmp_path):
        older, replay, module = _checkpoint(tmp_path, 64)
        newer, *_ = _checkpoint(tmp_path, 128, replay, module)
        storage = newer / "replay" / "replay.pt"
        storage.write_bytes(storage.read_bytes()[: storage.stat().st_size // 2])
        ok, note = check_checkpoint(newer)
        assert not ok and "replay/replay.pt" in note and "bytes" in note
        with pytest.warns(RunWarning, match=r"skipped .*step_128 \(replay/replay.pt has .* bytes.*resuming from .*step_64"):
            assert latest_checkpoint(str(newer.parent.parent)) == older
        # an explicitly named damaged checkpoint is refused, not replaced
        with pytest.raises(CheckpointError, match="step_128 cannot be used: replay/replay.pt has"):
            latest_checkpoint(str(newer))

    def test_nan_weights_are_never_checkpointed(self, tmp_path):
        from vlmrb_torchrl.recipes.checkpoint import DivergedError

        replay = _replay()
        module = torch.nn.Linear(2, 2)
        with torch.no_grad():
            module.bias[1] = float("nan")
        path = tmp_path / "run" / "checkpoints" / "step_64"
        with pytest.raises(DivergedError, match="'net': bias holds NaN or infinite values .*not checkpointed"):
            save_checkpoint(path, modules={"net": module}, rb=replay.buffer, counters={"env_steps": 64})
        assert not path.parent.exists() or list(path.parent.iterdir()) == []
        replay.close()

    def test_pickled_objects_are_not_loaded_unless_trusted(self, tmp_path):
        # issue 35: a checkpoint from someone else ran a planted __reduce__ on resume
        path, replay, _ = _checkpoint(tmp_path, 64)
        witness = tmp_path / "ran"
        state = torch.load(path / "state.pt", weights_only=True)
        state["planted"] = _Planted(str(witness))
        torch.save(state, path / "state.pt")
        (path / MANIFEST).unlink()
        (path / MANIFEST).write_text(json.dumps(_manifest(path)))  # a well-formed, verified checkpoint
        with pytest.raises(CheckpointError, match="state.pt holds pickled Python objects.*trust_checkpoint=true"):
            load_checkpoint(path, modules={"net": torch.nn.Linear(2, 2)}, rb=_replay().buffer)
        assert not witness.exists()
        load_checkpoint(path, modules={"net": torch.nn.Linear(2, 2)}, rb=_replay().buffer, trust=True)
        assert witness.exists()  # what trust_checkpoint=true means: the pickle runs
        replay.close()

    def test_an_optional_state_missing_from_an_older_checkpoint_starts_afresh(self, tmp_path):
        from vlmrb_torchrl.recipes.value_ceiling import SoftValueCeiling

        path, replay, module = _checkpoint(tmp_path, 64)  # saved without a value ceiling (an older SAC run)
        ceiling, net = SoftValueCeiling(gamma=0.99, max_entropy=1.0), torch.nn.Linear(2, 2)
        load_checkpoint(path, modules={"net": net, "value_ceiling": ceiling}, rb=_replay().buffer)
        assert torch.equal(net.weight, module.weight) and ceiling.exceeded_at is None and ceiling._streak == 0
        with pytest.raises(CheckpointError, match="'other'"):  # a required module still is
            load_checkpoint(path, modules={"net": net, "other": torch.nn.Linear(2, 2)}, rb=_replay().buffer)
        replay.close()

    def test_torchrl_dumps_of_an_older_version_need_trust(self, tmp_path):
        import shutil

        path, replay, _ = _checkpoint(tmp_path, 64)
        shutil.rmtree(path / "replay")
        replay.buffer.dumps(path / "replay")  # what checkpoints held before: a pickled prefetch queue among them
        with pytest.raises(CheckpointError, match="written by TorchRL's rb.dumps .*prefetch.pkl is a pickle.*"
                                                  "trust_checkpoint=true"):
            load_checkpoint(path, modules={"net": torch.nn.Linear(2, 2)}, rb=_replay().buffer)
        fresh = _replay()
        load_checkpoint(path, modules={"net": torch.nn.Linear(2, 2)}, rb=fresh.buffer, trust=True)
        assert len(fresh.buffer) == len(replay.buffer)
        fresh.close()
        replay.close()

    def test_a_changed_byte_fails_the_checksum(self, tmp_path):
        path, *_ = _checkpoint(tmp_path, 64)
        data = bytearray((path / "state.pt").read_bytes())
        data[-10] ^= 0xFF
        (path / "state.pt").write_bytes(bytes(data))
        assert check_checkpoint(path) == (False, "state.pt changed since it was written (SHA-256 mismatch)")
        with pytest.raises(CheckpointError, match="no intact checkpoint; skipped .*step_64 \\(state.pt changed"):
            latest_checkpoint(str(path.parent.parent))

    def test_checkpoints_without_manifest_are_refused_unless_trusted(self, tmp_path):
        path, replay, module = _checkpoint(tmp_path, 64)
        (path / MANIFEST).unlink()
        with pytest.raises(CheckpointError, match="no MANIFEST.json: its files cannot be verified; resume with "
                                                  "trust_checkpoint=true"):
            latest_checkpoint(str(path.parent.parent))
        with pytest.warns(RunWarning, match="no MANIFEST.json: .*cannot be verified \\(used: trust_checkpoint=true"):
            assert latest_checkpoint(str(path.parent.parent), trust=True) == path
        fresh = _replay()
        assert load_checkpoint(path, modules={"net": torch.nn.Linear(2, 2)}, rb=fresh.buffer) == {"env_steps": 64}
        assert len(fresh.buffer) == len(replay.buffer)
        fresh.close()
        replay.close()

    @pytest.mark.parametrize("victim", ["state.pt", "replay/replay.json", "replay/replay.pt"])
    def test_truncated_files_raise_errors_naming_them(self, tmp_path, victim):
        path, replay, _ = _checkpoint(tmp_path, 64)
        (path / MANIFEST).unlink()  # an old, unverifiable checkpoint: the load itself must name the file
        file = path / victim
        file.write_bytes(file.read_bytes()[:20])
        with pytest.raises(CheckpointError, match=f"{file} cannot be read"):
            load_checkpoint(path, modules={"net": torch.nn.Linear(2, 2)}, rb=_replay().buffer)
        replay.close()

    def test_non_finite_scores_are_refused_at_load(self, tmp_path):
        path, replay, _ = _checkpoint(tmp_path, 64)
        (path / MANIFEST).unlink()
        tensors = torch.load(path / "replay" / "replay.pt", weights_only=True)
        meta = json.loads((path / "replay" / "replay.json").read_text())
        note = meta["sampler"]["notes"]["score"]
        score = expand(tensors["sampler"]["score"], note).float()
        score[0] = float("nan")
        tensors["sampler"]["score"] = score
        meta["sampler"]["notes"]["score"] = {**note, "dtype": "float32", "encoding": "raw"}
        torch.save(tensors, path / "replay" / "replay.pt")
        (path / "replay" / "replay.json").write_text(json.dumps(meta))
        with pytest.raises(CheckpointError, match="replay cannot be loaded: ValueError: .*score.* NaN"):
            load_checkpoint(path, modules={"net": torch.nn.Linear(2, 2)}, rb=_replay().buffer)
        replay.close()

    def test_interrupting_the_scorer_wait_still_writes_the_checkpoint(self, tmp_path):
        replay = _replay()
        batch = _batch()
        replay.store(batch, batch)

        class Interrupted:
            buffer = replay.buffer
            drain_timeout = 60

            def before_checkpoint(self):
                raise KeyboardInterrupt

            def backlog(self):
                return 3

        class FakeRun:
            dir = tmp_path

        counters = {"env_steps": 16}
        with pytest.warns(RunWarning, match="interrupted; 3 queued clips are saved unscored"), \
                pytest.raises(KeyboardInterrupt):
            checkpoint_now(FakeRun(), Interrupted(), modules={}, counters=counters)
        assert check_checkpoint(tmp_path / "checkpoints" / "step_16") == (True, "")
        assert counters["scorer_unscored_at_checkpoint"] == 3 and counters["scorer_drain_timeouts"] == 1
        replay.close()


# ---------------------------------------------------------------------------------- resume config
class TestResumeConfig:
    def _run_dir(self, tmp_path, **saved):
        path, replay, _ = _checkpoint(tmp_path, 64)
        replay.close()
        cfg = apply_overrides(DQNConfig(), {**TINY, **saved})
        import dataclasses

        (path.parent.parent / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
        return path.parent.parent

    def test_conflicting_keys_are_listed_with_both_values(self, tmp_path):
        run_dir = self._run_dir(tmp_path)
        cfg = apply_overrides(DQNConfig(), {**TINY, "resume": str(run_dir), "seed": 3, "buffer_size": 4_000,
                                            "total_frames": 1_024, "eval_episodes": 5})
        with pytest.raises(ConfigError) as info:
            prepare_run_dir(cfg, recipe="dqn")
        msg = str(info.value)
        assert "seed: 0 (checkpoint) vs 3 (now)" in msg and "buffer_size: 2000 (checkpoint) vs 4000 (now)" in msg
        assert "total_frames:" not in msg and "eval_episodes:" not in msg  # allowed to change
        assert "only these keys may change: total_frames, stop_at" in msg

    def test_a_hand_edited_run_config_is_caught_by_the_checkpoints_copy(self, tmp_path):
        # issue 35: batch_size and gamma edited in config.json were used silently on resume
        import dataclasses

        run_dir = tmp_path / "run"
        saved = apply_overrides(DQNConfig(), {**TINY, "output_dir": str(run_dir)})
        replay = _replay()
        batch = _batch()
        replay.store(batch, batch)
        save_checkpoint(run_dir / "checkpoints" / "step_64", modules={}, rb=replay.buffer,
                        counters={"env_steps": 64}, config=dataclasses.asdict(saved))
        replay.close()
        edited = {**dataclasses.asdict(saved), "batch_size": 32, "gamma": 0.5}
        (run_dir / "config.json").write_text(json.dumps(edited))
        cfg = apply_overrides(DQNConfig(), {**edited, "resume": str(run_dir), "output_dir": None})
        with pytest.raises(ConfigError) as info:
            prepare_run_dir(cfg, recipe="dqn")
        msg = str(info.value)
        assert "batch_size: 16 (checkpoint) vs 32 (now)" in msg and "gamma: 0.99 (checkpoint) vs 0.5 (now)" in msg
        assert "config.json no longer matches the checkpoint's config: edited since the run wrote it?" in msg

    def test_allowed_changes_resume(self, tmp_path):
        run_dir = self._run_dir(tmp_path)
        cfg = apply_overrides(DQNConfig(), {**TINY, "resume": str(run_dir), "total_frames": 1_024, "stop_at": 768,
                                            "device": "cpu", "progress": True})
        assert prepare_run_dir(cfg, recipe="dqn").name == "step_64"
        assert cfg.output_dir == str(run_dir)

    def test_cli_keeps_the_saved_config_and_rejects_a_changed_env(self, tmp_path, capsys):
        run_dir = self._run_dir(tmp_path)
        args = _train_parser("dqn").parse_intermixed_args([f"resume={run_dir}", "total_frames=1024"])
        cfg = build_config("dqn", args)
        assert (cfg.hidden, cfg.total_frames, cfg.output_dir) == (32, 1_024, None)
        assert cli_main(["train", "dqn", f"resume={run_dir}", "env=MiniGrid-Empty-5x5-v0"]) == 2
        assert "env: 'MiniGrid-DoorKey-5x5-v0' (checkpoint) vs 'MiniGrid-Empty-5x5-v0' (now)" in capsys.readouterr().err

    def test_stop_at_of_the_last_chunk_is_not_read_back(self, tmp_path):
        # a run started with stop_at=64 resumes to total_frames, not to 64 again (where it stands)
        run_dir = self._run_dir(tmp_path, stop_at=64)
        cfg = build_config("dqn", _train_parser("dqn").parse_intermixed_args([f"resume={run_dir}"]))
        assert cfg.stop_at is None and cfg.total_frames == TINY["total_frames"]
        cfg = build_config("dqn", _train_parser("dqn").parse_intermixed_args([f"resume={run_dir}", "stop_at=128"]))
        assert cfg.stop_at == 128  # the next chunk's, when given

    @pytest.mark.parametrize("saved, key", [
        # issue 64: a foreign run's config.json (and its checkpoint's copy, manifest recomputed) ran this on resume=
        ({"scorer": "python:torch.distributed.run:main()",
          "scorer_kwargs": {"args": ["--nproc_per_node=1", "--no-python", "touch", "WITNESS"]}}, "scorer"),
        ({"scorer": "distill:python:test_run_safety:FailingScorer"}, "scorer"),
        ({"scorer": "hf:/models/x", "scorer_kwargs": {"trust_remote_code": True}}, "scorer_kwargs"),
        ({"scorer_backend": "ray", "ray_address": "ray://10.0.0.9:10001"}, "ray_address"),
    ])
    def test_code_read_back_from_a_run_directory_is_refused_unless_given_or_trusted(self, tmp_path, capsys, saved,
                                                                                      key):
        witness = tmp_path / "PWNED"
        saved = json.loads(json.dumps(saved).replace("WITNESS", str(witness)))
        run_dir = self._run_dir(tmp_path, **saved)
        assert cli_main(["train", "dqn", f"resume={run_dir}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"its config.json sets {key}=" in err
        assert f"Give {key}= again on the command line if it is yours, or pass trust_checkpoint=true" in err
        assert not witness.exists()

        def build(*extra):
            return build_config("dqn", _train_parser("dqn").parse_intermixed_args([f"resume={run_dir}", *extra]))

        value = saved[key] if isinstance(saved[key], str) else json.dumps(saved[key])
        assert getattr(build(f"{key}={value}"), key) == saved[key]  # the user names it again: theirs
        assert getattr(build("trust_checkpoint=true"), key) == saved[key]
        config_file = tmp_path / "mine.yaml"
        config_file.write_text(json.dumps({key: saved[key]}))  # given again in a config file counts too
        assert getattr(build("--config", str(config_file)), key) == saved[key]
        assert not witness.exists()

    def test_a_run_of_another_recipe_is_named(self, tmp_path, capsys):
        # issue 64: `train dqn resume=<a SAC run>` said "unknown key 'env_backend'"
        import dataclasses

        from vlmrb_torchrl.recipes.config import SACConfig

        run_dir = tmp_path / "sac_run"
        run_dir.mkdir()
        (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(SACConfig())))
        assert cli_main(["train", "dqn", f"resume={run_dir}"]) == 2
        err = capsys.readouterr().err
        assert f"resume={str(run_dir)!r} is a run of `vlmrb train sac`" in err and "unknown key" not in err
        assert f"resume it with `vlmrb train sac resume={run_dir}`" in err and err.count("\n") == 1

    def test_a_missing_resume_path_is_reported_as_given(self, tmp_path, capsys):
        missing = str(tmp_path / "runs" / "does_not_exist")
        assert cli_main(["train", "dqn", f"resume={missing}"]) == 2
        assert f"resume={missing!r}: no such file or directory" in capsys.readouterr().err
        with pytest.raises(ConfigError, match=f"resume={missing!r}: no such file or directory"):
            latest_checkpoint(missing)


# ---------------------------------------------------------------------------------- config checks
class TestConfigChecks:
    @pytest.mark.parametrize("text, match", [
        ("seed: 1.5\n", "seed=1.5 is invalid: expected int"),
        ("total_frames: 1000.5\n", "total_frames=1000.5 is invalid: expected int"),
        ("async_scoring: 3\n", "async_scoring=3 is invalid: expected bool"),
        ("scorer_kwargs: [1]\n", "scorer_kwargs=\\[1\\] is invalid: expected a mapping"),
        ("seed: [\n", "not valid YAML"),
        ("- a\n", "expected a mapping of key: value pairs"),
    ])
    def test_config_file_values_go_through_the_same_checks(self, tmp_path, text, match):
        path = tmp_path / "run.yaml"
        path.write_text(text)
        args = _train_parser("dqn").parse_intermixed_args(["--config", str(path)])
        with pytest.raises(ConfigError, match=match) as info:
            build_config("dqn", args)
        assert str(path) in str(info.value)

    def test_config_file_numbers_convert_like_the_command_line(self, tmp_path):
        path = tmp_path / "run.yaml"
        path.write_text("total_frames: 3.0e+5\nlr: 1\nunscored_priority: 0.5\nthreshold: null\n")
        cfg = build_config("dqn", _train_parser("dqn").parse_intermixed_args(["--config", str(path)]))
        assert (cfg.total_frames, cfg.lr, cfg.unscored_priority, cfg.threshold) == (300_000, 1.0, "0.5", None)
        assert type(cfg.total_frames) is int and type(cfg.lr) is float

    def test_a_missing_config_file_is_named(self, tmp_path, capsys):
        assert cli_main(["train", "dqn", "--config", str(tmp_path / "nope.yaml")]) == 2
        assert f"--config {tmp_path / 'nope.yaml'}: cannot read the file" in capsys.readouterr().err

    def test_options_between_key_value_pairs(self):
        args = _train_parser("dqn").parse_intermixed_args(["seed=1", "--quick", "total_frames=2000"])
        cfg = build_config("dqn", args)
        assert (cfg.seed, cfg.total_frames, cfg.num_envs) == (1, 2_000, 4)  # --quick's num_envs

    @pytest.mark.parametrize("overrides, match", [
        (["seed=-1"], "seed=-1 is invalid: expected an integer in \\[0, 2\\*\\*32\\)"),
        ([f"seed={2**32}"], "seed=4294967296 is invalid"),
        (["buffer_size=32", "batch_size=64"], "buffer_size=32 is invalid: expected at least batch_size=64"),
        (["buffer_size=100", "frames_per_batch=128", "batch_size=16"], "buffer_size=100 is invalid"),
        (["buffer_size=64", "batch_size=16", "frames_per_batch=64", "clip_len=100", "replay=vlm"],
         "buffer_size=64 is invalid: .* and clip_len=100"),
        (["scorer_drain_timeout=-1"], "scorer_drain_timeout=-1.0 is invalid: expected a number >= 0"),
        (["on_scorer_error=ignore"], "on_scorer_error='ignore' is invalid: expected one of \\['raise', 'skip'\\]"),
        (["max_consecutive_scorer_errors=0"], "max_consecutive_scorer_errors=0 is invalid: expected an integer >= 1"),
        (["lr=inf"], "lr=inf is invalid: expected a finite number"),
        (["scorer_drain_timeout=inf"], "scorer_drain_timeout=inf is invalid: expected a finite number"),
        (["gamma=nan"], "gamma=nan is invalid: expected a finite number"),
        # issue 64: clip_len=100000 passed validation and died mid-run allocating 34 GB (one scorer call's frames)
        (["clip_len=10000000", "buffer_size=10000000", "replay=vlm", "scorer=builtin:minigrid"],
         "clip_len=10000000 is invalid: expected at most \\d+ here: a scorer call packs 32 clips of clip_len \\+ 1 "
         "frames of 12288 bytes, 3932.2 GB, more than half the .* GB of memory available; set clip_frames"),
        (["clip_len=10000000", "clip_frames=10000000", "buffer_size=10000000", "replay=vlm"],
         "clip_frames=10000000 is invalid: expected at most"),
    ])
    def test_bad_values(self, overrides, match):
        with pytest.raises(ConfigError, match=match):
            apply_overrides(DQNConfig(), overrides).validate()

    def test_a_path_that_is_not_utf8_is_refused_before_anything_is_written(self, tmp_path, capsys):
        # issue 64: a non-UTF-8 output_dir crashed TensorBoard with a 31-line UnicodeEncodeError after the run
        # directory existed (bytes that are not UTF-8 reach sys.argv as lone surrogates)
        out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/run-\xff")
        assert cli_main(["train", "dqn", f"output_dir={out}", "total_frames=256"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "output_dir: " in err and "is not valid UTF-8 (byte 0xff at position" in err
        assert list(tmp_path.iterdir()) == []
        assert cli_main(["build-scorer", "minigrid", "--out", out]) == 2
        assert "--out " in capsys.readouterr().err and list(tmp_path.iterdir()) == []

    def test_a_bad_mujoco_gl_is_one_line(self, monkeypatch, capsys):
        # issue 64: MUJOCO_GL=bogus gave MuJoCo's raw traceback (TorchRL imports MuJoCo when it is installed)
        monkeypatch.setenv("MUJOCO_GL", "bogus")
        for command in (["train", "sac"], ["train", "dqn"], ["build-scorer", "lift", "--out", "x"]):
            assert cli_main(command) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "MUJOCO_GL='bogus' is not a MuJoCo rendering backend" in err
            assert "set it to glx, egl, osmesa, glfw, or unset it" in err
        # a value MuJoCo takes, in any case, passes the check; checked without running the CLI, which would import
        # MuJoCo with it (its first import in this process then picks the rendering backend for every later test)
        from vlmrb_torchrl.cli import _mujoco_gl_problem

        assert _mujoco_gl_problem("EGL") == _mujoco_gl_problem("egl") == _mujoco_gl_problem(None) == ""

    def test_ctrl_c_during_start_up_is_one_line(self, monkeypatch, capsys, tmp_path):
        # issue 64: Ctrl-C during start-up (before the run) gave a raw traceback
        import vlmrb_torchrl.cli as cli

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(cli, "build_config", interrupted)
        assert cli_main(["train", "dqn", f"output_dir={tmp_path / 'run'}"]) == 130
        assert capsys.readouterr().err == "vlmrb train dqn: interrupted during start-up: nothing was written.\n"
        assert not (tmp_path / "run").exists()

    def test_json_nested_too_deep_is_one_line(self, tmp_path, capsys):
        # issue 64: deeply nested JSON gave a bare RecursionError
        deep = "[" * 100_000 + "]" * 100_000
        assert cli_main(["train", "dqn", f"scorer_kwargs={deep}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is invalid: expected a JSON object such as" in err and "nested too deep" in err
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "config.json").write_text(deep)
        assert cli_main(["train", "dqn", f"resume={run_dir}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot read" in err and "RecursionError" in err
        checkpoint, replay, _ = _checkpoint(tmp_path, 64)
        replay.close()
        (checkpoint / MANIFEST).write_text(deep)
        assert check_checkpoint(checkpoint)[0] is False and "MANIFEST.json is unreadable (RecursionError" in \
            check_checkpoint(checkpoint)[1]

    def test_long_clips_pass_where_they_fit(self):
        big = ["clip_len=10000000", "buffer_size=10000000", "replay=vlm"]
        assert apply_overrides(DQNConfig(), [*big, "clip_frames=8"]).validate().clip_len == 10_000_000  # 9 frames
        assert apply_overrides(DQNConfig(), [*big, "scorer=oracle:minigrid"]).validate().clip_len == 10_000_000
        assert apply_overrides(DQNConfig(), [*big[:2], "replay=uniform"]).validate().clip_len == 10_000_000

    def test_a_replay_larger_than_memory_fails_at_start(self, tmp_path, capsys):
        out = tmp_path / "run"
        args = [f"{k}={v}" for k, v in TINY.items()] + ["replay=uniform", f"output_dir={out}", "buffer_size=1e13"]
        assert cli_main(["train", "dqn", *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "buffer_size=10000000000000 is invalid: expected at most " in err
        assert " GB of memory is available" in err and not out.exists()

    def test_a_short_clip_check_only_in_vlm_modes(self):
        cfg = apply_overrides(DQNConfig(), ["buffer_size=64", "batch_size=16", "frames_per_batch=64", "clip_len=100",
                                            "replay=uniform"]).validate()
        assert cfg.buffer_size == 64


# ---------------------------------------------------------------------------------- hung scorer, Ctrl-C
def test_a_hung_scorer_costs_a_checkpoint_and_the_close_the_timeout_only(tmp_path, release_scorer):
    from vlmrb_torchrl.recipes.replay import VLMReplay

    cfg = apply_overrides(DQNConfig(), {**TINY, "buffer_size": 64, "scorer_drain_timeout": 0.2})
    replay = make_replay(cfg, generator=torch.Generator().manual_seed(0), updates=10, scorer=HangingScorer())
    assert isinstance(replay, VLMReplay) and replay.drain_timeout == 0.2
    batch = _batch()
    replay.store(batch, batch)

    class FakeRun:
        dir = tmp_path

    counters = {"env_steps": 16}
    start = time.perf_counter()
    with pytest.warns(RunWarning, match="not done within scorer_drain_timeout=0.2 s; 16 queued clips"):
        path = checkpoint_now(FakeRun(), replay, modules={}, counters=counters)
    assert time.perf_counter() - start < 5
    # 2 trajectories x (5 complete clips + 3 flushed tails), none scored
    assert counters["scorer_unscored_at_checkpoint"] == 16 and check_checkpoint(path) == (True, "")
    start = time.perf_counter()
    with pytest.warns(RuntimeWarning, match=r"close\(timeout=0.2\): a scorer call did not return in time; its daemon"):
        replay.close()
    assert time.perf_counter() - start < 5 and replay.closed


@pytest.mark.slow  # a short training run
def test_a_hung_scorer_delays_checkpoints_and_the_end_by_the_timeout_only(tmp_path, release_scorer):
    from vlmrb_torchrl.recipes.dqn import main as dqn_main

    cfg = apply_overrides(DQNConfig(), {**TINY, "output_dir": str(tmp_path / "run"), "scorer_drain_timeout": 0.5,
                                        "scorer": "python:test_run_safety:HangingScorer"})
    start = time.perf_counter()
    with pytest.warns(RunWarning, match=r"step_512: the scorer was not done within scorer_drain_timeout=0.5 s; "
                                        r"\d+ queued clips are saved unscored"):
        summary = dqn_main(cfg)
    # Without the timeout the run would wait for the scorer until teardown; the bound only has to
    # separate "returned" from "hung", with room for a loaded CI machine (a tiny run took 90 s there).
    assert time.perf_counter() - start < 300
    assert summary["env_steps"] == 512
    assert summary["scorer_unscored_at_checkpoint"] > 0 and summary["scorer_drain_timeouts"] == 1
    path = tmp_path / "run" / "checkpoints" / "step_512"
    assert check_checkpoint(path) == (True, "")
    sampler = json.loads((path / "replay" / "replay.json").read_text())["sampler"]
    scored = expand(torch.load(path / "replay" / "replay.pt", weights_only=True)["sampler"]["scored"],
                    sampler["notes"]["scored"])
    assert not scored.any()  # saved unscored: they keep the unscored priority


@pytest.mark.slow  # two short training runs
def test_ctrl_c_stops_after_the_batch_with_a_checkpoint_and_resumes(tmp_path, monkeypatch, release_scorer, capsys):
    from vlmrb_torchrl.recipes import loop
    from vlmrb_torchrl.recipes.dqn import main as dqn_main

    original = loop.maybe_evaluate

    def evaluate_then_ctrl_c(*args, counters, **kwargs):
        if counters["env_steps"] == 256 and not hasattr(evaluate_then_ctrl_c, "done"):
            evaluate_then_ctrl_c.done = True
            signal.raise_signal(signal.SIGINT)  # what the terminal sends
        return original(*args, counters=counters, **kwargs)

    monkeypatch.setattr(loop, "maybe_evaluate", evaluate_then_ctrl_c)
    cfg = apply_overrides(DQNConfig(), {**TINY, "output_dir": str(tmp_path / "run"), "scorer_drain_timeout": 0.5,
                                        "scorer": "python:test_run_safety:HangingScorer"})
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt), pytest.warns(RunWarning, match="step_256: the scorer was not done"):
        dqn_main(cfg)
    assert time.perf_counter() - start < 60
    err = capsys.readouterr().err
    assert "Ctrl-C: stopping after this batch" in err
    assert f"interrupted at 256 frames; last checkpoint: {tmp_path / 'run' / 'checkpoints' / 'step_256'}" in err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    assert check_checkpoint(tmp_path / "run" / "checkpoints" / "step_256") == (True, "")
    release_scorer.set()
    with pytest.warns(RunWarning, match="clips were still queued for scoring when it was written"):
        summary = dqn_main(apply_overrides(cfg, {"resume": str(tmp_path / "run")}))
    assert summary["env_steps"] == 512 and summary["scorer_unscored_lost"] > 0


# ---------------------------------------------------------------------------------- scorer errors
@pytest.mark.parametrize("async_scoring", [True, False])
def test_skipped_scorer_errors_leave_clips_unscored_and_are_counted(async_scoring):
    cfg = apply_overrides(DQNConfig(), {**TINY, "buffer_size": 64, "on_scorer_error": "skip",
                                        "async_scoring": async_scoring})
    replay = make_replay(cfg, generator=torch.Generator().manual_seed(0), updates=10, scorer=FailingScorer())
    with replay, pytest.warns(RuntimeWarning, match=r"scorer call failed \(1 so far.*ConnectionError"):
        batch = _batch()
        replay.store(batch, batch)  # with async_scoring=false this waits for the (failed) scores
        assert replay.buffer.async_scorer.drain(10)  # async: one scorer call per step below, as in sync mode
        assert replay.before_checkpoint() == 0  # the failed batch is done, not pending
        stats = replay.stats({})
    assert (stats["scorer_errors"], stats["scorer_consecutive_errors"], stats["fraction_scored"]) == (2, 2, 0.0)
    assert len(replay.buffer) == 16  # the data is stored; it keeps the unscored priority


@pytest.mark.filterwarnings("ignore:AsyncScorer. scorer call failed")
def test_scorer_errors_end_the_run_by_default_and_after_max_in_a_row():
    for overrides, match in (({}, r"worker failed: ConnectionError"),
                             ({"on_scorer_error": "skip", "max_consecutive_scorer_errors": 2},
                              r"2 scorer calls failed in a row \(on_error='skip', max_consecutive_errors=2\)")):
        cfg = apply_overrides(DQNConfig(), {**TINY, "buffer_size": 64, "async_scoring": False, **overrides})
        replay = make_replay(cfg, generator=torch.Generator().manual_seed(0), updates=10, scorer=FailingScorer())
        batch = _batch()
        with pytest.raises(RuntimeError, match=match), replay:
            for _ in range(3):
                replay.store(batch, batch)
                replay.before_checkpoint()


def test_a_resumed_run_keeps_the_metrics_columns_of_its_file(tmp_path):
    from vlmrb_torchrl.recipes.run import Run

    old_header = "env_steps,episodes,loss,time_s\n"  # a run written before newer columns existed
    (tmp_path / "metrics.csv").write_text(old_header + "100,1,0.5,1.0\n")
    cfg = DQNConfig(output_dir=str(tmp_path), tensorboard=False, progress=False)
    with Run(cfg, recipe="dqn", total=200, resumed_from=100) as run:
        run.log({"env_steps": 200, "episodes": 2, "loss": 0.25, "scorer_errors": 3, "time_s": 2.0})
    assert (tmp_path / "metrics.csv").read_text() == old_header + "100,1,0.5,1.0\n200,2,0.25,2\n"


@pytest.mark.slow  # a short training run
def test_a_down_scorer_with_skip_trains_to_the_end_and_reports_the_errors(tmp_path, monkeypatch):
    import csv

    from vlmrb_torchrl.recipes.dqn import main as dqn_main

    monkeypatch.setattr(FailingScorer, "up", False)
    cfg = apply_overrides(DQNConfig(), {**TINY, "output_dir": str(tmp_path / "run"), "on_scorer_error": "skip",
                                        "max_consecutive_scorer_errors": 1000,
                                        "scorer": "python:test_run_safety:FailingScorer"})
    with pytest.warns(RuntimeWarning, match="scorer call failed"):
        summary = dqn_main(cfg)
    assert summary["env_steps"] == 512 and summary["scorer_errors"] > 0 and summary["fraction_scored"] == 0.0
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert int(rows[-1]["scorer_errors"]) == summary["scorer_errors"]


# ---------------------------------------------------------------------------------- metrics on resume
class TestMetricsOnResume:
    def test_a_row_cut_mid_write_is_dropped(self, tmp_path):
        path = tmp_path / "metrics.csv"
        path.write_text("env_steps,loss\r\n100,0.5\r\n200,0.4\r\n300,0.3\r\n40")  # killed while writing a row
        truncate_metrics(path, 300)
        text = path.read_text()
        assert text.splitlines() == ["env_steps,loss", "100,0.5", "200,0.4", "300,0.3"] and text.endswith("\n")
        truncate_metrics(path, 200)
        assert path.read_text().splitlines() == ["env_steps,loss", "100,0.5", "200,0.4"]

    def test_tensorboard_keeps_the_row_logged_at_the_checkpoint(self, tmp_path):
        event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
        cfg = DQNConfig(output_dir=str(tmp_path), tensorboard=True, progress=False)
        with Run(cfg, recipe="dqn", total=300) as run:
            for step in (100, 200):  # a checkpoint at 200, after its row was logged
                run.log({"env_steps": step, "loss": step / 1000})
            run.log({"env_steps": 300, "loss": 0.3})  # logged after the checkpoint: gone on resume
        with Run(cfg, recipe="dqn", total=300, resumed_from=200) as run:
            run.log({"env_steps": 300, "loss": 0.35})
        events = event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
        events.Reload()
        tag = next(t for t in events.Tags()["scalars"] if t.endswith("loss"))
        assert [(e.step, round(e.value, 3)) for e in events.Scalars(tag)] == [(100, 0.1), (200, 0.2), (300, 0.35)]


# ---------------------------------------------------------------------------------- SIGTERM, divergence
def _ray_like_sigterm_handler():
    """A stand-in for the handler ``ray.init`` installs and leaves after ``ray.shutdown`` (it only exits)."""
    def sigterm_handler(signum, frame):
        raise SystemExit(signum)

    sigterm_handler.__module__ = "ray._private.worker"
    sigterm_handler.__qualname__ = "init.<locals>.sigterm_handler"
    return sigterm_handler


def test_a_run_takes_over_rays_sigterm_handler_but_not_the_users():
    from vlmrb_torchrl.recipes.loop import _replaceable_handler

    assert _replaceable_handler(signal.SIG_DFL) and _replaceable_handler(signal.default_int_handler)
    assert _replaceable_handler(_ray_like_sigterm_handler())
    assert not _replaceable_handler(lambda signum, frame: None)  # the user's stays theirs


@pytest.mark.slow  # a short training run
@pytest.mark.parametrize("before", ["default", "ray"])
def test_sigterm_checkpoints_and_exits_cleanly(tmp_path, monkeypatch, capsys, before):
    """What a scheduler sends on preemption: the batch ends with a checkpoint, the command exits 143 — also
    after ``ray.init`` has installed its own SIGTERM handler (the Ray scorer backend), which is put back."""
    from vlmrb_torchrl.recipes import loop

    previous = signal.getsignal(signal.SIGTERM)
    installed = signal.SIG_DFL if before == "default" else _ray_like_sigterm_handler()
    signal.signal(signal.SIGTERM, installed)
    try:
        _sigterm_run(tmp_path, monkeypatch, capsys, loop)
        assert signal.getsignal(signal.SIGTERM) is installed  # restored
    finally:
        signal.signal(signal.SIGTERM, previous)


def _sigterm_run(tmp_path, monkeypatch, capsys, loop):
    original = loop.maybe_evaluate

    def evaluate_then_sigterm(*args, counters, **kwargs):
        if counters["env_steps"] == 256 and not hasattr(evaluate_then_sigterm, "done"):
            evaluate_then_sigterm.done = True
            # without the recipe's handler SIGTERM would end pytest itself (or exit it, Ray's), not fail this test
            assert getattr(signal.getsignal(signal.SIGTERM), "__name__", None) == "_on_signal", \
                "the recipe installed no SIGTERM handler"
            signal.raise_signal(signal.SIGTERM)
        return original(*args, counters=counters, **kwargs)

    monkeypatch.setattr(loop, "maybe_evaluate", evaluate_then_sigterm)
    run_dir = tmp_path / "run"
    args = [f"{k}={v}" for k, v in TINY.items()] + ["replay=vlm", "scorer=oracle:minigrid", f"output_dir={run_dir}"]
    assert cli_main(["train", "dqn", *args]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "SIGTERM: stopping after this batch, with a checkpoint" in err and "stopped by signal 15." in err
    assert check_checkpoint(run_dir / "checkpoints" / "step_256") == (True, "")
    from vlmrb_torchrl.recipes.run_dir import LOCK

    import fcntl

    with open(run_dir / LOCK) as lock:  # released: another run may take the directory
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.slow  # two spawned Python processes
def test_a_process_scorer_child_dies_with_its_run(tmp_path):
    """A learner killed outright (SIGKILL: no handler runs) takes its scorer's child process with it."""
    import subprocess
    import sys

    script = tmp_path / "learner.py"
    script.write_text(
        "import time\n"
        "import torch\n"
        "from vlmrb_torchrl import ClipSpec, make_vlm_replay_buffer\n"
        "from vlmrb_torchrl.testing import make_clips\n"
        "if __name__ == '__main__':  # (the scorer's child is spawned: it imports this file)\n"
        "    rb = make_vlm_replay_buffer(64, 'oracle:minigrid', clip_spec=ClipSpec(clip_len=4), backend='process')\n"
        "    batch = make_clips(2, 8).exclude('pixels', 'mask', 'success')\n"
        "    batch['collector', 'traj_ids'] = torch.arange(2)[:, None].expand(2, 8)\n"
        "    batch['next', 'done'] = torch.zeros(2, 8, 1, dtype=torch.bool)\n"
        "    rb.extend(batch)\n"
        "    rb.flush_clips()\n"
        "    assert rb.async_scorer.drain(120)\n"
        "    children = [p.pid for p in rb.async_scorer._executor._processes.values()]\n"
        "    print('children:', *children, flush=True)\n"
        "    time.sleep(600)\n")
    learner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        line = next(line for line in learner.stdout if line.startswith("children:"))  # (TorchRL logs there too)
        children = [int(pid) for pid in line.split()[1:]]
    finally:
        learner.kill()
        learner.wait()
    assert children
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in children)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.slow  # a short training run
def test_a_diverging_learner_stops_with_a_clear_message_and_no_nan_checkpoint(tmp_path, monkeypatch, capsys):
    # issue 35: lr=inf with uniform replay ended rc 0 with loss=nan in metrics.csv and a NaN network saved
    from vlmrb_torchrl.recipes import dqn

    forward, calls = dqn.DoubleDQNLoss.forward, []

    def diverging(self, *args, **kwargs):  # from the 40th update on the loss overflows (NaN gradients follow)
        calls.append(1)
        out = forward(self, *args, **kwargs)
        return out * float("inf") if len(calls) >= 40 else out

    monkeypatch.setattr(dqn.DoubleDQNLoss, "forward", diverging)
    run_dir = tmp_path / "run"
    args = [f"{k}={v}" for k, v in TINY.items()] + ["replay=uniform", "checkpoint_every=64", f"output_dir={run_dir}"]
    assert cli_main(["train", "dqn", *args]) == 1
    err = capsys.readouterr().err
    assert "vlmrb train dqn: loss became NaN or infinite at" in err and "the learner diverged (lr=" in err
    assert "Nothing of it was checkpointed; the last checkpoint: " in err
    assert len(list((run_dir / "checkpoints").glob("step_*"))) >= 2  # those before it diverged
    from vlmrb_torchrl.recipes.checkpoint import check_finite_state

    for checkpoint in (run_dir / "checkpoints").glob("step_*"):  # those written before it diverged
        state = torch.load(checkpoint / "state.pt", weights_only=True)
        check_finite_state({"loss": state["loss"], "optim": state["optim"]}, str(checkpoint))


@pytest.mark.slow  # starts a run in a child process and kills it
def test_the_same_command_just_works_after_kill_9_at_the_start(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "run"
    # no evaluation, so no metrics row, before the kill: what any start looks like in its first seconds
    args = [f"{k}={v}" for k, v in {**TINY, "total_frames": 10**7, "learning_starts": 10**7, "eval_every": 10**7}.items()]
    child = subprocess.Popen([sys.executable, "-m", "vlmrb_torchrl.cli", "train", "dqn", *args, f"output_dir={out}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.csv").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (out / "metrics.csv").exists()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert (out / "config.json").exists()  # what the killed start left
    assert cli_main(["train", "dqn", *[f"{k}={v}" for k, v in TINY.items()], f"output_dir={out}"]) == 0
    assert (out / "summary.json").exists()
