"""The clip gallery: the top- and bottom-scored clips of a few rendered episodes, as GIFs."""

from __future__ import annotations

from pathlib import Path

import torch

from vlmrb_torchrl.clip_scoring import make_clip_scoring
from vlmrb_torchrl.clips import ClipBatch, ClipSpec
from vlmrb_torchrl.recipes.envs import has_batched_env, make_batched_env
from vlmrb_torchrl.recipes.evaluate import on_env_device
from vlmrb_torchrl.recipes.replay import FRAME_KEY, needs_frames

__all__ = ["clip_gallery"]


@torch.no_grad()
def clip_gallery(out_dir: Path, *, scorer, make_env, policy, clip_len: int, clips: int, seed: int,
                 episodes: int = 6, steps: int = 2_000) -> list[Path]:
    """Scores clips from a few rendered episodes and saves the top/bottom ``clips`` as GIFs.

    Plays at most ``episodes`` episodes and ``steps`` env steps in all: an episode still running
    when the budget is spent is cut there (its clips so far count). Each GIF carries its score and
    the scorer's prompt in the frame's caption strip.
    """
    from PIL import Image, ImageDraw

    # the training env's own batched class where there is one (Atari preprocesses frames its own way)
    batched = has_batched_env(make_env)
    env = make_batched_env(make_env, 1) if batched else make_env()
    env.set_seed(seed)
    # the GIFs read clips[FRAME_KEY] inline (not pooled), also when the scorer reads no frames
    extra_keys = [] if needs_frames(scorer) else [FRAME_KEY]
    stream, transform = make_clip_scoring(scorer, ClipSpec(clip_len=clip_len), frame_key=FRAME_KEY,
                                          pool_frames=False, extra_keys=extra_keys)
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
    order = torch.argsort(scores, descending=True, stable=True)
    picks = [("top", i) for i in order[:clips].tolist()] + [("bottom", i) for i in order.flip(0)[:clips].tolist()]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    prompt = getattr(scorer, "prompt", "") or ""
    for rank, (kind, i) in enumerate(picks):
        shown = batch.clips["mask"][i].clone()
        shown[clip_len:] = True  # the outcome frame after the last step, when the stream carries one
        frames = batch.clips[FRAME_KEY][i][shown]
        images = []
        for frame in frames.numpy():
            img = Image.fromarray(frame).resize((frame.shape[1] * 3, frame.shape[0] * 3), Image.NEAREST)
            canvas = Image.new("RGB", (img.width, img.height + 28), "black")
            canvas.paste(img, (0, 28))
            draw = ImageDraw.Draw(canvas)
            draw.text((2, 1), f"score {scores[i]:.2f}", fill="white")
            draw.text((2, 14), prompt[:60], fill="gray")
            images.append(canvas)
        path = out_dir / f"{kind}_{rank % clips if clips else rank}_score{scores[i]:.2f}.gif"
        images[0].save(path, save_all=True, append_images=images[1:], duration=150, loop=0)
        paths.append(path)
    (out_dir / "prompt.txt").write_text(prompt)
    return paths
