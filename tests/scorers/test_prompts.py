"""Prompt templates: per-family defaults, task insertion, overrides."""

from __future__ import annotations

import pytest
import torch

from vlmrb_torchrl.scorers import ENV_FAMILIES, OpenAIScorer, contrastive_prompts, default_prompt
from vlmrb_torchrl.scorers.prompts import GOAL_QUESTION, format_prompt


class TestDefaultPrompt:
    @pytest.mark.parametrize("family", ENV_FAMILIES)
    def test_every_family_asks_the_paper_question(self, family):
        prompt = default_prompt(family)
        assert GOAL_QUESTION in prompt and prompt.endswith("Answer yes or no.")
        assert "{" not in prompt

    @pytest.mark.parametrize("family", ENV_FAMILIES)
    def test_task_is_inserted(self, family):
        prompt = default_prompt(family, task="get to the green goal square.")
        assert "get to the green goal square." in prompt and ".." not in prompt
        assert prompt.index("get to the green goal square") < prompt.index(GOAL_QUESTION)
        assert default_prompt(family, task="  ") == default_prompt(family)  # empty task: no task sentence

    def test_families_differ_and_case_is_ignored(self):
        assert len({default_prompt(f) for f in ENV_FAMILIES}) == len(ENV_FAMILIES)
        assert default_prompt("MiniGrid") == default_prompt("minigrid")
        assert "red triangle" in default_prompt("minigrid")
        assert "contact followed by displacement" in default_prompt("robosuite")

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"env_family": "doom"}, ValueError, r"Unknown env_family='doom'; valid values: \['generic', 'minigrid'"),
            ({"env_family": 3}, TypeError, "env_family must be a str"),
            ({"task": 3}, TypeError, "task must be a str"),
        ],
    )
    def test_errors(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            default_prompt(**kwargs)


class TestContrastivePrompts:
    @pytest.mark.parametrize("family", ENV_FAMILIES)
    def test_positive_and_negatives(self, family):
        positive, negatives = contrastive_prompts(family)
        assert positive and negatives and positive not in negatives
        with_task, same_negatives = contrastive_prompts(family, task="opens the door")
        assert "opens the door" in with_task and same_negatives == negatives


class TestFormatPrompt:
    def test_override_with_task(self):
        assert format_prompt("Did the agent {task}?", "pick up the key") == "Did the agent pick up the key?"
        assert format_prompt("Reply {answer: yes}", None) == "Reply {answer: yes}"  # other braces stay
        assert format_prompt("{task} or {task}?", "lift") == "lift or lift?"

    @pytest.mark.parametrize(
        "template, task, error, match",
        [
            ("Did it {task}?", None, ValueError, "contains {task} but no task was given"),
            (3, None, TypeError, "prompt must be a str"),
        ],
    )
    def test_errors(self, template, task, error, match):
        with pytest.raises(error, match=match):
            format_prompt(template, task)


def test_scorers_use_the_templates():
    # OpenAIScorer with an explicit model contacts nothing at construction
    default = OpenAIScorer("http://127.0.0.1:9/v1", "m")
    assert default.prompt == default_prompt()
    family = OpenAIScorer("http://127.0.0.1:9/v1", "m", env_family="minigrid", task="open the door")
    assert family.prompt == default_prompt("minigrid", task="open the door")
    custom = OpenAIScorer(
        "http://127.0.0.1:9/v1", "m", prompt="Does the agent {task}? Answer yes or no.", task="open it"
    )
    assert custom.prompt == "Does the agent open it? Answer yes or no."


class TestPromptCheck:
    def test_fields_normalised(self):
        from vlmrb_torchrl.scorers.contrastive import AGGREGATIONS as CONTRASTIVE_AGGREGATIONS
        from vlmrb_torchrl.scorers.prompts import AGGREGATIONS, PromptCheck

        check = PromptCheck("holds the key", ["the key is on the floor", "no key"], "progress")
        assert check.negatives == ("the key is on the floor", "no key") and check._fields == (
            "positive", "negatives", "aggregation", "hold")
        assert check.hold == 1 and check == ("holds the key", ("the key is on the floor", "no key"), "progress", 1)
        assert PromptCheck("a", "b", "max").negatives == ("b",)  # a lone str is one negative
        assert check._replace(aggregation="mean").aggregation == "mean"
        assert AGGREGATIONS is CONTRASTIVE_AGGREGATIONS == ("max", "mean", "progress", "rise")

    @pytest.mark.parametrize(
        "args, error, match",
        [
            ((3, ["b"], "max"), TypeError, "positive must be a str"),
            (("  ", ["b"], "max"), ValueError, "positive must be a non-empty str"),
            (("a", [], "max"), ValueError, "negatives must be a non-empty sequence"),
            (("a", ["b", ""], "max"), ValueError, "negatives must be a non-empty sequence"),
            (("a", 5, "max"), TypeError, "negatives must be a sequence of str"),
            (("a", ["b"], "median"), ValueError, r"aggregation must be one of \['max', 'mean', 'progress', 'rise'\]"),
            (("a", ["b"], "rise", 0), ValueError, "hold must be an int >= 1, got hold=0"),
            (("a", ["b"], "rise", 2.0), ValueError, "hold must be an int >= 1, got hold=2.0"),
            (("a", ["b"], "rise", True), ValueError, "hold must be an int >= 1, got hold=True"),
            (("a", ["b"], "progress", 3), ValueError, "hold=3 applies to 'max' and 'rise' checks only"),
            (("a", ["b"], "mean", 2), ValueError, "hold=2 applies to 'max' and 'rise' checks only"),
        ],
    )
    def test_errors(self, args, error, match):
        from vlmrb_torchrl.scorers.prompts import PromptCheck

        with pytest.raises(error, match=match):
            PromptCheck(*args)
        with pytest.raises(error, match=match):
            PromptCheck.coerce(args)

    def test_canonical_text_is_unambiguous_and_ordered(self):
        from vlmrb_torchrl.scorers.prompts import PromptCheck, prompt_set_text

        a = PromptCheck('say "hi", then', ["b"], "max")
        b = PromptCheck("say", ['hi", then b'], "max")
        assert prompt_set_text([a]) != prompt_set_text([b])
        assert prompt_set_text([a, b]) != prompt_set_text([b, a])  # the set's order is part of its name
        assert prompt_set_text([a]) == prompt_set_text([PromptCheck.coerce(('say "hi", then', ("b",), "max"))])
        held = PromptCheck('say "hi", then', ["b"], "max", hold=2)
        assert prompt_set_text([held]) == 'max of max[hold=2]("say \\"hi\\", then" vs "b")' != prompt_set_text([a])

    def test_hold_round_trips_and_stays_out_of_the_defaults(self):
        from vlmrb_torchrl.scorers.prompts import PromptCheck

        plain = PromptCheck("the door is open", ["the door is closed"], "rise")
        held = plain._replace(hold=3)
        assert held.hold == 3 and held != plain
        assert plain.record() == ["the door is open", ["the door is closed"], "rise"]  # as before hold existed
        assert held.record() == ["the door is open", ["the door is closed"], "rise", 3]
        assert PromptCheck.coerce(held.record()) == held and PromptCheck.coerce(plain.record()) == plain
        assert "hold" not in repr(plain) and repr(held).endswith("aggregation='rise', hold=3)")
        with pytest.raises(TypeError, match=r"aggregation\[, hold\]\) tuple"):
            PromptCheck.coerce(("a", ["b"], "rise", 2, "extra"))


class TestAggregate:
    def test_checks_folded_together_equal_each_clip_alone_bit_for_bit(self):
        # aggregate_checks folds the clips of one length at once; it must give aggregate()'s numbers exactly
        from vlmrb_torchrl.scorers.prompts import AGGREGATIONS, PromptCheck, aggregate, aggregate_checks

        gen = torch.Generator().manual_seed(0)
        checks = [PromptCheck("p", ["n"], a, h) for a in AGGREGATIONS for h in (1, 2, 3)
                  if h == 1 or a in ("max", "rise")]
        clips = [torch.rand(t, len(checks), generator=gen) for t in (17, 17, 1, 5, 17, 2, 5, 3)]
        clips[3][2, 0] = 0.5  # ties
        clips[3][3, 0] = 0.5
        got = aggregate_checks(clips, checks)
        want = torch.stack([torch.stack([aggregate(p[:, c], k.aggregation, k.hold) for c, k in enumerate(checks)])
                            for p in clips])
        assert got.dtype == torch.float32 and torch.equal(got, want)

    @pytest.mark.parametrize(
        "probs, expected",
        [
            # max, mean, progress, rise
            ([0.1, 0.9, 0.2], [0.9, 0.4, 0.1, 0.8]),  # true in the middle only: rise sees it, progress barely
            ([0.2, 0.5, 0.9], [0.9, 8 / 15, 0.7, 0.7]),  # only rising: progress == rise
            ([0.9, 0.5, 0.7], [0.9, 0.7, 0.0, 0.2]),  # a dip and a partial recovery
            ([0.9, 0.6, 0.1], [0.9, 8 / 15, 0.0, 0.0]),  # only falling: nothing became true
            ([0.3, 0.8, 0.1, 0.6], [0.8, 0.45, 0.3, 0.5]),  # the best gain is to a later frame, not the last
            ([0.7], [0.7, 0.7, 0.0, 0.0]),  # one frame: no change
        ],
    )
    def test_values(self, probs, expected):
        from vlmrb_torchrl.scorers.prompts import AGGREGATIONS, aggregate

        got = [aggregate(torch.tensor(probs), name).item() for name in AGGREGATIONS]
        assert got == pytest.approx(expected, abs=1e-6)

    def test_rise_is_the_best_gain_over_ordered_pairs(self):
        from vlmrb_torchrl.scorers.prompts import aggregate

        gen = torch.Generator().manual_seed(0)
        for length in (1, 2, 5, 17):
            for _ in range(20):
                p = torch.rand(length, generator=gen)
                brute = max(float(p[t] - p[s]) for t in range(length) for s in range(t + 1))
                assert aggregate(p, "rise").item() == pytest.approx(brute, abs=1e-7)
                assert aggregate(p, "rise") >= aggregate(p, "progress")

    @pytest.mark.parametrize("hold", [2, 3, 5])
    def test_hold_is_the_best_gain_between_held_states(self, hold):
        """rise: max over s < t of min(p[t:t+hold]) - max(p[s-hold+1:s+1]) (windows cut at the clip's edges), >= 0;
        max: the best min(p[t:t+hold])."""
        from vlmrb_torchrl.scorers.prompts import aggregate

        gen = torch.Generator().manual_seed(hold)
        for length in (1, 2, 3, 6, 17):
            for _ in range(20):
                p = torch.rand(length, generator=gen)
                high = [float(p[t : t + hold].min()) for t in range(length)]
                low = [float(p[max(0, s - hold + 1) : s + 1].max()) for s in range(length)]
                brute = max([0.0] + [high[t] - low[s] for t in range(length) for s in range(t)])
                assert aggregate(p, "rise", hold).item() == pytest.approx(brute, abs=1e-7)
                assert aggregate(p, "max", hold).item() == pytest.approx(max(high), abs=1e-7)
                assert aggregate(p, "rise", hold) <= aggregate(p, "rise") + 1e-7  # holding only removes rises

    @pytest.mark.parametrize("hold", [2, 3, 4])
    def test_hold_keeps_events_and_drops_flickers(self, hold):
        from vlmrb_torchrl.scorers.prompts import aggregate

        low, high, length = 0.1, 0.9, 17
        for start in range(1, length):  # false, then true for good from frame `start`: a real event, wherever it is
            p = torch.full((length,), low)
            p[start:] = high
            assert aggregate(p, "rise", hold).item() == pytest.approx(high - low)
        for width in range(1, hold):  # true for fewer than `hold` frames
            for start in range(1, length - width):  # inside the clip: not an event
                p = torch.full((length,), low)
                p[start : start + width] = high
                assert aggregate(p, "rise", hold).item() == 0.0 and aggregate(p, "max", hold).item() == pytest.approx(low)
                assert aggregate(1 - p, "rise", hold).item() == 0.0  # a dip in a true state is not an event either
            p = torch.full((length,), low)
            p[length - width :] = high  # running into the clip's end: the clip cannot show whether it lasts
            assert aggregate(p, "rise", hold).item() == pytest.approx(high - low)

    def test_hold_one_is_the_plain_rule(self):
        from vlmrb_torchrl.scorers.prompts import AGGREGATIONS, aggregate

        p = torch.rand(17, generator=torch.Generator().manual_seed(0))
        for name in AGGREGATIONS:
            assert torch.equal(aggregate(p, name, 1), aggregate(p, name))
        with pytest.raises(ValueError, match="hold=2 applies to 'max' and 'rise' only"):
            aggregate(p, "progress", 2)
        with pytest.raises(ValueError, match="hold must be an int >= 1"):
            aggregate(p, "rise", 0)

    def test_unknown(self):
        from vlmrb_torchrl.scorers.prompts import aggregate

        with pytest.raises(ValueError, match=r"aggregation must be one of \['max', 'mean', 'progress', 'rise'\], got aggregation='last'"):
            aggregate(torch.tensor([0.5]), "last")
