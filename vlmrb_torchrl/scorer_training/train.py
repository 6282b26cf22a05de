"""Training a small CLIP on captioned frames of one environment: ``vlmrb build-scorer minigrid|lift --out DIR``.

:func:`build_scorer` takes a :class:`~vlmrb_torchrl.scorer_training.domains.Domain` (what is
environment-specific: how frames are generated, the statements a state makes true, their
wordings, the validation questions, the model card's description; each env family supplies
its own), generates frames, captions them from the simulator's state, trains a transformers
``CLIPModel`` on one CPU thread (or a GPU: ``BuildConfig.device``) and saves it with ``save_pretrained``, its tokenizer and
processor, ``training.json`` (the recipe and metrics) and ``MODEL_CARD.md``. The directory loads
with ``make_scorer("clip:DIR")`` and ``HF_HUB_OFFLINE=1``. The domains are the env families'
(:data:`~vlmrb_torchrl.scorer_training.domains.DOMAINS`, e.g. ``vlmrb_torchrl/envs/minigrid/domain.py``).

The loss: every true caption of a frame must beat every false one,
``softplus(logsumexp(false captions) - true caption)`` averaged over the frame's true captions,
over the batch's captions (one 1-3 statement caption per frame) plus one wording of every
statement. A caption is true of a frame when all its statements are (statements are computed
from the env state, so false captions are exactly known). A log-sum-exp over the positives
instead would let one easy caption carry each frame.

Deterministic for a seed: data, initialisation, batches and captions come from seeded
generators and torch runs on one thread; the same arguments give byte-identical weights
(unless ``minutes`` cuts training short, which depends on the machine's speed). On a GPU
(``device="cuda"``) the data, initialisation, batches and captions are the same, but the
arithmetic is not bit-identical to the CPU's: the weights differ slightly, and the device is
recorded in ``training.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlmrb_torchrl.scorer_training.domains import (DOMAINS, BuildConfig, Domain, FrameSet, Statement, get_domain,
                                                   load_frames, save_frames)
from vlmrb_torchrl.scorer_training.model import MODEL_SIZES, build_model, build_processor, build_tokenizer

__all__ = ["BuildConfig", "build_scorer", "weights_sha256", "resolve_device", "BUILD_MARKER", "check_build_dir"]

#: Written into every directory a build saves a model to, with the build's id (also in its ``training.json``): what
#: lets the next build write over that model's files without ``overwrite=True`` (``--overwrite``).
BUILD_MARKER = ".vlmrb-scorer"


def resolve_device(device: str) -> torch.device:
    """``BuildConfig.device`` as a torch device: ``"cpu"``, ``"cuda"`` (``"cuda:N"``) or ``"auto"`` (a GPU if
    torch sees one, else the CPU).

    Examples:
        >>> resolve_device("cpu")
        device(type='cpu')
        >>> resolve_device("tpu")
        Traceback (most recent call last):
        ...
        ValueError: BuildConfig.device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got 'tpu'.
    """
    if not isinstance(device, str) or not (device in ("cpu", "cuda", "auto") or
                                           (device.startswith("cuda:") and device[5:].isdigit())):
        raise ValueError(f"BuildConfig.device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}.")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"BuildConfig.device={device!r}, but torch sees no CUDA GPU here: use 'cpu' or 'auto'.")
    return torch.device(device)


def _device_name(device: torch.device) -> str:
    """What ``training.json`` records: ``"cpu"`` or ``"cuda (NVIDIA H200)"``."""
    return "cpu" if device.type == "cpu" else f"{device.type} ({torch.cuda.get_device_name(device)})"


def weights_sha256(out_dir: str | Path) -> str:
    """SHA-256 of ``model.safetensors`` in ``out_dir`` (the model card's content hash)."""
    return hashlib.sha256((Path(out_dir) / "model.safetensors").read_bytes()).hexdigest()


class _Statements:
    """Frames' states as multi-hot rows over the domain's statements, with per-statement wordings."""

    def __init__(self, states, domain: Domain) -> None:
        self.names = list(domain.statements())
        self.index = {s: i for i, s in enumerate(self.names)}
        unique: dict[Any, int] = {}
        self.state_id = np.array([unique.setdefault(s, len(unique)) for s in states], dtype=np.int64)
        self.hot = np.zeros((len(unique), len(self.names)), dtype=bool)
        self.true: list[list[int]] = []
        for s, u in unique.items():
            idx = sorted(self.index[t] for t in domain.true_statements(s))
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

    def __init__(self, processor, device: torch.device | str = "cpu") -> None:
        ip = processor.image_processor
        self.scale = float(ip.rescale_factor)
        self.mean = torch.tensor(ip.image_mean, dtype=torch.float32, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(ip.image_std, dtype=torch.float32, device=device).view(1, 3, 1, 1)

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        return (pixels.float() * self.scale - self.mean) / self.std


def _features(output: Any) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def _embed_texts(model, tokenizer, texts: list[str]) -> torch.Tensor:
    tokens = tokenizer(texts, padding=True, truncation=True, return_tensors="pt").to(model.device)
    feats = _features(model.get_text_features(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"]))
    return torch.nn.functional.normalize(feats, dim=-1)


def _embed_pixels(model, normalize: _Normalize, pixels: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    feats = [_features(model.get_image_features(pixel_values=normalize(pixels[i : i + chunk])))
             for i in range(0, len(pixels), chunk)]
    return torch.nn.functional.normalize(torch.cat(feats), dim=-1)


@torch.inference_mode()
def _question_accuracy(model, tokenizer, normalize, pixels: torch.Tensor, hot: np.ndarray,
                       index: dict[Statement, int], domain: Domain) -> dict[str, Any]:
    """Per question: accuracy and count over the frames where exactly one option is true."""
    model.eval()
    images = _embed_pixels(model, normalize, pixels)
    out: dict[str, Any] = {}
    wordings = domain.wordings
    for name, options in domain.questions.items():
        cols = [index[o] for o in options]
        truth = hot[:, cols]
        keep = truth.sum(1) == 1
        if keep.sum() == 0:
            continue
        texts = _embed_texts(model, tokenizer, [wordings(o)[0] for o in options])
        pred = (images[torch.from_numpy(keep).to(images.device)] @ texts.T).argmax(-1).cpu().numpy()
        out[name] = {"accuracy": round(float((pred == truth[keep].argmax(1)).mean()), 4), "frames": int(keep.sum())}
    model.train()
    return out


class _AuxHead(torch.nn.Module):
    """``BuildConfig.aux_weight``'s head: a linear map of the (unit) image embedding to one logit per
    statement, and per question a cross-entropy over its options' logits, summed over the questions
    (each question weighs as much as the whole contrastive loss: with the mean, a build whose cues
    are small still saw no signal after 400 steps)."""

    #: the unit embeddings' logits are multiplied by this (a cosine classifier's temperature)
    SCALE = 8.0

    def __init__(self, dim: int, index: dict[Statement, int], domain: Domain, seed: int) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.linear = torch.nn.Linear(dim, len(index))
        self.questions = [np.array([index[o] for o in options]) for options in domain.questions.values()]

    def loss(self, image_embeds: torch.Tensor, frame_hot: np.ndarray) -> torch.Tensor:
        logits = self.linear(image_embeds * self.SCALE)
        terms = []
        for cols in self.questions:
            truth = frame_hot[:, cols]
            keep = truth.sum(1) == 1
            if keep.any():
                rows = torch.from_numpy(np.flatnonzero(keep)).to(logits.device)
                terms.append(torch.nn.functional.cross_entropy(logits[rows][:, torch.from_numpy(cols).to(logits.device)],
                                                               torch.from_numpy(truth[keep].argmax(1)).to(logits.device)))
        return torch.stack(terms).sum() if terms else logits.sum() * 0.0


class _Flips:
    """``BuildConfig.augment``: flips each frame of a batch by each of the domain's symmetries with
    probability 1/2 (its own generator: the batches and captions draw what they drew without it)
    and says what each frame's statements became."""

    _DIMS = {"horizontal": -1, "vertical": -2}

    def __init__(self, domain: Domain, index: dict[Statement, int], seed: int) -> None:
        if not domain.symmetries:
            raise ValueError(f"BuildConfig.augment=True, but the {domain.name!r} domain has no symmetries: its "
                             "frames have an orientation a flip would break. Build it with augment=False.")
        self.rng = np.random.default_rng([seed, 1])
        names = list(index)
        self.flips = []
        for axis, statement_map in domain.symmetries:
            if axis not in self._DIMS:
                raise ValueError(f"Domain.symmetries: axis must be 'horizontal' or 'vertical', got {axis!r}.")
            mapped = [statement_map(s) for s in names]
            unknown = [m for m in mapped if m not in index]
            if unknown:
                raise ValueError(f"Domain.symmetries: the {axis} flip maps statements to unknown ones: {unknown[:3]}.")
            perm = np.array([index[m] for m in mapped])
            if len(set(perm.tolist())) != len(perm):
                raise ValueError(f"Domain.symmetries: the {axis} flip maps two statements to one; it must be one to one.")
            self.flips.append((self._DIMS[axis], perm))

    def __call__(self, pixels: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        """``(flipped pixels, maps)``: ``maps[i, s]`` is the index statement ``s`` of frame ``i`` became."""
        maps = np.broadcast_to(np.arange(len(self.flips[0][1])), (len(pixels), len(self.flips[0][1]))).copy()
        pixels = pixels.clone()
        for dim, perm in self.flips:
            rows = np.flatnonzero(self.rng.random(len(pixels)) < 0.5)
            if len(rows):
                idx = torch.from_numpy(rows).to(pixels.device)
                pixels[idx] = pixels[idx].flip(dim)
                maps[rows] = perm[maps[rows]]
        return pixels, maps

    @staticmethod
    def inverse(maps: np.ndarray) -> np.ndarray:
        """Per row, the permutation that undoes ``maps``: ``hot[:, inverse]`` is the flipped frame's multi-hot."""
        inv = np.empty_like(maps)
        np.put_along_axis(inv, maps, np.broadcast_to(np.arange(maps.shape[1]), maps.shape), axis=1)
        return inv


class _OppositeTexts:
    """``BuildConfig.opposite_texts``: for frames of a batch, one true statement that has opposites
    (rare ones first) and one of its opposites, as texts of the step (their own generator: the
    batches and captions draw what they drew without it)."""

    def __init__(self, domain: Domain, stmts: _Statements, stmt_w: np.ndarray, seed: int) -> None:
        if domain.opposites is None:
            raise ValueError(f"BuildConfig.opposite_texts > 0, but the {domain.name!r} domain names no opposites "
                             "(Domain.opposites). Build it with opposite_texts=0.")
        self.rng = np.random.default_rng([seed, 2])
        self.opposites = {}
        for i, name in enumerate(stmts.names):
            known = [stmts.index[o] for o in domain.opposites(name) if o in stmts.index]
            if known:
                self.opposites[i] = np.array(known)
        self.has = np.zeros(len(stmts.names), dtype=bool)
        self.has[list(self.opposites)] = True
        self.stmts, self.weight = stmts, stmt_w

    def draw(self, state_ids: np.ndarray, maps: np.ndarray, n: int) -> list[int]:
        """Statement indices, a true one and an opposite per chosen frame (``maps``: the frames' flips)."""
        out: list[int] = []
        for i in self.rng.choice(len(state_ids), size=min(n, len(state_ids)), replace=False):
            true = maps[i][self.stmts.true[state_ids[i]]]
            true = true[self.has[true]]
            if len(true) == 0:
                continue
            p = self.weight[true] / self.weight[true].sum()
            chosen = int(self.rng.choice(true, p=p))
            out += [chosen, int(self.rng.choice(self.opposites[chosen]))]
        return out


def _loss(image_embeds, text_embeds, scale, truth: torch.Tensor) -> torch.Tensor:
    logits = scale * image_embeds @ text_embeds.T  # [B, T]
    negatives = logits.masked_fill(truth, float("-inf")).logsumexp(-1, keepdim=True)
    per_pair = torch.nn.functional.softplus(negatives - logits)
    return ((per_pair * truth).sum(-1) / truth.sum(-1).clamp(min=1)).mean()


def _build_id(path: Path) -> str | None:
    """The ``build_id`` of the JSON object in ``path`` (the marker or ``training.json``); ``None`` without one."""
    try:
        value = json.loads(path.read_text()).get("build_id")
    except (OSError, ValueError, RecursionError, AttributeError):
        return None
    return value if isinstance(value, str) and len(value) == 32 and value.isalnum() else None


def check_build_dir(out_dir: str | Path, *, overwrite: bool = False) -> None:
    """Refuses to save a model into ``out_dir`` when it holds files an earlier build did not write, unless
    ``overwrite``: a build writes over ``config.json``, ``tokenizer.json``, ``MODEL_CARD.md``, ... A directory
    that does not exist, is empty, or holds an earlier build (its :data:`BUILD_MARKER`'s id is the one in its
    ``training.json``) is fine.

    Raises:
        FileExistsError: the directory holds other files (or is a file); the message names them and
            ``--overwrite``.

    Examples:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp())
        >>> check_build_dir(out)  # empty: fine
        >>> _ = (out / "config.json").write_text("{}")
        >>> check_build_dir(out)
        Traceback (most recent call last):
        ...
        FileExistsError: --out ...: the directory holds files no build wrote (config.json); a build writes over ...
        >>> check_build_dir(out, overwrite=True)
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out_dir}: a file, not a directory.")
    if overwrite or not out.is_dir():
        return
    found = sorted(p.name for p in out.iterdir())
    marked = _build_id(out / BUILD_MARKER)
    if not found or (marked is not None and marked == _build_id(out / "training.json")):
        return
    raise FileExistsError(f"--out {out_dir}: the directory holds files no build wrote ({', '.join(found[:6])}"
                          f"{', ...' if len(found) > 6 else ''}); a build writes over config.json, tokenizer.json, "
                          "MODEL_CARD.md, ... there. Choose an empty or new directory, or pass --overwrite "
                          "(overwrite=True) to write over them.")


def build_scorer(
    domain: str | Domain,
    out_dir: str | Path,
    config: BuildConfig | None = None,
    *,
    log: Callable[[str], None] | None = print,
    command: str | None = None,
    cache: str | Path | None = None,
    workers: int = 1,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Generates captioned frames of ``domain``, trains a small CLIP and saves it to ``out_dir``.

    Args:
        domain (str or Domain): ``"minigrid"``, ``"lift"`` or a :class:`Domain`.
        out_dir (str or Path): where ``config.json``, ``model.safetensors``, the tokenizer,
            the processor, ``training.json`` and ``MODEL_CARD.md`` are written.
        config (BuildConfig, optional): the recipe. Defaults to the domain's
            ``default_config`` (the shipped model's).

    Keyword Args:
        log (callable, optional): progress lines go here (``None``: silent). Defaults to ``print``.
        command (str, optional): the command line recorded in the model card.
        cache (str or Path, optional): a directory where the generated training frames are kept
            (``<domain>-<frames>-seed<seed>.npz``) and reused by the next build with the same
            frames and seed: generating robosuite frames costs ~0.1 s each. Not part of the
            recipe (the frames are the same either way).
        workers (int, optional): processes that generate the frames, for domains that can
            (``Domain.parallel``: Scene); the frames do not depend on it. Defaults to ``1``.
        overwrite (bool, optional): save into ``out_dir`` even when it holds files an earlier build did not
            write (:func:`check_build_dir`: checked first, before any frame is generated); files of the same
            names are replaced. Defaults to ``False``.

    Returns:
        dict: the contents of ``training.json`` (config, data counts, metrics, timings, hash).

    Raises:
        FileExistsError: ``out_dir`` holds other files and ``overwrite`` is not set.
        FrameCacheError: a frame cache in ``cache`` is damaged (the message names it: delete it to rebuild).
    """
    domain = get_domain(domain) if isinstance(domain, str) else domain
    cfg = config or domain.default_config
    if cfg.size not in MODEL_SIZES:
        raise ValueError(f"BuildConfig.size must be one of {sorted(MODEL_SIZES)}, got {cfg.size!r}.")
    device = resolve_device(cfg.device)
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"build_scorer: workers must be an int >= 1, got workers={workers!r}.")
    if workers > 1 and not domain.parallel:
        raise ValueError(f"build_scorer: the {domain.name!r} domain generates its frames in one process "
                         f"(workers=1); only {sorted(n for n, d in DOMAINS.items() if d().parallel)} take workers.")
    say = log or (lambda _: None)
    out = Path(out_dir)
    check_build_dir(out, overwrite=overwrite)
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: faster than two on a shared 2-core machine, and deterministic
    try:
        return _build(out, cfg, domain, say, command, None if cache is None else Path(cache), device, workers)
    finally:
        torch.set_num_threads(threads)


def _frames(domain: Domain, cfg: BuildConfig, cache: Path | None, say, workers: int = 1) -> FrameSet:
    """The training frames: generated, or read from ``cache`` where an earlier build kept them."""
    # "-v4": states as JSON, frames of several sizes (older caches held pickled states; they are not read);
    # MiniGrid's episodes drawn per episode (v3 MiniGrid caches hold other frames for the same seed)
    name = "-".join(x for x in (domain.name, domain.frames_tag, str(cfg.frames), f"seed{cfg.seed}", "v4") if x)
    path = None if cache is None else cache / f"{name}.npz"
    if path is not None and path.is_file():
        say(f"reading the frames from {path}")
        return load_frames(path, frames=cfg.frames)
    data = domain.generate(cfg.frames, cfg.seed, workers) if domain.parallel else domain.generate(cfg.frames, cfg.seed)
    if path is not None:  # a cache that cannot be written is not worth the generated frames: go on without it
        try:
            cache.mkdir(parents=True, exist_ok=True)
            save_frames(data, path)
        except (OSError, TypeError, ValueError) as err:
            say(f"could not keep the frames in {path} ({type(err).__name__}: {err}); training goes on")
    return data


def _build(out: Path, cfg: BuildConfig, domain: Domain, say, command, cache: Path | None, device: torch.device,
           workers: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    data: FrameSet = _frames(domain, cfg, cache, say, workers)
    t_data = time.perf_counter() - t0
    say(f"generated {len(data)} frames from {data.episode.max() + 1} episodes in {t_data:.0f} s")

    s = MODEL_SIZES[cfg.size]
    tokenizer = build_tokenizer(domain.vocabulary(), max_length=s["max_text_len"])
    processor = build_processor(tokenizer, image_size=s["image_size"])
    t1 = time.perf_counter()
    pixels = _pixels(data.frames, processor).to(device)
    normalize = _Normalize(processor, device)
    say(f"preprocessed frames to {tuple(pixels.shape[1:])} in {time.perf_counter() - t1:.0f} s")
    stmts = _Statements(data.states, domain)
    rng = np.random.default_rng(cfg.seed)
    episodes = np.unique(data.episode)
    n_val = min(len(episodes) - 1, max(1, int(round(cfg.val_share * len(episodes)))))
    if n_val < 1:  # a single episode (tiny builds): validate on the training frames
        train_idx = val_idx = np.arange(len(data))
    else:
        is_val = np.isin(data.episode, rng.choice(episodes, size=n_val, replace=False))
        train_idx, val_idx = np.flatnonzero(~is_val), np.flatnonzero(is_val)

    # balanced sampling: a frame's weight follows its rarest balanced statement (MiniGrid: the
    # colour-free ones), so facing the goal, holding the key or an unlocked-but-closed door are
    # seen far more often than their share of the rollouts
    hot_train = stmts.frame_hot(train_idx)
    freq = hot_train.sum(0).astype(np.float64)
    balance_cols = np.array([i for i, n in enumerate(stmts.names) if domain.balanced(n)])
    inv = 1.0 / np.sqrt(np.maximum(freq, 50.0))
    frame_w = (hot_train[:, balance_cols] * inv[balance_cols]).max(1)
    frame_w = torch.from_numpy(frame_w / frame_w.sum())
    stmt_w = 1.0 / np.sqrt(np.maximum(freq, 1.0))  # caption statements: rare ones first
    active = np.flatnonzero(freq > 0)
    stmt_p = stmt_w[active] / stmt_w[active].sum()
    wordings = domain.wordings

    model = build_model(len(tokenizer), size=cfg.size, seed=cfg.seed).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    aux = _AuxHead(model.config.projection_dim, stmts.index, domain, cfg.seed).to(device) if cfg.aux_weight > 0 else None
    optim = torch.optim.AdamW(list(model.parameters()) + (list(aux.parameters()) if aux else []), lr=cfg.lr,
                              weight_decay=0.01)
    warm = max(1, int(0.05 * cfg.steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda k: min(1.0, (k + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, k / max(1, cfg.steps)))))
    gen = torch.Generator().manual_seed(cfg.seed)
    flips = _Flips(domain, stmts.index, cfg.seed) if cfg.augment else None
    opposite = _OppositeTexts(domain, stmts, stmt_w, cfg.seed) if cfg.opposite_texts > 0 else None
    all_hot = stmts.hot
    val_pixels = pixels[torch.from_numpy(val_idx).to(device)]
    val_hot = stmts.frame_hot(val_idx)
    history = []
    t2 = time.perf_counter()
    deadline = None if cfg.minutes is None else t2 + 60 * cfg.minutes
    steps_done = 0
    loss_avg = None
    for step in range(cfg.steps):
        pick = train_idx[torch.multinomial(frame_w, cfg.batch_size, replacement=True, generator=gen).numpy()]
        frame_hot = all_hot[stmts.state_id[pick]]
        batch_pixels = pixels[torch.from_numpy(pick).to(device)]
        # each frame's statement map under its flips (identity without augmentation)
        maps = np.broadcast_to(np.arange(len(stmts.names)), frame_hot.shape)
        if flips is not None:
            batch_pixels, maps = flips(batch_pixels)
            frame_hot = np.take_along_axis(frame_hot, flips.inverse(maps), axis=1)
        texts, rows = [], []
        for u, mapped in zip(stmts.state_id[pick], maps):
            true = stmts.true[u]
            k = min(len(true), int(rng.choice((1, 2, 3), p=(0.5, 0.3, 0.2))))
            p = stmt_w[true] / stmt_w[true].sum()
            chosen = mapped[rng.choice(true, size=k, replace=False, p=p)]
            texts.append(" and ".join(str(rng.choice(wordings(stmts.names[c]))) for c in chosen))
            rows.append(chosen)
        if opposite is not None:
            for c in opposite.draw(stmts.state_id[pick], maps, cfg.opposite_texts):
                texts.append(str(opposite.rng.choice(wordings(stmts.names[c]))))
                rows.append(np.array([c]))
        extra = active
        if cfg.statement_texts is not None and len(active) > cfg.statement_texts:  # a draw, rare ones first
            extra = rng.choice(active, size=cfg.statement_texts, replace=False, p=stmt_p)
        for c in extra:  # one wording of every statement seen in training (or of a draw of them)
            texts.append(str(rng.choice(wordings(stmts.names[c]))))
            rows.append(np.array([c]))
        caption_hot = np.zeros((len(texts), len(stmts.names)), dtype=bool)
        for t, r in enumerate(rows):
            caption_hot[t, r] = True
        # a caption is true of a frame when none of its statements is false there
        truth = torch.from_numpy((caption_hot.astype(np.float32) @ (~frame_hot).T.astype(np.float32)) == 0).T
        truth = truth.to(device)
        image_embeds = _embed_pixels(model, normalize, batch_pixels)
        text_embeds = _embed_texts(model, tokenizer, texts)
        scale = model.logit_scale.clamp(max=math.log(100.0)).exp()
        loss = _loss(image_embeds, text_embeds, scale, truth)
        if aux is not None:
            loss = loss + cfg.aux_weight * aux.loss(image_embeds, frame_hot)
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
            acc = _question_accuracy(model, tokenizer, normalize, val_pixels, val_hot, stmts.index, domain)
            history.append({"step": steps_done, "seconds": round(time.perf_counter() - t2, 1),
                            "loss": round(loss_avg, 4), "val": {k: v["accuracy"] for k, v in acc.items()}})
            say(f"step {steps_done}/{cfg.steps} {time.perf_counter() - t2:.0f}s loss {loss_avg:.3f} "
                + " ".join(f"{k}={v['accuracy']:.3f}" for k, v in acc.items()))
        if last:
            break
    t_train = time.perf_counter() - t2
    model.eval()
    val_metrics = _question_accuracy(model, tokenizer, normalize, val_pixels, val_hot, stmts.index, domain)

    held_out = {}
    if cfg.held_out_frames > 0 and domain.held_out is not None:
        ho = domain.held_out(cfg.held_out_frames, cfg.seed + 1_000_003)
        ho_stmts = _Statements(ho.states, domain)
        held_out = _question_accuracy(model, tokenizer, normalize, _pixels(ho.frames, processor).to(device),
                                      ho_stmts.frame_hot(np.arange(len(ho))), ho_stmts.index, domain)
        say("held-out tasks: " + " ".join(f"{k}={v['accuracy']:.3f}" for k, v in held_out.items()))

    build_id = uuid.uuid4().hex
    (out / BUILD_MARKER).write_text(json.dumps({"build_id": build_id, "domain": domain.name}) + "\n")
    model.to("cpu").save_pretrained(out)
    processor.save_pretrained(out)
    report = {
        "build_id": build_id,
        "config": dataclasses.asdict(cfg),
        "command": command,
        **domain.describe(data),
        "frames": {"train": int(len(train_idx)), "val": int(len(val_idx)), "episodes": int(len(episodes))},
        "parameters": int(n_params),
        "steps_done": steps_done,
        "seconds": {"data": round(t_data, 1), "train": round(t_train, 1)},
        "device": _device_name(device),
        "workers": workers,
        "val_accuracy": val_metrics,
        "held_out_accuracy": held_out,
        "history": history,
        "weights_sha256": weights_sha256(out),
        "versions": domain.versions(),
    }
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "MODEL_CARD.md").write_text(model_card(report, domain))
    say(f"saved to {out} ({n_params} parameters, sha256 {report['weights_sha256'][:16]}...)")
    return report


def _trained_on(report: dict[str, Any]) -> str:
    device = report.get("device", "cpu")  # builds before the device option trained on the CPU
    return "one CPU thread" if device == "cpu" else f"one GPU, {device.split(' (', 1)[-1].rstrip(')')}"


def _workers_note(report: dict[str, Any]) -> str:
    return f" in {report['workers']} processes" if report.get("workers", 1) > 1 else ""


def model_card(report: dict[str, Any], domain: Domain | str = "minigrid") -> str:
    """The ``MODEL_CARD.md`` text for a build ``report`` (``training.json``) of ``domain``."""
    domain = get_domain(domain) if isinstance(domain, str) else domain
    cfg = report["config"]

    def table(metrics: dict) -> str:
        rows = "\n".join(f"| {k} | {v['accuracy']:.3f} | {v['frames']} |" for k, v in metrics.items())
        return "| question | accuracy | frames |\n|---|---|---|\n" + rows

    command = report.get("command") or (
        f"vlmrb build-scorer {domain.name} --out DIR --frames {cfg['frames']} --steps {cfg['steps']} "
        f"--seed {cfg['seed']}")
    held_out = ""
    if domain.held_out is not None:
        held_out = "\n\nHeld-out tasks:\n\n" + (
            table(report["held_out_accuracy"]) if report["held_out_accuracy"] else "(not measured)")
    return f"""# builtin:{domain.name}: {domain.card_title}

{domain.card_intro(report)}

## Rebuild

```
{command}
```

Seed {cfg['seed']}; {report['steps_done']} steps of {cfg['batch_size']} frames on {_trained_on(report)}
({report['seconds']['data']:.0f} s data{_workers_note(report)}, {report['seconds']['train']:.0f} s training).
Versions: {json.dumps(report['versions'])}.

## Data

{domain.card_data(report)}

## Metrics (frame level: rank the true statement first among exclusive options)

Validation episodes{domain.card_validation}:

{table(report['val_accuracy'])}{held_out}

## Content hash

`model.safetensors` sha256: `{report['weights_sha256']}`
"""
