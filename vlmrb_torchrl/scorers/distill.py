"""Distillation: a cheap student scores most clips; the VLM (the teacher) scores a budgeted few.

:class:`DistilledScorer` wraps any scorer (the *teacher*: ``builtin:minigrid``, ``hf:``,
``clip:``, ``openai:``, the oracle, ...) and trains a small network (the *student*,
:class:`ClipStudent` by default: a tiny CNN on a few downsampled frames of the clip) online, in
the scoring worker, from the teacher's scores of the clips the teacher sees. Once the student
agrees with the teacher, the teacher scores only a ``teacher_fraction`` of the clips:

- a random *audit* share of that budget (``audit_share``): the student's agreement with the
  teacher (precision / recall / F1 of ``score > threshold``) is measured on these clips only,
  so it is an unbiased estimate of how the student does on the clips it scores alone;
- the rest of the budget goes to the clips the student is least sure about (predicted
  probability closest to 0.5), which are also the most useful to learn from.

The student scores everything else, with its probability that the teacher would score the clip
above ``threshold``, mapped so that 0.5 lands on ``threshold`` (the sampler's cut: set both the
same). Teacher-scored clips get the teacher's score.

Trust, with hysteresis. The student starts *untrusted*: the teacher scores every clip, and
every clip is an audit (the student predicts before it learns from the label). It becomes
*trusted* once ``min_audits`` audited clips are in the agreement window and the window's F1 is
``>= recover_agreement`` (default halfway between ``min_agreement`` and 1, e.g. 0.95 for 0.9).
A trusted student falls back (the teacher scores everything again) as soon as the window's F1
drops below ``min_agreement``. The gap between the two thresholds keeps the scorer from
switching on every noisy audit. A window without any positive (neither the teacher nor the
student says ``score > threshold``) counts as F1 = 1: both agree nothing happened.

Checkpoints. :meth:`DistilledScorer.state_dict` holds the student's weights, its optimiser,
the training memory, the agreement window, the trust state, the routing credits, the random
generator and the counters; :meth:`~DistilledScorer.load_state_dict` restores them, so a
resumed run routes, trains and scores exactly as the uninterrupted one. The student lives where
the scorer runs: with ``AsyncScorer(backend="process")`` it trains in the child process and the
parent's copy is never updated (use the thread backend, the recipes' default, to checkpoint it).
"""

from __future__ import annotations

import copy
import math
import numbers
import threading
from collections import deque
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from vlmrb_torchrl._frames import evenly_spaced
from vlmrb_torchrl._keys import is_nested_key
from vlmrb_torchrl.scorers.base import Scorer, check_clips, make_scorer, register_scorer, scorer_stats, validate_scores

__all__ = ["ClipStudent", "DistilledScorer"]

#: Version of :meth:`DistilledScorer.state_dict`'s layout.
_STATE_VERSION = 1
#: (teacher positive, student positive) -> the counter of the trusted student's audits it falls in.
_CONFUSION = {(True, True): "trusted_audit_tp", (False, True): "trusted_audit_fp", (True, False): "trusted_audit_fn",
              (False, False): "trusted_audit_tn"}


class ClipStudent(nn.Module):
    """The default student: a tiny CNN on ``frames`` evenly spaced frames of a clip.

    :meth:`prepare` turns clips into the student's input (kept, as uint8, in the scorer's
    training memory): ``frames`` frames chosen with the clip layout's rule (first and last
    kept: the last is the clip's outcome frame), area-downsampled to ``size x size``. The
    network embeds each frame together with its difference from the clip's first frame (what
    changed: a key gone from the floor, a door opened; two strided convolutions, global
    max-pool) and classifies the clip from the first frame's embedding, the last frame's, their
    difference and the per-feature max over frames: progress is a change between the start and
    the end of the clip. (Without the difference image, at 32 px, the student learned DoorKey's
    events more slowly and less well: ``docs/scorers.md``, Distillation.)

    A custom student is any :class:`torch.nn.Module` with the same three members: ``in_keys``
    (the clip entries :meth:`prepare` reads), ``prepare(clips) -> Tensor[B, ...]`` (no
    gradient; small, it is stored) and ``forward(x) -> Tensor[B]`` (logits).

    Args:
        frame_key (NestedKey, optional): the frames, uint8 ``[B, T, H, W, 3]``. Defaults to
            ``"pixels"``.

    Keyword Args:
        frames (int, optional): frames per clip the student sees (``>= 2``). Defaults to 4.
        size (int, optional): frame width and height after downsampling. Defaults to 32.
        channels (int, optional): width of the convolutions. Defaults to 32.
        hidden (int, optional): width of the classifier's hidden layer. Defaults to 64.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> student = ClipStudent(frames=3, size=16)
        >>> clips = TensorDict(pixels=torch.zeros(2, 5, 64, 64, 3, dtype=torch.uint8), batch_size=[2, 5])
        >>> x = student.prepare(clips)
        >>> x.shape, x.dtype, student(x).shape
        (torch.Size([2, 3, 3, 16, 16]), torch.uint8, torch.Size([2]))
    """

    def __init__(
        self, frame_key: NestedKey = "pixels", *, frames: int = 4, size: int = 32, channels: int = 32, hidden: int = 64
    ) -> None:
        super().__init__()
        if not is_nested_key(frame_key):
            raise TypeError(f"ClipStudent.frame_key must be a str or a tuple of str, got {frame_key!r}.")
        for name, value, low in (("frames", frames, 2), ("size", size, 8), ("channels", channels, 1),
                                 ("hidden", hidden, 1)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise ValueError(f"ClipStudent.{name} must be an int >= {low}, got {name}={value!r}.")
        self.frame_key = frame_key
        self.in_keys = [frame_key]
        self.frames, self.size = int(frames), int(size)
        self.encoder = nn.Sequential(
            nn.Conv2d(6, channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveMaxPool2d(1), nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Linear(4 * channels, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    @torch.no_grad()
    def prepare(self, clips: TensorDictBase) -> torch.Tensor:
        """uint8 ``[B, frames, 3, size, size]``: the clip's chosen frames, downsampled."""
        pixels = clips.get(self.frame_key)
        if pixels.dim() != 5 or pixels.shape[-1] != 3:
            raise ValueError(f"ClipStudent expects {self.frame_key!r} as uint8 [B, T, H, W, 3] frames, got shape "
                             f"{list(pixels.shape)}.")
        b, t = pixels.shape[:2]
        chosen = pixels[:, evenly_spaced(t, self.frames).to(pixels.device)]
        x = chosen.permute(0, 1, 4, 2, 3).reshape(-1, 3, *pixels.shape[2:4]).float()
        if tuple(x.shape[-2:]) != (self.size, self.size):
            x = nn.functional.interpolate(x, size=(self.size, self.size), mode="area")
        x = x.round_().clamp_(0, 255).to(torch.uint8)
        return x.view(b, -1, 3, self.size, self.size).cpu()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[B]`` of "the teacher scores this clip above its threshold"."""
        b, f = x.shape[:2]
        x = x.float().div(255.0)
        x = torch.cat([x, x - x[:, :1]], 2)  # each frame and what changed since the first
        h = self.encoder(x.flatten(0, 1)).view(b, f, -1)
        first, last = h[:, 0], h[:, -1]
        return self.head(torch.cat([first, last, last - first, h.amax(1)], -1)).squeeze(-1)


def _check_fraction(name: str, value: Any, *, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"DistilledScorer.{name} must be a float, got {name}={value!r}.")
    if not (0.0 < value <= 1.0 if low_open else 0.0 <= value <= 1.0):
        interval = "(0, 1]" if low_open else "[0, 1]"
        raise ValueError(f"DistilledScorer.{name} must be in {interval}, got {name}={value!r}.")
    return float(value)


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"DistilledScorer.{name} must be an int >= {low}, got {name}={value!r}.")
    return int(value)


class DistilledScorer:
    """Scores clips with a small student trained online from a teacher scorer, calling the teacher on few clips.

    See the module documentation for the routing (random audits + least-confident clips within
    ``teacher_fraction``), the agreement measure and its hysteresis. Scores are the teacher's on
    the clips it scored and the student's probability elsewhere, float32 in ``[0, 1]``.

    Args:
        teacher (Scorer): the scorer to distil (any backend).

    Keyword Args:
        student (nn.Module, optional): the student (see :class:`ClipStudent` for what it must
            have). Defaults to ``ClipStudent(frame_key)``, initialised from ``seed``.
        teacher_fraction (float, optional): share of the clips the teacher scores while the
            student is trusted, in ``(0, 1]``. Defaults to ``0.1``.
        min_agreement (float, optional): the student is trusted while the F1 of its audited
            predictions is ``>= min_agreement``. Defaults to ``0.9``.
        recover_agreement (float, optional): F1 an untrusted student must reach to be trusted
            (again), ``>= min_agreement``. Defaults to halfway between ``min_agreement`` and 1.
        audit_share (float, optional): share of the teacher budget spent on random audits (the
            rest goes to the least-confident clips). Defaults to ``0.5``.
        agreement_window (int, optional): audited clips the agreement is measured over (the most
            recent ones). Defaults to ``500``.
        min_audits (int, optional): audited clips needed before the student can be trusted.
            Defaults to ``200``.
        threshold (float, optional): a score ``> threshold`` is a positive, for the agreement and
            the student's training target; the student's scores are mapped so that they cross
            it where its probability crosses 0.5. Use the sampler's threshold. Defaults to ``0.5``
            (the sampler's default).
        frame_key (NestedKey, optional): the frames the default student reads. Defaults to
            ``"pixels"``.
        lr (float, optional): the student's Adam learning rate. Defaults to ``1e-3``.
        memory_size (int, optional): teacher-labelled clips kept to train on (a ring). Defaults
            to ``4096``.
        train_batch (int, optional): clips per gradient step. Defaults to ``64``.
        replay_ratio (float, optional): gradient steps per new label times ``train_batch``: how
            often a label is used, on average. Defaults to ``4.0``.
        positive_share (float, optional): minimum share of teacher positives in a training batch
            (positives are rare in RL experience). Defaults to ``0.25``.
        seed (int, optional): seeds the student's initial weights (default student), the audits
            and the training batches. Defaults to ``0``.

    Attributes:
        teacher, student: the two models.
        trusted (bool): whether the student scores clips alone now.
        prompt, in_keys: the teacher's prompt; the teacher's ``in_keys`` plus the student's.
        provenance (dict): ``{"backend": "distill", "prompt_hash", "teacher": <teacher's
            provenance>, "student": {...}, "teacher_fraction", ...}``.

    .. note:: The student predicts a clip *before* it learns from the teacher's score of it, so
        the agreement is always measured on clips it has not been trained on.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.scorers import CallableScorer
        >>> bright = CallableScorer(lambda c: (c["pixels"].float().mean((1, 2, 3, 4)) > 127).float(),
        ...                         name="bright")
        >>> scorer = DistilledScorer(bright, teacher_fraction=0.1, min_audits=64, seed=0)
        >>> g = torch.Generator().manual_seed(0)
        >>> for _ in range(30):
        ...     level = (torch.rand(32, generator=g) > 0.5).to(torch.uint8) * 200 + 20
        ...     clips = TensorDict(pixels=level.view(32, 1, 1, 1, 1).expand(32, 3, 8, 8, 3).clone(),
        ...                        mask=torch.ones(32, 3, dtype=torch.bool), batch_size=[32, 3])
        ...     _ = scorer.score(clips)
        >>> stats = scorer.stats()
        >>> stats["trusted"], stats["teacher_calls"] < 30 * 32, stats["agreement_f1"] > 0.9
        (True, True, True)
    """

    #: it learns while it scores: the recipes save its state with every checkpoint
    #: (:func:`~vlmrb_torchrl.recipes.checkpoint.checkpointed_modules`)
    stateful = True

    def __init__(
        self,
        teacher: Scorer,
        *,
        student: nn.Module | None = None,
        teacher_fraction: float = 0.1,
        min_agreement: float = 0.9,
        recover_agreement: float | None = None,
        audit_share: float = 0.5,
        agreement_window: int = 500,
        min_audits: int = 200,
        threshold: float = 0.5,
        frame_key: NestedKey = "pixels",
        lr: float = 1e-3,
        memory_size: int = 4096,
        train_batch: int = 64,
        replay_ratio: float = 4.0,
        positive_share: float = 0.25,
        seed: int = 0,
    ) -> None:
        if not isinstance(teacher, Scorer):
            raise TypeError(
                f"DistilledScorer distils a Scorer (score(clips), prompt, in_keys, provenance), got "
                f"{type(teacher).__name__}.")
        self.teacher_fraction = _check_fraction("teacher_fraction", teacher_fraction, low_open=True)
        self.min_agreement = _check_fraction("min_agreement", min_agreement)
        if recover_agreement is None:
            recover_agreement = (1.0 + self.min_agreement) / 2
        self.recover_agreement = _check_fraction("recover_agreement", recover_agreement)
        if self.recover_agreement < self.min_agreement:
            raise ValueError(f"DistilledScorer.recover_agreement must be >= min_agreement={self.min_agreement} (the "
                             f"hysteresis gap), got recover_agreement={recover_agreement!r}.")
        self.audit_share = _check_fraction("audit_share", audit_share, low_open=True)
        self.agreement_window = _check_int("agreement_window", agreement_window, 1)
        self.min_audits = _check_int("min_audits", min_audits, 1)
        if self.min_audits > self.agreement_window:
            raise ValueError(f"DistilledScorer.min_audits must be <= agreement_window={self.agreement_window}, got "
                             f"min_audits={min_audits!r}.")
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0.0 <= threshold < 1.0:
            raise ValueError(f"DistilledScorer.threshold must be a float in [0, 1), got threshold={threshold!r}.")
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not lr > 0:
            raise ValueError(f"DistilledScorer.lr must be a float > 0, got lr={lr!r}.")
        if isinstance(replay_ratio, bool) or not isinstance(replay_ratio, numbers.Real) or not replay_ratio > 0:
            raise ValueError(f"DistilledScorer.replay_ratio must be a float > 0, got replay_ratio={replay_ratio!r}.")
        self.positive_share = _check_fraction("positive_share", positive_share)
        self.memory_size = _check_int("memory_size", memory_size, 1)
        self.train_batch = _check_int("train_batch", train_batch, 1)
        self.seed = _check_int("seed", seed, 0)
        self.threshold, self.lr, self.replay_ratio = float(threshold), float(lr), float(replay_ratio)
        if student is None:
            with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
                torch.manual_seed(self.seed)
                student = ClipStudent(frame_key)
        for member in ("in_keys", "prepare"):
            if not hasattr(student, member) or not isinstance(student, nn.Module):
                raise TypeError(f"DistilledScorer.student must be an nn.Module with in_keys, prepare(clips) and "
                                f"forward(x) -> logits (see ClipStudent), got {type(student).__name__} without "
                                f"{member!r}.")
        self.teacher = teacher
        self.student = student
        self.name = f"DistilledScorer({getattr(teacher, 'name', type(teacher).__name__)})"
        self.in_keys = list(dict.fromkeys([*teacher.in_keys, *student.in_keys]))
        self._optimizer = torch.optim.Adam(student.parameters(), lr=self.lr)
        self._generator = torch.Generator().manual_seed(self.seed)
        self._lock = threading.RLock()
        self._reset_state()

    def _reset_state(self) -> None:
        self.trusted = False
        self._window: deque[tuple[bool, bool]] = deque(maxlen=self.agreement_window)
        self._memory_x: torch.Tensor | None = None
        self._memory_y = torch.zeros(self.memory_size)
        self._memory_len = 0
        self._memory_pos = 0
        self._credit = [0.0, 0.0]  # audits, least-confident: fractional teacher calls carried to the next call
        self._steps_credit = 0.0
        self.counters = {"teacher_calls": 0, "student_calls": 0, "audited": 0, "fallbacks": 0, "recoveries": 0,
                         "train_steps": 0, **dict.fromkeys(_CONFUSION.values(), 0)}

    # ------------------------------------------------------------------ protocol
    @property
    def prompt(self) -> str:
        """The teacher's prompt."""
        return self.teacher.prompt

    @property
    def provenance(self) -> dict:
        """The distillation settings, the teacher's provenance and a description of the student."""
        inner = dict(self.teacher.provenance)
        student = {"class": f"{type(self.student).__module__}.{type(self.student).__qualname__}",
                   "parameters": sum(p.numel() for p in self.student.parameters()),
                   "in_keys": list(self.student.in_keys)}
        return {"backend": "distill", "prompt_hash": inner.get("prompt_hash"), "teacher": inner, "student": student,
                "teacher_fraction": self.teacher_fraction, "min_agreement": self.min_agreement,
                "recover_agreement": self.recover_agreement, "audit_share": self.audit_share,
                "threshold": self.threshold, "seed": self.seed}

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """Teacher scores on the routed clips, the student's (threshold-mapped) probabilities elsewhere:
        float32 ``[B]`` in ``[0, 1]``."""
        batch = check_clips(clips, self.in_keys, scorer=self)
        if batch == 0:
            return validate_scores(torch.zeros(0), 0, scorer=self)
        x = self.student.prepare(clips)
        with self._lock:
            probs = self._predict(x)
            trusted = self.trusted
            routed, audits = self._route(probs)
        scores = self._as_scores(probs)
        if routed.numel():
            taught = validate_scores(self.teacher.score(clips[routed]), routed.numel(), scorer=self.teacher).cpu()
            scores[routed] = taught
            with self._lock:
                labels = (taught > self.threshold).float()
                # agreement: the student's predictions made before it learned from these labels
                pairs = list(zip(labels[torch.searchsorted(routed, audits)].bool().tolist(),
                                 (probs[audits] > 0.5).tolist(), strict=True))
                self._window.extend(pairs)
                self.counters["audited"] += audits.numel()
                if trusted:  # the random audits of the clips the student scores alone
                    for taught, said in pairs:
                        self.counters[_CONFUSION[taught, said]] += 1
                self._update_trust()
                # the scoring caller may run under no_grad / inference_mode (galleries, benchmarks)
                with torch.inference_mode(False), torch.enable_grad():
                    self._remember(x[routed].clone(), labels.clone())
                    self._train(routed.numel())
        with self._lock:
            self.counters["teacher_calls"] += routed.numel()
            self.counters["student_calls"] += batch - routed.numel()
        return validate_scores(scores, batch, scorer=self)

    # ------------------------------------------------------------------ routing and trust
    @torch.no_grad()
    def _predict(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.student(x).float()).cpu()

    def _as_scores(self, probs: torch.Tensor) -> torch.Tensor:
        """The student's probabilities as scores on the teacher's scale: ``p > 0.5`` iff score ``> threshold``.

        The student predicts "the teacher scores above ``threshold``"; its agreement counts
        ``p > 0.5`` as a positive. The sampler cuts scores at its own threshold (the same one in
        the recipes), so a probability is mapped piecewise linearly with 0.5 onto ``threshold``
        (0 -> 0, 1 -> 1): at the default 0.5 scores are the probabilities themselves.

        Examples:
            >>> from vlmrb_torchrl.scorers import OracleScorer
            >>> DistilledScorer(OracleScorer(), threshold=0.7)._as_scores(torch.tensor([0.0, 0.4, 0.5, 0.6, 1.0]))
            tensor([0.0000, 0.5600, 0.7000, 0.7600, 1.0000])
        """
        t = self.threshold
        return torch.where(probs <= 0.5, 2 * probs * t, t + (2 * probs - 1) * (1 - t))

    def _route(self, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(clips the teacher scores, the random audits among them), sorted."""
        n = probs.numel()
        if not self.trusted:
            every = torch.arange(n)
            return every, every
        self._credit[0] += self.teacher_fraction * self.audit_share * n
        self._credit[1] += self.teacher_fraction * (1 - self.audit_share) * n
        n_audit = min(n, int(self._credit[0]))
        n_unsure = min(n - n_audit, int(self._credit[1]))
        self._credit[0] -= n_audit
        self._credit[1] -= n_unsure
        order = torch.randperm(n, generator=self._generator)
        audits, rest = order[:n_audit], order[n_audit:]
        # least confident: probability closest to 0.5 (ties: the random order)
        unsure = rest[torch.argsort((probs[rest] - 0.5).abs(), stable=True)[:n_unsure]]
        audits = audits.sort().values
        return torch.cat([audits, unsure]).sort().values, audits

    def agreement(self) -> dict[str, float]:
        """Precision, recall and F1 of the student vs the teacher on the audited clips of the window.

        Precision (recall) is NaN when the student (the teacher) says no clip is positive; F1 is
        1.0 when neither does (they agree). ``audits`` is the window's size.
        """
        with self._lock:
            pairs = list(self._window)
        tp = sum(t and s for t, s in pairs)
        fp = sum(s and not t for t, s in pairs)
        fn = sum(t and not s for t, s in pairs)
        return {"precision": tp / (tp + fp) if tp + fp else math.nan,
                "recall": tp / (tp + fn) if tp + fn else math.nan,
                "f1": 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 1.0,
                "audits": len(pairs)}

    def _update_trust(self) -> None:
        if len(self._window) < self.min_audits:
            return
        f1 = self.agreement()["f1"]
        if self.trusted and f1 < self.min_agreement:
            self.trusted = False
            self.counters["fallbacks"] += 1
        elif not self.trusted and f1 >= self.recover_agreement:
            self.trusted = True
            self.counters["recoveries"] += 1

    # ------------------------------------------------------------------ online training
    def _remember(self, x: torch.Tensor, labels: torch.Tensor) -> None:
        if self._memory_x is None:
            self._memory_x = torch.zeros(self.memory_size, *x.shape[1:], dtype=x.dtype)
        elif self._memory_x.shape[1:] != x.shape[1:]:
            raise ValueError(f"{self.name}: the student's inputs changed shape from {list(self._memory_x.shape[1:])} "
                             f"to {list(x.shape[1:])}; clips scored by one DistilledScorer must keep one layout.")
        for row, label in zip(x, labels, strict=True):
            self._memory_x[self._memory_pos] = row
            self._memory_y[self._memory_pos] = label
            self._memory_pos = (self._memory_pos + 1) % self.memory_size
            self._memory_len = min(self._memory_len + 1, self.memory_size)

    def _train(self, new_labels: int) -> None:
        self._steps_credit += self.replay_ratio * new_labels / self.train_batch
        steps = int(self._steps_credit)
        self._steps_credit -= steps
        n = self._memory_len
        labels = self._memory_y[:n]
        positives = (labels > 0.5).nonzero().flatten()
        negatives = (labels <= 0.5).nonzero().flatten()
        size = min(self.train_batch, n)
        n_pos = 0
        if len(positives) and len(negatives):
            n_pos = max(math.ceil(self.positive_share * size), round(len(positives) / n * size))
            n_pos = min(n_pos, size - 1)
        self.student.train()
        for _ in range(steps):
            if n_pos:
                rows = torch.cat([positives[torch.randint(len(positives), (n_pos,), generator=self._generator)],
                                  negatives[torch.randint(len(negatives), (size - n_pos,), generator=self._generator)]])
            else:
                rows = torch.randint(n, (size,), generator=self._generator)
            logits = self.student(self._memory_x[rows])
            loss = nn.functional.binary_cross_entropy_with_logits(logits, self._memory_y[rows])
            self._optimizer.zero_grad()
            loss.backward()
            self._optimizer.step()
            self.counters["train_steps"] += 1
        self.student.eval()

    # ------------------------------------------------------------------ metrics and checkpoints
    def stats(self) -> dict[str, Any]:
        """Counters (``teacher_calls``, ``student_calls``, ``audited``, ``fallbacks``, ``recoveries``,
        ``train_steps``), ``teacher_share`` (teacher calls / clips scored), ``trusted``, the
        window's agreement (``agreement_precision``, ``agreement_recall``, ``agreement_f1``,
        ``agreement_audits``) and, over every random audit made while the student was trusted
        (``trusted_audit_tp``, ``_fp``, ``_fn``, ``_tn``), ``trusted_audit_f1``: the student's F1 vs
        the teacher on the clips it scores alone, for the whole run (NaN before any positive).
        The teacher's own stats (:func:`~vlmrb_torchrl.scorers.scorer_stats`) come first."""
        with self._lock:
            out: dict[str, Any] = {**scorer_stats(self.teacher), **self.counters}
            out["trusted"] = self.trusted
        total = out["teacher_calls"] + out["student_calls"]
        out["teacher_share"] = out["teacher_calls"] / total if total else math.nan
        tp, fp, fn = (out[f"trusted_audit_{k}"] for k in ("tp", "fp", "fn"))
        out["trusted_audit_f1"] = 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else math.nan
        out.update({f"agreement_{k}": v for k, v in self.agreement().items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to route, train and score as the uninterrupted one.

        Examples:
            >>> from vlmrb_torchrl.scorers import OracleScorer
            >>> scorer = DistilledScorer(OracleScorer())
            >>> clone = DistilledScorer(OracleScorer(), seed=1)
            >>> clone.load_state_dict(scorer.state_dict())
            >>> all(torch.equal(a, b) for a, b in zip(clone.student.parameters(), scorer.student.parameters()))
            True
        """
        with self._lock:
            return {
                "version": _STATE_VERSION,
                "student": {k: v.clone() for k, v in self.student.state_dict().items()},
                # a copy: the optimiser's state_dict holds its live moment tensors, which the
                # scoring thread may still update while a checkpoint is written
                "optimizer": copy.deepcopy(self._optimizer.state_dict()),
                "generator": self._generator.get_state(),
                "trusted": self.trusted,
                "window": list(self._window),
                "memory": {"x": None if self._memory_x is None else self._memory_x[: self._memory_len].clone(),
                           "y": self._memory_y[: self._memory_len].clone(), "pos": self._memory_pos},
                "credit": list(self._credit),
                "steps_credit": self._steps_credit,
                "counters": dict(self.counters),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output (of a scorer built with the same settings).

        Raises:
            ValueError: the state is from another version or does not fit this scorer (another
                student, memory size or window); nothing is changed then.
        """
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"{self.name}.load_state_dict: expected a DistilledScorer state of version "
                             f"{_STATE_VERSION}, got {state.get('version') if isinstance(state, dict) else state!r}.")
        memory = state["memory"]
        if len(memory["y"]) > self.memory_size or len(state["window"]) > self.agreement_window:
            raise ValueError(f"{self.name}.load_state_dict: the state holds {len(memory['y'])} remembered clips and "
                             f"{len(state['window'])} audits, more than memory_size={self.memory_size} / "
                             f"agreement_window={self.agreement_window}: build the scorer with the run's settings.")
        with self._lock:
            backup = {k: v.clone() for k, v in self.student.state_dict().items()}
            try:
                self.student.load_state_dict(state["student"])
                self._optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))  # shares no tensor with `state`
            except (RuntimeError, ValueError, KeyError) as err:
                self.student.load_state_dict(backup)
                raise ValueError(f"{self.name}.load_state_dict: the saved student does not fit this scorer's "
                                 f"student ({err}).") from err
            self._reset_state()
            self._generator.set_state(state["generator"])
            self.trusted = bool(state["trusted"])
            self._window.extend((bool(t), bool(s)) for t, s in state["window"])
            n = len(memory["y"])
            if memory["x"] is not None:
                self._memory_x = torch.zeros(self.memory_size, *memory["x"].shape[1:], dtype=memory["x"].dtype)
                self._memory_x[:n] = memory["x"]
            self._memory_y[:n] = memory["y"]
            self._memory_len, self._memory_pos = n, int(memory["pos"])
            self._credit = [float(c) for c in state["credit"]]
            self._steps_credit = float(state["steps_credit"])
            self.counters.update(state["counters"])
            self.student.eval()

    def __getstate__(self) -> dict:
        with self._lock:
            state = {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_generator")}
            state["_generator_state"] = self._generator.get_state()
        return state

    def __setstate__(self, state: dict) -> None:
        generator_state = state.pop("_generator_state")
        self.__dict__.update(state)
        self._generator = torch.Generator()
        self._generator.set_state(generator_state)
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.teacher!r}, teacher_fraction={self.teacher_fraction}, "
                f"min_agreement={self.min_agreement}, trusted={self.trusted})")


#: DistilledScorer's own keyword arguments; make_scorer("distill:<teacher spec>", ...) passes the others to the teacher.
_DISTILL_KWARGS = ("student", "teacher_fraction", "min_agreement", "recover_agreement", "audit_share",
                   "agreement_window", "min_audits", "threshold", "frame_key", "lr", "memory_size", "train_batch",
                   "replay_ratio", "positive_share", "seed")


def _make_distilled(rest: str, **kwargs: Any) -> DistilledScorer:
    if not rest:
        raise ValueError("A distill scorer spec is 'distill:<teacher spec>', e.g. 'distill:builtin:minigrid'; got "
                         "'distill:' without a teacher.")
    own = {k: kwargs.pop(k) for k in _DISTILL_KWARGS if k in kwargs}
    return DistilledScorer(make_scorer(rest, **kwargs), **own)


register_scorer("distill", _make_distilled, form="distill:<teacher spec>", overwrite=True)
