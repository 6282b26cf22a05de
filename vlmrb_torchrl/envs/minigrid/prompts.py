"""The checks ``builtin:minigrid`` scores a MiniGrid / BabyAI task with, derived from its mission string.

:func:`mission_prompt_set` parses the mission (:func:`~vlmrb_torchrl.envs.minigrid.missions.parse_mission`)
and turns every sub-goal into a :class:`~vlmrb_torchrl.scorers.PromptCheck` made of the
statements the shipped model was trained on (their canonical wordings,
:func:`~vlmrb_torchrl.envs.minigrid.captions.wordings`), each positive against the
statements that are true exactly when it is false:

========================  ====================================================  ==========================================================  ===========
sub-goal                  positive                                              negatives                                                   aggregation
========================  ====================================================  ==========================================================  ===========
pick up X                 the agent holds X                                     X is on the floor                                           progress
unlock X (a locked door)  X is unlocked                                         X is locked                                                 progress
open X                    X is open                                             X is closed; there is no X                                  rise
go to X                   the agent faces X                                     the agent faces the empty floor; ... a wall;                max
                                                                                ... the other types in X's colour
put X next to Y           X is next to Y                                        X is not next to Y; the agent holds X                       progress
... and X picked up      the agent holds X                                     X is on the floor                                           rise
... and X put down       X is on the floor                                     the agent holds X                                           rise
get to the goal           the agent is on the goal                              the agent is next to the goal; ... is far from the goal     max
========================  ====================================================  ==========================================================  ===========

plus the sub-goals the mission implies: "open X" adds "pick up X's key" (the key of the door,
if it is locked), "put X next to Y" adds X's pickup and drop (``rise``: a scripted agent carries X
a few steps, so one clip often holds both; the drop stands in for "next to", which the frames barely
show), and a mission whose targets may lie
behind a door (the goal, an object) and that names no door itself adds "the agent faces the open
door" (``rise``, against facing a closed or locked door, the floor or a wall: opening or unlocking a
door means facing it, and in the agent-centred view "a door is open" or "unlocked" changes whenever
one turns into sight), and "the agent holds a key" (the key of
a locked door on the way) unless it names a key itself — where the env's layouts have doors
(``doors=True``, the default; the recipes and the benchmark pass ``doors=False`` for an env whose
first episodes show none, :func:`~vlmrb_torchrl.envs.minigrid.env.minigrid_has_doors`: in a single room
those checks can only fire on noise). Checks repeat nothing: the set is the
distinct checks in the mission's order. "X" without a colour is the colour-free statement
("the key"); BabyAI's "object" (a key, ball or box) gives one check per type; locations ("on
your left") are dropped (a frame shows where things are, not where they were at the start).

DoorKey's mission, "use the key to open the door and then get to the goal", gives exactly
:data:`~vlmrb_torchrl.scorers.builtin.MINIGRID_PROMPT_SET` (key, lock, goal), the set every
DoorKey measurement and study used.

Examples:
    >>> for check in mission_prompt_set("put the red ball next to the blue box"):
    ...     print(check.aggregation, check.positive, "|", "; ".join(check.negatives))
    progress the red ball is next to the blue box | the red ball is not next to the blue box; the agent holds the red ball
    rise the agent holds the red ball | the red ball is on the floor
    rise the red ball is on the floor | the agent holds the red ball
    rise the agent faces the open door | the agent faces the closed door; the agent faces the locked door; the agent faces the empty floor; the agent faces a wall
    progress the agent holds the key | the key is on the floor
"""

from __future__ import annotations

import warnings

from vlmrb_torchrl.envs.minigrid.missions import CARRYABLE, Mission, Subgoal, Thing, parse_mission
from vlmrb_torchrl.scorers.prompts import PromptCheck

__all__ = ["GENERIC_CHECKS", "MINIGRID_GOAL_PROMPT_SET", "MINIGRID_PROMPT_SET", "MISSION_MODELS", "MissionScorer",
           "mission_prompt_set", "minigrid_task_checks", "with_mission"]

#: The built-in MiniGrid models (``builtin:<name>``) whose checks derive from the mission (``task=``,
#: ``mission_key=``; the DQN recipe and the scorer-quality benchmark tell them the env's): ``minigrid`` reads
#: frames of the whole grid, ``minigrid_agent`` of the agent-centred view (``MiniGridEnv(frame_view="agent")``).
MISSION_MODELS = ("minigrid", "minigrid_agent")

#: The checks ``builtin:minigrid`` scores with (score = max over checks). The wordings are the
#: canonical ones of the training captions (``vlmrb_torchrl.envs.minigrid.captions``).
MINIGRID_PROMPT_SET: tuple[PromptCheck, ...] = (
    PromptCheck("the agent holds the key", ("the key is on the floor",), "progress"),
    PromptCheck("the door is unlocked", ("the door is locked",), "progress"),
    PromptCheck("the agent is on the goal", ("the agent is next to the goal", "the agent is far from the goal"), "max"),
)

#: ``builtin:minigrid_goal``: the same model asked only the VLM-RB paper's question, "a clear instance of
#: goal satisfaction": the goal check of :data:`MINIGRID_PROMPT_SET` alone, the labels of
#: ``oracle:minigrid_goal`` (key pickups and door openings score 0).
MINIGRID_GOAL_PROMPT_SET: tuple[PromptCheck, ...] = (MINIGRID_PROMPT_SET[2],)


def _say(*statement: str, wording: int = 0) -> str:
    from vlmrb_torchrl.envs.minigrid.captions import wordings

    return wordings(tuple(statement))[wording]


def _color(thing: Thing) -> str:
    return thing.color or "any"


def _kinds(thing: Thing) -> tuple[str, ...]:
    return CARRYABLE if thing.kind == "object" else (thing.kind,)


def _holds(thing: Thing, aggregation: str = "progress") -> list[PromptCheck]:
    return [PromptCheck(_say("holds", _color(thing), k), (_say("floor", _color(thing), k),), aggregation)
            for k in _kinds(thing)]


def _carried(thing: Thing) -> list[PromptCheck]:
    # What "put X next to Y" is made of: X picked up, then put down. Both `rise`: a scripted agent
    # carries X a few steps, so one clip often holds the pickup and the drop (`progress` then reads
    # nothing), and the drop stands in for "X is next to Y", a relation these frames barely show.
    dropped = [PromptCheck(_say("floor", _color(thing), k), (_say("holds", _color(thing), k),), "rise")
               for k in _kinds(thing)]
    return [*_holds(thing, "rise"), *dropped]


def _faced_open_door() -> PromptCheck:
    # An implied door is checked on the cell in front of the agent: in the agent-centred view "a door is
    # open" rises whenever an open door turns into sight (most of that view's false positives), while
    # opening a door means facing it.
    return PromptCheck(_say("faces_door", "open"), (_say("faces_door", "closed"), _say("faces_door", "locked"),
                                                    _say("faces", "any", "floor"), _say("faces", "any", "wall")), "rise")


def _goal() -> PromptCheck:
    return PromptCheck(_say("goal", "on"), (_say("goal", "next"), _say("goal", "far")), "max")


def _unlocked(color: str) -> PromptCheck:
    return PromptCheck(_say("door", color, "notlocked"), (_say("door", color, "locked"),), "progress")


def _opened(color: str) -> PromptCheck:
    return PromptCheck(_say("door", color, "open"), (_say("door", color, "closed"), _say("absent", color, "door")),
                       "rise")


def _faces(color: str, kind: str) -> PromptCheck:
    # Against what else the faced cell can hold, not against "does not face X": the complement
    # statement takes most of the mass even on frames that face X (ranked right, P < 0.5).
    others = tuple(_say("faces", color, k) for k in CARRYABLE if k != kind)
    return PromptCheck(_say("faces", color, kind), (_say("faces", "any", "floor"), _say("faces", "any", "wall"), *others),
                       "max")


def _checks(sub: Subgoal) -> list[PromptCheck]:
    target = sub.target
    if sub.verb == "reach":
        return [_goal()]
    if sub.verb == "pick_up":
        return _holds(target)
    if sub.verb == "open":
        if sub.locked:
            return [_unlocked(_color(target))]
        return [_opened(_color(target)), *_holds(Thing("key", target.color))]
    if sub.verb == "go_to":
        return [_faces(_color(target), k) for k in _kinds(target)]
    # put_next: colour-specific statements only (the model's "next to" statements name both colours)
    other = sub.other
    if target.color is None or other.color is None or "object" in (target.kind, other.kind):
        return _carried(target)
    a, b = sorted([(target.color, target.kind), (other.color, other.kind)])
    order = 0 if a == (target.color, target.kind) else 1  # the wording that names the moved object first
    placed = PromptCheck(_say("next", *a, *b, wording=order),
                         (_say("apart", *a, *b, wording=order), _say("holds", target.color, target.kind)), "progress")
    return [placed, *_carried(target)]


def mission_prompt_set(mission: str | Mission, *, doors: bool = True) -> tuple[PromptCheck, ...] | None:
    """The checks of a MiniGrid / BabyAI mission (see the module docstring); ``None`` when it does not parse.

    Args:
        mission (str or Mission): the env's mission string, or a parsed one.

    Keyword Args:
        doors (bool, optional): whether the env's layouts have doors. ``False`` leaves out the door and key
            checks the mission only implies (a door it names keeps its checks). Defaults to ``True``.

    Examples:
        >>> from vlmrb_torchrl.scorers.builtin import MINIGRID_PROMPT_SET
        >>> mission_prompt_set("use the key to open the door and then get to the goal") == MINIGRID_PROMPT_SET
        True
        >>> [c.positive for c in mission_prompt_set("go to the purple key, then open the red door")]
        ['the agent faces the purple key', 'the red door is open', 'the agent holds the red key']
        >>> mission_prompt_set("go to the matching object at the end of the hallway") is None
        True
        >>> [c.positive for c in mission_prompt_set("go to the red ball", doors=False)]  # a single room
        ['the agent faces the red ball']
    """
    parsed = parse_mission(mission) if isinstance(mission, str) else mission
    if parsed is None:
        return None
    checks: list[PromptCheck] = []
    for sub in parsed.subgoals:
        checks += _checks(sub)
    subs = parsed.subgoals
    names_door = any(s.verb == "open" or s.target.kind == "door" or (s.other is not None and s.other.kind == "door")
                     for s in subs)
    names_key = any(s.target.kind in ("key", "object") for s in subs if s.verb in ("pick_up", "put_next", "go_to"))
    if doors and not names_door and any(s.verb in ("reach", "pick_up", "go_to", "put_next") for s in subs):
        # the door to the target's room, and the key of a locked one
        checks.append(_faced_open_door())  # a locked door opens when unlocked: one check for both
        if not names_key:
            checks += _holds(Thing("key"))
    return tuple(dict.fromkeys(checks))


#: The checks of an unparsable mission (and of ``builtin:minigrid`` without a task): DoorKey's
#: key, lock and goal (:data:`~vlmrb_torchrl.scorers.builtin.MINIGRID_PROMPT_SET`).
GENERIC_CHECKS: tuple[PromptCheck, ...] = (
    PromptCheck(_say("holds", "any", "key"), (_say("floor", "any", "key"),), "progress"),
    _unlocked("any"),
    _goal(),
)


def minigrid_task_checks(task: str | None, *, owner: str = "builtin:minigrid",
                         doors: bool = True) -> tuple[tuple[PromptCheck, ...], str]:
    """The checks for ``task`` and where they come from: ``"mission"`` (derived), ``"generic"`` (the
    mission does not parse: :data:`GENERIC_CHECKS`, with a one-line warning) or ``"default"`` (no task).
    ``doors`` goes to :func:`mission_prompt_set`.

    Examples:
        >>> checks, source = minigrid_task_checks("pick up the blue ball")
        >>> source, checks[0].positive
        ('mission', 'the agent holds the blue ball')
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     checks, source = minigrid_task_checks("go to the matching object at the end of the hallway")
        >>> source, checks == GENERIC_CHECKS, str(caught[0].message)[:52]
        ('generic', True, "builtin:minigrid: cannot read the mission 'go to the")
    """
    if task is None:
        return GENERIC_CHECKS, "default"
    checks = mission_prompt_set(task, doors=doors)
    if checks is None:
        warnings.warn(f"{owner}: cannot read the mission {task!r} (outside the MiniGrid/BabyAI grammar); scoring "
                      "with the generic checks (key picked up, door unlocked, goal reached).", UserWarning, stacklevel=3)
        return GENERIC_CHECKS, "generic"
    return checks, "mission"


def with_mission(scorer, mission: str | None, *, owner: str = "builtin:minigrid", doors: bool = True):
    """``scorer`` (an :class:`~vlmrb_torchrl.scorers.HFContrastiveScorer`, e.g. ``builtin:minigrid``)
    scoring the checks of another mission, sharing its model and frame-embedding cache
    (:meth:`~vlmrb_torchrl.scorers.HFContrastiveScorer.with_prompt_set`): for envs whose mission
    changes every episode (most BabyAI levels, GoToObject, Fetch, PutNear, ...). ``doors`` goes to
    :func:`mission_prompt_set`.

    Examples:
        >>> from vlmrb_torchrl.scorers import make_scorer
        >>> base = make_scorer("builtin:minigrid")
        >>> scorer = with_mission(base, "pick up the green box")
        >>> scorer.provenance["checks_from"], scorer.prompt_set[0].positive, scorer.model is base.model
        ('mission', 'the agent holds the green box', True)
    """
    checks, source = minigrid_task_checks(mission, owner=owner, doors=doors)
    out = scorer.with_prompt_set(checks, task=mission)
    out.provenance.update(task=mission, checks_from=source)
    return out


class MissionScorer:
    """``builtin:minigrid`` scoring each clip with the checks of its own episode's mission.

    For envs whose mission changes every episode (most BabyAI levels, GoToObject, Fetch,
    PutNear, KeyCorridor, ...), one prompt set cannot follow the task. The env writes each
    step's mission (:class:`~vlmrb_torchrl.envs.MiniGridEnv` with ``write_mission=True``: the
    ``"mission"`` entry, :func:`~vlmrb_torchrl.envs.minigrid.missions.encode_mission`), clips
    carry it, and this scorer groups a batch's clips by the mission of their first real step and
    scores each group with :func:`with_mission`'s checks for it: the same model, one frame
    embedding per frame whatever the number of missions (the checks share the base scorer's
    frame cache), the derived checks kept for the last ``cache_size`` missions.

    Args:
        base (HFContrastiveScorer): the model (``make_scorer("builtin:minigrid")``).
        mission_key (NestedKey, optional): the clips' mission entry. Defaults to ``"mission"``.

    Keyword Args:
        cache_size (int, optional): missions whose checks are kept. Defaults to ``1024``.
        doors (bool, optional): whether the env's layouts have doors (:func:`mission_prompt_set`).
            Defaults to ``True``.

    Attributes:
        in_keys: the base scorer's (frames, mask) and ``mission_key``.
        prompt (str): says that the checks come from each clip's mission.
        provenance (dict): the base scorer's, with ``task="per-clip mission"``,
            ``checks_from="mission per clip"`` and ``mission_key``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.envs.minigrid.missions import encode_mission
        >>> from vlmrb_torchrl.scorers import make_scorer
        >>> scorer = make_scorer("builtin:minigrid", mission_key="mission")
        >>> missions = torch.stack([torch.from_numpy(encode_mission(m)) for m in ("go to the red ball", "open the door")])
        >>> clips = TensorDict(pixels=torch.zeros(2, 3, 64, 64, 3, dtype=torch.uint8),
        ...                    mask=torch.ones(2, 3, dtype=torch.bool),
        ...                    mission=missions.unsqueeze(1).expand(2, 3, -1), batch_size=[2, 3])
        >>> scorer.score(clips).shape, sorted(scorer.missions_seen())
        (torch.Size([2]), ['go to the red ball', 'open the door'])
    """

    def __init__(self, base, mission_key="mission", *, cache_size: int = 1024, doors: bool = True) -> None:
        import threading
        from collections import OrderedDict

        from vlmrb_torchrl._keys import is_nested_key

        if not hasattr(base, "with_prompt_set"):
            raise TypeError(f"MissionScorer needs a contrastive scorer with with_prompt_set (builtin:minigrid), "
                            f"got {type(base).__name__}.")
        if not is_nested_key(mission_key):
            raise TypeError(f"MissionScorer.mission_key must be a str or a tuple of str, got {mission_key!r}.")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"MissionScorer.cache_size must be an int >= 1, got {cache_size!r}.")
        self.base = base
        self.mission_key = mission_key
        self.cache_size = cache_size
        self.doors = bool(doors)
        self.frame_key, self.mask_key = base.frame_key, base.mask_key
        self.max_frames = base.max_frames
        self.in_keys = [*base.in_keys, mission_key]
        self.name = f"MissionScorer({base.name})"
        self.provenance = {**base.provenance, "task": "per-clip mission", "checks_from": "mission per clip",
                           "mission_key": mission_key, **({} if doors else {"doors": False})}
        from vlmrb_torchrl.scorers._hashing import prompt_hash

        for key in ("prompt_set", "negatives", "negatives_hash"):
            self.provenance.pop(key, None)
        self.prompt = "checks derived per clip from its episode's mission (builtin:minigrid)"
        self.provenance.update(prompt=self.prompt, prompt_hash=prompt_hash(self.prompt))
        self._scorers: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.RLock()

    def scorer_for(self, mission: str):
        """The base model scoring ``mission``'s checks (built once per mission, then kept)."""
        with self._lock:
            scorer = self._scorers.get(mission)
            if scorer is None:
                scorer = self._scorers[mission] = with_mission(self.base, mission, doors=self.doors)
                while len(self._scorers) > self.cache_size:
                    self._scorers.popitem(last=False)
            else:
                self._scorers.move_to_end(mission)
            return scorer

    def missions_seen(self) -> list[str]:
        """The missions whose checks are kept (most recent last)."""
        with self._lock:
            return list(self._scorers)

    def score(self, clips):
        """Each clip scored with its mission's checks: float32 ``[B]`` in ``[0, 1]``."""
        import torch

        from vlmrb_torchrl.envs.minigrid.missions import decode_mission
        from vlmrb_torchrl.scorers.base import check_clips, validate_scores

        batch = check_clips(clips, self.in_keys, scorer=self)
        codes = clips.get(self.mission_key)
        mask = clips.get(self.mask_key).bool()
        first = mask.int().argmax(1)  # the first real step (a clip has at least one)
        rows = codes[torch.arange(batch), first].reshape(batch, -1).cpu().numpy()
        groups: dict[bytes, list[int]] = {}
        for i, row in enumerate(rows):
            groups.setdefault(row.tobytes(), []).append(i)
        out = torch.zeros(batch, dtype=torch.float32)
        for code, idx in groups.items():
            mission = decode_mission(rows[idx[0]])
            index = torch.tensor(idx)
            out[index] = self.scorer_for(mission).score(clips[index]).float().cpu()
        return validate_scores(out, batch, scorer=self)

    def __reduce__(self):
        # the base pickles as its arguments (a reload); the per-mission checks are rebuilt on demand
        return (type(self), (self.base, self.mission_key), {"cache_size": self.cache_size, "doors": self.doors})

    def __setstate__(self, state: dict) -> None:
        self.cache_size = state["cache_size"]
        self.doors = state.get("doors", True)
        if not self.doors:
            self.provenance["doors"] = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base={self.base!r}, mission_key={self.mission_key!r})"
