"""The scorer core: protocol, validation, registry, oracle and noisy scorers, the contract helper itself."""

from __future__ import annotations

import importlib.util
import sys
import threading

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl.scorers import (
    CallableScorer,
    NoisyScorer,
    OracleScorer,
    Scorer,
    check_clips,
    make_scorer,
    prompt_hash,
    register_scorer,
    registered_scorer_forms,
    scorer_factory,
    spec_loads_code,
    validate_scores,
)
from vlmrb_torchrl.scorers import base as scorers_base

from vlmrb_torchrl.testing import B, T, ScorerContract, make_clips

from ._shared import mean_pixel_score

_has_minigrid = importlib.util.find_spec("minigrid") is not None and importlib.util.find_spec("gymnasium") is not None


@pytest.fixture
def tiny_clips():
    return make_clips()


@pytest.fixture
def clean_registry():
    before = dict(scorers_base._REGISTRY)
    yield
    scorers_base._REGISTRY.clear()
    scorers_base._REGISTRY.update(before)


@scorer_factory
def mean_pixel_factory(prompt: str = "factory"):
    return CallableScorer(mean_pixel_score, prompt=prompt, name="from_factory")


def unmarked_factory(prompt: str = "factory"):
    """A function without a clips argument and without the factory mark: called only when named with ()."""
    CALLED.append(prompt)
    return CallableScorer(mean_pixel_score, prompt=prompt, name="named_factory")


CALLED: list = []


class FitScorer:
    """A class with an estimator's score(X, y) (scikit-learn's): not a Scorer class, never instantiated."""

    def __init__(self, **kwargs):
        CALLED.append(kwargs)

    def score(self, X, y):
        return 0.0


class HalfScorer:
    def __init__(self, value: float = 0.5):
        self.prompt = "half"
        self.in_keys = ["mask"]
        self.provenance = {"backend": "test", "prompt_hash": prompt_hash(self.prompt)}
        self.value = value

    def score(self, clips):
        return torch.full((clips.batch_size[0],), self.value)


HALF_SCORER = HalfScorer(0.25)


# ---------------------------------------------------------------------------- helpers
class TestHelpers:
    def test_prompt_hash(self):
        h = prompt_hash("Does this clip show the agent opening the door?")
        # pinned: checkpoints store this hash and resumed runs compare it, so it must never change
        assert h == "6729f0bfee97caac"
        assert prompt_hash("") == "e3b0c44298fc1c14"  # SHA-256 of the empty string, first 16 hex digits
        assert h == prompt_hash("Does this clip show the agent opening the door?")
        assert h != prompt_hash("Does this clip show the agent opening the door")
        with pytest.raises(TypeError, match="str"):
            prompt_hash(3)

    @pytest.mark.parametrize(
        "scores, expected",
        [
            ([0, 1, 0.5], [0.0, 1.0, 0.5]),
            (np.array([0.25, 0.75, 1.0]), [0.25, 0.75, 1.0]),
            (torch.tensor([True, False, True]), [1.0, 0.0, 1.0]),
            (torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64), [0.5, 0.5, 0.5]),
        ],
    )
    def test_validate_scores_accepts(self, scores, expected):
        out = validate_scores(scores, 3)
        assert out.dtype == torch.float32 and out.tolist() == expected

    @pytest.mark.parametrize(
        "scores, error, match",
        [
            (torch.zeros(3, 1), ValueError, r"shape \[3, 1\]; expected one score per clip, shape \[B\]=\[3\]"),
            (torch.zeros(4), ValueError, r"shape \[4\]"),
            (torch.tensor(0.5), ValueError, r"shape \[\]"),
            (torch.tensor([0.1, float("nan"), 0.2]), ValueError, r"non-finite scores .* indices \[1\]"),
            (torch.tensor([0.1, 0.2, float("inf")]), ValueError, r"non-finite scores .* indices \[2\]"),
            (torch.tensor([0.1, 1.2, 0.2]), ValueError, r"outside \[0, 1\] \(min=0.1, max=1.2\)"),
            (torch.tensor([-0.5, 0.0, 0.2]), ValueError, r"outside \[0, 1\] \(min=-0.5"),
            (["a", "b", "c"], TypeError, "must return numbers .*got text"),
            (torch.zeros(3, dtype=torch.complex64), TypeError, "real-valued"),
        ],
    )
    def test_validate_scores_rejects(self, scores, error, match):
        with pytest.raises(error, match=match):
            validate_scores(scores, 3, scorer="my_scorer")
        with pytest.raises(error, match="^my_scorer"):
            validate_scores(scores, 3, scorer="my_scorer")

    def test_validate_scores_batch_from_clips(self, tiny_clips):
        assert validate_scores(torch.zeros(B), tiny_clips).shape == (B,)
        with pytest.raises(ValueError, match=rf"\[B\]=\[{B}\]"):
            validate_scores(torch.zeros(B + 1), tiny_clips)

    def test_check_clips(self, tiny_clips):
        assert check_clips(tiny_clips, ["pixels", ("next", "progress_event")]) == B
        with pytest.raises(TypeError, match="TensorDict"):
            check_clips({"pixels": torch.zeros(1)}, ["pixels"], scorer="S")
        with pytest.raises(KeyError, match=r"S needs \['depth'\] in its clips; found \[.*'mask'.*\]"):
            check_clips(tiny_clips, ["depth"], scorer="S")


# ------------------------------------------------------------------------------- oracle
class TestOracleScorer(ScorerContract):
    def make_scorer(self):
        return OracleScorer()

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"events_key": 3}, TypeError, "events_key must be a str or a tuple of str"),
            ({"mask_key": ("a", 1)}, TypeError, "mask_key must be a str or a tuple of str"),
            ({"prompt": None}, TypeError, "prompt must be a str"),
        ],
    )
    def test_construction_errors(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            OracleScorer(**kwargs)

    @pytest.mark.parametrize("key", ["", (), ("next", ""), ("a", 1)])
    def test_keys_naming_no_entry_rejected(self, key):
        # the rule ClipStream applies too (vlmrb_torchrl._keys.is_nested_key)
        with pytest.raises(TypeError, match="events_key must be a str or a tuple of str"):
            OracleScorer(key)

    def test_nested_tuple_key(self):
        events = torch.tensor([[0, 1], [0, 0]], dtype=torch.bool)
        clips = TensorDict({("next", "a", "ev"): events, "mask": torch.ones(2, 2, dtype=torch.bool)}, batch_size=[2, 2])
        assert OracleScorer(("next", ("a", "ev"))).score(clips).tolist() == [1.0, 0.0]

    def test_in_keys_and_provenance(self):
        scorer = OracleScorer("success", prompt="p")
        assert scorer.in_keys == ["success", "mask"]
        assert scorer.provenance == {
            "backend": "oracle",
            "events_key": "success",
            "prompt_hash": prompt_hash("p"),
            "dtype": "bool",
        }

    def test_scores_events(self):
        events = torch.zeros(4, 3, dtype=torch.bool)
        events[0, 0] = True  # first step
        events[1, 2] = True  # last step
        events[3, 1] = events[3, 2] = True  # two events: still 1.0
        clips = make_clips(4, 3, events=events)
        assert OracleScorer().score(clips).tolist() == [1.0, 1.0, 0.0, 1.0]
        assert OracleScorer("success").score(clips).tolist() == [1.0, 1.0, 0.0, 1.0]

    def test_padded_steps_ignored(self):
        events = torch.tensor([[0, 0, 1], [0, 1, 1], [1, 0, 0], [0, 0, 1]], dtype=torch.bool)
        mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.bool)
        clips = make_clips(4, 3, events=events, mask=mask)
        # clip 0: event only on padding; clip 1: only on padding; clip 2: on a real step
        assert OracleScorer().score(clips).tolist() == [0.0, 0.0, 1.0, 1.0]

    def test_integer_events_and_trailing_dims(self):
        events = torch.tensor([[0, 2], [0, 0]], dtype=torch.int64).view(2, 2, 1, 1).expand(2, 2, 1, 3)
        clips = TensorDict(ev=events, mask=torch.ones(2, 2, dtype=torch.bool), batch_size=[2, 2])
        assert OracleScorer("ev").score(clips).tolist() == [1.0, 0.0]

    def test_bad_shapes(self):
        clips = TensorDict(ev=torch.zeros(2, 3), mask=torch.ones(2, 3, 1, dtype=torch.bool), batch_size=[2, 3])
        with pytest.raises(ValueError, match=r"'mask' of shape \[B, T\]=\[2, 3\], got \[2, 3\] and \[2, 3, 1\]"):
            OracleScorer("ev").score(clips)

    @pytest.mark.skipif(not _has_minigrid, reason="needs minigrid")
    @pytest.mark.parametrize("clip_len", [1, 4, 8])
    def test_scripted_minigrid_episode(self, clip_len):
        steps, actions, expected = _scripted_doorkey_episode()(0, loops=True, render=True)
        n = len(actions)
        event_steps = sorted({i for idx in expected.values() for i in idx})
        clips = _windows(steps, clip_len)
        assert clips.batch_size == (n, clip_len)
        scores = OracleScorer().score(clips)
        want = [float(any(i <= e < i + clip_len for e in event_steps)) for i in range(n)]
        assert scores.tolist() == want
        assert sum(want) == 3 if clip_len == 1 else 3 < sum(want) <= n
        # the registered spec reads the same key
        assert make_scorer("oracle:minigrid").score(clips).tolist() == want
        # success only: just the windows that contain the final step
        success = OracleScorer(("next", "success")).score(clips).tolist()
        assert success == [float(i + clip_len > n - 1) for i in range(n)]


def _scripted_doorkey_episode():
    try:
        from test_minigrid_env import scripted_doorkey_episode
    except ImportError:  # tests/ imported as a package
        from tests.test_minigrid_env import scripted_doorkey_episode
    return scripted_doorkey_episode


def _windows(steps: TensorDict, clip_len: int) -> TensorDict:
    """Clips starting at every step (stride 1); the tail is padded with the last step, mask False."""
    n = steps.shape[0]
    start = torch.arange(n).unsqueeze(1)
    offset = torch.arange(clip_len).unsqueeze(0)
    index = start + offset
    mask = index < n
    clips = steps[index.clamp(max=n - 1)]
    clips.set("mask", mask)
    return clips.select("mask", ("next", "pixels"), ("next", "progress_event"), ("next", "success"))


# ----------------------------------------------------------------------------- callable
class TestCallableScorer(ScorerContract):
    def make_scorer(self):
        return CallableScorer(mean_pixel_score, prompt="bright?")

    def test_not_callable(self):
        with pytest.raises(TypeError, match="needs a callable fn"):
            CallableScorer(3)

    def test_prompt_type(self):
        with pytest.raises(TypeError, match="prompt must be a str"):
            CallableScorer(mean_pixel_score, prompt=1)

    def test_scores_are_the_function_output(self, tiny_clips):
        s = CallableScorer(mean_pixel_score).score(tiny_clips)
        torch.testing.assert_close(s, torch.arange(B, dtype=torch.float32) * 10 / 255)

    def test_in_keys_checked_before_call(self, tiny_clips):
        calls = []
        scorer = CallableScorer(lambda c: calls.append(1) or torch.zeros(B), in_keys=["depth"], name="depth_fn")
        with pytest.raises(KeyError, match=r"depth_fn needs \['depth'\]"):
            scorer.score(tiny_clips)
        assert not calls
        assert CallableScorer(mean_pixel_score, in_keys="pixels").in_keys == ["pixels"]

    def test_json_lists_are_nested_keys(self):
        """scorer_kwargs on the command line is JSON: a nested key arrives as a list (issue 63)."""
        scorer = CallableScorer(mean_pixel_score, in_keys=[["next", "reward"], "mask"])
        assert scorer.in_keys == [("next", "reward"), "mask"]

    def test_reading_an_undeclared_entry_is_one_line_naming_it_and_the_fix(self, tiny_clips):
        from vlmrb_torchrl.scorers import ScorerInputError

        scorer = CallableScorer(lambda c: c["next", "reward"].sum((1, 2)), name="rewarded")  # in_keys: pixels
        with pytest.raises(ScorerInputError) as info:
            scorer.score(tiny_clips)
        message = str(info.value)
        assert "\n" not in message and message.startswith('rewarded read an entry its clips do not carry (')
        assert "default ('pixels',)" in message and '"in_keys": [["next", "reward"], "mask"]' in message
        assert isinstance(info.value, KeyError)  # what the contract promised before

    def test_a_key_error_inside_the_function_for_other_reasons_is_reported_too(self, tiny_clips):
        def lookup(clips):
            return {"a": 1}["b"]

        with pytest.raises(KeyError, match="lookup.*do not carry"):
            CallableScorer(lookup).score(tiny_clips)

    @pytest.mark.parametrize(
        "output, error, match",
        [
            (lambda c: torch.zeros(B, 1), ValueError, rf"bad_fn returned scores of shape \[{B}, 1\]"),
            (lambda c: torch.zeros(B - 1), ValueError, rf"shape \[{B - 1}\]; expected .* \[B\]=\[{B}\]"),
            (lambda c: torch.full((B,), float("nan")), ValueError, r"bad_fn returned non-finite"),
            (lambda c: torch.full((B,), 2.0), ValueError, r"bad_fn returned scores outside \[0, 1\]"),
            (lambda c: torch.full((B,), -0.1), ValueError, r"bad_fn returned scores outside \[0, 1\]"),
            (lambda c: None, TypeError, r"bad_fn must return a float tensor"),
            (lambda c: "yes", TypeError, r"bad_fn must return numbers .*got text"),
        ],
    )
    def test_output_validation(self, tiny_clips, output, error, match):
        with pytest.raises(error, match=match):
            CallableScorer(output, name="bad_fn").score(tiny_clips)

    def test_array_and_bool_outputs(self, tiny_clips):
        assert CallableScorer(lambda c: np.ones(B)).score(tiny_clips).tolist() == [1.0] * B
        s = CallableScorer(lambda c: c["success"].any(-1)).score(tiny_clips)
        assert s.dtype == torch.float32 and s.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]

    def test_provenance(self):
        scorer = CallableScorer(mean_pixel_score, prompt="bright?")
        assert scorer.provenance["backend"] == "python"
        assert scorer.provenance["callable"] == f"{mean_pixel_score.__module__}.mean_pixel_score"
        assert scorer.provenance["prompt_hash"] == prompt_hash("bright?")
        assert scorer.name == "CallableScorer(mean_pixel_score)"


# ------------------------------------------------------------------------------- noisy
class TestNoisyScorer(ScorerContract):
    def make_scorer(self):
        return NoisyScorer(OracleScorer(), flip_prob=0.3, noise_std=0.1, seed=1)

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"flip_prob": -0.1}, ValueError, r"flip_prob must be in \[0, 1\], got flip_prob=-0.1"),
            ({"flip_prob": 1.5}, ValueError, r"flip_prob must be in \[0, 1\], got flip_prob=1.5"),
            ({"flip_prob": float("nan")}, ValueError, r"flip_prob must be in \[0, 1\]"),
            ({"flip_prob": "0.1"}, TypeError, "flip_prob must be a float"),
            ({"flip_prob": True}, TypeError, "flip_prob must be a float"),
            ({"noise_std": -1.0}, ValueError, r"noise_std must be a finite float >= 0, got noise_std=-1.0"),
            ({"noise_std": float("inf")}, ValueError, "noise_std must be a finite float >= 0"),
            ({"seed": 1.5}, TypeError, "seed must be an int"),
        ],
    )
    def test_construction_errors(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            NoisyScorer(OracleScorer(), **kwargs)

    def test_wraps_only_scorers(self):
        with pytest.raises(TypeError, match="NoisyScorer wraps a Scorer"):
            NoisyScorer(mean_pixel_score)

    def test_identity_without_noise(self, tiny_clips):
        s = NoisyScorer(OracleScorer()).score(tiny_clips)
        assert s.tolist() == OracleScorer().score(tiny_clips).tolist()

    @pytest.mark.parametrize("flip_prob", [0.05, 0.2, 0.5])
    def test_flip_rate(self, flip_prob):
        n = 20_000
        clips = make_clips(n, 2, events=torch.ones(n, 2, dtype=torch.bool))
        s = NoisyScorer(OracleScorer(), flip_prob=flip_prob, seed=3).score(clips)
        assert set(s.unique().tolist()) <= {0.0, 1.0}
        flipped = int((s == 0).sum())
        mean, sd = n * flip_prob, (n * flip_prob * (1 - flip_prob)) ** 0.5
        assert abs(flipped - mean) < 5 * sd, (flipped, mean, sd)
        # and flips act both ways: an all-zero batch gets ones at the same rate
        clips0 = make_clips(n, 2, events=torch.zeros(n, 2, dtype=torch.bool))
        ones = int(NoisyScorer(OracleScorer(), flip_prob=flip_prob, seed=4).score(clips0).sum())
        assert abs(ones - mean) < 5 * sd

    def test_deterministic_for_a_seed(self):
        clips = make_clips(200, 2)
        a = NoisyScorer(OracleScorer(), flip_prob=0.3, noise_std=0.2, seed=11)
        b = NoisyScorer(OracleScorer(), flip_prob=0.3, noise_std=0.2, seed=11)
        c = NoisyScorer(OracleScorer(), flip_prob=0.3, noise_std=0.2, seed=12)
        runs_a = [a.score(clips) for _ in range(3)]
        runs_b = [b.score(clips) for _ in range(3)]
        for x, y in zip(runs_a, runs_b):
            assert torch.equal(x, y)
        assert not torch.equal(runs_a[0], runs_a[1])  # the generator advances between calls
        assert not torch.equal(runs_a[0], c.score(clips))

    def test_gaussian_noise(self):
        n = 20_000
        base = CallableScorer(lambda c: torch.full((c.batch_size[0],), 0.5), in_keys=["mask"])
        s = NoisyScorer(base, noise_std=0.1, seed=0).score(make_clips(n, 1))
        assert abs(s.mean().item() - 0.5) < 0.005
        assert abs(s.std().item() - 0.1) < 0.005
        wide = NoisyScorer(base, noise_std=5.0, seed=0).score(make_clips(n, 1))
        assert wide.min() == 0 and wide.max() == 1  # clipped to [0, 1]

    def test_provenance(self):
        inner = OracleScorer(prompt="p")
        noisy = NoisyScorer(inner, flip_prob=0.1, noise_std=0.05, seed=7)
        assert noisy.provenance == {
            "backend": "noisy",
            "flip_prob": 0.1,
            "noise_std": 0.05,
            "seed": 7,
            "prompt_hash": prompt_hash("p"),
            "wrapped": inner.provenance,
        }
        assert noisy.prompt == "p" and noisy.in_keys == inner.in_keys

    def test_concurrent_calls_consume_disjoint_draws(self):
        # each call draws its block under the lock: threaded results are a permutation of a
        # sequential run with the same seed
        clips = make_clips(64, 2)
        sequential = NoisyScorer(OracleScorer(), flip_prob=0.5, seed=5)
        expected = sorted(tuple(sequential.score(clips).tolist()) for _ in range(40))
        threaded = NoisyScorer(OracleScorer(), flip_prob=0.5, seed=5)
        results = []
        lock = threading.Lock()

        def work():
            for _ in range(10):
                r = tuple(threaded.score(clips).tolist())
                with lock:
                    results.append(r)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == expected


# ---------------------------------------------------------------------------- registry
class TestMakeScorer:
    def test_oracle_minigrid(self):
        scorer = make_scorer("oracle:minigrid")
        assert isinstance(scorer, OracleScorer)
        assert scorer.events_key == ("next", "progress_event")
        assert make_scorer("oracle:minigrid", events_key=("next", "success")).events_key == ("next", "success")

    def test_oracle_minigrid_goal_reads_only_the_goal_flag(self):
        scorer = make_scorer("oracle:minigrid_goal")
        assert scorer.events_key == ("next", "goal_reached")
        events = {name: torch.zeros(3, 4, 1, dtype=torch.bool) for name in ("progress_event", "goal_reached")}
        events["progress_event"][0, 1] = events["progress_event"][1, 2] = True  # a key pickup, then the goal
        events["goal_reached"][1, 2] = True
        clips = TensorDict({**{("next", k): v for k, v in events.items()}, "mask": torch.ones(3, 4, dtype=torch.bool)},
                           batch_size=[3, 4])
        assert scorer.score(clips).tolist() == [0.0, 1.0, 0.0]
        assert make_scorer("oracle:minigrid").score(clips).tolist() == [1.0, 1.0, 0.0]

    def test_unknown_oracle(self):
        with pytest.raises(ValueError, match=r"Unknown oracle scorer 'oracle:tetris'. Valid forms: 'oracle:minigrid'"):
            make_scorer("oracle:tetris")

    def test_oracle_atari_reads_positive_rewards(self):
        scorer = make_scorer("oracle:atari")
        assert scorer.events_key == ("next", "progress_event")  # AtariEnv / BatchedAtariEnv: raw_reward > 0
        events = torch.zeros(3, 4, 1, dtype=torch.bool)
        events[0, 3] = events[2, 0] = True
        mask = torch.ones(3, 4, dtype=torch.bool)
        mask[0, 3] = False  # an event on a padded step does not count
        clips = TensorDict({("next", "progress_event"): events, "mask": mask}, batch_size=[3, 4])
        assert scorer.score(clips).tolist() == [0.0, 0.0, 1.0]

    def test_python_function(self, tiny_clips):
        scorer = make_scorer(f"python:{mean_pixel_score.__module__}:mean_pixel_score", prompt="bright?")
        assert isinstance(scorer, CallableScorer)
        assert scorer.prompt == "bright?"
        torch.testing.assert_close(scorer.score(tiny_clips), mean_pixel_score(tiny_clips))

    def test_python_factory_class_and_instance(self):
        factory = make_scorer(f"python:{__name__}:mean_pixel_factory", prompt="from kwargs")  # @scorer_factory
        assert isinstance(factory, CallableScorer) and factory.name == "from_factory"
        assert factory.prompt == "from kwargs"
        named = make_scorer(f"python:{__name__}:unmarked_factory()", prompt="named")  # named as a factory
        assert named.name == "named_factory" and CALLED[-1] == "named"
        cls = make_scorer(f"python:{__name__}:HalfScorer", value=0.75)
        assert isinstance(cls, HalfScorer) and cls.value == 0.75
        assert make_scorer(f"python:{__name__}:HALF_SCORER") is HALF_SCORER
        nested = make_scorer("python:vlmrb_torchrl.scorers:OracleScorer", events_key="success")  # a submodule's
        assert isinstance(nested, OracleScorer) and nested.events_key == "success"

    def test_python_dotted_attribute(self):
        scorer = make_scorer(f"python:{__name__}:TestMakeScorer.static_score")
        assert isinstance(scorer, CallableScorer)

    @staticmethod
    def static_score(clips):
        return torch.zeros(clips.batch_size[0])

    @pytest.mark.parametrize(
        "spec, error, match",
        [
            ("python:no_such_module_xyz:fn", ImportError, "cannot import module 'no_such_module_xyz'"),
            ("python:math:no_such_fn", ValueError, "module 'math' has no attribute 'no_such_fn'"),
            ("python:math", ValueError, r"is 'python:<module>:<callable>'"),
            ("python:math:pi", TypeError, "'pi' is a float, not a callable"),
            ("python:vlmrb_torchrl.scorers:registered_scorer_forms()", TypeError, "returned a list, not a Scorer"),
        ],
    )
    def test_python_errors(self, spec, error, match):
        with pytest.raises(error, match=match):
            make_scorer(spec)

    @pytest.mark.parametrize("spec, kwargs, match", [
        # issue 35: a class from the standard library, and a "factory" (no required positional argument) from it
        ("python:subprocess:Popen", {"shell": True}, "'Popen' is a class without score\\(clips\\), not a Scorer class"),
        ("python:subprocess:run", {"shell": True}, "'run' takes no clips argument, so it would be called as a "
                                                   "factory: name it as one \\(python:subprocess:run\\(\\)\\) or mark"),
        ("python:os:system", {}, "'system' is a builtin_function_or_method: a python: spec names a Scorer class"),
        # issue 64: any zero-argument callable of an installed package was called before the "not a Scorer" check
        ("python:torch.distributed.run:main", {}, "'main' takes no clips argument"),
        # ... and a spec could reach into a module the named one imports
        ("python:vlmrb_torchrl.scorers.base:os.system", {}, "'os.system' goes through the module 'os'"),
        ("python:vlmrb_torchrl.scorers.openai:json.loads", {}, "goes through the module 'json'"),
        ("python:vlmrb_torchrl.scorers.base:prompt_hash", {},
         "'prompt_hash' is defined in module 'vlmrb_torchrl.scorers._hashing', not in 'vlmrb_torchrl.scorers.base': "
         "a python: spec loads only what it names; name it where it is defined "
         "\\(python:vlmrb_torchrl.scorers._hashing:prompt_hash\\)"),
    ])
    def test_python_specs_are_checked_before_anything_is_called(self, tmp_path, spec, kwargs, match):
        witness = tmp_path / "ran"
        if "subprocess" in spec:
            kwargs = {"args": f"touch {witness}", **kwargs}
        if "torch.distributed" in spec:  # the probe: torchrun --no-python touch <witness>
            kwargs = {"args": ["--nproc_per_node=1", "--no-python", "touch", str(witness)]}
        with pytest.raises(TypeError, match=match + ".*nothing was called"):
            make_scorer(spec, **kwargs)
        assert not witness.exists()

    def test_python_classes_need_score_and_factories_their_arguments(self):
        built = []
        CALLED.clear()

        class NotAScorer:
            def __init__(self, **kwargs):
                built.append(kwargs)

        def factory(prompt: str = ""):
            built.append(prompt)
            return HalfScorer()

        module = sys.modules[__name__]
        module.NotAScorer, module.strict_factory = NotAScorer, factory
        NotAScorer.__module__ = factory.__module__ = __name__
        try:
            with pytest.raises(TypeError, match="'NotAScorer' is a class without score\\(clips\\).*nothing was called"):
                make_scorer(f"python:{__name__}:NotAScorer", shell=True)
            with pytest.raises(TypeError, match="'FitScorer' is a class whose score\\(\\) does not take one clips "
                                                "argument, not a Scorer class \\(nothing was called\\)"):
                make_scorer(f"python:{__name__}:FitScorer", shell=True)
            with pytest.raises(TypeError, match="factory strict_factory\\(\\) takes no keyword argument 'shell'; it "
                                                "takes: prompt"):
                make_scorer(f"python:{__name__}:strict_factory()", shell=True)
            with pytest.raises(TypeError, match="'strict_factory' takes no clips argument"):
                make_scorer(f"python:{__name__}:strict_factory", prompt="p")
            with pytest.raises(TypeError, match="'mean_pixel_score' is named as a factory but has 1 required"):
                make_scorer(f"python:{mean_pixel_score.__module__}:mean_pixel_score()")
            with pytest.raises(TypeError, match="names a scorer instance; it takes no keyword arguments and is not "
                                                "a factory: drop the \\(\\)"):
                make_scorer(f"python:{__name__}:HALF_SCORER()")
            assert built == [] and CALLED == []
            assert isinstance(make_scorer(f"python:{__name__}:strict_factory()", prompt="p"), HalfScorer)
        finally:
            del module.NotAScorer, module.strict_factory
            CALLED.clear()

    def test_scorer_factory_marks_functions_only(self):
        with pytest.raises(TypeError, match="scorer_factory marks a function that returns a Scorer, got type"):
            scorer_factory(HalfScorer)
        assert spec_loads_code("python:m:f") and spec_loads_code("distill:python:m:f()")
        assert not spec_loads_code("builtin:minigrid") and not spec_loads_code(None)

    @pytest.mark.parametrize("returned, match", [
        (["yes", "no"], "must return numbers .*got text: \"\\['yes', 'no'\\]\""),
        (torch.zeros(2, device="meta"), "returned a tensor on the meta device \\(a shape without values\\)"),
    ])
    def test_scores_that_are_not_numbers_are_named(self, returned, match):
        # issue 35: a list of strings or a meta-device tensor got a message naming neither the scorer nor the problem
        from vlmrb_torchrl import VLMScoreTransform

        class Talkative:
            prompt, in_keys, provenance = "", ["pixels"], {"backend": "talkative"}

            def score(self, clips):
                return returned

        transform = VLMScoreTransform(Talkative(), clip_len=2, in_keys=["pixels"], final_frame=False)
        with pytest.raises(TypeError, match="Talkative.*" + match):
            transform.score_clips(make_clips(2, 2))

    def test_python_instance_rejects_kwargs(self):
        with pytest.raises(TypeError, match="names a scorer instance; it takes no keyword arguments"):
            make_scorer(f"python:{__name__}:HALF_SCORER", prompt="x")

    @pytest.mark.parametrize(
        "target, match",
        [
            ("mean_pixel_score", r"mean_pixel_score is a score function fn\(clips\), wrapped in CallableScorer, "
                                 r"which takes only prompt, in_keys, name; got 'threshold'"),
            ("mean_pixel_factory", r"factory mean_pixel_factory\(\) takes no keyword argument 'threshold'; "
                                   r"it takes: prompt\."),
            ("HalfScorer", r"class HalfScorer takes no keyword argument 'threshold'; it takes: value\."),
        ],
    )
    def test_python_unknown_keyword(self, target, match):
        """An unknown keyword names itself and what the target takes, before the target is called."""
        module = mean_pixel_score.__module__ if target == "mean_pixel_score" else __name__
        with pytest.raises(TypeError, match=match):
            make_scorer(f"python:{module}:{target}", threshold=0.5)

    def test_backend_unknown_keyword(self):
        with pytest.raises(TypeError, match=r"make_scorer\('oracle:minigrid'\): unknown keyword argument 'foo'"):
            make_scorer("oracle:minigrid", foo=1)

    def test_python_module_in_working_directory(self, tmp_path, monkeypatch):
        """``python:`` finds a module in the working directory, as ``python -m`` would (the ``vlmrb`` script's
        sys.path starts with its own bin directory, not the working directory)."""
        (tmp_path / "my_cwd_scorer_mod.py").write_text(
            "import torch\n"
            "def score(clips):\n"
            "    return torch.ones(clips.batch_size[0])\n")
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
        monkeypatch.delitem(sys.modules, "my_cwd_scorer_mod", raising=False)
        scorer = make_scorer("python:my_cwd_scorer_mod:score", in_keys=["mask"])
        assert scorer.provenance["callable"] == "my_cwd_scorer_mod.score"
        assert str(tmp_path) in sys.path  # kept: a "process" backend's child imports it too
        monkeypatch.delitem(sys.modules, "my_cwd_scorer_mod", raising=False)
        with pytest.raises(ImportError, match="nor in the working directory"):
            make_scorer("python:no_such_module_in_cwd_xyz:score")

    @pytest.mark.parametrize("spec", ["vlm:facebook/Perception-LM-1B", "minigrid", "", "unknown:thing"])
    def test_unknown_spec_lists_forms(self, spec):
        with pytest.raises(ValueError) as info:
            make_scorer(spec)
        msg = str(info.value)
        assert msg.startswith(f"Unknown scorer spec {spec!r}. Valid forms:")
        assert "'oracle:minigrid'" in msg and "'python:<module>:<callable>'" in msg

    def test_non_string_spec(self):
        with pytest.raises(TypeError, match="spec string"):
            make_scorer(3)

    def test_register_scorer(self, clean_registry, tiny_clips):
        seen = {}

        def factory(rest, **kwargs):
            seen["rest"], seen["kwargs"] = rest, kwargs
            return HalfScorer(float(rest))

        register_scorer("half", factory, form="half:<value>")
        assert "half:<value>" in registered_scorer_forms()
        scorer = make_scorer("half:0.125", extra=1)
        assert seen == {"rest": "0.125", "kwargs": {"extra": 1}}
        assert scorer.score(tiny_clips).tolist() == [0.125] * B
        with pytest.raises(ValueError, match="'half:<value>'"):
            make_scorer("halves:1")
        with pytest.raises(ValueError, match="already registered for 'half'"):
            register_scorer("half", factory)
        register_scorer("half", lambda rest, **kw: HalfScorer(0.0), overwrite=True)
        assert make_scorer("half:0.9").value == 0.0

    def test_register_scorer_errors(self, clean_registry):
        with pytest.raises(ValueError, match="prefix must be a non-empty name"):
            register_scorer("bad prefix", lambda rest: None)
        with pytest.raises(ValueError, match="prefix must be a non-empty name"):
            register_scorer("", lambda rest: None)
        with pytest.raises(TypeError, match="factory must be callable"):
            register_scorer("x", 3)
        register_scorer("notascorer", lambda rest, **kw: object())
        with pytest.raises(TypeError, match=r"make_scorer\('notascorer:1'\) built a object, which is not a Scorer"):
            make_scorer("notascorer:1")


def test_imports_do_not_load_gymnasium_or_minigrid():
    # the scorers and the env module import lazily: building an env is what needs the extra
    import subprocess
    from pathlib import Path

    code = "import sys, vlmrb_torchrl.scorers, vlmrb_torchrl.envs; print(' '.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1]
    )
    top_level = {name.split(".")[0] for name in out.stdout.split()}
    assert "vlmrb_torchrl" in top_level
    assert not top_level & {"gymnasium", "minigrid"}


def test_backend_modules_load_lazily():
    # importing the package (and using the oracle) loads no backend module; a backend name or
    # spec prefix loads just its module
    import subprocess
    from pathlib import Path

    backends = ("contrastive", "generative", "openai")
    code = (
        "import sys, vlmrb_torchrl.scorers as s\n"
        "def loaded(): return sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.rsplit('.', 1)[-1] in %r "
        "and m.startswith('vlmrb_torchrl.scorers.'))\n"
        "print(loaded()); s.make_scorer('oracle:minigrid'); print(loaded())\n"
        "s.HFContrastiveScorer; print(loaded())\n"
        "s.make_scorer('openai:http://127.0.0.1:9/v1#m'); print(loaded())\n"
        "try: s.make_scorer('hf:' + 'x' * 3)\n"
        "except Exception: pass\n"
        "print(loaded()); print('answer_token_ids' in dir(s), s.answer_token_ids.__module__)\n"
    ) % (backends,)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1],
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.stdout.splitlines() == [
        "[]",
        "[]",
        "['contrastive']",
        "['contrastive', 'openai']",
        "['contrastive', 'generative', 'openai']",
        "True vlmrb_torchrl.scorers.generative",
    ]
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        import vlmrb_torchrl.scorers as scorers

        scorers.nope  # noqa: B018


if __name__ == "__main__":
    pytest.main([__file__, "-q"])


class TestTheContractItself:
    """vlmrb_torchrl.testing.ScorerContract fails a scorer that breaks the protocol."""

    class Wide:
        prompt = ""
        in_keys = ["pixels"]
        provenance = {"backend": "wide", "prompt_hash": ""}

        def score(self, clips):  # 2 instead of [0, 1], float64, and no input checks
            return torch.full(clips.shape[:1], 2.0, dtype=torch.float64)

        def stats(self):
            return ["not", "a", "dict"]

    def test_a_broken_scorer_fails(self):
        contract = type("Contract", (ScorerContract,), {"make_scorer": lambda self: self.Wide()})()
        contract.Wide = self.Wide
        clips = make_clips()
        contract.test_is_scorer()  # the protocol's attributes are there...
        for check in (contract.test_scores_shape_dtype_range, contract.test_missing_key_raises,
                      contract.test_flat_clips_rejected, contract.test_stats_are_numbers):
            with pytest.raises((AssertionError, pytest.fail.Exception)):  # ...but every behaviour check fails
                check(clips)

    def test_a_good_scorer_passes(self):
        contract = type("Contract", (ScorerContract,), {"make_scorer": lambda self: OracleScorer()})()
        clips = make_clips()
        for check in (contract.test_scores_shape_dtype_range, contract.test_missing_key_raises,
                      contract.test_flat_clips_rejected, contract.test_stats_are_numbers, contract.test_threads):
            check(clips)
