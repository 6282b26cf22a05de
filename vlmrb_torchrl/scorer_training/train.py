"""Training a small CLIP on captioned MiniGrid frames: ``vlmrb build-scorer minigrid --out DIR``.

:func:`build_minigrid_scorer` generates frames (:func:`~vlmrb_torchrl.scorer_training.data.generate_frames`),
captions them from the simulator's state (:mod:`~vlmrb_torchrl.scorer_training.captions`),
trains a transformers ``CLIPModel`` on one CPU thread and saves it with ``save_pretrained``,
its tokenizer and processor, ``training.json`` (the recipe and metrics) and ``MODEL_CARD.md``.
The directory loads with ``make_scorer("clip:DIR")`` and ``HF_HUB_OFFLINE=1``.

The loss: every true caption of a frame must beat every false one,
``softplus(logsumexp(false captions) - true caption)`` averaged over the frame's true captions,
over the batch's captions (one 1-3 statement caption per frame) plus one wording of every
statement. A caption is true of a frame when all its statements are (statements are computed
from the env state, so false captions are exactly known). A log-sum-exp over the positives
instead would let one easy caption carry each frame.

Deterministic for a seed: data, initialisation, batches and captions come from seeded
generators and torch runs on one thread; the same arguments give byte-identical weights
(unless ``minutes`` cuts training short, which depends on the machine's speed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlmrb_torchrl.scorer_training.captions import Statement, all_statements, true_statements, vocabulary, wordings
from vlmrb_torchrl.scorer_training.data import HELD_OUT_LAYOUTS, TRAIN_LAYOUTS, FrameSet, Layout, generate_frames
from vlmrb_torchrl.scorer_training.model import MODEL_SIZES, build_model, build_processor, build_tokenizer

__all__ = ["BuildConfig", "build_minigrid_scorer", "QUESTIONS", "weights_sha256"]

#: Frame-level validation: groups of mutually exclusive statements; a frame where exactly one
#: option is true counts as correct when the model ranks that option's canonical wording first.
QUESTIONS: dict[str, tuple[Statement, ...]] = {
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


@dataclasses.dataclass
class BuildConfig:
    """What :func:`build_minigrid_scorer` does (recorded in ``training.json`` and the model card).

    Attributes:
        frames (int): training + validation frames generated.
        steps (int): optimisation steps (batches).
        batch_size (int): frames per batch.
        lr (float): peak AdamW learning rate (linear warm-up over 5% of steps, cosine decay).
        seed (int): seeds data, initialisation, batches and captions.
        size (str): a key of :data:`~vlmrb_torchrl.scorer_training.model.MODEL_SIZES`.
        val_share (float): share of episodes held out for validation.
        held_out_frames (int): frames of :data:`HELD_OUT_LAYOUTS` (tasks never trained on)
            generated for the transfer metrics (0 = skip).
        eval_every (int): steps between validation passes.
        minutes (float or None): stop training after this many minutes (breaks determinism
            across machines of different speed).
    """

    frames: int = 120_000
    steps: int = 2000
    batch_size: int = 128
    lr: float = 2e-3
    seed: int = 0
    size: str = "small"
    val_share: float = 0.03
    held_out_frames: int = 3_000
    eval_every: int = 200
    minutes: float | None = None


def weights_sha256(out_dir: str | Path) -> str:
    """SHA-256 of ``model.safetensors`` in ``out_dir`` (the model card's content hash)."""
    return hashlib.sha256((Path(out_dir) / "model.safetensors").read_bytes()).hexdigest()


class _Statements:
    """Frames' states as multi-hot rows over :func:`all_statements`, with per-statement wordings."""

    def __init__(self, states) -> None:
        self.names = all_statements()
        self.index = {s: i for i, s in enumerate(self.names)}
        unique: dict[Any, int] = {}
        self.state_id = np.array([unique.setdefault(s, len(unique)) for s in states], dtype=np.int64)
        self.hot = np.zeros((len(unique), len(self.names)), dtype=bool)
        self.true: list[list[int]] = []
        for s, u in unique.items():
            idx = sorted(self.index[t] for t in true_statements(s))
            self.hot[u, idx] = True
        self.true = [np.flatnonzero(row) for row in self.hot]

    def frame_hot(self, frames: np.ndarray) -> np.ndarray:
        return self.hot[self.state_id[frames]]


def _pixels(frames: list[np.ndarray], processor, chunk: int = 512) -> torch.Tensor:
    """uint8 ``[N, 3, S, S]``: the processor's resize, before rescaling and normalising."""
    from PIL import Image

    out = []
    for i in range(0, len(frames), chunk):
        images = [Image.fromarray(f) for f in frames[i : i + chunk]]
        px = processor.image_processor(images=images, return_tensors="pt", do_rescale=False, do_normalize=False)
        out.append(px["pixel_values"].round().clamp(0, 255).to(torch.uint8))
    return torch.cat(out)


class _Normalize:
    """The processor's rescale + normalise, applied to the stored uint8 pixels."""

    def __init__(self, processor) -> None:
        ip = processor.image_processor
        self.scale = float(ip.rescale_factor)
        self.mean = torch.tensor(ip.image_mean, dtype=torch.float32).view(1, 3, 1, 1)
        self.std = torch.tensor(ip.image_std, dtype=torch.float32).view(1, 3, 1, 1)

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        return (pixels.float() * self.scale - self.mean) / self.std


def _features(output: Any) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def _embed_texts(model, tokenizer, texts: list[str]) -> torch.Tensor:
    tokens = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    feats = _features(model.get_text_features(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"]))
    return torch.nn.functional.normalize(feats, dim=-1)


def _embed_pixels(model, normalize: _Normalize, pixels: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    feats = [_features(model.get_image_features(pixel_values=normalize(pixels[i : i + chunk])))
             for i in range(0, len(pixels), chunk)]
    return torch.nn.functional.normalize(torch.cat(feats), dim=-1)


@torch.inference_mode()
def _question_accuracy(model, tokenizer, normalize, pixels: torch.Tensor, hot: np.ndarray,
                       index: dict[Statement, int]) -> dict[str, Any]:
    """Per question: accuracy and count over the frames where exactly one option is true."""
    model.eval()
    images = _embed_pixels(model, normalize, pixels)
    out: dict[str, Any] = {}
    for name, options in QUESTIONS.items():
        cols = [index[o] for o in options]
        truth = hot[:, cols]
        keep = truth.sum(1) == 1
        if keep.sum() == 0:
            continue
        texts = _embed_texts(model, tokenizer, [wordings(o)[0] for o in options])
        pred = (images[torch.from_numpy(keep)] @ texts.T).argmax(-1).numpy()
        out[name] = {"accuracy": round(float((pred == truth[keep].argmax(1)).mean()), 4), "frames": int(keep.sum())}
    model.train()
    return out


def _loss(image_embeds, text_embeds, scale, truth: torch.Tensor) -> torch.Tensor:
    logits = scale * image_embeds @ text_embeds.T  # [B, T]
    negatives = logits.masked_fill(truth, float("-inf")).logsumexp(-1, keepdim=True)
    per_pair = torch.nn.functional.softplus(negatives - logits)
    return ((per_pair * truth).sum(-1) / truth.sum(-1).clamp(min=1)).mean()


def build_minigrid_scorer(
    out_dir: str | Path,
    config: BuildConfig | None = None,
    *,
    layouts: tuple[Layout, ...] = TRAIN_LAYOUTS,
    log: Callable[[str], None] | None = print,
    command: str | None = None,
) -> dict[str, Any]:
    """Generates captioned MiniGrid frames, trains a small CLIP and saves it to ``out_dir``.

    Args:
        out_dir (str or Path): where ``config.json``, ``model.safetensors``, the tokenizer,
            the processor, ``training.json`` and ``MODEL_CARD.md`` are written.
        config (BuildConfig, optional): the recipe. Defaults to ``BuildConfig()`` (the shipped model's).

    Keyword Args:
        layouts (tuple of Layout, optional): the training mixture. Defaults to :data:`TRAIN_LAYOUTS`.
        log (callable, optional): progress lines go here (``None``: silent). Defaults to ``print``.
        command (str, optional): the command line recorded in the model card.

    Returns:
        dict: the contents of ``training.json`` (config, data counts, metrics, timings, hash).

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
    cfg = config or BuildConfig()
    if cfg.size not in MODEL_SIZES:
        raise ValueError(f"BuildConfig.size must be one of {sorted(MODEL_SIZES)}, got {cfg.size!r}.")
    say = log or (lambda _: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: faster than two on a shared 2-core machine, and deterministic
    try:
        return _build(out, cfg, layouts, say, command)
    finally:
        torch.set_num_threads(threads)


def _build(out: Path, cfg: BuildConfig, layouts, say, command) -> dict[str, Any]:
    t0 = time.perf_counter()
    data: FrameSet = generate_frames(cfg.frames, seed=cfg.seed, layouts=layouts)
    t_data = time.perf_counter() - t0
    say(f"generated {len(data)} frames from {data.episode.max() + 1} episodes in {t_data:.0f} s")

    s = MODEL_SIZES[cfg.size]
    tokenizer = build_tokenizer(vocabulary(), max_length=s["max_text_len"])
    processor = build_processor(tokenizer, image_size=s["image_size"])
    t1 = time.perf_counter()
    pixels = _pixels(data.frames, processor)
    normalize = _Normalize(processor)
    say(f"preprocessed frames to {tuple(pixels.shape[1:])} in {time.perf_counter() - t1:.0f} s")
    stmts = _Statements(data.states)
    rng = np.random.default_rng(cfg.seed)
    episodes = np.unique(data.episode)
    n_val = min(len(episodes) - 1, max(1, int(round(cfg.val_share * len(episodes)))))
    if n_val < 1:  # a single episode (tiny builds): validate on the training frames
        train_idx = val_idx = np.arange(len(data))
    else:
        is_val = np.isin(data.episode, rng.choice(episodes, size=n_val, replace=False))
        train_idx, val_idx = np.flatnonzero(~is_val), np.flatnonzero(is_val)

    # balanced sampling: a frame's weight follows its rarest (colour-free) statement, so facing
    # the goal, holding the key or an unlocked-but-closed door are seen far more often than
    # their share of the rollouts
    hot_train = stmts.frame_hot(train_idx)
    freq = hot_train.sum(0).astype(np.float64)
    balance_cols = np.array([i for i, n in enumerate(stmts.names) if len(n) < 3 or n[1] == "any"])
    inv = 1.0 / np.sqrt(np.maximum(freq, 50.0))
    frame_w = (hot_train[:, balance_cols] * inv[balance_cols]).max(1)
    frame_w = torch.from_numpy(frame_w / frame_w.sum())
    stmt_w = 1.0 / np.sqrt(np.maximum(freq, 1.0))  # caption statements: rare ones first
    active = np.flatnonzero(freq > 0)

    model = build_model(len(tokenizer), size=cfg.size, seed=cfg.seed)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    optim = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    warm = max(1, int(0.05 * cfg.steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda k: min(1.0, (k + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, k / max(1, cfg.steps)))))
    gen = torch.Generator().manual_seed(cfg.seed)
    all_hot = stmts.hot
    val_pixels = pixels[torch.from_numpy(val_idx)]
    val_hot = stmts.frame_hot(val_idx)
    history = []
    t2 = time.perf_counter()
    deadline = None if cfg.minutes is None else t2 + 60 * cfg.minutes
    steps_done = 0
    loss_avg = None
    for step in range(cfg.steps):
        pick = train_idx[torch.multinomial(frame_w, cfg.batch_size, replacement=True, generator=gen).numpy()]
        frame_hot = all_hot[stmts.state_id[pick]]
        texts, rows = [], []
        for u in stmts.state_id[pick]:
            true = stmts.true[u]
            k = min(len(true), int(rng.choice((1, 2, 3), p=(0.5, 0.3, 0.2))))
            p = stmt_w[true] / stmt_w[true].sum()
            chosen = rng.choice(true, size=k, replace=False, p=p)
            texts.append(" and ".join(str(rng.choice(wordings(stmts.names[c]))) for c in chosen))
            rows.append(chosen)
        for c in active:  # one wording of every statement seen in training
            texts.append(str(rng.choice(wordings(stmts.names[c]))))
            rows.append(np.array([c]))
        caption_hot = np.zeros((len(texts), len(stmts.names)), dtype=bool)
        for t, r in enumerate(rows):
            caption_hot[t, r] = True
        # a caption is true of a frame when none of its statements is false there
        truth = torch.from_numpy((caption_hot.astype(np.float32) @ (~frame_hot).T.astype(np.float32)) == 0).T
        image_embeds = _embed_pixels(model, normalize, pixels[torch.from_numpy(pick)])
        text_embeds = _embed_texts(model, tokenizer, texts)
        scale = model.logit_scale.clamp(max=math.log(100.0)).exp()
        loss = _loss(image_embeds, text_embeds, scale, truth)
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        with torch.no_grad():
            model.logit_scale.clamp_(max=math.log(100.0))
        steps_done = step + 1
        value = loss.item()
        loss_avg = value if loss_avg is None else 0.95 * loss_avg + 0.05 * value
        last = steps_done == cfg.steps or (deadline is not None and time.perf_counter() > deadline)
        if steps_done % cfg.eval_every == 0 or last:
            acc = _question_accuracy(model, tokenizer, normalize, val_pixels, val_hot, stmts.index)
            history.append({"step": steps_done, "seconds": round(time.perf_counter() - t2, 1),
                            "loss": round(loss_avg, 4), "val": {k: v["accuracy"] for k, v in acc.items()}})
            say(f"step {steps_done}/{cfg.steps} {time.perf_counter() - t2:.0f}s loss {loss_avg:.3f} "
                + " ".join(f"{k}={v['accuracy']:.3f}" for k, v in acc.items()))
        if last:
            break
    t_train = time.perf_counter() - t2
    model.eval()
    val_metrics = _question_accuracy(model, tokenizer, normalize, val_pixels, val_hot, stmts.index)

    held_out = {}
    if cfg.held_out_frames > 0:
        ho = generate_frames(cfg.held_out_frames, seed=cfg.seed + 1_000_003,
                             layouts=tuple(Layout(e, 1.0, "doorkey" if "Unlock" in e or "Locked" in e else "subgoal")
                                           for e in HELD_OUT_LAYOUTS))
        ho_stmts = _Statements(ho.states)
        held_out = _question_accuracy(model, tokenizer, normalize, _pixels(ho.frames, processor),
                                      ho_stmts.frame_hot(np.arange(len(ho))), ho_stmts.index)
        say("held-out tasks: " + " ".join(f"{k}={v['accuracy']:.3f}" for k, v in held_out.items()))

    model.save_pretrained(out)
    processor.save_pretrained(out)
    report = {
        "config": dataclasses.asdict(cfg),
        "command": command,
        "layouts": [dataclasses.asdict(lay) for lay in layouts],
        "held_out_layouts": list(HELD_OUT_LAYOUTS),
        "frames": {"train": int(len(train_idx)), "val": int(len(val_idx)), "episodes": int(len(episodes))},
        "parameters": int(n_params),
        "steps_done": steps_done,
        "seconds": {"data": round(t_data, 1), "train": round(t_train, 1)},
        "val_accuracy": val_metrics,
        "held_out_accuracy": held_out,
        "history": history,
        "weights_sha256": weights_sha256(out),
        "versions": _versions(),
    }
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "MODEL_CARD.md").write_text(model_card(report))
    say(f"saved to {out} ({n_params} parameters, sha256 {report['weights_sha256'][:16]}...)")
    return report


def _versions() -> dict[str, str]:
    import minigrid
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "minigrid": minigrid.__version__,
            "python": platform.python_version()}


def model_card(report: dict[str, Any]) -> str:
    """The ``MODEL_CARD.md`` text for a build ``report`` (``training.json``)."""
    cfg = report["config"]

    def table(metrics: dict) -> str:
        rows = "\n".join(f"| {k} | {v['accuracy']:.3f} | {v['frames']} |" for k, v in metrics.items())
        return "| question | accuracy | frames |\n|---|---|---|\n" + rows

    layouts = ", ".join(f"{lay['env_id']} ({lay['weight']:.2f}, {lay['scripted']})" for lay in report["layouts"])
    command = report.get("command") or (
        f"vlmrb build-scorer minigrid --out DIR --frames {cfg['frames']} --steps {cfg['steps']} --seed {cfg['seed']}")
    return f"""# builtin:minigrid: a small CLIP for MiniGrid frames

A transformers `CLIPModel` ({report["parameters"]:,} parameters, size "{cfg["size"]}": see
`config.json`) trained from scratch on MiniGrid frames rendered by `vlmrb_torchrl.envs.MiniGridEnv`
(`frame_size=64`) with captions generated from the simulator's state (what the agent holds, door
states, what it faces, goal distance, room). The simulator's state is privileged information used
at training time only; at scoring time the model sees pixels and text. It is a domain model, not a
general pretrained VLM: it knows MiniGrid's objects, colours and door states and nothing else.

## Rebuild

```
{command}
```

Seed {cfg['seed']}; {report['steps_done']} steps of {cfg['batch_size']} frames on one CPU thread
({report['seconds']['data']:.0f} s data, {report['seconds']['train']:.0f} s training).
Versions: {json.dumps(report['versions'])}.

## Data

{report['frames']['train']:,} training frames and {report['frames']['val']:,} validation frames
({report['frames']['episodes']:,} episodes; validation = held-out episodes). Layouts (share, scripted
agent): {layouts}. 30% of episodes are played by a uniform random agent, the others by a scripted agent
with epsilon in {{0, .1, .2, .3, .5}} and random bursts; 30% start from a perturbed state (an object in
hand, a door unlocked or open, the agent next to or facing the goal). Batches are balanced over rare
statements. Each frame gets a 1-3 statement caption; every statement's wordings are in
`vlmrb_torchrl/scorer_training/captions.py`.

Held-out tasks (never trained on): {', '.join(report['held_out_layouts'])}.

## Metrics (frame level: rank the true statement first among exclusive options)

Validation episodes of the training layouts:

{table(report['val_accuracy'])}

Held-out tasks:

{table(report['held_out_accuracy']) if report['held_out_accuracy'] else '(not measured)'}

## Content hash

`model.safetensors` sha256: `{report['weights_sha256']}`
"""
