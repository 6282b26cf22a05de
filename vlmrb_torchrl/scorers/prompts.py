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
import numbers
from collections.abc import Sequence
from typing import NamedTuple

import torch

__all__ = [
    "AGGREGATIONS",
    "ENV_FAMILIES",
    "GOAL_QUESTION",
    "PromptCheck",
    "aggregate",
    "aggregate_checks",
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


def aggregate(probabilities: torch.Tensor, aggregation: str, hold: int = 1) -> torch.Tensor:
    """Folds a clip's per-frame probabilities (``[T]``, real frames in order) into its score.

    - ``"max"``: the best frame, "the statement is true somewhere in the clip";
    - ``"mean"``: the average frame;
    - ``"progress"``: last frame minus first, clamped at 0: "the statement became true and
      stayed so" (holding a key throughout, or dropping it, scores 0);
    - ``"rise"``: the largest gain from a frame to any later one, ``max_t (p_t - min_{s<=t}
      p_s)``, 0 for one frame: "the statement became true at some point in the clip", even if
      it is undone before the clip ends (a door opened, then closed again). It is never below
      ``"progress"``; on a clip that only rises they are equal.

    **Persistence** (``hold``, ``"max"`` and ``"rise"`` only). A per-frame reading that flickers
    (a statement the model cannot see well, one frame true, the next false) makes a ``"rise"``
    in every clip that holds one flip, and a one-frame ``"max"``. With ``hold=k`` a state counts
    only where it lasts: a frame's "true" level is the *lowest* probability of the ``k`` frames
    starting at it, ``hi_t = min(p_t .. p_{t+k-1})``, and its "false" level the *highest* of the
    ``k`` frames ending at it, ``lo_s = max(p_{s-k+1} .. p_s)``. ``"max"`` is then ``max_t hi_t``
    and ``"rise"`` ``max_{s<t} (hi_t - lo_s)`` clamped at 0: the statement false for ``k``
    frames, then true for ``k`` frames. A window is cut at the clip's edges (a state seen from a
    frame to the clip's last, or from its first, counts as held: the clip cannot show more), so
    an event near a clip's end still scores, while a flicker inside the clip scores ~0 and only
    the few clips that end (or start) on it see it. ``hold=1`` is the rule above.

    Args:
        probabilities (Tensor): ``[T]`` probabilities, ``T >= 1``.
        aggregation (str): one of :data:`AGGREGATIONS`.
        hold (int, optional): the frames a state must last to count (``"max"``, ``"rise"``).
            Defaults to ``1``.

    Returns:
        a 0-dim tensor of the probabilities' dtype.

    Raises:
        ValueError: an unknown aggregation, ``hold < 1``, or ``hold > 1`` with ``"mean"`` or
            ``"progress"``.

    Examples:
        >>> p = torch.tensor([0.1, 0.9, 0.2])  # true in the middle of the clip only
        >>> [round(aggregate(p, a).item(), 2) for a in AGGREGATIONS]
        [0.9, 0.4, 0.1, 0.8]
        >>> aggregate(torch.tensor([0.9, 0.5, 0.7]), "rise").item()  # a dip and a partial recovery
        0.19999998807907104
        >>> flicker = torch.tensor([0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1])  # one frame true, inside the clip
        >>> [round(aggregate(flicker, "rise", hold=h).item(), 2) for h in (1, 2)]
        [0.8, 0.0]
        >>> event = torch.tensor([0.1, 0.1, 0.1, 0.1, 0.9, 0.9, 0.9])  # true for good
        >>> round(aggregate(event, "rise", hold=3).item(), 2), round(aggregate(event[:5], "rise", hold=3).item(), 2)
        (0.8, 0.8)
    """
    if isinstance(hold, bool) or not isinstance(hold, int) or hold < 1:
        raise ValueError(f"hold must be an int >= 1, got hold={hold!r}.")
    if hold > 1 and aggregation in ("mean", "progress"):
        raise ValueError(f"hold={hold} applies to 'max' and 'rise' only, got aggregation={aggregation!r}.")
    if aggregation == "mean":
        return probabilities.mean()
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got aggregation={aggregation!r}.")
    return _aggregate_rows(probabilities[None], aggregation, hold)[0]


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
    hold: int = 1


class PromptCheck(_PromptCheckFields):
    """One check of a contrastive scorer's prompt set: a positive text, the baseline texts it
    must beat, and how its per-frame probabilities become a clip score (and, optionally, for how
    many frames a state must last to count).

    A frame's probability is the softmax of its similarities over ``(positive, *negatives)``;
    ``aggregation`` (one of :data:`AGGREGATIONS`) folds them over the clip's real frames:
    ``"progress"`` for an event (a state that changes within the clip: "holds the key" vs
    "the key is on the floor"), ``"rise"`` for an event that may be undone within the clip (a
    door opened and closed again), ``"max"`` for a state worth reaching ("faces the goal");
    see :func:`aggregate`. ``hold`` (``"max"`` and ``"rise"``) makes a state count only when it
    lasts ``hold`` consecutive frames of the clip (or runs into the clip's edge): for a statement
    whose per-frame reading flickers, which would otherwise make a ``"rise"`` of every flip.
    :class:`~vlmrb_torchrl.scorers.HFContrastiveScorer` takes a list of them as
    ``prompt_set=`` and scores a clip by the max over its checks.

    Fields are validated on construction: ``negatives`` becomes a tuple (a lone str is one
    negative). ``{task}`` placeholders are filled by the scorer from its ``task=``.

    Args:
        positive (str): the text whose probability is measured.
        negatives (sequence of str): one or more baseline texts.
        aggregation (str): ``"max"``, ``"mean"``, ``"progress"`` or ``"rise"``.
        hold (int, optional): the consecutive frames (of those the scorer is shown) a state must
            last to count, ``"max"`` and ``"rise"`` only: see :func:`aggregate`. Defaults to ``1``
            (every frame counts; the repr leaves it out then).

    Raises:
        TypeError: a text is not a str.
        ValueError: an empty text, no negatives, an unknown aggregation, ``hold < 1``, or
            ``hold > 1`` with ``"mean"`` or ``"progress"``.

    Examples:
        >>> check = PromptCheck("the agent holds the key", ["the key is on the floor"], "progress")
        >>> check
        PromptCheck(positive='the agent holds the key', negatives=('the key is on the floor',), aggregation='progress')
        >>> PromptCheck("the door is open", "the door is locked", "median")
        Traceback (most recent call last):
            ...
        ValueError: PromptCheck.aggregation must be one of ['max', 'mean', 'progress', 'rise'], got aggregation='median'.
        >>> PromptCheck("the cube is on its target", ["the cube is off its target"], "rise", hold=3)
        PromptCheck(positive='the cube is on its target', negatives=('the cube is off its target',), aggregation='rise', hold=3)
    """

    __slots__ = ()

    def __new__(cls, positive: str, negatives: Sequence[str] | str, aggregation: str, hold: int = 1) -> PromptCheck:
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
        if isinstance(hold, bool) or not isinstance(hold, numbers.Integral) or hold < 1:
            raise ValueError(f"PromptCheck.hold must be an int >= 1, got hold={hold!r}.")
        if hold > 1 and aggregation not in ("max", "rise"):
            raise ValueError(f"PromptCheck.hold={hold} applies to 'max' and 'rise' checks only, got "
                             f"aggregation={aggregation!r}.")
        return super().__new__(cls, positive, negatives, aggregation, int(hold))

    def __repr__(self) -> str:
        held = f", hold={self.hold}" if self.hold != 1 else ""
        return (f"PromptCheck(positive={self.positive!r}, negatives={self.negatives!r}, "
                f"aggregation={self.aggregation!r}{held})")

    def record(self) -> list:
        """The check as a JSON list, ``[positive, [negatives...], aggregation]`` (``hold`` appended
        when it is not 1): what a scorer's provenance records, and what :meth:`coerce` reads back.

        Examples:
            >>> PromptCheck("the door is open", ["the door is closed"], "rise", hold=2).record()
            ['the door is open', ['the door is closed'], 'rise', 2]
        """
        return [self.positive, list(self.negatives), self.aggregation] + ([self.hold] if self.hold != 1 else [])

    @classmethod
    def _make(cls, iterable) -> PromptCheck:  # namedtuple's _make/_replace validate too
        return cls(*iterable)

    @classmethod
    def coerce(cls, check: PromptCheck | Sequence) -> PromptCheck:
        """A :class:`PromptCheck` from itself or a ``(positive, negatives, aggregation[, hold])`` tuple.

        Examples:
            >>> PromptCheck.coerce(("faces the goal", ["is far from the goal"], "max")).negatives
            ('is far from the goal',)
            >>> PromptCheck.coerce(["the door is open", ["the door is closed"], "rise", 2]).hold
            2
        """
        if isinstance(check, PromptCheck):
            return check
        if isinstance(check, str) or not isinstance(check, Sequence) or len(check) not in (3, 4):
            raise TypeError(
                "a prompt check is a PromptCheck or a (positive, negatives, aggregation[, hold]) tuple, "
                f"got {check!r}."
            )
        return cls(*check)


def prompt_set_text(checks: Sequence[PromptCheck]) -> str:
    """The canonical text of a prompt set: what a scorer's ``prompt`` and prompt hash name.

    One ``aggregation(positive vs negative, ...)`` term per check in the given order, texts
    JSON-quoted (so two different sets never read the same), after ``"max of "``: the clip
    score is the max over the checks. A check with ``hold`` > 1 reads ``aggregation[hold=k](...)``.

    Examples:
        >>> print(prompt_set_text([PromptCheck("holds the key", ["the key is on the floor"], "progress"),
        ...                        PromptCheck("faces the goal", ["is far from the goal", "a wall"], "max")]))
        max of progress("holds the key" vs "the key is on the floor"); max("faces the goal" vs "is far from the goal", "a wall")
        >>> print(prompt_set_text([PromptCheck("the drawer is open", ["the drawer is closed"], "rise", hold=3)]))
        max of rise[hold=3]("the drawer is open" vs "the drawer is closed")
    """
    terms = [
        f"{c.aggregation}{f'[hold={c.hold}]' if c.hold != 1 else ''}"
        f"({json.dumps(c.positive)} vs {', '.join(json.dumps(n) for n in c.negatives)})"
        for c in checks
    ]
    return "max of " + "; ".join(terms)


def aggregate_checks(frame_probabilities: Sequence[torch.Tensor], checks: Sequence[PromptCheck]) -> torch.Tensor:
    """Each check's clip score, per clip: the clips' ``[T_b, num_checks]`` per-frame probabilities folded by each
    check's :func:`aggregate` (its ``aggregation`` and ``hold``), float32 ``[B, num_checks]`` (``[0, num_checks]``
    for no clips). What a prompt-set scorer's ``check_scores`` returns; its clip score is the max over checks.

    Examples:
        >>> checks = [PromptCheck("holds the key", ["the key is on the floor"], "progress"),
        ...           PromptCheck("faces the goal", ["is far from the goal"], "max")]
        >>> [[round(x, 3) for x in row] for row in aggregate_checks([torch.tensor([[0.1, 0.2], [0.7, 0.4]])], checks).tolist()]
        [[0.6, 0.4]]
        >>> aggregate_checks([], checks).shape
        torch.Size([0, 2])
    """
    out = torch.zeros(len(frame_probabilities), len(checks))
    by_length: dict[int, list[int]] = {}
    for b, p in enumerate(frame_probabilities):
        by_length.setdefault(p.shape[0], []).append(b)
    # the clips of one length folded together (a call's clips mostly share one): the same elementwise min, max and
    # differences as aggregate() per clip, so the same numbers bit for bit; a mean is a sum whose order a batched
    # reduction may change, so "mean" stays per clip
    for clips in by_length.values():
        stacked = torch.stack([frame_probabilities[b] for b in clips])  # [n, T, num_checks]
        for c, check in enumerate(checks):
            if check.aggregation == "mean":
                folded = torch.stack([aggregate(row, "mean") for row in stacked[:, :, c]])
            else:
                folded = _aggregate_rows(stacked[:, :, c], check.aggregation, check.hold)
            out[clips, c] = folded.float()
    return out


def _aggregate_rows(p: torch.Tensor, aggregation: str, hold: int) -> torch.Tensor:
    """:func:`aggregate` of each row of ``[n, T]`` (``"max"``, ``"progress"``, ``"rise"``): ``[n]``. Elementwise
    min, max and differences only, so a row's value is the same bit for bit however many rows there are."""
    if aggregation == "max":
        return (_held_true(p, hold) if hold > 1 else p).max(1).values
    if aggregation == "progress":
        return (p[:, -1] - p[:, 0]).clamp(min=0.0)
    if hold == 1:  # "rise"
        return (p - p.cummin(1).values).max(1).values
    if p.shape[1] < 2:
        return p.new_zeros(p.shape[0])
    high, low = _held_true(p, hold), _held_false(p, hold)
    return (high[:, 1:] - low.cummin(1).values[:, :-1]).max(1).values.clamp(min=0.0)


def _held_true(p: torch.Tensor, hold: int) -> torch.Tensor:
    """``min(p[:, t : t + hold])`` for each ``t`` of ``[n, T]`` (the window cut at the end)."""
    k = min(hold, p.shape[1])
    return torch.cat([p, p.new_full((p.shape[0], k - 1), float("inf"))], 1).unfold(1, k, 1).min(-1).values


def _held_false(p: torch.Tensor, hold: int) -> torch.Tensor:
    """``max(p[:, s - hold + 1 : s + 1])`` for each ``s`` of ``[n, T]`` (the window cut at the start)."""
    k = min(hold, p.shape[1])
    return torch.cat([p.new_full((p.shape[0], k - 1), float("-inf")), p], 1).unfold(1, k, 1).max(-1).values
