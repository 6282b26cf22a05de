"""What ``vlmrb build-scorer atari`` trains on: the Pong and Breakout :class:`~vlmrb_torchrl.scorer_training.domains.Domain`."""

from __future__ import annotations

import functools
from typing import Any

from vlmrb_torchrl.envs.atari import training as atari
from vlmrb_torchrl.scorer_training.domains import BuildConfig, Domain, FrameSet, library_versions

__all__ = ['atari_domain']


def _atari_intro(report: dict) -> str:
    return f"""A transformers `CLIPModel` ({report["parameters"]:,} parameters, size "{report["config"]["size"]}": see
`config.json`) trained from scratch on Pong and Breakout frames rendered by `vlmrb_torchrl.envs.AtariEnv`
(`frame_size=64`, the max-pooled RGB screen resized as `BatchedAtariEnv`, the DQN recipe's env, resizes it
for its scorer), with captions generated from the emulator's RAM and the reward events: which game it is,
the last digit of the agent's score (Pong: the green digits; Breakout: the score at the top left), where
the ball is (Pong: behind the orange paddle, behind the green one, in the field, gone; Breakout: at the
bricks, in the middle, at the paddle, not in play) and what happens (Pong: the green paddle, the agent,
scores a point; the orange one does; nothing; Breakout: a brick breaks; the ball is lost; nothing). An
event at a step labels the frames after and before that step. The RAM and rewards are privileged
information used at training time only; at scoring time the model sees pixels and text. It is a domain
model, not a general pretrained VLM: it knows these two games and nothing else."""


def _atari_data(report: dict) -> str:
    kinds = report["episode_kinds"]
    return f"""{report['frames']['train']:,} training frames and {report['frames']['val']:,} validation frames
({report['frames']['episodes']:,} episodes, Pong and Breakout alternating; validation = held-out episodes),
every step of each episode rendered (frame skip 4, sticky actions of the `-v5` ids). Episodes
({kinds['steps'][0]}-{kinds['steps'][1]} steps or game over) are played by
`vlmrb_torchrl.envs.atari.policies.AtariPolicy`: {kinds['random_share']:.0%} uniform random, the others a
script (Pong: the paddle follows the ball; Breakout: serve, then keep the paddle under the ball; a random
aim per episode) with epsilon in {{0, .05, .1, .2, .3}} and random bursts. Each episode's game is reset from
a seed >= 2**20 (the scorer-quality benchmark's held-out episodes use seeds from 1000); half the Pong
episodes then start from random scores (0-19 each, written into the RAM, the no-op step that shows them
dropped), as the script seldom wins more than a few points and most green digits would never appear.
Batches are balanced over rare statements. Besides the contrastive loss, a linear head on the image
embedding answers each question (auxiliary cross-entropy, weight {report['config'].get('aux_weight', 0)}, dropped after
training): the digits are a few pixels, and without it neither tower separated them and predictions stayed
constant. Each frame gets a 1-3 statement caption; every statement's wordings are
in `vlmrb_torchrl/envs/atari/training.py`. Frames per state in the training data: {report['state_counts']}."""


def atari_domain() -> Domain:
    """The Atari domain (``builtin:atari``): Pong and Breakout frames as the DQN recipe renders them (64 px)."""
    episode_steps, random_share = (400, 2500), 0.2

    def describe(data: FrameSet) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for s in data.states:
            key = f"{s.game}/{s.event}"
            counts[key] = counts.get(key, 0) + 1
        return {"episode_kinds": {"steps": list(episode_steps), "random_share": random_share,
                                  "kinds": list(atari.ATARI_EPISODE_KINDS),
                                  "frames": {k: int((data.layout == i).sum()) for i, k in enumerate(data.layouts)}},
                "state_counts": dict(sorted(counts.items()))}

    return Domain(
        name="atari",
        generate=lambda n, seed: atari.generate_atari_frames(n, seed=seed, episode_steps=episode_steps,
                                                             random_share=random_share),
        statements=atari.all_statements,
        true_statements=atari.true_statements,
        wordings=atari.wordings,
        vocabulary=atari.vocabulary,
        questions=atari.ATARI_QUESTIONS,
        balanced=lambda s: s[0] != "game",
        default_config=BuildConfig(frames=12_000, steps=1500, batch_size=64, lr=2e-3, size="atari", val_share=0.15,
                                   eval_every=100, held_out_frames=0, aux_weight=1.0),
        describe=describe,
        versions=functools.partial(library_versions, "ale_py"),
        card_title="a small CLIP for Pong and Breakout frames",
        card_intro=_atari_intro,
        card_data=_atari_data,
    )
