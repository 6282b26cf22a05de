"""Prompt templates for the VLM scorers: paper-style defaults per env family, with the task inserted.

A generative scorer asks one yes/no question per clip; a contrastive scorer compares the clip's
frames against a positive text and one or more baseline (negative) texts. The defaults follow
the VLM-RB paper's reported wording (Appendix C, reported second-hand): a task-agnostic
*"Does this clip contain a clear instance of goal satisfaction anywhere in it?"*, preceded by a
sentence describing the domain and, when the environment provides one, its mission / task text
(MiniGrid's ``env.mission``, a robosuite task name, ...). Every scorer takes ``prompt=`` (and the
contrastive one ``negatives=``) to override them per run; a ``{task}`` placeholder in an
override is filled from ``task=``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

import torch

__all__ = [
    "AGGREGATIONS",
    "ENV_FAMILIES",
    "GOAL_QUESTION",
    "PromptCheck",
    "aggregate",
    "default_prompt",
    "contrastive_prompts",
    "format_prompt",
    "prompt_set_text",
]

#: How a contrastive scorer turns per-frame probabilities into a clip score: the best frame
#: (``"max"``), the average (``"mean"``), the gain from the first to the last real frame,
#: clamped at 0 (``"progress"``), or the largest gain from any frame to a later one
#: (``"rise"``). See :func:`aggregate`.
AGGREGATIONS = ("max", "mean", "progress", "rise")

#: The paper's reported yes/no question (MiniGrid DoorKey prompt, Appendix C).
GOAL_QUESTION = "Does this clip contain a clear instance of goal satisfaction anywhere in it?"
_ANSWER = "Answer yes or no."

# family -> (domain sentence, task sentence with {task}, extra hint after the question)
_GENERATIVE = {
    "generic": (
        "The images are consecutive frames of a clip of an agent acting in an environment.",
        "The agent's task: {task}.",
        "",
    ),
    "minigrid": (
        "The images are consecutive frames of a top-down grid world; the agent is the red triangle.",
        "The agent's mission: {task}.",
        "Picking up a key, opening a door and reaching the green goal square all count.",
    ),
    "atari": (
        "The images are consecutive frames of an Atari game played by an agent.",
        "The agent's goal: {task}.",
        "Scoring points, collecting an item or reaching a new area counts.",
    ),
    "robosuite": (
        "The images are consecutive camera frames of a robot arm manipulating objects on a table.",
        "The robot's task: {task}.",
        "Look for contact followed by displacement: lifting, placing into a receptacle, opening or closing an "
        "articulated object, or moving an object to a target zone.",
    ),
}

# family -> (positive without a task, positive with {task}, negatives)
_CONTRASTIVE = {
    "generic": ("an agent achieving its goal", "an agent that {task}", ("an agent doing nothing useful",)),
    "minigrid": (
        "a red triangle agent reaching the green goal square in a grid world",
        "a red triangle agent in a grid world: {task}",
        ("a red triangle agent in an empty grid world",),
    ),
    "atari": (
        "a player scoring points in an Atari game",
        "an Atari game where the player {task}",
        ("an Atari game screen",),
    ),
    "robosuite": (
        "a robot arm lifting an object off the table",
        "a robot arm that {task}",
        ("a robot arm next to objects on a table",),
    ),
}

#: Env families with default prompts; unknown families are an error (use ``"generic"``).
ENV_FAMILIES: tuple[str, ...] = tuple(_GENERATIVE)


def _check_family(env_family: str) -> str:
    if not isinstance(env_family, str):
        raise TypeError(f"env_family must be a str, one of {list(ENV_FAMILIES)}; got {type(env_family).__name__}.")
    family = env_family.lower()
    if family not in _GENERATIVE:
        raise ValueError(f"Unknown env_family={env_family!r}; valid values: {list(ENV_FAMILIES)}.")
    return family


def _clean_task(task: str | None) -> str | None:
    if task is None:
        return None
    if not isinstance(task, str):
        raise TypeError(f"task must be a str (the env's mission / task text) or None, got {type(task).__name__}.")
    task = task.strip().rstrip(".").strip()
    return task or None


def format_prompt(template: str, task: str | None = None) -> str:
    """Fills the ``{task}`` placeholder of a user-supplied prompt.

    Only the literal text ``{task}`` is replaced; any other braces are left as they are (prompts
    may contain JSON or other braces). A template without ``{task}`` is returned unchanged and
    ``task`` is then ignored.

    Args:
        template (str): the prompt, optionally containing ``{task}``.
        task (str, optional): the env's mission / task text (a trailing period is dropped).

    Raises:
        TypeError: ``template`` or ``task`` is not a str.
        ValueError: the template contains ``{task}`` but no task was given.

    Examples:
        >>> format_prompt("Does the agent {task}? Answer yes or no.", task="open the door.")
        'Does the agent open the door? Answer yes or no.'
        >>> format_prompt('Is the door open? Reply {"answer": "yes"} or {"answer": "no"}.', task="ignored")
        'Is the door open? Reply {"answer": "yes"} or {"answer": "no"}.'
    """
    if not isinstance(template, str):
        raise TypeError(f"prompt must be a str, got {type(template).__name__}.")
    task = _clean_task(task)
    if "{task}" not in template:
        return template
    if task is None:
        raise ValueError(f"prompt {template!r} contains {{task}} but no task was given; pass task='...'.")
    return template.replace("{task}", task)


def default_prompt(env_family: str = "generic", *, task: str | None = None) -> str:
    """The default yes/no question of a generative scorer for an env family.

    Args:
        env_family (str, optional): one of :data:`ENV_FAMILIES` (``"generic"``, ``"minigrid"``,
            ``"atari"``, ``"robosuite"``). Defaults to ``"generic"``.

    Keyword Args:
        task (str, optional): the env's own mission / task text, inserted when given (e.g.
            MiniGrid's ``env.mission``).

    Raises:
        ValueError: unknown ``env_family``.

    Examples:
        >>> print(default_prompt())
        The images are consecutive frames of a clip of an agent acting in an environment.
        Does this clip contain a clear instance of goal satisfaction anywhere in it? Answer yes or no.
        >>> print(default_prompt("minigrid", task="use the key to open the door and then get to the goal"))
        The images are consecutive frames of a top-down grid world; the agent is the red triangle.
        The agent's mission: use the key to open the door and then get to the goal.
        Does this clip contain a clear instance of goal satisfaction anywhere in it?
        Picking up a key, opening a door and reaching the green goal square all count. Answer yes or no.
    """
    domain, task_sentence, hint = _GENERATIVE[_check_family(env_family)]
    task = _clean_task(task)
    parts = [domain, task_sentence.format(task=task) if task else "", GOAL_QUESTION, hint, _ANSWER]
    return " ".join(p for p in parts if p)


def contrastive_prompts(env_family: str = "generic", *, task: str | None = None) -> tuple[str, list[str]]:
    """Default ``(positive, negatives)`` texts of a contrastive (CLIP/SigLIP) scorer.

    The positive text describes the goal (the task when given); the negatives are baseline
    descriptions of the same scene without progress, as in VLM-RM's goal/baseline prompts.

    Examples:
        >>> contrastive_prompts("minigrid")
        ('a red triangle agent reaching the green goal square in a grid world',
         ['a red triangle agent in an empty grid world'])
        >>> contrastive_prompts("robosuite", task="lifts the red cube")[0]
        'a robot arm that lifts the red cube'
    """
    plain, with_task, negatives = _CONTRASTIVE[_check_family(env_family)]
    task = _clean_task(task)
    return (with_task.format(task=task) if task else plain), list(negatives)


def aggregate(probabilities: torch.Tensor, aggregation: str) -> torch.Tensor:
    """Folds a clip's per-frame probabilities (``[T]``, real frames in order) into its score.

    - ``"max"``: the best frame, "the statement is true somewhere in the clip";
    - ``"mean"``: the average frame;
    - ``"progress"``: last frame minus first, clamped at 0: "the statement became true and
      stayed so" (holding a key throughout, or dropping it, scores 0);
    - ``"rise"``: the largest gain from a frame to any later one, ``max_t (p_t - min_{s<=t}
      p_s)``, 0 for one frame: "the statement became true at some point in the clip", even if
      it is undone before the clip ends (a door opened, then closed again). It is never below
      ``"progress"``; on a clip that only rises they are equal.

    Args:
        probabilities (Tensor): ``[T]`` probabilities, ``T >= 1``.
        aggregation (str): one of :data:`AGGREGATIONS`.

    Returns:
        a 0-dim tensor of the probabilities' dtype.

    Examples:
        >>> p = torch.tensor([0.1, 0.9, 0.2])  # true in the middle of the clip only
        >>> [round(aggregate(p, a).item(), 2) for a in AGGREGATIONS]
        [0.9, 0.4, 0.1, 0.8]
        >>> aggregate(torch.tensor([0.9, 0.5, 0.7]), "rise").item()  # a dip and a partial recovery
        0.19999998807907104
    """
    if aggregation == "max":
        return probabilities.max()
    if aggregation == "mean":
        return probabilities.mean()
    if aggregation == "progress":
        return (probabilities[-1] - probabilities[0]).clamp(min=0.0)
    if aggregation == "rise":
        return (probabilities - probabilities.cummin(0).values).max()
    raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got aggregation={aggregation!r}.")


def check_negatives(negatives: Sequence[str] | str, *, owner: str) -> list[str]:
    """Validates a list of baseline prompts (a lone str is wrapped)."""
    if isinstance(negatives, str):
        negatives = [negatives]
    negatives = list(negatives)
    if not negatives or not all(isinstance(n, str) and n.strip() for n in negatives):
        raise ValueError(f"{owner}: negatives must be a non-empty list of non-empty str, got {negatives!r}.")
    return negatives


class _PromptCheckFields(NamedTuple):
    positive: str
    negatives: tuple[str, ...]
    aggregation: str


class PromptCheck(_PromptCheckFields):
    """One check of a contrastive scorer's prompt set: a positive text, the baseline texts it
    must beat, and how its per-frame probabilities become a clip score.

    A frame's probability is the softmax of its similarities over ``(positive, *negatives)``;
    ``aggregation`` (one of :data:`AGGREGATIONS`) folds them over the clip's real frames:
    ``"progress"`` for an event (a state that changes within the clip: "holds the key" vs
    "the key is on the floor"), ``"rise"`` for an event that may be undone within the clip (a
    door opened and closed again), ``"max"`` for a state worth reaching ("faces the goal");
    see :func:`aggregate`.
    :class:`~vlmrb_torchrl.scorers.HFContrastiveScorer` takes a list of them as
    ``prompt_set=`` and scores a clip by the max over its checks.

    Fields are validated on construction: ``negatives`` becomes a tuple (a lone str is one
    negative). ``{task}`` placeholders are filled by the scorer from its ``task=``.

    Args:
        positive (str): the text whose probability is measured.
        negatives (sequence of str): one or more baseline texts.
        aggregation (str): ``"max"``, ``"mean"``, ``"progress"`` or ``"rise"``.

    Raises:
        TypeError: a text is not a str.
        ValueError: an empty text, no negatives, or an unknown aggregation.

    Examples:
        >>> check = PromptCheck("the agent holds the key", ["the key is on the floor"], "progress")
        >>> check
        PromptCheck(positive='the agent holds the key', negatives=('the key is on the floor',), aggregation='progress')
        >>> PromptCheck("the door is open", "the door is locked", "median")
        Traceback (most recent call last):
            ...
        ValueError: PromptCheck.aggregation must be one of ['max', 'mean', 'progress', 'rise'], got aggregation='median'.
    """

    __slots__ = ()

    def __new__(cls, positive: str, negatives: Sequence[str] | str, aggregation: str) -> PromptCheck:
        if not isinstance(positive, str):
            raise TypeError(f"PromptCheck.positive must be a str, got {type(positive).__name__}.")
        if not positive.strip():
            raise ValueError("PromptCheck.positive must be a non-empty str, got an empty one.")
        if isinstance(negatives, str):
            negatives = (negatives,)
        try:
            negatives = tuple(negatives)
        except TypeError:
            raise TypeError(
                f"PromptCheck.negatives must be a sequence of str, got {type(negatives).__name__}."
            ) from None
        if not negatives or not all(isinstance(n, str) and n.strip() for n in negatives):
            raise ValueError(
                f"PromptCheck.negatives must be a non-empty sequence of non-empty str, got {negatives!r}."
            )
        if not isinstance(aggregation, str) or aggregation not in AGGREGATIONS:
            raise ValueError(
                f"PromptCheck.aggregation must be one of {list(AGGREGATIONS)}, got aggregation={aggregation!r}."
            )
        return super().__new__(cls, positive, negatives, aggregation)

    @classmethod
    def _make(cls, iterable) -> PromptCheck:  # namedtuple's _make/_replace validate too
        return cls(*iterable)

    @classmethod
    def coerce(cls, check: PromptCheck | Sequence) -> PromptCheck:
        """A :class:`PromptCheck` from itself or a ``(positive, negatives, aggregation)`` tuple.

        Examples:
            >>> PromptCheck.coerce(("faces the goal", ["is far from the goal"], "max")).negatives
            ('is far from the goal',)
        """
        if isinstance(check, PromptCheck):
            return check
        if isinstance(check, str) or not isinstance(check, Sequence) or len(check) != 3:
            raise TypeError(
                "a prompt check is a PromptCheck or a (positive, negatives, aggregation) tuple, "
                f"got {check!r}."
            )
        return cls(*check)


def prompt_set_text(checks: Sequence[PromptCheck]) -> str:
    """The canonical text of a prompt set: what a scorer's ``prompt`` and prompt hash name.

    One ``aggregation(positive vs negative, ...)`` term per check in the given order, texts
    JSON-quoted (so two different sets never read the same), after ``"max of "``: the clip
    score is the max over the checks.

    Examples:
        >>> print(prompt_set_text([PromptCheck("holds the key", ["the key is on the floor"], "progress"),
        ...                        PromptCheck("faces the goal", ["is far from the goal", "a wall"], "max")]))
        max of progress("holds the key" vs "the key is on the floor"); max("faces the goal" vs "is far from the goal", "a wall")
    """
    terms = [
        f"{c.aggregation}({json.dumps(c.positive)} vs {', '.join(json.dumps(n) for n in c.negatives)})"
        for c in checks
    ]
    return "max of " + "; ".join(terms)
