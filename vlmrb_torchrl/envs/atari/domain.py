"""What ``vlmrb build-scorer atari`` trains on: the Pong and Breakout :class:`~vlmrb_torchrl.scorer_training.domains.Domain`."""

from __future__ import annotations

import functools
from typing import Any

from vlmrb_torchrl.envs.atari import training as atari
from vlmrb_torchrl.scorer_training.domains import BuildConfig, Domain, FrameSet, library_versions

__all__ = ['atari_domain']


def _score_view(report: dict) -> bool:
    return (report.get("frames_rendered") or {}).get("atari_frame_view") == "score"


def _atari_intro(report: dict) -> str:
    if _score_view(report):
        return f"""A transformers `CLIPModel` ({report["parameters"]:,} parameters, size "{report["config"]["size"]}": see
`config.json`) trained from scratch on frames of the score box of Pong and Breakout rendered by
`vlmrb_torchrl.envs.AtariEnv(frame_view="score")`: the 32x32 square of the native 210x160 screen that holds
the last two digits of the agent's score (Pong: the green points; Breakout: the score at the top left;
`vlmrb_torchrl.envs.atari.env.ATARI_SCORE_BOXES`), scaled to 64 px by nearest-neighbour, exactly as the DQN
recipe renders it for this scorer (`frame_view=auto` picks it). Captions, generated from the emulator's RAM,
say which game it is and the last digit of the agent's score; a clip in which that digit changes is a clip
in which the agent scored, what `oracle:atari` labels. The RAM is privileged information used at training
time only; at scoring time the model sees pixels and text. It is a domain model, not a general pretrained
VLM: it knows these two games' score displays and nothing else."""
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
training){_aux_why(report)}. Each frame gets a 1-3 statement caption; every statement's wordings are
in `vlmrb_torchrl/envs/atari/training.py`. Frames per state in the training data: {report['state_counts']}."""


def _aux_why(report: dict) -> str:
    if _score_view(report):
        return ""
    return (": the digits are a few pixels, and without it neither tower separated them and predictions stayed "
            "constant")


def _score_statement(statement: tuple[str, ...]) -> bool:
    """What a score box shows: the game (its digits' colour and place) and the score's last digit."""
    return statement[0] == "game" or statement[1] == "score"


def atari_domain(frame_view: str = "score") -> Domain:
    """The Atari domain (``builtin:atari``): Pong and Breakout frames as the DQN recipe renders them (64 px).

    ``frame_view="score"`` (``builtin:atari``): frames of the box of the agent's score, captioned with the game
    and the score's last digit alone (the box shows no ball, no paddle). ``"screen"``: the whole screen, with
    the ball and event statements too (the model shipped before the score box, whose held-out clip F1 was
    0.43-0.47: at 64 px a digit of the whole screen is ~3x2 pixels).
    """
    if frame_view not in ("screen", "score"):
        raise ValueError(f"atari_domain: frame_view must be 'screen' or 'score', got {frame_view!r}.")
    score = frame_view == "score"
    episode_steps, random_share = (400, 2500), 0.2
    keep = _score_statement if score else (lambda statement: True)  # noqa: E731

    def describe(data: FrameSet) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for s in data.states:
            key = f"{s.game}/{s.event}"
            counts[key] = counts.get(key, 0) + 1
        return {"episode_kinds": {"steps": list(episode_steps), "random_share": random_share,
                                  "kinds": list(atari.ATARI_EPISODE_KINDS),
                                  "frames": {k: int((data.layout == i).sum()) for i, k in enumerate(data.layouts)}},
                "state_counts": dict(sorted(counts.items())),
                **({"frames_rendered": {"atari_frame_view": "score", "frame_size": 64}} if score else {})}

    return Domain(
        name="atari",
        generate=lambda n, seed: atari.generate_atari_frames(n, seed=seed, episode_steps=episode_steps,
                                                             random_share=random_share, frame_view=frame_view),
        statements=lambda: [s for s in atari.all_statements() if keep(s)],
        true_statements=lambda state: frozenset(s for s in atari.true_statements(state) if keep(s)),
        wordings=atari.wordings,
        vocabulary=atari.vocabulary,
        questions={k: v for k, v in atari.ATARI_QUESTIONS.items() if keep(v[0])},
        balanced=lambda s: s[0] != "game",
        default_config=BuildConfig(frames=12_000, steps=1500, batch_size=64, lr=2e-3, size="atari", val_share=0.15,
                                   eval_every=100, held_out_frames=0, aux_weight=1.0),
        describe=describe,
        versions=functools.partial(library_versions, "ale_py"),
        card_title="a small CLIP for Pong and Breakout score boxes" if score else "a small CLIP for Pong and Breakout frames",
        frames_tag="score" if score else "",
        card_intro=_atari_intro,
        card_data=_atari_data,
    )
