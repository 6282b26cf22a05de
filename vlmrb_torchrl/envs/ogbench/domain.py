"""What ``vlmrb build-scorer scene`` trains on: the OGBench Scene :class:`~vlmrb_torchrl.scorer_training.domains.Domain`."""

from __future__ import annotations

import functools
from typing import Any

from vlmrb_torchrl.envs.ogbench import training as scene
from vlmrb_torchrl.scorer_training.domains import BuildConfig, Domain, FrameSet, library_versions

__all__ = ['SCENE_RANDOM_SHARE', 'scene_domain']


def _scene_intro(report: dict) -> str:
    return f"""A transformers `CLIPModel` ({report["parameters"]:,} parameters, size "{report["config"]["size"]}": see
`config.json`) trained from scratch on OGBench Scene frames rendered by `vlmrb_torchrl.envs.SceneEnv` exactly
as the SAC recipe renders them for its scorer (OGBench's `front_pixels` camera, `frame_size=64`, the arm
drawn transparent as in OGBench's pixel-based Scene, shadows and reflections off), with captions generated
from the simulator's state: the cube on its target or off it (OGBench draws the target as a faint cube and
the cube lighter on it), in the drawer, on the table or in the air, held or not; the drawer and the window
open, half open or closed; each of them locked or unlocked (the button and the handle red or white). The
simulator's state is privileged information used at training time only; at scoring time the model sees
pixels and text. It is a domain model, not a general pretrained VLM: it knows OGBench's Scene and nothing
else."""


def _scene_data(report: dict) -> str:
    kinds = report["episode_kinds"]
    return f"""{report['frames']['train']:,} training frames and {report['frames']['val']:,} validation frames
({report['frames']['episodes']:,} episodes; validation = held-out episodes), every {kinds['frame_every']} steps of each
episode rendered. Episodes ({kinds['steps'][0]}-{kinds['steps'][1]} steps, not ended when the task is solved) cycle
through the five tasks and are played by `vlmrb_torchrl.envs.ogbench.policies.ScenePolicy`: {kinds['random_share']:.0%}
random arm motion, the others subtasks (press a button, move the drawer or the window, carry the cube)
executed by OGBench's scripted Markov oracles, each the next step toward the task's goal (a share of
0.3, 0.6 or 0.9 per episode) or a random one, with Gaussian action noise in {{0, 0.1, 0.2}} and random
bursts. Each episode's seed is >= 2**20 (the scorer-quality benchmark's held-out episodes use seeds from
1000). Batches are balanced over rare statements. Each frame gets a 1-3 statement caption; every
statement's wordings are in `vlmrb_torchrl/envs/ogbench/training.py`. Frame shares in the training data:
{report['statement_shares']}."""


#: Share of random-motion episodes in ``builtin:scene``'s training frames (:func:`scene_domain`). 0.3: at 0.1
#: (the first build) a cube pushed about by random actions, half hidden by the window's frame, read "on its
#: target" (task 5's target lies inside the drawer); 0.3 removed those false positives (studies/builtin_scorer_builds.md).
SCENE_RANDOM_SHARE = 0.3


def scene_domain(*, random_share: float = SCENE_RANDOM_SHARE) -> Domain:
    """The OGBench Scene domain (``builtin:scene``): the SAC recipe's ``front_pixels`` frames at 64 px.

    Keyword Args:
        random_share (float, optional): share of episodes of random arm motion
            (:class:`~vlmrb_torchrl.envs.ogbench.policies.ScenePolicy`; the others run scripted
            subtasks). Defaults to :data:`SCENE_RANDOM_SHARE`, the shipped model's; recorded in
            ``training.json`` and the frame cache's name.
    """
    if not 0.0 <= random_share <= 1.0:
        raise ValueError(f"scene_domain: random_share must be in [0, 1], got {random_share!r}.")
    episode_steps, frame_every = (300, 750), 3

    def describe(data: FrameSet) -> dict[str, Any]:
        shares = {" ".join(st): round(sum(st in scene.true_statements(s) for s in data.states) / max(1, len(data)), 3)
                  for st in scene.all_statements()}
        return {"episode_kinds": {"steps": list(episode_steps), "frame_every": frame_every,
                                  "random_share": random_share, "kinds": list(scene.SCENE_EPISODE_KINDS),
                                  "frames": {k: int((data.layout == i).sum()) for i, k in enumerate(data.layouts)}},
                "statement_shares": shares}

    return Domain(
        name="scene",
        generate=lambda n, seed, workers=1: scene.generate_scene_frames(
            n, seed=seed, episode_steps=episode_steps, frame_every=frame_every, random_share=random_share,
            workers=workers, log=lambda line: print(line, flush=True)),
        statements=scene.all_statements,
        true_statements=scene.true_statements,
        wordings=scene.wordings,
        vocabulary=scene.vocabulary,
        questions=scene.SCENE_QUESTIONS,
        balanced=lambda s: True,
        default_config=BuildConfig(frames=30_000, steps=4000, held_out_frames=0),
        describe=describe,
        versions=functools.partial(library_versions, "ogbench", "mujoco"),
        card_title="a small CLIP for OGBench Scene frames",
        card_intro=_scene_intro,
        card_data=_scene_data,
        parallel=True,
        # always named: caches of the first builds (0.1, no tag) are not read as frames of another share
        frames_tag=f"random{random_share:g}",
    )
