"""The clip gallery: the top- and bottom-scored clips of a run, as GIFs labelled with score and step.

:class:`RunGallery` keeps them while the run trains, over every clip scored (with a scorer that
reads frames); :func:`clip_gallery` scores a few rendered evaluation episodes instead, for a
scorer that reads no frames (the oracle): its training clips carry none.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, NamedTuple

import torch

from vlmrb_torchrl.scoring.clip_scoring import make_clip_scoring
from vlmrb_torchrl.scoring.clips import ClipBatch, ClipSpec
from vlmrb_torchrl.scoring.render import StateRenderer, render_states
from vlmrb_torchrl.recipes.envs import has_batched_env, make_batched_env
from vlmrb_torchrl.recipes.evaluate import on_env_device
from vlmrb_torchrl.recipes.replay import FRAME_KEY, needs_frames

__all__ = ["RunGallery", "attach_run_gallery", "clip_gallery", "save_gif"]


class _Kept(NamedTuple):
    score: float
    tiebreak: float  # a uniform draw: among equal scores, a uniform sample of the run's clips is kept
    step: int  # rows the buffer had stored when the clip's first step was stored (the env step)
    frames: torch.Tensor  # uint8 [n, H, W, 3], the real frames and the outcome frame (or the states they are drawn from)


class RunGallery:
    """The ``clips`` highest- and lowest-scored clips of a whole run, kept as the scorer scores them.

    :meth:`observe` is an :attr:`~vlmrb_torchrl.AsyncScorer.on_scored` hook: for each scored batch it
    copies the frames of the clips that enter the top or bottom ``clips`` (so the gallery shows the
    contrast of the whole run, early random clips included, not only the last episodes). Among equal
    scores (binary scorers) the kept clips are a uniform sample of the run's. The clips kept at one end
    are distinct: their steps are at least ``min_gap`` apart (overlapping clips of one moment, which
    look alike, are not shown twice). :meth:`write` saves them as GIFs (a clip that does not move as a
    still PNG). A clip's step is the number of transitions the buffer had stored when its first step was
    stored, read from the slot's write generation (``(generation - 1) * capacity + slot + 1``): the env
    step to within one collector batch, also after a resume (generations are checkpointed).

    Args:
        clips (int): clips kept at each end.
        capacity (int): the replay buffer's capacity (slots).
        clip_len (int): steps per clip (a clip of ``clip_len + 1`` frames ends with its outcome frame).

    Keyword Args:
        frame_key (NestedKey): the frames in the clips. Defaults to ``"pixels"``.
        seed (int): seeds the tie-breaking draws. Defaults to 0.
        renderer (StateRenderer, optional): ψ, when the clips carry states (its ``state_key``) in place of
            frames: the kept clips' states are rendered by :meth:`write`, only theirs. Defaults to ``None``.
        min_gap (int, optional): the fewest stored transitions between the first steps of two clips kept at
            one end. Defaults to ``clip_len`` (the recipes: ``clip_len * num_envs``, one clip's span when the
            envs' steps interleave).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.scoring.clips import ClipBatch
        >>> gallery = RunGallery(1, capacity=100, clip_len=2)
        >>> clips = TensorDict({"pixels": torch.zeros(3, 2, 4, 4, 3, dtype=torch.uint8),
        ...                     "mask": torch.ones(3, 2, dtype=torch.bool),
        ...                     ("clip", "index"): torch.tensor([[5, 6], [6, 7], [7, 8]])}, batch_size=[3, 2])
        >>> batch = ClipBatch(clips, torch.arange(3), torch.tensor([5, 6, 7]), torch.ones(3, dtype=torch.long), "max")
        >>> gallery.observe(batch, torch.tensor([0.25, 0.75, 0.5]))
        >>> [(k.score, k.step) for k in gallery.top], [(k.score, k.step) for k in gallery.bottom]
        ([(0.75, 7)], [(0.25, 6)])
    """

    def __init__(self, clips: int, *, capacity: int, clip_len: int, frame_key: Any = FRAME_KEY, seed: int = 0,
                 renderer: StateRenderer | None = None, min_gap: int | None = None) -> None:
        self.clips = clips
        self.capacity = capacity
        self.clip_len = clip_len
        self.min_gap = clip_len if min_gap is None else min_gap
        self.renderer = renderer
        self.frame_key = frame_key if renderer is None else renderer.state_key
        self.top: list[_Kept] = []
        self.bottom: list[_Kept] = []
        self.observed = 0
        self._generator = torch.Generator().manual_seed(seed)
        self._lock = threading.Lock()

    def observe(self, batch: ClipBatch, scores: torch.Tensor) -> None:
        """Keeps the clips of ``batch`` that enter the top or bottom ``clips``."""
        scores = scores.detach().float().cpu()
        steps = self._steps(batch)
        with self._lock:
            self.observed += len(scores)
            draws = torch.rand(len(scores), generator=self._generator)
            for kept, best in ((self.top, True), (self.bottom, False)):
                sign = 1.0 if best else -1.0
                # (rank key, tiebreak, a kept clip or a row of the batch, step), best first
                pool = sorted([(sign * k.score, k.tiebreak, k, k.step) for k in kept]
                              + [(sign * float(scores[i]), float(draws[i]), i, steps[i]) for i in range(len(scores))],
                              key=lambda c: (c[0], c[1]), reverse=True)
                chosen = []
                for candidate in pool:
                    if len(chosen) == self.clips:
                        break
                    if not self._near(candidate[3], [c[3] for c in chosen]):
                        chosen.append(candidate)
                new = [c[2] for c in chosen if isinstance(c[2], int)]
                made = dict(zip(new, self._keep(batch, new, scores, draws, steps)))
                kept[:] = [made[c[2]] if isinstance(c[2], int) else c[2] for c in chosen]

    def _near(self, step: int, others: list[int]) -> bool:
        return step >= 0 and any(other >= 0 and abs(step - other) < self.min_gap for other in others)

    def _steps(self, batch: ClipBatch) -> list[int]:
        """Each clip's step (``-1`` where unknown: a clip of the frame pool only, a slot never written)."""
        first_slots = batch.clips.get(("clip", "index"))[:, 0].tolist()
        generation_of = {}
        for clip, generation in zip(batch.target_clip.tolist(), batch.generation.tolist()):
            generation_of.setdefault(clip, generation)  # the clip's first target's
        return [(generation_of.get(i, -1) - 1) * self.capacity + slot + 1
                if generation_of.get(i, -1) > 0 and slot >= 0 else -1 for i, slot in enumerate(first_slots)]

    def _keep(self, batch: ClipBatch, rows: list[int], scores: torch.Tensor, draws: torch.Tensor,
              steps: list[int]) -> list[_Kept]:
        if not rows:
            return []
        picked = torch.tensor(rows)
        clips = ClipBatch.inline_frames(batch.clips[picked], batch.frames)
        out = []
        for j, i in enumerate(rows):
            shown = clips["mask"][j].clone()
            shown[self.clip_len:] = True  # the outcome frame after the last step, when the clips carry one
            out.append(_Kept(float(scores[i]), float(draws[i]), steps[i], clips[self.frame_key][j][shown].clone()))
        return out

    def write(self, out_dir: Path, *, prompt: str = "") -> list[Path]:
        """Saves the kept clips as ``top_<rank>_score<s>_step<n>.gif`` / ``bottom_...`` (best first, worst
        first; ``.png`` for a clip that does not move) and ``prompt.txt``; returns the paths."""
        with self._lock:
            picks = [("top", r, k) for r, k in enumerate(self.top)] + [("bottom", r, k) for r, k in enumerate(self.bottom)]
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for kind, rank, kept in picks:
            path = out_dir / f"{kind}_{rank}_score{kept.score:.2f}_step{kept.step}.gif"
            frames = kept.frames if self.renderer is None else render_states(self.renderer, kept.frames)
            paths.append(save_gif(path, frames, f"score {kept.score:.2f} | step {kept.step:,}", prompt))
        (out_dir / "prompt.txt").write_text(prompt)
        return paths


def attach_run_gallery(buffer: Any, clips: int, *, frame_key: Any = FRAME_KEY, seed: int = 0,
                       renderer: StateRenderer | None = None, min_gap: int | None = None) -> RunGallery:
    """A :class:`RunGallery` fed by ``buffer``'s scoring worker (a
    :class:`~vlmrb_torchrl.VLMReplayBuffer`, whose scorer reads ``frame_key``, drawn by ``renderer`` when given)."""
    gallery = RunGallery(clips, capacity=buffer.sampler.max_size, clip_len=buffer.clip_stream.spec.clip_len,
                         frame_key=frame_key, seed=seed, renderer=renderer, min_gap=min_gap)
    buffer.async_scorer.on_scored = gallery.observe
    return gallery


def save_gif(path: Path, frames: torch.Tensor, title: str, subtitle: str = "") -> Path:
    """Frames ``uint8 [n, H, W, 3]`` as a looping GIF, enlarged 3x, under a caption strip; returns the path written.

    A clip whose frames are all the same is a still image: it is saved as ``path`` with a ``.png`` suffix (a GIF
    of identical frames plays as one frame, which looks like a broken animation).

    Examples:
        >>> import tempfile
        >>> still = torch.zeros(4, 8, 8, 3, dtype=torch.uint8)
        >>> save_gif(Path(tempfile.mkdtemp()) / "clip.gif", still, "score 0.00").suffix
        '.png'
    """
    from PIL import Image, ImageDraw

    if bool((frames == frames[:1]).all()):
        frames, path = frames[:1], Path(path).with_suffix(".png")
    images = []
    for frame in frames.numpy():
        img = Image.fromarray(frame).resize((frame.shape[1] * 3, frame.shape[0] * 3), Image.NEAREST)
        canvas = Image.new("RGB", (img.width, img.height + 28), "black")
        canvas.paste(img, (0, 28))
        draw = ImageDraw.Draw(canvas)
        draw.text((2, 1), title, fill="white")
        draw.text((2, 14), subtitle[:60], fill="gray")
        images.append(canvas)
    if len(images) == 1:
        images[0].save(path)
    else:
        images[0].save(path, save_all=True, append_images=images[1:], duration=150, loop=0)
    return Path(path)


@torch.no_grad()
def clip_gallery(out_dir: Path, *, scorer, make_env, policy, clip_spec: ClipSpec, clips: int, seed: int,
                 episodes: int = 6, steps: int = 2_000) -> list[Path]:
    """Scores clips from a few rendered evaluation episodes and saves the top/bottom ``clips`` as GIFs:
    the gallery of a scorer that reads no frames (its training clips carry none; see :class:`RunGallery`).
    The clips are cut as the run's training clips are (``clip_spec``: the run's
    :meth:`~vlmrb_torchrl.recipes.config.RecipeConfig.clip_spec`).

    Plays at most ``episodes`` episodes and ``steps`` env steps in all: an episode still running
    when the budget is spent is cut there (its clips so far count). Each GIF carries its score and
    the scorer's prompt in the frame's caption strip.
    """
    # the training env's own batched class where there is one (Atari preprocesses frames its own way)
    batched = has_batched_env(make_env)
    env = make_batched_env(make_env, 1) if batched else make_env()
    env.set_seed(seed)
    # the GIFs read clips[FRAME_KEY] inline (not pooled), also when the scorer reads no frames
    extra_keys = [] if needs_frames(scorer) else [FRAME_KEY]
    stream, transform = make_clip_scoring(scorer, clip_spec, frame_key=FRAME_KEY, pool_frames=False,
                                          extra_keys=extra_keys)
    batches = []
    offset = 0
    for episode in range(episodes):
        if offset >= steps:
            break
        rollout = env.rollout(steps - offset, on_env_device(policy, env.device), break_when_any_done=True)
        rollout = rollout[0] if batched else rollout
        rollout["collector", "traj_ids"] = torch.full(rollout.shape, episode, dtype=torch.long)
        index = torch.arange(offset, offset + rollout.numel())
        offset += rollout.numel()
        for out in (stream.push(rollout, index), stream.flush()):
            if out is not None:
                batches.append(out)
    env.close()
    if not batches:
        return []
    batch = ClipBatch.cat(batches)
    scores = torch.cat([transform.score_clips(c) for c in batch.clips.split(64)])
    order = torch.argsort(scores, descending=True, stable=True).tolist()
    starts = batch.clips.get(("clip", "index"))[:, 0].tolist()  # the clip's first step in the played episodes
    picks = []
    for kind, ranked in (("top", order), ("bottom", order[::-1])):  # distinct clips: no two within a clip's length
        chosen: list[int] = []
        for i in ranked:
            if len(chosen) == clips:
                break
            if all(abs(starts[i] - starts[j]) >= clip_spec.clip_len for j in chosen):
                chosen.append(i)
        picks += [(kind, rank, i) for rank, i in enumerate(chosen)]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    prompt = getattr(scorer, "prompt", "") or ""
    for kind, rank, i in picks:
        shown = batch.clips["mask"][i].clone()
        shown[clip_spec.clip_len:] = True  # the outcome frame after the last step, when the stream carries one
        frames = batch.clips[FRAME_KEY][i][shown]
        path = out_dir / f"{kind}_{rank}_score{scores[i]:.2f}.gif"
        paths.append(save_gif(path, frames, f"score {scores[i]:.2f} (evaluation episode)", prompt))
    (out_dir / "prompt.txt").write_text(prompt)
    return paths
