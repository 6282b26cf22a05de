"""``builtin:scene``'s prompt sets: for each Scene task, one check per subgoal, its goal state against the others.

The wordings are the canonical ones of the training captions (:mod:`vlmrb_torchrl.envs.ogbench.training`).
"""

from __future__ import annotations

from typing import Any

from vlmrb_torchrl.scorers.prompts import PromptCheck

__all__ = ["SCENE_CUBE_HOLD", "SCENE_GOALS", "SCENE_PROMPT_SETS", "scene_prompt_set"]

#: OGBench Scene's goals by task (OGBench 1.2's ``task_infos``; a test checks them against it): button 0
#: (the drawer's lock) and button 1 (the window's) in state 1 = unlocked or 0 = locked, the drawer and
#: the window open or closed. Every task also has a target for the cube.
SCENE_GOALS: dict[int, dict[str, Any]] = {
    1: {"drawer_unlocked": True, "window_unlocked": True, "drawer": "open", "window": "open"},
    2: {"drawer_unlocked": False, "window_unlocked": False, "drawer": "closed", "window": "closed"},
    3: {"drawer_unlocked": True, "window_unlocked": True, "drawer": "open", "window": "closed"},
    4: {"drawer_unlocked": True, "window_unlocked": False, "drawer": "closed", "window": "closed"},
    5: {"drawer_unlocked": False, "window_unlocked": False, "drawer": "closed", "window": "open"},
}


#: The frames ``builtin:scene``'s cube check needs a state to last (``PromptCheck.hold``). The model reads
#: the cube on or off its target from a few pixels, and that reading flips for single frames while the
#: arm sweeps over the cube: with ``hold=1`` each flip is a ``rise``, a false positive in every clip
#: that holds it. 2 was picked on episodes of the model's own seed range (scorer-quality runs from
#: seed 2**20, 4 episodes per task, never the held-out seeds from 1000): all-progress F1 per task
#: 1-5 went from 0.985/0.845/0.872/0.742/0.456 to 0.985/0.988/0.987/0.979/0.549 at the same recall
#: but task 5's; 3 or more dropped real cube events that last 2 frames (task 3's recall 1.0 -> 0.875).
#: The drawer, window and lock checks keep ``hold=1``: their readings do not flicker, and a window
#: swinging shut for one frame is a real event the oracle labels. See ``studies/builtin_scorer_builds.md``.
SCENE_CUBE_HOLD = 2


def scene_prompt_set(task: int, *, cube_hold: int = SCENE_CUBE_HOLD) -> tuple[PromptCheck, ...]:
    """The checks ``builtin:scene`` scores task ``task``'s clips with (score = max over checks): for each
    of the five subgoals, its goal state against the others, ``rise`` over the clip's frames (a subgoal
    that becomes satisfied in the clip, even if undone before its end: what ``oracle:ogbench`` labels).
    The wordings are the canonical ones of ``vlmrb_torchrl.envs.ogbench.training``.

    Args:
        task (int): the Scene task, 1-5.

    Keyword Args:
        cube_hold (int, optional): the frames the cube check's states must last
            (:class:`~vlmrb_torchrl.scorers.prompts.PromptCheck`'s ``hold``). Defaults to
            :data:`SCENE_CUBE_HOLD`; ``1`` is the plain ``rise``.

    Examples:
        >>> [check.positive for check in scene_prompt_set(4)][1:3]
        ['the drawer is unlocked', 'the window is locked']
        >>> [check.hold for check in scene_prompt_set(4)], scene_prompt_set(4, cube_hold=1)[0].hold
        ([2, 1, 1, 1, 1], 1)
    """
    if task not in SCENE_GOALS:
        raise ValueError(f"builtin:scene: unknown task={task!r}; Scene's tasks are 1-5.")
    goal = SCENE_GOALS[task]
    checks = [PromptCheck("the cube is on its target", ("the cube is off its target",), "rise", cube_hold)]
    for thing in ("drawer", "window"):
        lock, other = ("unlocked", "locked") if goal[f"{thing}_unlocked"] else ("locked", "unlocked")
        checks.append(PromptCheck(f"the {thing} is {lock}", (f"the {thing} is {other}",), "rise"))
    for thing in ("drawer", "window"):
        states = {"open": f"the {thing} is open", "half": f"the {thing} is half open", "closed": f"the {thing} is closed"}
        positive = states.pop(goal[thing])
        checks.append(PromptCheck(positive, tuple(states.values()), "rise"))
    return tuple(checks)


#: ``builtin:scene``'s prompt set for each Scene task.
SCENE_PROMPT_SETS: dict[int, tuple[PromptCheck, ...]] = {task: scene_prompt_set(task) for task in SCENE_GOALS}
