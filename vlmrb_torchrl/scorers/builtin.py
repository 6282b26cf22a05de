"""Scorers that ship with the package: ``builtin:minigrid``, ``builtin:minigrid_agent``, ``builtin:lift``, ``builtin:atari``, ``builtin:scene-task<N>``.

``builtin:minigrid`` is a small CLIP model (~0.28M parameters, ~1.1 MB) trained by
``vlmrb build-scorer minigrid`` on MiniGrid and BabyAI frames captioned from the simulator's
state (see ``docs/builtin_scorer.md`` and the ``MODEL_CARD.md`` next to the weights), scored
with a prompt set. Given the env's mission (``task=env.mission``, what the recipes pass), the
set is derived from it (:func:`~vlmrb_torchrl.envs.minigrid.prompts.mission_prompt_set`: one
check per sub-goal of the mission and per sub-goal it implies; a mission outside the MiniGrid /
BabyAI grammar gives the generic checks and a warning). Without a task, and for DoorKey's
mission, it is the best of three checks on the clip's frames,

- the key: "the agent holds the key" against "the key is on the floor" (``progress``: the
  clip's last frame minus its first, so holding the key throughout scores 0);
- the door: "the door is unlocked" against "the door is locked" (``progress``). A door stays
  unlocked once opened, so this sees the *first* opening, as the oracle does, and a door opened
  and closed again within the clip still counts;
- the goal: "the agent is on the goal" against "the agent is next to the goal" and "the agent
  is far from the goal" (``max``). Clips end with the frame after their last step
  (``ClipSpec.final_frame``), so a clip whose last step reaches the goal shows it.

``builtin:minigrid_agent`` is the same recipe trained on frames of MiniGrid's agent-centred view
(``MiniGridEnv(frame_view="agent")``: the agent's 7x7 view, the agent at the bottom centre facing up),
with the same mission-derived checks: there what the agent faces and holds sits at the same pixels in
every frame, which whole-grid frames of 64 px do not resolve. The DQN recipe's ``scorer=auto`` picks it
for missions that are not about reaching the goal, and renders those frames for it.

``builtin:minigrid_goal`` is the same model with the goal check alone (:data:`MINIGRID_GOAL_PROMPT_SET`):
the VLM-RB paper's labels, where only reaching the goal is progress (``oracle:minigrid_goal``).

``builtin:lift`` is two models of the same kind, one per camera, reading the two panels of the frames the
SAC recipe renders for it on Lift (``camera="front_close+eye_in_hand"``, a
:class:`~vlmrb_torchrl.envs.robosuite.env.PanelView`: 64 px each, fast rendering): ``vlmrb build-scorer lift``
trains the one for ``front_close`` (a camera 45 cm in front of the cube, where a lift is plain) and ``vlmrb
build-scorer lift_hand`` the one for ``robot0_eye_in_hand`` (the gripper's own camera, where the cube sits
between the finger pads or not), each on frames of its camera captioned from the simulator's state
(gripper open / closed, near / far from the cube, grasping it or not, cube lifted or on the table). A
:class:`~vlmrb_torchrl.scorers.PanelScorer` combines their readings of each check on each frame
(:func:`~vlmrb_torchrl.scorers.mean_logit`): a finger pressed on the cube looks like a grasp from the front
and not from the hand, a grasp seen edge-on by the hand camera is plain from the front. Its prompt set is
the best of two checks, both ``max`` over the clip's frames, so that a clip scores high when any of its
frames shows what ``oracle:robosuite`` labels:

- the grasp: "the robot grasps the cube" against "the robot does not hold the cube";
- the lift: "the cube is lifted off the table" against "the cube is on the table".

Both count a grasp or a lift only when it lasts :data:`LIFT_HOLD` (3) consecutive frames (``hold``):
the models misread single frames as a grasp (:func:`lift_prompt_set`).

``builtin:atari`` is the same kind of model trained by ``vlmrb build-scorer atari`` on Pong and
Breakout frames as the DQN recipe renders them (:class:`~vlmrb_torchrl.envs.BatchedAtariEnv`, 64 px),
captioned from the emulator's RAM and the reward events (the game; the last digit of the agent's
score; where the ball is; the agent scores a point, a brick breaks, the ball is lost). It reads the
score: its prompt set (:data:`ATARI_PROMPT_SET`) has one check per game and digit, "the green score
ends in 3" (Pong: the agent's green digits) / "the score ends in 3" (Breakout) against the nine other
digits and the other game, ``progress`` over the clip (its last frame minus its first). Every point
the agent scores changes that digit, and nothing else does, so a clip scores high when the agent
scored in it: what ``oracle:atari`` labels, a positive reward. A reading error common to a clip's
first and last frame cancels out. It knows Pong and Breakout only (:data:`ATARI_BUILTIN_GAMES`).
``builtin:scene`` is the same kind of model trained by ``vlmrb build-scorer scene`` on OGBench Scene
frames as the SAC recipe renders them (OGBench's ``front_pixels`` camera, 64 px, the arm transparent),
captioned from the simulator's state (the cube on its target or not, in the drawer, on the table or
in the air, held or not; the drawer and the window open, half open or closed, locked or unlocked).
Its prompt set depends on the task (``builtin:scene-task3``, or ``make_scorer("builtin:scene",
task=3)``; the SAC recipe picks the env's): one check per subgoal of the task, its goal state
against the other states (``rise``: the largest gain from a frame to a later one), so that a clip
scores high when a subgoal becomes satisfied in it, what ``oracle:ogbench`` labels. The cube check
counts a state only when it lasts :data:`SCENE_CUBE_HOLD` (2) consecutive frames (``hold``, see
:func:`~vlmrb_torchrl.scorers.prompts.aggregate`): the model's cube-on-target reading flickers for
single frames as the arm passes over the cube, and each flicker would otherwise be a ``rise``.

Their weights live in the package (``vlmrb_torchrl/scorers/models/<name>``): nothing is
downloaded, and they load with ``HF_HUB_OFFLINE=1``. transformers and Pillow are needed
(``pip install 'vlmrb-torchrl[vlm]'``). The files are checked against SHA-256 digests shipped with
the package each time a built-in scorer is built (:func:`check_builtin_model`): changed or damaged
weights are refused, naming the model, unless ``allow_rebuilt=True`` or ``VLMRB_ALLOW_REBUILT_MODELS=1``
says that a rebuild of the user's own was copied there.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlmrb_torchrl.envs.atari.prompts import ATARI_BUILTIN_GAMES, ATARI_PROMPT_SET
from vlmrb_torchrl.envs.minigrid.prompts import MINIGRID_GOAL_PROMPT_SET, MINIGRID_PROMPT_SET, MISSION_MODELS
from vlmrb_torchrl.envs.ogbench.prompts import SCENE_CUBE_HOLD, SCENE_GOALS, SCENE_PROMPT_SETS, scene_prompt_set
from vlmrb_torchrl.envs.robosuite.prompts import LIFT_HOLD, LIFT_PROMPT_SET, lift_prompt_set
from vlmrb_torchrl.scorers._model_digests import BUILTIN_MODEL_DIGESTS
from vlmrb_torchrl.scorers.base import register_scorer
from vlmrb_torchrl.scorers.prompts import PromptCheck

__all__ = ["ATARI_BUILTIN_GAMES", "ATARI_PROMPT_SET", "BUILTIN_MODELS", "BUILTIN_PROMPT_SETS", "LIFT_HOLD",
           "LIFT_PROMPT_SET", "MINIGRID_GOAL_PROMPT_SET", "MINIGRID_PROMPT_SET", "SCENE_CUBE_HOLD", "SCENE_GOALS",
           "SCENE_PROMPT_SETS", "BUILTIN_DECISION_THRESHOLDS", "BUILTIN_PANEL_MODELS", "builtin_decision_threshold",
           "builtin_model_dir", "builtin_panel_model_dirs", "lift_prompt_set", "make_builtin_scorer", "scene_prompt_set",
           "ALLOW_REBUILT_MODELS_ENV", "check_builtin_model", "model_file_digests"]

#: The environment variable that lets built-in scorers load model files other than the shipped ones (``1``, ``true``
#: or ``yes``): a user's own rebuild copied over ``vlmrb_torchrl/scorers/models/<name>``. ``allow_rebuilt=True``
#: (``scorer_kwargs``) does the same for one scorer.
ALLOW_REBUILT_MODELS_ENV = "VLMRB_ALLOW_REBUILT_MODELS"
_UNCHECKED_FILES = ("MODEL_CARD.md", "training.json")

#: Built-in models by name: the package-data directory under ``vlmrb_torchrl/scorers/models``.
BUILTIN_MODELS: dict[str, str] = {"minigrid": "minigrid", "minigrid_goal": "minigrid", "minigrid_agent": "minigrid_agent",
                                  "lift": "lift", "atari": "atari", "scene": "scene"}

#: Built-in scorers made of a model per camera panel (:class:`~vlmrb_torchrl.scorers.PanelScorer`): the
#: package-data directories of the panels' models, left to right. ``builtin:lift``: ``front_close`` (the
#: ``lift`` model, ``vlmrb build-scorer lift``) and ``robot0_eye_in_hand`` (``lift_hand``, ``vlmrb build-scorer
#: lift_hand``), the panels of ``camera="front_close+eye_in_hand"``.
BUILTIN_PANEL_MODELS: dict[str, tuple[str, ...]] = {"lift": ("lift", "lift_hand")}

#: Decision thresholds picked for a built-in model with its own prompt set (``score > threshold`` is a
#: positive; the others use 0.5): the recipes' ``threshold=auto`` and ``scorer_quality.py`` read them.
#: ``lift`` (the two cameras' models, their readings combined by :func:`~vlmrb_torchrl.scorers.mean_logit`): picked
#: on 90 tuning episodes (scorer-quality runs from seeds 3000 and 3030) as the best of 0.001, 0.002, 0.005, 0.01,
#: 0.02, 0.05, 0.1, 0.2, ..., 0.9, 0.95: F1 0.941 at 0.01 (0.936-0.941 from 0.005 to 0.05; the front model alone
#: 0.877 at its 0.8). Low: the gripper-camera model reads grasps with small probabilities (alone, its best threshold
#: on those episodes is 0.02), and the mean of log-odds keeps them small. Read once on 120 new held-out episodes
#: (seeds 8000-8119): F1 0.875 (the front model alone at its 0.8: 0.813); over all 390 held-out episodes 0.861 (0.817).
#: The front model alone had 0.8 (its tuning best). ``scene``
#: (every task's prompt set): picked on the clips of the five tasks' tuning episodes pooled (4 per task from
#: seed 2**20; 0.95 was also each task's best), held-out F1 (4 episodes per task from seed 1000) at 0.5 -> 0.95:
#: task 1 0.883 -> 0.883, 2 0.800 -> 0.992, 3 0.984 -> 0.984, 4 0.991 -> 0.991, 5 0.596 -> 0.800. See
#: ``studies/builtin_scorer_builds.md``.
BUILTIN_DECISION_THRESHOLDS: dict[str, float] = {"lift": 0.01, "scene": 0.95}


#: Each built-in model's default prompt set (``builtin:scene``'s depends on the task: :data:`SCENE_PROMPT_SETS`).
BUILTIN_PROMPT_SETS: dict[str, tuple[PromptCheck, ...]] = {
    "minigrid": MINIGRID_PROMPT_SET, "minigrid_goal": MINIGRID_GOAL_PROMPT_SET, "minigrid_agent": MINIGRID_PROMPT_SET,
    "lift": LIFT_PROMPT_SET, "atari": ATARI_PROMPT_SET}


def _builtin_name(name: str) -> tuple[str, int | None]:
    """``"scene-task3"`` -> ``("scene", 3)``; other names -> ``(name, None)``."""
    model, _, task = name.partition("-task")
    if model == "scene" and task:
        if not task.isdigit():
            raise ValueError(f"Unknown built-in scorer 'builtin:{name}': use builtin:scene-task1 ... builtin:scene-task5.")
        return model, int(task)
    return name, None


def builtin_model_dir(name: str = "minigrid") -> Path:
    """The directory of a built-in model's weights (``config.json``, ``model.safetensors``, ...).

    Raises:
        ValueError: unknown name.
        FileNotFoundError: the package was installed without its model data.

    Examples:
        >>> (builtin_model_dir("minigrid") / "config.json").is_file(), (builtin_model_dir("lift") / "config.json").is_file()
        (True, True)
    """
    name = _builtin_name(name)[0]
    if name not in BUILTIN_MODELS:
        raise ValueError(f"Unknown built-in scorer 'builtin:{name}'. Valid forms: "
                         + ", ".join(repr(f"builtin:{n}") for n in BUILTIN_MODELS) + " (builtin:scene-task<N>).")
    return _package_model_dir(BUILTIN_MODELS[name], name)


def builtin_panel_model_dirs(name: str) -> list[Path]:
    """The directories of a panel scorer's models, left to right (:data:`BUILTIN_PANEL_MODELS`).

    Examples:
        >>> [path.name for path in builtin_panel_model_dirs("lift")]
        ['lift', 'lift_hand']
    """
    if name not in BUILTIN_PANEL_MODELS:
        raise ValueError(f"builtin:{name} has one model, not one per panel (those are: {sorted(BUILTIN_PANEL_MODELS)}).")
    return [_package_model_dir(directory, directory) for directory in BUILTIN_PANEL_MODELS[name]]


def _package_model_dir(directory: str, name: str) -> Path:
    """``vlmrb_torchrl/scorers/models/<directory>``, checked: it exists and holds the weights (``name``: what
    ``vlmrb build-scorer`` calls the model, for the messages)."""
    path = Path(str(importlib.resources.files("vlmrb_torchrl.scorers") / "models" / directory))
    if not path.is_dir():  # a model this version of the package does not ship (yet)
        raise FileNotFoundError(
            f"builtin:{name}: this version of vlmrb-torchrl does not ship this model's weights. Build it with "
            f"`vlmrb build-scorer {name} --out DIR` and pass scorer=clip:DIR (with the prompt set, e.g. "
            f"make_scorer('clip:DIR', prompt_set=...)), or use the env's oracle scorer."
        )
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"builtin:{name}: the model files are missing from {path}; the package was installed without its "
            "package data. Reinstall vlmrb-torchrl, or rebuild them with "
            f"`vlmrb build-scorer {name} --out {path}`."
        )
    return path


def model_file_digests(path: str | os.PathLike) -> dict[str, str]:
    """The SHA-256 of every file of the model directory ``path`` but its documentation (``MODEL_CARD.md``,
    ``training.json``): what :func:`check_builtin_model` compares with the digests the package ships.

    Examples:
        >>> sorted(model_file_digests(builtin_model_dir("minigrid")))
        ['config.json', 'model.safetensors', 'processor_config.json', 'tokenizer.json', 'tokenizer_config.json']
    """
    return {file.name: hashlib.sha256(file.read_bytes()).hexdigest() for file in sorted(Path(path).iterdir())
            if file.is_file() and file.name not in _UNCHECKED_FILES}


def check_builtin_model(directory: str, name: str, *, allow_rebuilt: bool = False) -> Path:
    """The package's model directory ``directory`` (of ``builtin:<name>``), its files checked against the SHA-256
    digests shipped with the package: a changed, missing or extra file is refused with a ``ValueError`` naming the
    model and the files, unless ``allow_rebuilt`` or :data:`ALLOW_REBUILT_MODELS_ENV` allows a user's own rebuild
    there (then a ``RuntimeWarning`` says so).

    Examples:
        >>> check_builtin_model("minigrid", "minigrid").name
        'minigrid'
    """
    path = _package_model_dir(directory, name)
    expected, found = BUILTIN_MODEL_DIGESTS.get(directory, {}), model_file_digests(path)
    if found == expected:
        return path
    changed = sorted(f for f in {*found, *expected} if found.get(f) != expected.get(f))
    what = ", ".join(f"{f} {'missing' if f not in found else 'not shipped' if f not in expected else 'changed'}"
                     for f in changed[:4]) + (", ..." if len(changed) > 4 else "")
    if allow_rebuilt or os.environ.get(ALLOW_REBUILT_MODELS_ENV, "").lower() in ("1", "true", "yes"):
        warnings.warn(f"builtin:{name}: scoring with model files other than the ones this version ships ({what}, in "
                      f"{path}): a rebuild of your own (allowed by allow_rebuilt or {ALLOW_REBUILT_MODELS_ENV}).",
                      RuntimeWarning, stacklevel=3)
        return path
    raise ValueError(f"builtin:{name}: the model files in {path} are not the ones this version of vlmrb-torchrl ships "
                     f"({what}: SHA-256 mismatch), so its scores cannot be trusted. Reinstall vlmrb-torchrl; to score "
                     f"with a rebuild of your own, set {ALLOW_REBUILT_MODELS_ENV}=1 or pass allow_rebuilt=True "
                     f"(scorer_kwargs).")


def make_builtin_scorer(
    name: str = "minigrid",
    *,
    task: str | int | None = None,
    mission_key: Any = None,
    doors: bool = True,
    prompt_set: Sequence[PromptCheck] | None = None,
    prompt: str | None = None,
    negatives: Sequence[str] | str | None = None,
    aggregation: str = "max",
    dtype: Any = "float32",
    allow_rebuilt: bool = False,
    **kwargs: Any,
):
    """The ready scorer of a built-in model: an ``HFContrastiveScorer`` with its prompt set (``builtin:lift``: a
    :class:`~vlmrb_torchrl.scorers.PanelScorer` of two, one per camera panel, :data:`BUILTIN_PANEL_MODELS`).

    Args:
        name (str, optional): ``"minigrid"``, ``"minigrid_goal"`` (the MiniGrid model with the goal-only
            prompt set, :data:`MINIGRID_GOAL_PROMPT_SET`), ``"minigrid_agent"`` (a MiniGrid model that
            reads the agent-centred view, ``MiniGridEnv(frame_view="agent")``: the checks of
            ``"minigrid"``), ``"lift"``, ``"atari"``, ``"scene"`` (with
            ``task=``) or ``"scene-task<N>"``. Defaults to ``"minigrid"``.

    Keyword Args:
        task (str or int, optional): the env's mission / task text. ``builtin:minigrid`` derives its
            checks from it when neither ``prompt_set`` nor ``prompt`` is given
            (:func:`~vlmrb_torchrl.envs.minigrid.prompts.minigrid_task_checks`; an
            unparsable mission falls back to the generic checks with a warning); it also fills
            ``{task}`` placeholders of given prompts. Recorded in the provenance (``task``,
            ``checks_from``: ``"mission"``, ``"generic"``, ``"default"`` or ``"given"``).
            ``builtin:scene``: the Scene task (1-5) whose prompt set it scores with
            (:data:`SCENE_PROMPT_SETS`; or name it: ``"scene-task3"``), required.
        mission_key (NestedKey, optional): ``builtin:minigrid`` only: read each clip's mission
            from this entry (a :class:`~vlmrb_torchrl.envs.MiniGridEnv` built with
            ``write_mission=True`` writes ``"mission"``) and score it with that mission's checks:
            a :class:`~vlmrb_torchrl.envs.minigrid.prompts.MissionScorer`, for envs whose
            mission changes every episode. Not with ``task``, ``prompt`` or ``prompt_set``.
        doors (bool, optional): the mission-reading models (``minigrid``, ``minigrid_agent``): whether the
            env's layouts have doors; ``False`` leaves out the door and key checks a mission only implies
            (:func:`~vlmrb_torchrl.envs.minigrid.prompts.mission_prompt_set`; the DQN recipe passes it for
            an env whose first episodes show no door). Defaults to ``True``.
        prompt_set (sequence of PromptCheck, optional): replace the checks. Defaults to the
            mission's (above), else the model's (:data:`BUILTIN_PROMPT_SETS`:
            :data:`MINIGRID_PROMPT_SET`, :data:`LIFT_PROMPT_SET`; ``scene``: the task's, :data:`SCENE_PROMPT_SETS`).
        prompt (str, optional): score one check instead: this positive against ``negatives``
            (e.g. ``prompt="the agent holds the red ball", negatives=["the agent holds
            nothing"]``), aggregated with ``aggregation``.
        negatives (str or list of str, optional): the negatives of ``prompt`` (required with it).
        aggregation (str, optional): the aggregation of ``prompt``. Defaults to ``"max"``.
        dtype (optional): the model's dtype. Defaults to float32 (the model is tiny).
        allow_rebuilt (bool, optional): load model files that are not the shipped ones (a rebuild of your own
            copied over the package's; :func:`check_builtin_model`), with a warning; without it (and without
            :data:`ALLOW_REBUILT_MODELS_ENV`) they are refused. Defaults to ``False``.
        **kwargs: passed to :class:`~vlmrb_torchrl.scorers.HFContrastiveScorer` (``device``,
            ``batch_size``, ``max_frames``, ...; each panel's, for ``builtin:lift``).

    Examples:
        >>> scorer = make_builtin_scorer()
        >>> scorer.provenance["backend"], len(scorer.prompt_set)
        ('clip', 3)
        >>> len(make_builtin_scorer("lift").prompt_set), len(make_builtin_scorer("minigrid_goal").prompt_set)
        (2, 1)
        >>> scorer = make_builtin_scorer(task="go to the red ball, then pick up the blue key")
        >>> scorer.provenance["checks_from"], [c.positive for c in scorer.prompt_set]
        ('mission', ['the agent faces the red ball', 'the agent holds the blue key', 'the agent faces the open door'])
    """
    from vlmrb_torchrl.scorers.contrastive import HFContrastiveScorer

    name, named_task = _builtin_name(name)
    scene_task, source = None, "given"
    if name == "scene":  # the task is a Scene task number: its prompt set, not a text for the prompts
        scene_task = _scene_task_number(task, named_task)
        task = None
        if prompt_set is None and prompt is None:
            prompt_set, source = scene_prompt_set(scene_task), "task"
    path = builtin_model_dir(name)  # checks the name (and the weights) before the prompts
    for directory in BUILTIN_PANEL_MODELS.get(name, (BUILTIN_MODELS[name],)):  # the shipped files, unchanged
        check_builtin_model(directory, name, allow_rebuilt=allow_rebuilt)
    if prompt is not None:
        if prompt_set is not None:
            raise ValueError(f"builtin:{name}: pass prompt= (with negatives=) or prompt_set=, not both.")
        if not negatives:
            raise ValueError(
                f"builtin:{name}: prompt={prompt!r} needs negatives= (statements that are true when the prompt is "
                "false, e.g. negatives=['the agent holds nothing'] for 'the agent holds the red ball'): the model "
                "scores a prompt against alternatives, not alone."
            )
        negatives = (negatives,) if isinstance(negatives, str) else tuple(negatives)
        prompt_set = [PromptCheck(prompt, negatives, aggregation)]
    if not doors and name not in MISSION_MODELS:
        raise ValueError(f"builtin:{name}: doors= is for the models whose checks come from a MiniGrid mission "
                         f"({', '.join(MISSION_MODELS)}).")
    if mission_key is not None:
        if name not in MISSION_MODELS or task is not None or prompt_set is not None:
            raise ValueError(f"builtin:{name}: mission_key= reads each clip's mission (builtin:minigrid and "
                             "builtin:minigrid_agent only); "
                             "do not pass task=, prompt= or prompt_set= with it.")
        from vlmrb_torchrl.envs.minigrid.prompts import GENERIC_CHECKS, MissionScorer

        base = HFContrastiveScorer(str(path), prompt_set=list(GENERIC_CHECKS), dtype=dtype, **kwargs)
        return MissionScorer(base, mission_key, doors=doors)
    if prompt_set is None and name in MISSION_MODELS:
        from vlmrb_torchrl.envs.minigrid.prompts import minigrid_task_checks

        prompt_set, source = minigrid_task_checks(task, owner=f"builtin:{name}", doors=doors)
    elif prompt_set is None:
        prompt_set, source = BUILTIN_PROMPT_SETS[name], "default"
    if name in BUILTIN_PANEL_MODELS:  # a model per camera panel, their readings combined frame by frame
        from vlmrb_torchrl.scorers.panels import PanelScorer

        scorer = PanelScorer([HFContrastiveScorer(str(member), prompt_set=list(prompt_set), task=task, dtype=dtype,
                                                  **kwargs) for member in builtin_panel_model_dirs(name)])
    else:
        scorer = HFContrastiveScorer(str(path), prompt_set=list(prompt_set), task=task, dtype=dtype, **kwargs)
    scorer.provenance.update(task=task if scene_task is None else f"scene-task{scene_task}", checks_from=source)
    if not doors and source == "mission":
        scorer.provenance["doors"] = False
    if source in ("default", "task") and name in BUILTIN_DECISION_THRESHOLDS:  # tuned for its checks, not others
        scorer.decision_threshold = BUILTIN_DECISION_THRESHOLDS[name]
    return scorer


def builtin_decision_threshold(spec: str) -> float:
    """The decision threshold of scorer ``spec``: :data:`BUILTIN_DECISION_THRESHOLDS`'s for a built-in
    model that has one, else 0.5 (every other spec). What the recipes' ``threshold=auto`` resolves to.

    Examples:
        >>> builtin_decision_threshold("builtin:lift"), builtin_decision_threshold("builtin:minigrid")
        (0.01, 0.5)
        >>> builtin_decision_threshold("builtin:scene-task2")
        0.95
        >>> builtin_decision_threshold("oracle:robosuite"), builtin_decision_threshold("clip:/models/lift")
        (0.5, 0.5)
    """
    kind, _, rest = spec.partition(":")
    if kind != "builtin":
        return 0.5
    return BUILTIN_DECISION_THRESHOLDS.get(rest.split("-task")[0] or "minigrid", 0.5)


def _scene_task_number(task: str | int | None, named: int | None) -> int:
    """The Scene task of ``builtin:scene`` from ``task=`` (an int or its digits) and/or the name's ``-task<N>``."""
    if task is not None:
        try:
            number = int(task)
        except (TypeError, ValueError):
            raise ValueError(f"builtin:scene: task={task!r} is not a Scene task number (1-5).") from None
        if named is not None and number != named:
            raise ValueError(f"builtin:scene-task{named}: task={task!r} names another task.")
        return number
    if named is None:
        raise ValueError("builtin:scene scores a task's subgoals: name the task, builtin:scene-task3 or "
                         "make_scorer('builtin:scene', task=3) (the SAC recipe picks the env's).")
    return named


def _make_builtin(rest: str, **kwargs: Any):
    return make_builtin_scorer(rest or "minigrid", **kwargs)


register_scorer("builtin", _make_builtin, form="builtin:minigrid, builtin:minigrid_goal, builtin:minigrid_agent, "
                "builtin:lift, builtin:atari or builtin:scene-task<N>", overwrite=True)
