"""Scoring frames that hold several cameras side by side: a model per camera, their readings combined.

A :class:`~vlmrb_torchrl.envs.robosuite.env.PanelView` renders each step as one frame made of several cameras'
full pictures, left to right (``[H, n * H, 3]``), so the clip pipeline (replay, clips, the scoring
transform, the asynchronous worker) carries one image per step as usual. :class:`PanelScorer` cuts each
frame back into its panels, lets one contrastive scorer read each panel, and combines their per-frame
check probabilities before the checks' aggregation: two cameras that err on different frames vote on
every frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from vlmrb_torchrl.scorers.base import check_clips, prompt_hash, validate_scores
from vlmrb_torchrl.scorers.prompts import aggregate_checks

__all__ = ["PanelScorer", "mean_logit"]


def mean_logit(probabilities: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """``sigmoid(mean_i logit(p_i))`` over the first dimension: the panels' probabilities combined.

    Each probability is clamped to ``[eps, 1 - eps]`` (a softmax of scaled cosine similarities reaches 0 or 1
    in float32), so no panel's logit is infinite: a panel that is sure (``|logit| ~ 14``) outvotes one that
    hesitates, two that are sure of opposite things cancel out to 0.5. Computed in float64, returned as float32.

    Examples:
        >>> p = torch.tensor([[0.9, 0.5, 0.02], [0.9, 0.99, 0.5]])
        >>> [round(x, 4) for x in mean_logit(p).tolist()]
        [0.9, 0.9087, 0.125]
        >>> mean_logit(torch.tensor([[1.0], [0.0]])).tolist()
        [0.5]
    """
    p = probabilities.double().clamp(eps, 1.0 - eps)
    return torch.sigmoid((p.log() - torch.log1p(-p)).mean(0)).float()


class PanelScorer:
    """Scores clips whose frames are several cameras side by side, with a model per camera.

    Member ``i`` reads panel ``i`` (columns ``[i * H, (i + 1) * H)`` of each frame, which must be exactly ``n``
    square panels wide, ``W = n * H``: a frame of one or three panels is refused, not misread): a clip is cut into ``n`` clips of one camera each, every member gives each check's probability on each of
    its frames (``frame_probabilities``), the ``n`` readings of a frame are combined with :func:`mean_logit`,
    and then each check is aggregated over the clip (``aggregation``, ``hold``) and the clip's score is the max
    over the checks, as :class:`~vlmrb_torchrl.scorers.HFContrastiveScorer` does with one model. ``builtin:lift``
    is one: its front-camera model and its gripper-camera model on ``camera="front_close+eye_in_hand"`` frames.

    Args:
        members (sequence of scorers): one per panel, left to right, with the same prompt set, frame key and
            mask key (e.g. :class:`~vlmrb_torchrl.scorers.HFContrastiveScorer`; each needs
            ``frame_probabilities(clips)`` and ``prompt_set``). At least two.

    Attributes:
        prompt_set, prompt, in_keys: the members' (checks, their text, frames and mask).
        provenance (dict): ``backend="panels"``, ``combine="mean_logit"``, the prompt and its hash, and
            ``panels``: each member's provenance (its model, weights, ...).

    Examples:
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.scorers import make_scorer
        >>> scorer = make_scorer("builtin:lift")  # front_close (left) and robot0_eye_in_hand (right)
        >>> type(scorer).__name__, len(scorer.members), scorer.provenance["combine"]
        ('PanelScorer', 2, 'mean_logit')
        >>> clips = TensorDict(pixels=torch.zeros(2, 4, 64, 128, 3, dtype=torch.uint8),
        ...                    mask=torch.ones(2, 4, dtype=torch.bool), batch_size=[2, 4])
        >>> scorer.score(clips).shape
        torch.Size([2])
    """

    def __init__(self, members: Sequence[Any]) -> None:
        members = list(members)
        if len(members) < 2:
            raise ValueError(f"PanelScorer needs a member per panel, at least two; got {len(members)}.")
        for member in members:
            if not callable(getattr(member, "frame_probabilities", None)) or not hasattr(member, "prompt_set"):
                raise TypeError(f"PanelScorer members give per-frame check probabilities (frame_probabilities, "
                                f"prompt_set: e.g. HFContrastiveScorer), got {type(member).__name__}.")
        first = members[0]
        for i, member in enumerate(members[1:], 1):
            if tuple(member.prompt_set) != tuple(first.prompt_set):
                raise ValueError(f"PanelScorer members must share one prompt set (their readings of each check are "
                                 f"combined); member {i}'s differs from member 0's.")
            if (member.frame_key, member.mask_key) != (first.frame_key, first.mask_key):
                raise ValueError(f"PanelScorer members must read the same frame and mask keys; member {i} reads "
                                 f"{(member.frame_key, member.mask_key)!r}, member 0 {(first.frame_key, first.mask_key)!r}.")
        self.members = members
        self.prompt_set = tuple(first.prompt_set)
        self.prompt = first.prompt
        self.frame_key, self.mask_key = first.frame_key, first.mask_key
        self.in_keys = list(first.in_keys)
        self.provenance = {"backend": "panels", "combine": "mean_logit", "prompt": self.prompt,
                           "prompt_hash": prompt_hash(self.prompt),
                           "panels": [dict(member.provenance) for member in members]}

    def panel_clips(self, clips: TensorDictBase, panel: int) -> TensorDictBase:
        """``clips`` with each frame cut to panel ``panel`` (what member ``panel`` reads)."""
        frames = clips.get(self.frame_key)
        n = len(self.members)
        if frames.ndim != 5 or frames.shape[-2] != n * frames.shape[-3]:
            found = (f": a width of {frames.shape[-2] / frames.shape[-3]:g} panels of {frames.shape[-3]} px"
                     if frames.ndim == 5 and frames.shape[-3] else "")
            raise ValueError(
                f"PanelScorer: {self.frame_key!r} must be frames [B, T, H, W, C] of exactly {n} square panels side "
                f"by side, W = {n} * H (a PanelView's, e.g. camera='front_close+eye_in_hand': [64, {n * 64}]); got "
                f"shape {tuple(frames.shape)}{found}."
            )
        step = frames.shape[-3]
        out = TensorDict({self.frame_key: frames[..., panel * step:(panel + 1) * step, :]}, batch_size=clips.batch_size)
        mask = clips.get(self.mask_key, None)
        if mask is not None:
            out.set(self.mask_key, mask)
        return out

    def frame_probabilities(self, clips: TensorDictBase) -> list[torch.Tensor]:
        """Per clip, ``[T_b, num_checks]``: each check's combined probability on each shown frame."""
        check_clips(clips, self.in_keys, scorer=self)
        readings = []
        for panel, member in enumerate(self.members):
            per_clip = member.frame_probabilities(self.panel_clips(clips, panel))
            readings.append([p if p.ndim == 2 else p.unsqueeze(-1) for p in per_clip])
        return [mean_logit(torch.stack(frames)) for frames in zip(*readings)]

    def check_scores(self, clips: TensorDictBase) -> torch.Tensor:
        """Each check's aggregated score of each clip: float32 ``[B, num_checks]`` (as
        :meth:`HFContrastiveScorer.check_scores <vlmrb_torchrl.scorers.HFContrastiveScorer.check_scores>`)."""
        return aggregate_checks(self.frame_probabilities(clips), self.prompt_set)

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """The max over checks of :meth:`check_scores`: float32 ``[B]`` in ``[0, 1]``."""
        per_check = self.check_scores(clips)
        return validate_scores(per_check.max(-1).values if len(per_check) else torch.zeros(0), clips.batch_size[0],
                               scorer=self)

    def with_prompt_set(self, prompt_set: Sequence[Any]) -> PanelScorer:
        """The same members (models shared) with other checks."""
        return PanelScorer([member.with_prompt_set(prompt_set) for member in self.members])

    @property
    def loaded(self) -> bool:
        """Whether every member's model is loaded (``lazy=True`` members load at the first clips)."""
        return all(getattr(member, "loaded", True) for member in self.members)

    def load(self) -> None:
        """Loads every member's model now (see :meth:`HFContrastiveScorer.load
        <vlmrb_torchrl.scorers.HFContrastiveScorer.load>`)."""
        for member in self.members:
            if hasattr(member, "load"):
                member.load()

    def stats(self) -> dict[str, float]:
        """Each member's counters, prefixed ``panel<i>_`` (frames embedded, cache hits, ...)."""
        return {f"panel{i}_{key}": value for i, member in enumerate(self.members)
                for key, value in (member.stats() if hasattr(member, "stats") else {}).items()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(m) for m in self.members)})"
