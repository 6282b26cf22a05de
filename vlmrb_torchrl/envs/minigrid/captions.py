"""Captions from MiniGrid states: compositional statements (object, colour, state) and their wordings.

A frame's :class:`~vlmrb_torchrl.envs.minigrid.policies.MiniGridState` is turned into the set
of *statements* true in it (:func:`true_statements`): what the agent holds, which objects lie
on the floor, each door's state, what the agent faces (and does not face), where the goal is,
which room the agent is in, which objects lie next to each other (and which do not), which
objects are absent. Statements are tuples such as ``("holds", "yellow", "key")`` or ``("door", "any",
"open")``; every statement not in the set is false in that frame, which is what makes the
contrastive loss's negatives exact. :func:`wordings` gives each statement 1-4 English
sentences; a caption joins 1-3 true statements with "and". The vocabulary is compositional
(6 colours x key/ball/box/door, door states, faced cells), so prompts for MiniGrid tasks the
model was not trained on ("the agent holds the red ball") are made of words it knows. The
complements ("the agent does not face the red ball", "the red ball is not next to the blue
box", "there is no red ball") are statements of their own, so that a check of a mission's
sub-goal (:mod:`vlmrb_torchrl.envs.minigrid.prompts`) has a negative that is true exactly
when its positive is false.
"""

from __future__ import annotations

from collections.abc import Iterable

from vlmrb_torchrl.envs.minigrid.missions import CARRYABLE, COLORS
from vlmrb_torchrl.envs.minigrid.policies import MiniGridState

__all__ = ["COLORS", "OBJECTS", "Statement", "true_statements", "wordings", "all_statements", "vocabulary",
           "mirrored_left_right", "mirrored_up_down", "opposites"]

#: The objects captions name: the ones an agent can carry (MiniGrid's colours: ``COLORS``, from
#: :mod:`vlmrb_torchrl.envs.minigrid.missions`).
OBJECTS = CARRYABLE
# closed: not open; unlocked: closed and not locked; notlocked: open or closed, not locked
DOOR_STATES = ("open", "closed", "locked", "unlocked", "notlocked")
FACED = ("key", "ball", "box", "door", "goal", "wall", "lava", "floor")
#: What "does not face", "is absent" and "is next to" statements name (colour or "any").
NAMED = (*OBJECTS, "door")

Statement = tuple[str, ...]


def true_statements(state: MiniGridState) -> frozenset[Statement]:
    """Every statement true in ``state`` (all others are false).

    Examples:
        >>> from vlmrb_torchrl.envs.minigrid.policies import MiniGridState
        >>> s = MiniGridState(("yellow", "key"), (), (("yellow", "locked"),), ("yellow", "door", "locked"),
        ...                   False, 3, "left")
        >>> sorted(t for t in true_statements(s) if t[0] == "door")[:4]
        [('door', 'any', 'closed'), ('door', 'any', 'locked'), ('door', 'yellow', 'closed'), ('door', 'yellow', 'locked')]
        >>> sorted(t for t in true_statements(s) if t[0] == "absent")[:3]
        [('absent', 'any', 'ball'), ('absent', 'any', 'box'), ('absent', 'blue', 'ball')]
    """
    out: set[Statement] = set()
    if state.carrying is None:
        out.add(("holds_nothing",))
    else:
        color, kind = state.carrying
        if kind in OBJECTS:
            out |= {("holds", color, kind), ("holds", "any", kind)}
    for color, kind in state.floor_objects:
        out |= {("floor", color, kind), ("floor", "any", kind)}
    for color, door in state.doors:
        names = [door] + (["closed"] if door != "open" else []) + (["unlocked"] if door == "closed" else [])
        names += ["notlocked"] if door != "locked" else []
        for name in names:
            out |= {("door", color, name), ("door", "any", name)}
    if state.front is None:
        out.add(("faces", "any", "floor"))
    else:
        color, kind, door = state.front
        if kind in FACED:
            out.add(("faces", "any", kind))
        if kind in OBJECTS or kind == "door":
            out.add(("faces", color, kind))
        if kind == "door":
            out.add(("faces_door", door))
            if door != "open":
                out.add(("faces_door", "closed"))
    for color in ("any", *COLORS):
        for kind in NAMED:
            if ("faces", color, kind) not in out:
                out.add(("faces_not", color, kind))
    present = {(c, k) for c, k in state.floor_objects} | {(c, "door") for c, _ in state.doors}
    if state.carrying is not None:
        present.add(tuple(state.carrying))
    present |= {("any", k) for _, k in present}
    for color in ("any", *COLORS):
        for kind in NAMED:
            if (color, kind) not in present:
                out.add(("absent", color, kind))
    adjacent = set(state.adjacent)
    on_floor = sorted({(c, k) for c, k in state.floor_objects} | {(c, "door") for c, _ in state.doors})
    for i, a in enumerate(on_floor):
        for b in on_floor[i:]:
            if a[1] == "door" and b[1] == "door":
                continue
            pair = (a, b)
            if pair in adjacent:
                out.add(("next", *a, *b))
            elif a != b or state.floor_objects.count(a) > 1:
                out.add(("apart", *a, *b))
    if state.goal_distance is not None:
        d = state.goal_distance
        out.add(("goal", "on" if d == 0 else ("next" if d == 1 else "far")))
    if state.room is not None:
        out.add(("room", state.room))
    return frozenset(out)


def wordings(statement: Statement) -> tuple[str, ...]:
    """The sentences that say ``statement`` (the first is the canonical one, used in prompts).

    Examples:
        >>> wordings(("holds", "red", "ball"))[0]
        'the agent holds the red ball'
        >>> wordings(("goal", "next"))
        ('the agent is next to the goal', 'the agent is beside the green goal')
    """
    head = statement[0]
    if head == "holds_nothing":
        return ("the agent holds nothing", "the agent carries nothing", "the agent is empty handed")
    if head == "holds":
        thing = _thing(statement[1], statement[2])
        return (f"the agent holds {thing}", f"the agent carries {thing}", f"the agent has picked up {thing}")
    if head == "floor":
        thing = _thing(statement[1], statement[2])
        return (f"{thing} is on the floor", f"{thing} lies on the floor")
    if head == "door":
        door = _thing(statement[1], "door")
        state = statement[2]
        if state == "notlocked":  # a door once unlocked stays so: its first opening, seen in a frame
            return (f"{door} is unlocked", f"{door} is not locked")
        if state == "unlocked":
            return (f"{door} is unlocked but closed", f"{door} is closed but unlocked")
        if state == "open":
            return (f"{door} is open", f"{door} is opened")
        if state == "closed":
            return (f"{door} is closed", f"{door} is shut")
        return (f"{door} is locked",)
    if head == "faces":
        color, kind = statement[1], statement[2]
        if kind == "floor":
            return ("the agent faces the empty floor", "the agent faces an empty cell")
        if kind == "wall":
            return ("the agent faces a wall", "the agent faces the wall")
        if kind == "lava":
            return ("the agent faces the lava",)
        if kind == "goal":
            return ("the agent faces the green goal", "the agent faces the goal", "the green goal is in front of the agent")
        thing = _thing(color, kind)
        return (f"the agent faces {thing}", f"the agent is facing {thing}", f"{thing} is in front of the agent")
    if head == "faces_door":
        return (f"the agent faces the {statement[1]} door", f"the {statement[1]} door is in front of the agent")
    if head == "goal":
        where = statement[1]
        if where == "on":
            return ("the agent is on the goal", "the agent stands on the green goal", "the agent reached the goal")
        if where == "next":
            return ("the agent is next to the goal", "the agent is beside the green goal")
        return ("the agent is far from the goal", "the green goal is far from the agent")
    if head == "faces_not":
        thing = _thing(statement[1], statement[2])
        return (f"the agent does not face {thing}", f"{thing} is not in front of the agent")
    if head == "absent":
        name = statement[2] if statement[1] == "any" else f"{statement[1]} {statement[2]}"
        return (f"there is no {name}", f"the grid has no {name}")
    if head in ("next", "apart"):
        a, b = _thing(*statement[1:3]), _thing(*statement[3:5])
        if head == "next":
            return (f"{a} is next to {b}", f"{b} is next to {a}", f"{a} is beside {b}")
        return (f"{a} is not next to {b}", f"{b} is not next to {a}", f"{a} is away from {b}")
    if head == "room":
        if statement[1] == "doorway":
            return ("the agent is in the doorway", "the agent stands in the doorway")
        return (f"the agent is in the {statement[1]} room",)
    raise ValueError(f"unknown statement {statement!r}")


def _thing(color: str, kind: str) -> str:
    return f"the {kind}" if color == "any" else f"the {color} {kind}"


def all_statements() -> list[Statement]:
    """Every statement :func:`true_statements` can produce, in a fixed order."""
    out: list[Statement] = [("holds_nothing",)]
    for color in ("any", *COLORS):
        out += [("holds", color, k) for k in OBJECTS]
        out += [("floor", color, k) for k in OBJECTS]
        out += [("door", color, s) for s in DOOR_STATES]
        out += [("faces", color, k) for k in (*OBJECTS, "door")]
    out += [("faces", "any", k) for k in ("goal", "wall", "lava", "floor")]
    out += [("faces_door", s) for s in ("open", "closed", "locked")]
    out += [("goal", w) for w in ("on", "next", "far")]
    out += [("room", r) for r in ("left", "doorway", "right")]
    out += [("faces_not", color, k) for color in ("any", *COLORS) for k in NAMED]
    out += [("absent", color, k) for color in ("any", *COLORS) for k in NAMED]
    things = sorted((c, k) for c in COLORS for k in NAMED)
    for i, a in enumerate(things):
        for b in things[i:]:
            if a[1] != "door" or b[1] != "door":
                out += [("next", *a, *b), ("apart", *a, *b)]
    return out


def opposites(statement: Statement) -> tuple[Statement, ...]:
    """The statements a check of the mission prompt sets (:mod:`vlmrb_torchrl.envs.minigrid.prompts`)
    weighs ``statement`` against (``BuildConfig.opposite_texts`` puts them side by side in
    training): faces / does not face, next to / not next to, held / on the floor, each door state
    against the others, on / next to / far from the goal; ``()`` for the rest. Usually false where
    ``statement`` is true; not always (two doors, one open and one closed): training reads every
    text's truth from the frame's state, so an exception is no wrong label.

    Examples:
        >>> opposites(("faces", "red", "ball"))
        (('faces_not', 'red', 'ball'),)
        >>> opposites(("door", "any", "open"))
        (('door', 'any', 'closed'), ('absent', 'any', 'door'))
        >>> opposites(("goal", "on"))
        (('goal', 'next'), ('goal', 'far'))
    """
    head = statement[0]
    if head == "faces" and statement[2] in NAMED:
        return (("faces_not", *statement[1:]),)
    if head == "faces_not":
        return (("faces", *statement[1:]),)
    if head in ("next", "apart"):
        return (("apart" if head == "next" else "next", *statement[1:]),)
    if head == "holds":
        return (("floor", *statement[1:]),)
    if head == "floor":
        return (("holds", *statement[1:]),)
    if head == "door":
        color, state = statement[1:]
        exclusive = {"open": ("closed",), "closed": ("open",), "locked": ("notlocked", "unlocked", "open"),
                     "unlocked": ("locked", "open"), "notlocked": ("locked",)}[state]
        out = tuple(("door", color, e) for e in exclusive)
        return out + ((("absent", color, "door"),) if state == "open" else ())
    if head == "goal":
        return tuple(("goal", w) for w in ("on", "next", "far") if w != statement[1])
    return ()


def mirrored_left_right(statement: Statement) -> Statement:
    """What a true ``statement`` becomes when the frame is flipped left to right: the agent in the left
    room is in the right one; nothing else changes (what the agent faces turns with it, objects
    next to each other stay so).

    Examples:
        >>> mirrored_left_right(("room", "left")), mirrored_left_right(("faces", "red", "ball"))
        (('room', 'right'), ('faces', 'red', 'ball'))
    """
    if statement[0] == "room" and statement[1] in ("left", "right"):
        return ("room", "right" if statement[1] == "left" else "left")
    return statement


def mirrored_up_down(statement: Statement) -> Statement:
    """What a true ``statement`` becomes when the frame is flipped up to down: itself (rooms are left,
    doorway or right of a vertical wall; no statement names up or down).

    Examples:
        >>> mirrored_up_down(("room", "left"))
        ('room', 'left')
    """
    return statement


def vocabulary(extra: Iterable[str] = ()) -> list[str]:
    """The words of every wording (plus ``extra`` sentences), sorted: the tokenizer's vocabulary.

    Examples:
        >>> words = vocabulary()
        >>> {"agent", "holds", "red", "ball", "door", "locked"} <= set(words)
        True
    """
    words = {w for s in all_statements() for text in wordings(s) for w in text.split()}
    words |= {w for text in extra for w in text.lower().split()}
    words.add("and")
    return sorted(words)
