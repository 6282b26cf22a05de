"""make_clip_scoring: the clip stream and the scoring transform that fit one scorer, built together.

A :class:`~vlmrb_torchrl.ClipStream` must carry exactly what the scorer reads (the frames when
its ``in_keys`` name the frame key, plus its other per-step keys), and the
:class:`~vlmrb_torchrl.VLMScoreTransform` must pack the same keys with the same clip geometry.
:func:`make_clip_scoring` decides this once, for :func:`~vlmrb_torchrl.make_vlm_replay_buffer`,
the recipes and hand-written loops alike.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

from tensordict.utils import NestedKey

from vlmrb_torchrl.scoring.clips import ClipSpec, ClipStream
from vlmrb_torchrl.scoring.render import StateRenderer
from vlmrb_torchrl.scoring.transform import VLMScoreTransform

__all__ = ["ClipScoring", "make_clip_scoring", "reads_frames"]


class ClipScoring(NamedTuple):
    """The matching pair :func:`make_clip_scoring` returns: ``(stream, transform)``.

    Examples:
        >>> from vlmrb_torchrl import ClipSpec, make_clip_scoring
        >>> scoring = make_clip_scoring("oracle:minigrid", ClipSpec(clip_len=8))
        >>> scoring.needs_frames  # the oracle reads event flags
        False
        >>> stream, transform = scoring  # a tuple: unpacks
        >>> stream.spec.clip_len, transform.clip_spec.clip_len
        (8, 8)
    """

    #: cuts collector batches into the clips the scorer needs.
    stream: ClipStream
    #: packs those clips (frames, extras, mask) and scores them.
    transform: VLMScoreTransform

    @property
    def needs_frames(self) -> bool:
        """Whether the scorer reads frames (the stream carries ``frame_key``)."""
        return self.stream.frame_key is not None


def reads_frames(scorer, frame_key: NestedKey = "pixels") -> bool:
    """Whether ``scorer`` reads the frames at ``frame_key`` (its ``in_keys`` name them), so the
    envs must render and the clip stream must carry them.

    Examples:
        >>> from vlmrb_torchrl.scorers import make_scorer
        >>> reads_frames(make_scorer("oracle:minigrid"))  # event flags only
        False
    """
    return frame_key in list(getattr(scorer, "in_keys", []))


def make_clip_scoring(
    scorer,
    clip_spec: ClipSpec | None = None,
    *,
    frame_key: NestedKey = "pixels",
    traj_key: NestedKey = ("collector", "traj_ids"),
    frame_size: int | tuple[int, int] | None = None,
    grid: bool = False,
    pool_frames: bool = True,
    renderer: StateRenderer | None = None,
    **stream_kwargs: Any,
) -> ClipScoring:
    """Builds the :class:`ClipStream` and :class:`VLMScoreTransform` that feed ``scorer``.

    The scorer needs frames when its ``in_keys`` name ``frame_key``: the stream then carries
    the frames (pooled, see ``pool_frames``) and the transform packs them; otherwise the
    stream cuts frame-less clips and the environment need not render. Either way the stream
    carries every other entry the scorer reads (:meth:`VLMScoreTransform.score_key_list`).
    Both show each clip's outcome frame when ``clip_spec.final_frame`` (the default) and the
    scorer reads frames: the stream then reads ``("next", frame_key)`` from every batch.

    A scorer with a ``max_frames`` attribute shows at most that many real frames of each clip;
    it subsamples only clips with more (same rule as :meth:`ClipSpec.frame_indices`), so with
    ``clip_spec.num_frames <= max_frames`` the transform's subsample is the only one. A
    warning says when both would subsample.

    Args:
        scorer: a :class:`~vlmrb_torchrl.scorers.Scorer`, or a spec string for
            :func:`~vlmrb_torchrl.scorers.make_scorer`.
        clip_spec (ClipSpec, optional): clip geometry. Defaults to ``ClipSpec()``.

    Keyword Args:
        frame_key (NestedKey): the rendered frames in collector batches. Defaults to
            ``"pixels"``.
        traj_key (NestedKey): trajectory ids. Defaults to ``("collector", "traj_ids")``.
        frame_size, grid: passed to :class:`VLMScoreTransform`.
        pool_frames (bool): passed to :class:`ClipStream`. Defaults to ``True`` (each frame
            kept once, whatever the number of clips showing it).
        renderer (StateRenderer, optional): ψ (:mod:`vlmrb_torchrl.scoring.render`): the envs write
            ``renderer.state_key`` instead of ``frame_key``; the stream carries those states and the
            transform renders the frames it shows from them. Defaults to ``None`` (frames are passed).
        **stream_kwargs: other :class:`ClipStream` arguments (``done_key``; ``extra_keys``
            are added to the scorer's own).

    Returns:
        ClipScoring: ``(stream, transform)``.

    Examples:
        >>> from vlmrb_torchrl import ClipSpec, make_clip_scoring
        >>> stream, transform = make_clip_scoring("oracle:minigrid", ClipSpec(clip_len=8, frames=4))
        >>> stream.frame_key is None, stream.extra_keys  # the oracle reads event flags, not frames
        (True, [('next', 'progress_event')])
        >>> transform.in_keys, transform.clip_spec.num_frames  # no frames, so no outcome frame either
        ([], 4)

    Frames drawn from stored states where the scorer runs (a toy ψ):

        >>> import torch
        >>> from vlmrb_torchrl.scorers import CallableScorer
        >>> class Shade:
        ...     state_key = "shade"
        ...     def __call__(self, states):
        ...         return states.to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 4, 4, 3)
        >>> scorer = CallableScorer(lambda clips: clips["pixels"].float().amax((1, 2, 3, 4)) / 255,
        ...                         in_keys=["pixels"])
        >>> stream, transform = make_clip_scoring(scorer, ClipSpec(clip_len=4), renderer=Shade())
        >>> stream.frame_key, transform.in_keys  # the stream carries states; the scorer reads frames
        ('shade', ['pixels'])
    """
    if isinstance(scorer, str):
        from vlmrb_torchrl.scorers import make_scorer

        scorer = make_scorer(scorer)
    clip_spec = clip_spec if clip_spec is not None else ClipSpec()
    needs_frames = reads_frames(scorer, frame_key)
    renderer = renderer if needs_frames else None
    transform = VLMScoreTransform(scorer, clip_spec=clip_spec, in_keys=[frame_key] if needs_frames else [],
                                  frame_size=frame_size, grid=grid, renderer=renderer)
    user_extras = stream_kwargs.pop("extra_keys", ())
    if isinstance(user_extras, str):
        user_extras = [user_extras]
    extra_keys = transform.score_key_list()
    extra_keys += [k for k in user_extras if k not in extra_keys]
    stream = ClipStream(
        clip_spec, frame_key=transform.source_keys[0] if needs_frames else None, traj_key=traj_key,
        extra_keys=extra_keys, pool_frames=pool_frames, **stream_kwargs,
    )
    max_frames = getattr(scorer, "max_frames", None)
    shown = 1 if grid else transform.clip_spec.num_frames
    seen = min(shown, max_frames) if isinstance(max_frames, int) else shown
    changes = [c.positive for c in getattr(scorer, "prompt_set", None) or ()
               if getattr(c, "aggregation", None) in ("progress", "rise")]
    if needs_frames and seen < 2 and changes:
        warnings.warn(
            f"{type(scorer).__name__} sees one frame per clip (" + ("grid=True tiles the clip into one image"
            if grid else f"ClipSpec.frames={clip_spec.frames}, max_frames={max_frames}") + "), but its checks "
            f"{changes} score a change between frames ('progress'/'rise'): they score 0 on every clip. "
            "Show at least 2 frames, or use 'max' checks.",
            UserWarning,
            stacklevel=2,
        )
    if needs_frames and isinstance(max_frames, int) and max_frames < shown:
        warnings.warn(
            f"{type(scorer).__name__}.max_frames={max_frames} is below the {shown} frames per clip the "
            f"transform sends (ClipSpec.frames={clip_spec.frames}): clips are subsampled twice. Set "
            f"ClipSpec(frames={max_frames}) or the scorer's max_frames=None.",
            UserWarning,
            stacklevel=2,
        )
    return ClipScoring(stream, transform)
