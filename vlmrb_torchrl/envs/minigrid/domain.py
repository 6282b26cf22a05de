"""What ``vlmrb build-scorer minigrid`` (and ``minigrid_agent``) trains on: the MiniGrid :class:`~vlmrb_torchrl.scorer_training.domains.Domain`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vlmrb_torchrl.envs.minigrid import captions
from vlmrb_torchrl.envs.minigrid.training import HELD_OUT_LAYOUTS, TRAIN_LAYOUTS, Layout, generate_frames
from vlmrb_torchrl.scorer_training.domains import BuildConfig, Domain, FrameSet, library_versions, Statement

__all__ = ['MINIGRID_QUESTIONS', 'build_minigrid_scorer', 'minigrid_agent_domain', 'minigrid_domain']


#: Frame-level validation: groups of mutually exclusive statements; a frame where exactly one
#: option is true counts as correct when the model ranks that option's canonical wording first.
MINIGRID_QUESTIONS: dict[str, tuple[Statement, ...]] = {
    "holds": (("holds_nothing",), ("holds", "any", "key"), ("holds", "any", "ball"), ("holds", "any", "box")),
    "key": (("holds", "any", "key"), ("floor", "any", "key")),
    "door": (("door", "any", "open"), ("door", "any", "unlocked"), ("door", "any", "locked")),
    "lock": (("door", "any", "notlocked"), ("door", "any", "locked")),
    "faces": tuple(("faces", "any", k) for k in ("floor", "wall", "door", "key", "ball", "box", "goal")),
    "goal": (("goal", "on"), ("goal", "next"), ("goal", "far")),
    "room": (("room", "left"), ("room", "doorway"), ("room", "right")),
    "held_colour": tuple(("holds", c, k) for c in ("red", "green", "blue", "purple", "yellow", "grey")
                         for k in ("key", "ball", "box")),
}


def _minigrid_intro(report: dict) -> str:
    view = report.get("frames_rendered", {}).get("frame_view", "grid")
    shown = ("the agent-centred view: `frame_view=\"agent\"`, the agent's 7x7 view with the agent at the bottom "
             "centre, facing up" if view == "agent" else "the whole grid")
    return f"""A transformers `CLIPModel` ({report["parameters"]:,} parameters, size "{report["config"]["size"]}": see
`config.json`) trained from scratch on MiniGrid frames rendered by `vlmrb_torchrl.envs.MiniGridEnv`
(`frame_size=64`, {shown}) with captions generated from the simulator's state (what the agent holds, door
states, what it faces, goal distance, room). The simulator's state is privileged information used
at training time only; at scoring time the model sees pixels and text. It is a domain model, not a
general pretrained VLM: it knows MiniGrid's objects, colours and door states and nothing else."""


def _minigrid_data(report: dict) -> str:
    layouts = ", ".join(f"{lay['env_id']} ({lay['weight']:.2f}, {lay['scripted']})" for lay in report["layouts"])
    return f"""{report['frames']['train']:,} training frames and {report['frames']['val']:,} validation frames
({report['frames']['episodes']:,} episodes; validation = held-out episodes). Layouts (share, scripted
agent): {layouts}. 30% of episodes are played by a uniform random agent, the others by a scripted agent
with epsilon in {{0, .1, .2, .3, .5}} and random bursts; 30% start from a perturbed state (an object in
hand, a door unlocked or open, the agent next to or facing the goal). Batches are balanced over rare
statements. Each frame gets a 1-3 statement caption; every statement's wordings are in
`vlmrb_torchrl/envs/minigrid/captions.py`.

Held-out tasks (never trained on): {', '.join(report['held_out_layouts'])}."""


def _minigrid_held_out(n_frames: int, seed: int, frame_view: str = "grid") -> FrameSet:
    return generate_frames(n_frames, seed=seed, layouts=tuple(Layout(e, 1.0, "mission") for e in HELD_OUT_LAYOUTS),
                           frame_view=frame_view)


def minigrid_domain(layouts: tuple[Layout, ...] = TRAIN_LAYOUTS, frame_view: str = "grid") -> Domain:
    """The MiniGrid domain with the training mixture ``layouts``, on frames of the whole grid
    (``frame_view="grid"``: ``minigrid``, ``builtin:minigrid``) or of the agent-centred view
    (``"agent"``: ``minigrid_agent``, ``builtin:minigrid_agent``; the same episodes, states and captions)."""

    if frame_view not in ("grid", "agent"):
        raise ValueError(f"minigrid_domain: frame_view must be 'grid' or 'agent', got {frame_view!r}.")
    agent = frame_view == "agent"
    # the agent-centred view has an up (the agent faces it): only left-right flips keep it a view
    flips = (("horizontal", captions.mirrored_left_right),)
    return Domain(
        name="minigrid_agent" if agent else "minigrid",
        generate=lambda n, seed, workers=1: generate_frames(n, seed=seed, layouts=layouts, workers=workers,
                                                            frame_view=frame_view),
        statements=captions.all_statements,
        true_statements=captions.true_statements,
        wordings=captions.wordings,
        vocabulary=captions.vocabulary,
        questions=MINIGRID_QUESTIONS,
        balanced=lambda s: len(s) < 3 or s[1] == "any",  # colour-free statements
        # aux_weight=1: on the broad mixture (~700 statements, most of them true in every frame) the
        # contrastive loss alone left "holds" / "key" at the majority answer for 800+ steps (issue 37,
        # studies/builtin_scorer_builds.md); the per-question head moves them from step ~600
        default_config=BuildConfig(frames=120_000, steps=2500, statement_texts=192, aux_weight=1.0),
        describe=lambda data: {"layouts": [dataclasses.asdict(lay) for lay in layouts],
                               "held_out_layouts": list(HELD_OUT_LAYOUTS),
                               **({"frames_rendered": {"frame_view": "agent", "frame_size": 64}} if agent else {})},
        versions=functools.partial(library_versions, "minigrid"),
        card_title="a small CLIP for MiniGrid's agent-centred view" if agent else "a small CLIP for MiniGrid frames",
        card_intro=_minigrid_intro,
        card_data=_minigrid_data,
        card_validation=" of the training layouts",
        held_out=functools.partial(_minigrid_held_out, frame_view=frame_view),
        parallel=True,
        symmetries=flips if agent else flips + (("vertical", captions.mirrored_up_down),),
        opposites=captions.opposites,
    )




def minigrid_agent_domain() -> Domain:
    """``builtin:minigrid_agent``'s domain: :func:`minigrid_domain` on frames of the agent-centred view."""
    return minigrid_domain(frame_view="agent")


def build_minigrid_scorer(
    out_dir: str | Path,
    config: BuildConfig | None = None,
    *,
    layouts: tuple[Layout, ...] = TRAIN_LAYOUTS,
    log: Callable[[str], None] | None = print,
    command: str | None = None,
) -> dict[str, Any]:
    """Generates captioned MiniGrid frames, trains a small CLIP and saves it to ``out_dir`` (``builtin:minigrid``).

    :func:`~vlmrb_torchrl.scorer_training.build_scorer` with the MiniGrid domain; ``layouts`` is its training
    mixture (defaults to :data:`~vlmrb_torchrl.envs.minigrid.training.TRAIN_LAYOUTS`). The defaults rebuild
    the shipped model.

    Examples:
        >>> import tempfile
        >>> from vlmrb_torchrl.scorers import make_scorer
        >>> out = tempfile.mkdtemp()
        >>> cfg = BuildConfig(frames=300, steps=2, batch_size=16, size="micro", held_out_frames=0)
        >>> report = build_minigrid_scorer(out, cfg, log=None)
        >>> scorer = make_scorer(f"clip:{out}", prompt="the agent holds the yellow key",
        ...                      negatives=["the key is on the floor"])
        >>> scorer.provenance["model_type"]
        'clip'
    """
    from vlmrb_torchrl.scorer_training.train import build_scorer

    return build_scorer(minigrid_domain(layouts), out_dir, config, log=log, command=command)
