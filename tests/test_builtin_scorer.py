"""The built-in MiniGrid scorer: the training tool, the shipped model, ``make_scorer("builtin:minigrid")``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("minigrid")

from vlmrb_torchrl.envs import DOORKEY_ACTIONS, MiniGridEnv  # noqa: E402
from vlmrb_torchrl.envs.minigrid.policies import DoorKeyPolicy, SubgoalPolicy, minigrid_state  # noqa: E402
from vlmrb_torchrl.envs.minigrid.domain import build_minigrid_scorer  # noqa: E402
from vlmrb_torchrl.scorer_training import BuildConfig, build_scorer, weights_sha256  # noqa: E402
from vlmrb_torchrl.envs.minigrid.captions import true_statements  # noqa: E402
from vlmrb_torchrl.scorers import make_scorer  # noqa: E402
from vlmrb_torchrl.scorers.builtin import MINIGRID_PROMPT_SET, builtin_model_dir  # noqa: E402

MICRO = BuildConfig(frames=200, steps=3, batch_size=16, size="micro", held_out_frames=0, eval_every=100)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _clips(frames: list[torch.Tensor]) -> TensorDict:
    pixels = torch.stack(frames).unsqueeze(0)
    return TensorDict(pixels=pixels, mask=torch.ones(1, len(frames), dtype=torch.bool), batch_size=[1, len(frames)])


# ------------------------------------------------------------------------------ training tool
def test_micro_build_loads_through_make_scorer(tmp_path):
    report = build_minigrid_scorer(tmp_path, MICRO, log=None)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "processor_config.json", "MODEL_CARD.md"):
        assert (tmp_path / name).is_file(), name
    assert json.loads((tmp_path / "training.json").read_text())["weights_sha256"] == weights_sha256(tmp_path)
    assert report["weights_sha256"] in (tmp_path / "MODEL_CARD.md").read_text()
    scorer = make_scorer(f"clip:{tmp_path}", prompt="the agent holds the red ball",
                         negatives=["the agent holds nothing"], aggregation="max")
    # the tokenizer appends the end-of-text token the CLIP text tower pools on
    ids = scorer.processor(text=["the agent holds the red ball"])["input_ids"][0]
    assert ids[-1] == scorer.model.config.text_config.eos_token_id != 2
    assert ids[0] == scorer.model.config.text_config.bos_token_id
    assert 1 not in ids  # every word is in the vocabulary (1 = <unk>)
    env = MiniGridEnv("MiniGrid-DoorKey-5x5-v0", seed=0)
    frames = [env.reset()["pixels"]] * 3
    scores = scorer.score(_clips(frames))
    assert scores.shape == (1,) and 0.0 <= float(scores[0]) <= 1.0


def test_micro_build_is_deterministic(tmp_path):
    build_minigrid_scorer(tmp_path / "a", MICRO, log=None)
    build_minigrid_scorer(tmp_path / "b", MICRO, log=None)
    build_minigrid_scorer(tmp_path / "c", BuildConfig(**{**MICRO.__dict__, "seed": 1}), log=None)
    a, b, c = (weights_sha256(tmp_path / n) for n in "abc")
    assert a == b
    assert a != c


def test_cli_build_scorer(tmp_path, capsys):
    from vlmrb_torchrl.cli import main

    rc = main(["build-scorer", "minigrid", "--out", str(tmp_path), "--frames", "100", "--steps", "1",
               "--batch-size", "8", "--size", "micro", "--held-out-frames", "0"])
    assert rc == 0
    assert "vlmrb build-scorer minigrid --out" in (tmp_path / "MODEL_CARD.md").read_text()
    assert main(["build-scorer", "minigrid", "--out", str(tmp_path), "--steps", "0"]) == 2
    # the build left its marker, whose id its training.json holds: the next build may write over it
    from vlmrb_torchrl.scorer_training.train import BUILD_MARKER, check_build_dir

    marked = json.loads((tmp_path / BUILD_MARKER).read_text())["build_id"]
    assert json.loads((tmp_path / "training.json").read_text())["build_id"] == marked
    check_build_dir(tmp_path)


@pytest.mark.parametrize("where", ["a project", "the current directory"])
def test_build_scorer_refuses_a_directory_it_did_not_write(tmp_path, capsys, monkeypatch, where):
    # issue 64: `vlmrb build-scorer --out DIR` replaced config.json, MODEL_CARD.md and tokenizer.json already there
    from vlmrb_torchrl.cli import main
    from vlmrb_torchrl.scorer_training.train import BUILD_MARKER, check_build_dir

    mine = {"config.json": '{"mine": 1}', "MODEL_CARD.md": "# my card", "tokenizer.json": "{}", "notes.txt": "x"}
    for name, text in mine.items():
        (tmp_path / name).write_text(text)
    out = str(tmp_path)
    if where == "the current directory":
        monkeypatch.chdir(tmp_path)
        out = "."
    assert main(["build-scorer", "minigrid", "--out", out, "--frames", "100", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out}: the directory holds files no build wrote" in err
    assert "pass --overwrite" in err
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == mine  # nothing written, nothing generated
    for marker in ("", "{}", '{"build_id": "0123456789abcdef0123456789abcdef"}'):  # planted, or not this build's
        (tmp_path / BUILD_MARKER).write_text(marker)
        with pytest.raises(FileExistsError, match="holds files no build wrote"):
            check_build_dir(tmp_path)
    check_build_dir(tmp_path, overwrite=True)  # --overwrite: the user says so
    (tmp_path / "file").write_text("")
    with pytest.raises(FileExistsError, match="a file, not a directory"):
        check_build_dir(tmp_path / "file")


def test_a_damaged_frame_cache_is_named_with_delete_it_to_rebuild(tmp_path, capsys):
    # issue 64: a crafted or damaged build-scorer cache gave a raw traceback that did not say "delete the cache"
    from vlmrb_torchrl.cli import main
    from vlmrb_torchrl.envs.minigrid.policies import MiniGridState
    from vlmrb_torchrl.scorer_training.domains import FrameSet
    from vlmrb_torchrl.scorer_training.domains import FrameCacheError, load_frames, save_frames

    state = MiniGridState(None, (), (), ("grey", "wall", ""), False, 3, "left", ())
    good = tmp_path / "good.npz"
    save_frames(FrameSet([np.zeros((2, 2, 3), np.uint8)] * 2, [state] * 2, np.zeros(2, np.int64), np.zeros(2, np.int64),
                         ["DoorKey"]), good)
    assert len(load_frames(good, frames=2)) == 2
    raw = good.read_bytes()
    cases = {"truncated.npz": raw[: len(raw) // 2], "text.npz": b"not a zip"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    arrays = dict(np.load(good))
    crafted = {
        "shapes.npz": {**arrays, "shapes": np.asarray([[2, 2, 3], [-1, 2, 3]])},
        "pixels.npz": {**arrays, "pixels": arrays["pixels"][:-1]},
        "states.npz": {**arrays, "states_json": np.frombuffer(b'[["MiniGridState", [1]]]', np.uint8)},
        "deep.npz": {**arrays, "states_json": np.frombuffer(b"[" * 100_000 + b"]" * 100_000, np.uint8)},
        "layout.npz": {**arrays, "layout": np.asarray([0, 7])},
    }
    for name, values in crafted.items():
        np.savez(tmp_path / name, **values)
    for name in [*cases, *crafted]:
        with pytest.raises(FrameCacheError, match=f"frame cache {tmp_path / name} is .*; delete it to rebuild"):
            load_frames(tmp_path / name)
    with pytest.raises(FrameCacheError, match="2 frames where its name says 100"):
        load_frames(good, frames=100)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "minigrid-100-seed0-v4.npz").write_bytes(raw[:100])  # the file a 100-frame build of seed 0 reads
    assert main(["build-scorer", "minigrid", "--out", str(tmp_path / "out"), "--frames", "100", "--steps", "1",
                 "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "minigrid-100-seed0-v4.npz is unreadable" in err and "delete it to rebuild" in err


def test_build_device_and_workers_options(tmp_path, capsys):
    from vlmrb_torchrl.cli import main
    from vlmrb_torchrl.scorer_training.train import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for bad in ("tpu", "cuda:x", "", None):
        with pytest.raises(ValueError, match="BuildConfig.device must be"):
            resolve_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA GPU here"):
            resolve_device("cuda")
        with pytest.raises(ValueError, match="no CUDA GPU"):
            build_minigrid_scorer(tmp_path / "gpu", BuildConfig(**{**MICRO.__dict__, "device": "cuda"}), log=None)
        assert main(["build-scorer", "minigrid", "--out", str(tmp_path / "gpu"), "--device", "cuda"]) == 2
        assert "--device: BuildConfig.device='cuda', but torch sees no CUDA GPU" in capsys.readouterr().err
    # frames of one process only, but for MiniGrid (both views) and Scene: a clear error, before any frame is generated
    with pytest.raises(ValueError, match=r"generates its frames in one process \(workers=1\); only \['minigrid', 'minigrid_agent', 'scene'\]"):
        build_scorer("lift", tmp_path / "w", MICRO, log=None, workers=2)
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        build_scorer("minigrid", tmp_path / "w", MICRO, log=None, workers=0)
    assert main(["build-scorer", "lift", "--out", str(tmp_path / "w"), "--workers", "3"]) == 2
    assert "--workers is for minigrid, minigrid_agent, scene only" in capsys.readouterr().err
    for bad in (["--lr", "0"], ["--statement-texts", "-1"]):
        assert main(["build-scorer", "minigrid", "--out", str(tmp_path / "w"), *bad]) == 2
        assert "--lr must be > 0, --statement-texts and --opposite-texts >= 0" in capsys.readouterr().err
    assert main(["build-scorer", "scene", "--out", str(tmp_path / "w"), "--workers", "0"]) == 2
    with pytest.raises(SystemExit):
        main(["build-scorer", "minigrid", "--out", str(tmp_path / "w"), "--device", "tpu"])
    assert not (tmp_path / "w").exists() and not (tmp_path / "gpu").exists()
    # a CPU build records its device; the card says one CPU thread
    report = build_minigrid_scorer(tmp_path / "cpu", MICRO, log=None)
    assert report["device"] == "cpu" and report["workers"] == 1 and report["config"]["device"] == "cpu"
    assert "frames on one CPU thread" in (tmp_path / "cpu" / "MODEL_CARD.md").read_text()



def test_cli_passes_lr_and_statement_texts(tmp_path):
    from vlmrb_torchrl.cli import main

    args = ["build-scorer", "minigrid", "--frames", "120", "--steps", "2", "--batch-size", "8", "--size", "micro",
            "--held-out-frames", "0"]
    assert main([*args, "--out", str(tmp_path / "a"), "--lr", "5e-4", "--statement-texts", "0"]) == 0
    config = json.loads((tmp_path / "a" / "training.json").read_text())["config"]
    assert config["lr"] == 5e-4 and config["statement_texts"] is None  # 0: every statement's wording
    assert main([*args, "--out", str(tmp_path / "b"), "--statement-texts", "16"]) == 0
    config = json.loads((tmp_path / "b" / "training.json").read_text())["config"]
    assert config["lr"] == 2e-3 and config["statement_texts"] == 16


def test_cli_help_states_each_domain_default():
    """``vlmrb build-scorer --help`` writes each domain's default frames, steps, batch size, held-out frames,
    statement texts and auxiliary weight by hand (building every domain to read them would import robosuite and
    OGBench pieces for ``--help``): they must say what ``get_domain(name).default_config`` is, so a changed
    default cannot leave the help behind."""
    import re

    from vlmrb_torchrl.cli import _build_scorer_parser
    from vlmrb_torchrl.scorer_training import DOMAINS, get_domain

    helps = {a.dest: a.help for a in _build_scorer_parser()._actions}

    def stated(text, name):
        """The value the help gives ``name`` (``lift 60000``, ``scene and lift 4000``, ``the others 0``)."""
        found = {}
        for words, value in re.findall(r"((?:[a-z_]+(?: and |, ))*[a-z_ ]+) (\d+(?:\.\d+)?)\b", text):
            for word in re.split(r" and |, ", words):
                found[word.strip()] = float(value)
        return found.get(name, found.get("the others", found.get("default")))

    for name in DOMAINS:
        cfg = get_domain(name).default_config
        for field in ("frames", "steps", "batch_size", "held_out_frames", "statement_texts", "aux_weight"):
            want = getattr(cfg, field) or 0  # statement_texts None: all of them, the help's 0
            assert stated(helps[field], name) == want, (name, field, want, helps[field])


def test_flips_map_pixels_and_statements():
    import dataclasses

    import numpy as np

    from vlmrb_torchrl.envs.minigrid.captions import all_statements
    from vlmrb_torchrl.envs.minigrid.domain import minigrid_domain
    from vlmrb_torchrl.scorer_training.train import _Flips

    domain = minigrid_domain()
    index = {s: i for i, s in enumerate(all_statements())}
    flips = _Flips(domain, index, seed=0)
    pixels = torch.arange(64 * 3 * 4 * 4, dtype=torch.int64).reshape(64, 3, 4, 4).to(torch.uint8)
    flipped, maps = flips(pixels)
    left, right, key = index[("room", "left")], index[("room", "right")], index[("holds", "any", "key")]
    hot = np.zeros((64, len(index)), dtype=bool)
    hot[:, [left, key]] = True  # every frame: the agent in the left room, holding a key
    new_hot = np.take_along_axis(hot, _Flips.inverse(maps), axis=1)
    seen = set()
    for i in range(64):
        h = torch.equal(flipped[i], pixels[i].flip(-1)) or torch.equal(flipped[i], pixels[i].flip(-1).flip(-2))
        v = torch.equal(flipped[i], pixels[i].flip(-2)) or torch.equal(flipped[i], pixels[i].flip(-1).flip(-2))
        seen.add((h, v))
        # a left-right flip (alone or with an up-down one) puts the agent in the right room; nothing else moves
        assert maps[i, left] == (right if h else left) and maps[i, key] == key
        assert new_hot[i, key] and new_hot[i, right] == h and new_hot[i, left] == (not h) and new_hot[i].sum() == 2
    assert seen == {(False, False), (True, False), (False, True), (True, True)}
    assert torch.equal(pixels, torch.arange(64 * 3 * 16).reshape(64, 3, 4, 4).to(torch.uint8))  # not flipped in place
    # domains whose frames have an orientation refuse it; a map must be one to one
    with pytest.raises(ValueError, match="has no symmetries"):
        _Flips(dataclasses.replace(domain, symmetries=()), index, seed=0)
    with pytest.raises(ValueError, match="maps two statements to one"):
        _Flips(dataclasses.replace(domain, symmetries=(("horizontal", lambda s: ("room", "left")
                                                         if s == ("room", "right") else s),)), index, seed=0)


def test_opposite_texts_pair_a_true_statement_with_an_opposite():
    import dataclasses

    import numpy as np

    from vlmrb_torchrl.envs.minigrid.captions import opposites
    from vlmrb_torchrl.envs.minigrid.training import Layout, generate_frames
    from vlmrb_torchrl.envs.minigrid.domain import minigrid_domain
    from vlmrb_torchrl.scorer_training.train import _OppositeTexts, _Statements

    domain = minigrid_domain()
    data = generate_frames(300, seed=3, layouts=(Layout("BabyAI-GoToLocal-v0", 1.0, "mission"),))
    stmts = _Statements(data.states, domain)
    texts = _OppositeTexts(domain, stmts, np.ones(len(stmts.names)), seed=0)
    identity = np.arange(len(stmts.names))[None]
    heads = set()
    for frame in range(len(data)):
        pair = texts.draw(stmts.state_id[[frame]], identity, 1)
        true, opposite = (stmts.names[c] for c in pair)
        assert true in domain.true_statements(data.states[frame]) and opposite in opposites(true)
        heads.add(true[0])
    assert {"faces", "faces_not", "floor"} <= heads  # facing an object and not facing one both get their pair
    # a flipped frame's statements are the mapped ones; a batch of n frames gives n pairs (or fewer)
    assert len(texts.draw(stmts.state_id[:10], np.repeat(identity, 10, 0), 4)) == 8
    with pytest.raises(ValueError, match="names no opposites"):
        _OppositeTexts(dataclasses.replace(domain, opposites=None), stmts, np.ones(len(stmts.names)), seed=0)


def test_augmented_build_and_cli(tmp_path, capsys):
    from vlmrb_torchrl.cli import main

    report = build_minigrid_scorer(tmp_path / "a", BuildConfig(**{**MICRO.__dict__, "augment": True}), log=None)
    assert report["config"]["augment"] is True
    assert weights_sha256(tmp_path / "a") != build_minigrid_scorer(tmp_path / "b", MICRO, log=None)["weights_sha256"]
    report = build_minigrid_scorer(tmp_path / "o", BuildConfig(**{**MICRO.__dict__, "opposite_texts": 8}), log=None)
    assert report["config"]["opposite_texts"] == 8 and report["weights_sha256"] != weights_sha256(tmp_path / "b")
    for flag, message in (("--augment", "--augment is for minigrid, minigrid_agent only"),
                          ("--opposite-texts=4", "--opposite-texts is for minigrid, minigrid_agent only")):
        assert main(["build-scorer", "lift", "--out", str(tmp_path / "c"), flag]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_minigrid_frames_are_drawn_per_episode():
    from vlmrb_torchrl.envs.minigrid.training import generate_frames

    one = generate_frames(300, seed=5)
    assert len(one) == 300 and one.episode.max() >= 2 and list(one.episode) == sorted(one.episode)
    # the first episodes of a longer draw are the same: each episode depends on (seed, its index) alone
    more = generate_frames(400, seed=5)
    assert all((a == b).all() for a, b in zip(one.frames, more.frames)) and one.states == more.states[:300]
    assert generate_frames(300, seed=6).states != one.states
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        generate_frames(10, workers=0)


@pytest.mark.slow
def test_minigrid_frames_do_not_depend_on_the_workers():
    from vlmrb_torchrl.envs.minigrid.training import generate_frames

    one = generate_frames(500, seed=3)
    two = generate_frames(500, seed=3, workers=2)
    assert len(two) == 500 and one.episode.max() >= 4
    assert all((a == b).all() for a, b in zip(one.frames, two.frames)) and one.states == two.states
    assert (one.layout == two.layout).all() and (one.episode == two.episode).all()


# ------------------------------------------------------------------------------ policies, states
def test_doorkey_policy_solves_every_size_and_is_seeded():
    for size in (5, 6, 8, 16):
        env = MiniGridEnv(f"MiniGrid-DoorKey-{size}x{size}-v0", seed=size, render=False, actions=DOORKEY_ACTIONS)
        rollout = env.rollout(10 * size * size, DoorKeyPolicy(env, seed=0, epsilon=0.2, burst_prob=0.05))
        assert bool(rollout["next", "success"][-1]), size
        assert rollout["next", "key_picked_up"].sum() == 1 and rollout["next", "door_opened"].sum() == 1
    runs = []
    for _ in range(2):
        env = MiniGridEnv("MiniGrid-DoorKey-8x8-v0", seed=1, render=False)
        runs.append(env.rollout(60, DoorKeyPolicy(env, seed=7, epsilon=0.5), break_when_any_done=False)["action"])
    assert torch.equal(runs[0], runs[1])


def test_subgoal_policy_batched_and_states():
    from torchrl.envs import SerialEnv

    envs = [MiniGridEnv("MiniGrid-KeyCorridorS3R1-v0", seed=i, render=False) for i in range(2)]
    policy = SubgoalPolicy(envs, seed=0)
    serial = SerialEnv(2, [lambda e=e: e for e in envs])
    serial.set_seed(0)
    td = serial.reset()
    out = policy(td)
    assert out["action"].shape == (2,) and out["action"].dtype == torch.int64
    state = minigrid_state(envs[0])
    assert ("holds_nothing",) in true_statements(state)
    assert any(s[0] == "door" for s in true_statements(state))


# ------------------------------------------------------------------------------ the shipped model
def _episode(size: int, seed: int, *, epsilon: float = 0.2):
    """A scripted DoorKey episode with random actions: the frame before each step plus the final
    frame, each frame's state, and the step of each first event."""
    env = MiniGridEnv(f"MiniGrid-DoorKey-{size}x{size}-v0", seed=seed, actions=DOORKEY_ACTIONS)
    policy = DoorKeyPolicy(env, seed=seed, epsilon=epsilon, burst_prob=0.05)
    td = env.reset()
    frames, states, events = [td["pixels"]], [minigrid_state(env)], {}
    for step in range(10 * size * size):
        td = env.step(policy(td))
        frames.append(td["next", "pixels"])
        states.append(minigrid_state(env))
        for key in ("key_picked_up", "door_opened", "goal_reached"):
            if bool(td["next", key]):
                events.setdefault(key, step)
        if bool(td["next", "done"]):
            break
        td = td["next"]
    assert set(events) == {"key_picked_up", "door_opened", "goal_reached"}
    return frames, states, events


def _quiet(states) -> bool:
    """No key or door state change and no frame facing or on the goal: nothing to detect."""
    held = {s.carrying is not None for s in states}
    doors = {s.doors for s in states}
    return len(held) == 1 and len(doors) == 1 and not any(s.faces_goal or s.on_goal for s in states)


def _check_scorers():
    """One single-prompt scorer per check of the built-in prompt set (score = max over them)."""
    path = str(builtin_model_dir())
    return [make_scorer(f"clip:{path}", prompt=c.positive, negatives=list(c.negatives), aggregation=c.aggregation)
            for c in MINIGRID_PROMPT_SET]


@pytest.fixture(scope="module")
def check_scorers():
    return _check_scorers()


@pytest.fixture(scope="module")
def builtin_scorer():
    return make_scorer("builtin:minigrid")


def test_shipped_model_files_and_card():
    path = builtin_model_dir()
    card = (path / "MODEL_CARD.md").read_text()
    assert weights_sha256(path) in card
    assert (path / "model.safetensors").stat().st_size < 5 * 2**20
    report = json.loads((path / "training.json").read_text())
    assert report["weights_sha256"] == weights_sha256(path)


@pytest.mark.parametrize("size,seed", [(5, 90_001), (6, 90_002), (8, 90_003)])
def test_shipped_model_scores_scripted_episode(builtin_scorer, size, seed):
    """Clips around the key, door and goal events score high; clips far from every event score low."""
    frames, states, events = _episode(size, seed)

    def scores(starts: list[int], length: int) -> list[float]:
        clips = torch.stack([torch.stack(frames[t : t + length]) for t in starts])
        td = TensorDict(pixels=clips, mask=torch.ones(clips.shape[:2], dtype=torch.bool), batch_size=clips.shape[:2])
        return builtin_scorer.score(td).tolist()

    # frame `step` is before the event's step, frame `step + 1` after it
    names, steps = zip(*events.items())
    hits = scores([max(0, step - 3) for step in steps], 5)
    assert all(h > 0.5 for h in hits), dict(zip(names, hits))
    quiet = [t for t in range(len(frames) - 4) if _quiet(states[t : t + 4])]
    assert len(quiet) >= 3, "too few clips without events"
    quiet = quiet[:: max(1, len(quiet) // 20)]
    wrong = [t for t, v in zip(quiet, scores(quiet, 4)) if v >= 0.5]
    assert len(wrong) <= len(quiet) // 10, (wrong, len(quiet))


def test_builtin_spec_is_the_prompt_set(check_scorers, builtin_scorer):
    scorer = builtin_scorer
    frames, _, _ = _episode(6, 90_010)
    clips = torch.stack([torch.stack(frames[t : t + 6]) for t in range(0, len(frames) - 6, 2)])
    td = TensorDict(pixels=clips, mask=torch.ones(clips.shape[:2], dtype=torch.bool), batch_size=clips.shape[:2])
    expected = torch.stack([s.score(td) for s in check_scorers]).max(0).values
    torch.testing.assert_close(scorer.score(td), expected, atol=1e-5, rtol=0)
    assert scorer.provenance["backend"] == "clip"


def test_goal_only_spec_scores_the_goal_check_alone(check_scorers, builtin_scorer):
    """builtin:minigrid_goal: the same model, the goal check alone (the VLM-RB paper's labels): a clip around
    the key pickup scores high with builtin:minigrid and low with the goal-only set; the goal clip high with both."""
    goal_only = make_scorer("builtin:minigrid_goal")
    frames, _, events = _episode(6, 90_002)
    starts = [max(0, events[name] - 3) for name in ("key_picked_up", "goal_reached")]
    clips = _clips_at(frames, starts, 5)
    key_clip, goal_clip = goal_only.score(clips).tolist()
    assert key_clip < 0.5 < goal_clip
    assert builtin_scorer.score(clips).tolist()[0] > 0.5
    torch.testing.assert_close(goal_only.score(clips), check_scorers[2].score(clips), atol=1e-5, rtol=0)


def _clips_at(frames, starts, length):
    clips = torch.stack([torch.stack(frames[t : t + length]) for t in starts])
    return TensorDict(pixels=clips, mask=torch.ones(clips.shape[:2], dtype=torch.bool), batch_size=clips.shape[:2])


def test_rise_sees_an_event_undone_within_the_clip():
    """A key picked up and put back within one clip (the frame after the pickup, then the frame
    before it again: what dropping it in place renders): ``progress`` (last - first) misses it,
    ``rise`` (the best gain to a later frame) sees it. A prompt set of the same checks agrees."""
    from vlmrb_torchrl.scorers import PromptCheck

    frames, states, events = _episode(8, 90_003)
    step = events["key_picked_up"]  # frames[step] is before the pickup, frames[step + 1] after it
    assert states[step].carrying is None and states[step + 1].carrying == ("yellow", "key")
    clip = _clips([frames[max(0, step - 1)], frames[step], frames[step + 1], frames[step]])
    texts = {"prompt": "the agent holds the key", "negatives": ["the key is on the floor"]}
    scores = {agg: make_scorer("builtin:minigrid", aggregation=agg, **texts).score(clip).item()
              for agg in ("progress", "rise")}
    assert scores["progress"] < 0.1 and scores["rise"] > 0.9, scores
    checks = [PromptCheck(texts["prompt"], texts["negatives"], agg) for agg in ("progress", "rise")]
    both = make_scorer("builtin:minigrid", prompt_set=checks).score(clip).item()
    assert both == pytest.approx(max(scores.values()), abs=1e-6)


def test_builtin_scorer_errors():
    with pytest.raises(ValueError, match="builtin:minigrid"):
        make_scorer("builtin:tetris")
    with pytest.raises(ValueError, match="needs negatives"):
        make_scorer("builtin:minigrid", prompt="the agent holds the red ball")


def test_dqn_default_scorer_is_builtin():
    from vlmrb_torchrl.recipes.config import DQNConfig, SACConfig

    from vlmrb_torchrl.recipes.config import ConfigError, apply_overrides

    # scorer=auto: the env's built-in scorer, resolved by validate() (config.json records the resolved spec)
    assert DQNConfig().scorer == "auto" and DQNConfig().validate().scorer == "builtin:minigrid"
    assert SACConfig().validate().scorer == "builtin:lift"
    for env in ("ALE/Pong-v5", "ALE/Breakout-v5"):
        assert apply_overrides(DQNConfig(), [f"env={env}"]).validate().scorer == "builtin:atari"
    with pytest.raises(ConfigError, match="scorer='builtin:minigrid' is invalid: expected a scorer for Atari envs \\(builtin:atari, oracle:atari"):
        apply_overrides(DQNConfig(), ["env=ALE/Pong-v5", "scorer=builtin:minigrid"]).validate()
    with pytest.raises(ConfigError, match="scorer='oracle:atari' is invalid: expected a scorer for MiniGrid or BabyAI envs"):
        apply_overrides(DQNConfig(), ["scorer=oracle:atari"]).validate()  # MiniGrid
    # a game no built-in model knows: the family's oracle, said in one line (it is privileged)
    assert apply_overrides(DQNConfig(), ["env=ALE/Tennis-v5"]).validate().scorer == "oracle:atari"
    with pytest.raises(ConfigError, match="env='ALE/Tenis-v5' is invalid: .*did you mean 'ALE/Tennis-v5'"):
        apply_overrides(DQNConfig(), ["env=ALE/Tenis-v5"]).validate()  # the env is blamed, not the scorer
    with pytest.raises(ConfigError, match="scorer='builtin:atari' is invalid: expected a scorer for this game"):
        apply_overrides(DQNConfig(), ["env=ALE/Tennis-v5", "scorer=builtin:atari"]).validate()
    apply_overrides(DQNConfig(), ["env=ALE/Tennis-v5", "scorer=oracle:atari"]).validate()
    apply_overrides(DQNConfig(), ["env=ALE/Tennis-v5", "replay=uniform"]).validate()  # no scorer used


def _one_lift_frame():
    """A one-frame Lift FrameSet (what ``Domain.describe`` reads)."""
    import numpy as np

    from vlmrb_torchrl.envs.robosuite.policies import LiftState
    from vlmrb_torchrl.envs.robosuite import training as lift
    from vlmrb_torchrl.scorer_training.domains import FrameSet

    state = LiftState(gripper_open=True, near=False, grasped=False, lifted=False)
    return FrameSet([np.zeros((4, 4, 3), np.uint8)], [state], np.zeros(1, np.int64), np.zeros(1, np.int64),
                    list(lift.LIFT_EPISODE_KINDS))


def test_lift_frames_come_with_their_states_and_progress_lines():
    """``generate_lift_frames``: every frame of an episode with its simulator state; a build's ~19 minutes of
    rendering print a progress line every ``log_every`` frames and at the end."""
    pytest.importorskip("robosuite")
    from vlmrb_torchrl.envs.robosuite.policies import LiftState
    from vlmrb_torchrl.envs.robosuite import training as lift

    lines = []
    data = lift.generate_lift_frames(25, seed=0, episode_steps=(9, 9), log=lines.append, log_every=20)
    assert len(data) == 25 and data.frames[0].shape == (64, 64, 3) and data.frames[0].std() > 10
    assert data.episode.tolist() == [0] * 10 + [1] * 10 + [2] * 5  # the reset frame and 9 steps per episode
    assert all(isinstance(s, LiftState) for s in data.states)
    assert [line.split(" (")[0] for line in lines] == ["lift frames: 20/25", "lift frames: 25/25"]
    assert "3 episodes" in lines[-1]
    with pytest.raises(ValueError, match="log_every must be an int >= 1"):
        lift.generate_lift_frames(5, log_every=0)


def test_lift_domain_miss_share_reaches_the_frames_and_the_record(monkeypatch):
    """``lift_domain(miss_share=...)``: the episodes' share of grasps aimed beside the cube, passed to the frame
    generator, recorded in ``training.json`` and in the frame cache's name (the default keeps the shipped name)."""
    from vlmrb_torchrl.envs.robosuite import training as lift
    from vlmrb_torchrl.envs.robosuite.domain import lift_domain
    from vlmrb_torchrl.scorer_training.domains import get_domain

    seen = {}
    monkeypatch.setattr(lift, "generate_lift_frames", lambda n, **kw: seen.update(kw) or "frames")
    domain = lift_domain(miss_share=0.5)
    assert domain.generate(10, seed=3) == "frames" and seen["miss_share"] == 0.5 and seen["seed"] == 3
    assert domain.frames_tag == "front_close-fast-miss0.5" and get_domain("lift").frames_tag == "front_close-fast"
    data = _one_lift_frame()
    assert domain.describe(data)["episode_kinds"]["miss_share"] == 0.5
    assert get_domain("lift").describe(data)["episode_kinds"]["miss_share"] == 0.2
    with pytest.raises(ValueError, match="miss_share must be in"):
        lift_domain(miss_share=1.5)


def test_lift_domain_edge_share_reaches_the_frames_and_the_record(monkeypatch):
    """``lift_domain(edge_share=...)``: the share of scripted episodes aiming at the cube's edge, passed to the
    frame generator and recorded; ``0`` gives the frames (and the cache name) of the builds before edge aims."""
    from vlmrb_torchrl.envs.robosuite import training as lift
    from vlmrb_torchrl.envs.robosuite.domain import LIFT_EDGE_SHARE, lift_domain
    from vlmrb_torchrl.scorer_training.domains import get_domain

    seen = {}
    monkeypatch.setattr(lift, "generate_lift_frames", lambda n, **kw: seen.update(kw) or "frames")
    assert get_domain("lift").generate(10, seed=3) == "frames" and seen["edge_share"] == LIFT_EDGE_SHARE == 0.0
    assert lift_domain(edge_share=0.2).generate(10, seed=3) == "frames" and seen["edge_share"] == 0.2
    assert lift_domain(edge_share=0.2).frames_tag == "front_close-fast-edge0.2"
    assert lift_domain(edge_share=0.35).frames_tag == "front_close-fast-edge0.35"
    data = _one_lift_frame()
    kinds = lift_domain(edge_share=0.35).describe(data)["episode_kinds"]
    assert kinds["edge_share"] == 0.35 and kinds["kinds"][-1] == "Lift/edge"
    def card(kinds, config=None):
        return lift_domain().card_data({"frames": {"train": 1, "val": 1, "episodes": 1}, "statement_shares": {},
                                        "episode_kinds": kinds, "config": config or {}})

    assert "35% aim 1-2 cm off its centre" in card(kinds)
    assert "auxiliary" not in card(kinds)  # the card names the image tower's auxiliary head only when it trained
    assert "auxiliary cross-entropy, weight 1," in card(kinds, {"aux_weight": 1.0})
    assert "off its centre" not in card(get_domain("lift").describe(data)["episode_kinds"])  # the shipped: none
    assert "off its centre" not in card({k: v for k, v in kinds.items() if k != "edge_share"})  # older records
    with pytest.raises(ValueError, match="edge_share must be >= 0 with miss_share"):
        lift_domain(edge_share=0.9)
    with pytest.raises(ValueError, match="edge_share must be >= 0"):
        lift_domain(edge_share=-0.1)


def test_lift_policy_edge_aims_take_scripted_episodes_only():
    """``LiftPolicy(edge_share=...)``: edge episodes are drawn out of the scripted ones and aim 1-2 cm off the
    cube's centre; ``edge_share=0`` draws exactly as the policy did before edge aims (the frames of the builds
    before them, and the scorer-quality benchmark's episodes, stay the same). No env is needed to draw plans."""
    import numpy as np

    from vlmrb_torchrl.envs.robosuite.policies import LiftPolicy

    def plans(policy, n=2000):
        out = [(policy.mode, policy._plan["offset"], policy._plan["noise"])]  # the plan drawn at construction
        for _ in range(n):
            policy.reset()
            out.append((policy.mode, policy._plan["offset"], policy._plan["noise"]))
        return out

    def plans_before_edge_aims(seed, n=2000):  # the draws of the policy before edge_share existed
        rng, out = np.random.default_rng(seed), []
        for _ in range(n + 1):
            mode = "random" if rng.random() < 0.2 else "scripted"
            if mode == "scripted" and rng.random() < 0.2:
                mode = "miss"
            if mode == "miss":
                angle, radius = rng.uniform(0, 2 * np.pi), rng.uniform(0.02, 0.04)
                offset = np.array([radius * np.cos(angle), radius * np.sin(angle), 0.0])
            else:
                offset = np.append(rng.normal(0.0, 0.004, 2), 0.0)
            out.append((mode, offset, float(rng.choice((0.0, 0.1, 0.3)))))
        return out

    plain = plans(LiftPolicy(None, seed=7))
    for (m0, o0, n0), (m1, o1, n1) in zip(plain, plans_before_edge_aims(7), strict=True):
        assert m0 == m1 and np.array_equal(o0, o1) and n0 == n1
    edged = plans(LiftPolicy(None, seed=7, edge_share=0.3))
    counts = {m: sum(m == mode for mode, _, _ in edged) for m in ("scripted", "miss", "edge", "random")}
    # of 2,001 plans: random 0.2; of the others miss 0.2, edge 0.3, scripted 0.5 (sd of each count < 20)
    expected = {"random": 0.2, "miss": 0.8 * 0.2, "edge": 0.8 * 0.3, "scripted": 0.8 * 0.5}
    assert all(abs(counts[m] - 2001 * p) < 4 * np.sqrt(2001 * p * (1 - p)) for m, p in expected.items()), counts
    radii = np.array([np.hypot(*o[:2]) for m, o, _ in edged if m == "edge"])
    assert radii.min() >= 0.01 and radii.max() <= 0.02 and radii.std() > 0.002
    assert all(o[2] == 0.0 for _, o, _ in edged)
    for bad in ({"edge_share": -0.1}, {"edge_share": 0.9}, {"miss_share": -0.2}):
        with pytest.raises(ValueError, match="miss_share and edge_share must be >= 0 with a sum <= 1"):
            LiftPolicy(None, **bad)


def test_lift_domain_camera_reaches_the_frames_and_the_record(monkeypatch):
    """``lift_domain(camera=...)``: the camera the frames are rendered from, passed to the frame generator and
    recorded in ``training.json`` and the frame cache's name; the default is the front camera, the left panel of
    the SAC recipe's scorer frames (``lift_hand``: the gripper's camera, the right one)."""
    import dataclasses

    from vlmrb_torchrl.envs.robosuite.env import ROBOSUITE_VIEWS
    from vlmrb_torchrl.envs.robosuite import LIFT_PANEL_CAMERAS
    from vlmrb_torchrl.envs.robosuite import training as lift
    from vlmrb_torchrl.envs.robosuite.domain import lift_domain
    from vlmrb_torchrl.scorer_training.domains import get_domain

    seen = {}
    monkeypatch.setattr(lift, "generate_lift_frames", lambda n, **kw: seen.update(kw) or "frames")
    assert ROBOSUITE_VIEWS["front_close_narrow"] == dataclasses.replace(ROBOSUITE_VIEWS["front_close"], fovy=30.0)
    domain = lift_domain(camera="front_close_narrow")
    assert domain.generate(10, seed=3) == "frames" and seen["camera"] == "front_close_narrow"
    assert domain.frames_tag == "front_close_narrow-fast"
    data = _one_lift_frame()
    assert domain.describe(data)["frames_rendered"]["camera"] == "front_close_narrow"
    assert lift_domain(camera="front_side_close").frames_tag == "front_side_close-fast"  # a SplitView of two cameras
    lift_domain().generate(10, seed=3)
    assert seen["camera"] == LIFT_PANEL_CAMERAS[0] == "front_close"
    get_domain("lift_hand").generate(10, seed=3)
    assert seen["camera"] == LIFT_PANEL_CAMERAS[1] == "robot0_eye_in_hand"
