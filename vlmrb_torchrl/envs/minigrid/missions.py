"""MiniGrid and BabyAI missions: what a mission string asks for, and when an episode reaches it.

Two things live here:

- :func:`parse_mission` reads a mission string of the MiniGrid / BabyAI grammar into a
  :class:`Mission`: ordered groups of :class:`Subgoal` (go to / pick up / open / put next to an
  object described by colour and type, or reach the goal tile), with "then" and "after you"
  sequences and "and" conjunctions, plus the MiniGrid missions' own phrasings ("use the key to
  open the door and then get to the goal", "get a blue key", "put the red ball near the green
  box", "get the red key from the blue room, unlock the red door and go to the goal", ...). A
  string outside the grammar gives ``None``.
- :class:`MissionTracker` follows an episode of a raw minigrid env against a parsed mission and
  says on which steps a *sub-goal* is reached for the first time: the mission's own sub-goals
  (in their order) and the ones its layout implies (the key of a locked door on the way, the
  doors on the way to a target). The env's oracle events (:class:`~vlmrb_torchrl.envs.MiniGridEnv`'s
  ``"subgoal"`` flag) come from it.

Neither imports minigrid: the tracker reads the env objects handed to it.

Examples:
    >>> m = parse_mission("go to the red ball, then pick up a blue key")
    >>> [[(s.verb, s.target.text) for s in group] for group in m.steps]
    [[('go_to', 'the red ball')], [('pick_up', 'the blue key')]]
    >>> [s.verb for s in parse_mission("use the key to open the door and then get to the goal").subgoals]
    ['pick_up', 'open', 'reach']
    >>> parse_mission("go to the matching object at the end of the hallway") is None
    True
"""

from __future__ import annotations

import dataclasses
import re
from collections import deque
from typing import Any

__all__ = ["COLORS", "OBJECT_KINDS", "MISSION_BYTES", "Thing", "Subgoal", "Mission", "parse_mission", "MissionTracker",
           "encode_mission", "decode_mission"]

#: MiniGrid's colours (``minigrid.core.constants.COLOR_NAMES``).
COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
#: What a mission can name: BabyAI's object types, ``"object"`` (a key, ball or box) and the goal tile.
OBJECT_KINDS = ("key", "ball", "box", "door", "object", "goal")
#: Objects an agent can carry.
CARRYABLE = ("key", "ball", "box")
_LOCATIONS = {"in front of you": "front", "behind you": "behind", "on your left": "left", "on your right": "right"}
VERBS = ("go_to", "pick_up", "open", "put_next", "reach")

_COLOR = "|".join(COLORS)
_DESC = (rf"(?:the|a|an) (?:(?P<{{p}}color>{_COLOR}) )?(?P<{{p}}kind>key|ball|box|door|object)"
         rf"(?: (?P<{{p}}loc>{'|'.join(_LOCATIONS)}))?")


def _desc(prefix: str = "") -> str:
    return _DESC.replace("{p}", prefix)


@dataclasses.dataclass(frozen=True)
class Thing:
    """An object a mission names: its kind, and its colour and location when the mission gives them.

    Attributes:
        kind (str): ``"key"``, ``"ball"``, ``"box"``, ``"door"``, ``"object"`` (any of key, ball,
            box) or ``"goal"`` (the green goal tile).
        color (str or None): one of :data:`COLORS`; ``None``: any colour.
        loc (str or None): BabyAI's location relative to the agent's starting pose (``"front"``,
            ``"behind"``, ``"left"``, ``"right"``); ``None``: anywhere.

    Examples:
        >>> Thing("ball", "red").text, Thing("door").text, Thing("object", "green", "left").text
        ('the red ball', 'the door', 'the green object on your left')
    """

    kind: str
    color: str | None = None
    loc: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in OBJECT_KINDS:
            raise ValueError(f"Thing.kind must be one of {OBJECT_KINDS}, got {self.kind!r}.")
        if self.color is not None and self.color not in COLORS:
            raise ValueError(f"Thing.color must be None or one of {COLORS}, got {self.color!r}.")
        if self.loc is not None and self.loc not in _LOCATIONS.values():
            raise ValueError(f"Thing.loc must be None or one of {tuple(_LOCATIONS.values())}, got {self.loc!r}.")

    @property
    def text(self) -> str:
        """``"the [colour] kind [location]"``."""
        words = ["the", *([self.color] if self.color else []), self.kind]
        if self.loc:
            words.append(next(k for k, v in _LOCATIONS.items() if v == self.loc))
        return " ".join(words)

    def matches(self, obj: Any) -> bool:
        """Whether a minigrid world object fits the description (colour and kind; not the location)."""
        if obj is None:
            return False
        if self.kind == "object":
            kind_ok = obj.type in CARRYABLE
        else:
            kind_ok = obj.type == self.kind
        return kind_ok and (self.color is None or obj.color == self.color)


@dataclasses.dataclass(frozen=True)
class Subgoal:
    """One thing a mission asks for.

    Attributes:
        verb (str): ``"go_to"`` (face the target, BabyAI's rule), ``"pick_up"``, ``"open"`` (a
            door), ``"put_next"`` (drop ``target`` next to ``other``) or ``"reach"`` (stand on
            the goal tile).
        target (Thing): what the verb acts on.
        other (Thing or None): ``put_next``'s fixed object.
        near (bool): ``put_next`` accepts a diagonal neighbour (MiniGrid's PutNear "near"),
            not only the four side neighbours (BabyAI's "next to").
        locked (bool): ``open``: the mission says the door is locked ("use the key to open the
            door", "unlock the red door").
    """

    verb: str
    target: Thing
    other: Thing | None = None
    near: bool = False
    locked: bool = False

    def __post_init__(self) -> None:
        if self.verb not in VERBS:
            raise ValueError(f"Subgoal.verb must be one of {VERBS}, got {self.verb!r}.")
        if (self.verb == "put_next") != (self.other is not None):
            raise ValueError("Subgoal.other is put_next's fixed object: given for put_next, and only for it.")
        if self.verb == "open" and self.target.kind != "door":
            raise ValueError(f"Subgoal('open', ...) needs a door, got {self.target.text!r}.")
        if self.verb in ("pick_up", "put_next") and self.target.kind not in (*CARRYABLE, "object"):
            raise ValueError(f"Subgoal({self.verb!r}, ...) needs a key, ball, box or object, got {self.target.text!r}.")
        if self.verb == "reach" and self.target.kind != "goal":
            raise ValueError(f"Subgoal('reach', ...) is for the goal tile, got {self.target.text!r}.")

    @property
    def text(self) -> str:
        """The sub-goal in words (``"pick up the red ball"``)."""
        if self.verb == "put_next":
            return f"put {self.target.text} {'near' if self.near else 'next to'} {self.other.text}"
        return {"go_to": "go to", "pick_up": "pick up", "open": "unlock" if self.locked else "open",
                "reach": "get to"}[self.verb] + " " + self.target.text


@dataclasses.dataclass(frozen=True)
class Mission:
    """A parsed mission: groups of sub-goals done in order; a group's sub-goals in any order.

    Attributes:
        text (str): the mission string as given.
        steps (tuple of tuple of Subgoal): "A, then B" is ``((A,), (B,))``, "A after you B"
            ``((B,), (A,))``, "A and B" ``((A, B),)``.
    """

    text: str
    steps: tuple[tuple[Subgoal, ...], ...]

    @property
    def subgoals(self) -> tuple[Subgoal, ...]:
        """Every sub-goal, group by group."""
        return tuple(s for group in self.steps for s in group)


class _Unparsable(ValueError):
    pass


_THEN = re.compile(r",? and then |, then | then |, and |; ")
_AND = re.compile(r" and |, ")
_IGNORED = ("avoid the lava", "find the opening", "avoid the obstacles")
_GOAL = re.compile(r"^(?:go to|get to|reach|go get to|move to|go|get) the (?:green )?goal(?: square| tile)?$")


def _thing(match: re.Match, prefix: str = "") -> Thing:
    loc = match.group(f"{prefix}loc")
    return Thing(match.group(f"{prefix}kind"), match.group(f"{prefix}color"), _LOCATIONS[loc] if loc else None)


def _clause(text: str, previous_verb: str | None) -> tuple[list[tuple[Subgoal, ...]], str | None]:
    """One clause -> its groups of sub-goals (most clauses: one group of one) and its verb."""
    if text in _IGNORED:
        return [], previous_verb
    m = re.fullmatch(r"traverse the rooms to (.+)", text)
    if m:  # the rooms' doors are implied sub-goals of the goal (the tracker finds them)
        return _clause(m.group(1), previous_verb)
    if _GOAL.fullmatch(text):
        return [(Subgoal("reach", Thing("goal")),)], "reach"
    m = re.fullmatch(rf"use {_desc('a')} to (?:open|unlock) {_desc('b')}", text)
    if m:
        key, door = _thing(m, "a"), _thing(m, "b")
        if key.kind not in CARRYABLE or door.kind != "door":
            raise _Unparsable(text)
        return [(Subgoal("pick_up", key),), (Subgoal("open", door, locked=True),)], "open"
    m = re.fullmatch(rf"(?:get|pick up|take|grab) {_desc()} from the (?P<room>{_COLOR}) room", text)
    if m:  # LockedRoom: a room's door has the room's colour
        return [(Subgoal("open", Thing("door", m.group("room"))),), (Subgoal("pick_up", _thing(m)),)], "pick_up"
    m = re.fullmatch(rf"put {_desc('a')} (?P<rel>next to|near|beside) {_desc('b')}", text)
    if m:
        return [(Subgoal("put_next", _thing(m, "a"), _thing(m, "b"), near=m.group("rel") == "near"),)], "put_next"
    m = re.fullmatch(rf"(?P<verb>go to|pick up|open|unlock|(?:go |you must )?(?:get|fetch)|go get) {_desc()}", text)
    if m:
        verb = m.group("verb")
        verb = {"go to": "go_to", "open": "open", "unlock": "open"}.get(verb, "pick_up")
        return [(Subgoal(verb, _thing(m), locked=m.group("verb") == "unlock"),)], verb
    m = re.fullmatch(_desc(), text)
    if m and previous_verb in ("go_to", "pick_up", "open"):  # "open the red door then the blue door"
        return [(Subgoal(previous_verb, _thing(m)),)], previous_verb
    raise _Unparsable(text)


def _sequence(text: str) -> list[tuple[Subgoal, ...]]:
    groups: list[tuple[Subgoal, ...]] = []
    verb = None
    for part in _THEN.split(text):
        conj: list[Subgoal] = []
        for clause in _AND.split(part):
            sub, verb = _clause(clause.strip(), verb)
            if len(sub) > 1:  # an ordered clause ("use the key to open the door") inside "and"
                if conj:
                    groups.append(tuple(conj))
                    conj = []
                groups.extend(sub[:-1])
                conj.extend(sub[-1])
            elif sub:
                conj.extend(sub[0])
        if conj:
            groups.append(tuple(conj))
    return groups


def parse_mission(text: str) -> Mission | None:
    """Parses a MiniGrid / BabyAI mission string; ``None`` when it is outside the grammar.

    Grammar (lower-cased, a final period ignored): BabyAI's ``go to`` / ``pick up`` / ``open`` /
    ``put ... next to`` with ``the`` / ``a`` + optional colour + ``key`` / ``ball`` / ``box`` /
    ``door`` / ``object`` + optional location (``in front of you``, ``behind you``, ``on your
    left`` / ``right``); ``A and B``, ``A, then B``, ``A after you B``; MiniGrid's ``get to the
    (green) goal (square)``, ``reach the goal``, ``traverse the rooms to get to the goal``,
    ``avoid the lava and ...``, ``find the opening and ...``, ``use the key to open the door and
    then ...``, ``(go) get / fetch a ...``, ``you must fetch a ...``, ``put ... near ...``, ``get
    the red key from the blue room, unlock the red door and go to the goal``, ``open the red
    door then the blue door``.

    Args:
        text (str): the mission (``env.mission``).

    Returns:
        Mission or None.

    Examples:
        >>> m = parse_mission("put the red ball next to the blue box after you open a door")
        >>> [[s.text for s in group] for group in m.steps]
        [['open the door'], ['put the red ball next to the blue box']]
        >>> [s.text for s in parse_mission("open the red door then the blue door").subgoals]
        ['open the red door', 'open the blue door']
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_mission expects the mission str, got {type(text).__name__}.")
    norm = " ".join(text.lower().strip().rstrip(".").split())
    if not norm:
        return None
    try:
        if " after you " in norm:
            then, first = norm.split(" after you ", 1)
            groups = _sequence(first) + _sequence(then)
        else:
            groups = _sequence(norm)
    except ValueError:  # _Unparsable, or a clause naming an impossible sub-goal ("pick up the red door")
        return None
    if not groups:
        return None
    return Mission(text, tuple(groups))


# ----------------------------------------------------------------------------------------- tracking
_DIRS = ((1, 0), (0, 1), (-1, 0), (0, -1))


def _cells(menv: Any) -> list[tuple[int, int, Any]]:
    grid = menv.grid
    return [(i % grid.width, i // grid.width, o) for i, o in enumerate(grid.grid) if o is not None]


def _loc_filter(menv: Any, thing: Thing, x: int, y: int) -> bool:
    """BabyAI's location rule: relative to the agent's start pose, objects of its starting room only."""
    if thing.loc is None:
        return True
    room_from_pos = getattr(menv, "room_from_pos", None)
    ax, ay = int(menv.agent_pos[0]), int(menv.agent_pos[1])
    if room_from_pos is not None and not room_from_pos(ax, ay).pos_inside(x, y):
        return False
    vx, vy = x - ax, y - ay
    d1 = _DIRS[int(menv.agent_dir)]
    d2 = (-d1[1], d1[0])
    along, side = vx * d1[0] + vy * d1[1], vx * d2[0] + vy * d2[1]
    return {"front": along > 0, "behind": along < 0, "left": side < 0, "right": side > 0}[thing.loc]


def _doors_on_way(menv: Any, targets: set[tuple[int, int]], *, onto: bool) -> list[Any]:
    """The closed doors on a shortest way from the agent to a target cell (``onto``) or a cell
    next to one: walls block, doors and objects do not (doors get opened, objects moved); among
    shortest ways, one through the fewest closed doors."""
    grid = menv.grid
    start = (int(menv.agent_pos[0]), int(menv.agent_pos[1]))
    goals = set(targets) if onto else {(tx + dx, ty + dy) for tx, ty in targets for dx, dy in _DIRS}
    if start in goals:
        return []
    # 0-1 BFS on (closed doors crossed, steps): fewest doors first
    best = {start: (0, 0)}
    parent: dict[tuple[int, int], tuple[int, int] | None] = {start: None}
    queue = deque([start])
    found = None
    while queue:
        cell = queue.popleft()
        if cell in goals:
            if found is None or best[cell] < best[found]:
                found = cell
            continue
        for dx, dy in _DIRS:
            nxt = (cell[0] + dx, cell[1] + dy)
            if not (0 <= nxt[0] < grid.width and 0 <= nxt[1] < grid.height):
                continue
            obj = grid.get(*nxt)
            if obj is not None and obj.type in ("wall", "lava"):
                continue
            if nxt in targets and not onto:
                continue
            closed = obj is not None and obj.type == "door" and not obj.is_open
            cost = (best[cell][0] + int(closed), best[cell][1] + 1)
            if nxt not in best or cost < best[nxt]:
                best[nxt] = cost
                parent[nxt] = cell
                if closed:
                    queue.append(nxt)
                else:
                    queue.appendleft(nxt)
    doors = []
    while found is not None:
        obj = grid.get(*found)
        if obj is not None and obj.type == "door" and not obj.is_open:
            doors.append(obj)
        found = parent[found]
    return doors[::-1]


class MissionTracker:
    """Follows an episode against a parsed mission: which steps reach a sub-goal for the first time.

    At :meth:`reset` (after the env's reset) it resolves the mission's objects in the grid and
    adds the sub-goals the layout implies: for every target (and for every key it adds), the
    closed doors on a shortest way from the agent's start to it become "open" sub-goals, and a
    locked one adds "pick up" of a key of its colour (as does a locked door the mission asks to
    open); "put X next to Y" adds "pick up X". :meth:`step` (after each env step) says whether a sub-goal was reached on that step:

    - ``pick_up``: the agent starts carrying a matching object (once per object);
    - ``open``: a matching door opens (once per door);
    - ``go_to``: the agent faces a matching object (once per object);
    - ``put_next``: the agent drops the moved object next to (``near``: or diagonal to) a fixed
      one (once per object);
    - ``reach``: the agent steps onto the goal tile (once per tile).

    The mission's own sub-goals count only once every earlier group of the mission has been
    reached ("A, then B": doing B before A is not progress, as in BabyAI's verifier); implied ones
    count whenever they happen. Success itself is the env's (its reward).

    Args:
        mission (Mission): the parsed mission.

    Attributes:
        implied (list of Subgoal): the sub-goals the layout adds (after :meth:`reset`).

    Examples:
        >>> import gymnasium, minigrid
        >>> env = gymnasium.make("MiniGrid-KeyCorridorS3R1-v0").unwrapped
        >>> _ = env.reset(seed=0)
        >>> tracker = MissionTracker(parse_mission(env.mission))
        >>> tracker.reset(env)
        >>> env.mission, [s.text for s in tracker.implied]
        ('pick up the purple ball', ['unlock the yellow door', 'pick up the yellow key', 'open the blue door'])
    """

    def __init__(self, mission: Mission) -> None:
        if not isinstance(mission, Mission):
            raise TypeError(f"MissionTracker needs a Mission (parse_mission(...)), got {type(mission).__name__}.")
        self.mission = mission
        self.implied: list[Subgoal] = []

    # ------------------------------------------------------------------ reset
    def reset(self, menv: Any) -> None:
        """Resolves the mission in the env's fresh layout (call after the env's reset)."""
        self._menv = menv
        cells = _cells(menv)
        self._pos = {id(o): (x, y) for x, y, o in cells}
        self._doors = [o for _, _, o in cells if o.type == "door"]
        self._was_open = {id(d): bool(d.is_open) for d in self._doors}
        self._carrying = menv.carrying
        self._group = 0
        self._pending = [set(range(len(g))) for g in self.mission.steps]
        self._done: set[tuple[int, int]] = set()  # (sub-goal, object) pairs already reported
        self._objs = {id(s): self._resolve(cells, s.target) for s in self.mission.subgoals}
        self._fixed = {id(s): self._resolve(cells, s.other) for s in self.mission.subgoals if s.other is not None}
        self.implied = []
        self._implied_objs: list[tuple[Subgoal, list[Any]]] = []
        taken = {id(o) for s in self.mission.subgoals if s.verb in ("open", "pick_up") for o in self._objs[id(s)]}
        todo: list[tuple[list[Any], bool]] = []
        for sub in self.mission.subgoals:
            todo.append((self._objs[id(sub)] + self._fixed.get(id(sub), []), sub.verb == "reach"))
            if sub.verb == "put_next":  # the object is picked up before it is put down
                grab = Subgoal("pick_up", sub.target)
                self.implied.append(grab)
                self._implied_objs.append((grab, [o for o in self._objs[id(sub)] if o is not menv.carrying]))
            if sub.verb == "open":
                for door in self._objs[id(sub)]:
                    if door.is_locked:
                        self._add_key(cells, door.color, taken, todo)
        while todo:  # the doors on the way to each target, and the keys of the locked ones
            objs, onto = todo.pop(0)
            targets = {self._pos[id(o)] for o in objs if id(o) in self._pos}
            for door in _doors_on_way(menv, targets, onto=onto) if targets else ():
                if id(door) in taken:
                    continue
                taken.add(id(door))
                sub = Subgoal("open", Thing("door", door.color), locked=bool(door.is_locked))
                self.implied.append(sub)
                self._implied_objs.append((sub, [door]))
                if door.is_locked:
                    self._add_key(cells, door.color, taken, todo)

    def _add_key(self, cells, color: str, taken: set[int], todo: list) -> None:
        carried = self._menv.carrying
        if carried is not None and carried.type == "key" and carried.color == color:
            return
        keys = [o for _, _, o in cells if o.type == "key" and o.color == color]
        boxes = [o for _, _, o in cells if o.type == "box" and getattr(o, "contains", None) is not None
                 and o.contains.type == "key" and o.contains.color == color]
        objs = keys + [b.contains for b in boxes]
        if not objs or any(id(o) in taken for o in objs):
            return
        taken.update(id(o) for o in objs)
        sub = Subgoal("pick_up", Thing("key", color))
        self.implied.append(sub)
        self._implied_objs.append((sub, objs))
        todo.append((keys + boxes, False))

    def _resolve(self, cells, thing: Thing) -> list[Any]:
        if thing.kind == "goal":
            return [o for _, _, o in cells if o.type == "goal"]
        out = [o for x, y, o in cells if thing.matches(o) and _loc_filter(self._menv, thing, x, y)]
        carried = self._menv.carrying
        if carried is not None and thing.loc is None and thing.matches(carried):
            out.append(carried)
        return out

    # ------------------------------------------------------------------ steps
    def _hit(self, sub: Subgoal, objs: list[Any]) -> Any:
        """The object with which ``sub`` is fulfilled on this step, else ``None``."""
        menv = self._menv
        if sub.verb == "pick_up":
            carrying = menv.carrying
            if carrying is not None and carrying is not self._carrying and any(carrying is o for o in objs):
                return carrying
        elif sub.verb == "open":
            return next((d for d in objs if d.is_open and not self._was_open.get(id(d), True)), None)
        elif sub.verb == "go_to":
            fx, fy = int(menv.front_pos[0]), int(menv.front_pos[1])
            grid = menv.grid
            front = grid.get(fx, fy) if 0 <= fx < grid.width and 0 <= fy < grid.height else None
            if front is not None and any(front is o for o in objs):
                return front
        elif sub.verb == "reach":
            here = menv.grid.get(int(menv.agent_pos[0]), int(menv.agent_pos[1]))
            if here is not None and here.type == "goal":
                return here
        elif sub.verb == "put_next":
            moved = self._carrying
            if moved is None or menv.carrying is not None or not any(moved is o for o in objs):
                return None
            fx, fy = int(menv.front_pos[0]), int(menv.front_pos[1])  # where it was dropped
            if menv.grid.get(fx, fy) is not moved:
                return None
            fixed = {id(o) for o in self._fixed[id(sub)] if o is not moved}
            for x, y, o in _cells(menv):
                dx, dy = abs(x - fx), abs(y - fy)
                if id(o) in fixed and (dx + dy == 1 or (sub.near and max(dx, dy) == 1)):
                    return moved
        return None

    def _reached(self, sub: Subgoal, objs: list[Any]) -> bool:
        hit = self._hit(sub, objs)
        if hit is None or (id(sub), id(hit)) in self._done:
            return False
        self._done.add((id(sub), id(hit)))
        return True

    def step(self) -> bool:
        """Whether a sub-goal (the mission's, in order, or an implied one) was reached on the last step."""
        reached = False
        for sub, objs in self._implied_objs:
            reached |= self._reached(sub, objs)
        while self._group < len(self.mission.steps):
            group, pending = self.mission.steps[self._group], self._pending[self._group]
            for i in sorted(pending):
                if self._reached(group[i], self._objs[id(group[i])]):
                    reached = True
                    pending.discard(i)
            if pending:
                break
            self._group += 1
        for door in self._doors:
            self._was_open[id(door)] = bool(door.is_open)
        self._carrying = self._menv.carrying
        return reached

    @property
    def complete(self) -> bool:
        """Every group of the mission's own sub-goals has been reached."""
        return self._group >= len(self.mission.steps)


# ----------------------------------------------------------------------------------------- per-step entry
#: Bytes of the ``"mission"`` entry :class:`~vlmrb_torchrl.envs.MiniGridEnv` writes with
#: ``write_mission=True``: the mission's UTF-8 bytes, zero-padded (BabyAI's longest missions
#: have ~150 characters).
MISSION_BYTES = 256


def encode_mission(text: str) -> Any:
    """A mission string as the uint8 ``[MISSION_BYTES]`` array the env writes (UTF-8, zero-padded).

    Raises:
        ValueError: the mission does not fit.

    Examples:
        >>> decode_mission(encode_mission("go to the red ball"))
        'go to the red ball'
    """
    import numpy as np

    raw = text.encode("utf-8")
    if len(raw) > MISSION_BYTES:
        raise ValueError(f"the mission {text!r} has {len(raw)} bytes; the per-step entry holds {MISSION_BYTES}.")
    out = np.zeros(MISSION_BYTES, dtype=np.uint8)
    out[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return out


def decode_mission(array: Any) -> str:
    """The mission string of an :func:`encode_mission` array (numpy or torch, ``[MISSION_BYTES]``)."""
    import numpy as np

    data = np.asarray(array, dtype=np.uint8).reshape(-1).tobytes()
    return data.rstrip(b"\0").decode("utf-8")
