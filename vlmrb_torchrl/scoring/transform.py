"""VLMScoreTransform: score TensorDict sub-trajectory slices (clips) with a frozen VLM."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey, unravel_key
from torch import Tensor
from torchrl.data import Composite, Unbounded
from torchrl.envs.transforms import Transform

from vlmrb_torchrl._frames import evenly_spaced, step_owners, tile_frames
from vlmrb_torchrl._keys import FRAME_ROW_KEY, MASK_KEY
from vlmrb_torchrl.scoring.clips import ClipBatch, ClipSpec
from vlmrb_torchrl.scoring.render import StateRenderer, render_states
from vlmrb_torchrl.scorers.base import validate_scores

__all__ = ["VLMScoreTransform", "pack_frames"]


def _resize(frames: Tensor, size: tuple[int, int]) -> Tensor:
    """Bilinear, antialiased resize of ``[N, H, W, C]`` uint8 frames, without torchvision."""
    if tuple(frames.shape[-3:-1]) == size:
        return frames
    x = frames.permute(0, 3, 1, 2).float()
    x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
    return x.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def _grid(frames: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Tiles ``[B, T, H, W, C]`` frames into one ``[B, 1, rows*H, cols*W, C]`` image (row-major)."""
    shown = frames * mask[..., None, None, None].to(frames.dtype)  # padding stays black
    return tile_frames(shown).unsqueeze(1), mask.any(-1, keepdim=True)


def pack_frames(
    clips: TensorDictBase,
    *,
    positions: Tensor,
    frame_keys: Sequence[NestedKey],
    frame_size: tuple[int, int] | None = None,
    grid: bool = False,
    frame_pool: TensorDictBase | None = None,
    final_frame: bool = False,
    renderers: Mapping[NestedKey, StateRenderer] | None = None,
) -> TensorDictBase:
    """Packs ``[B, L]`` clips into what a scorer receives: ``[B, F]`` (or ``[B, 1]`` with ``grid``).

    Frame keys are subsampled at ``positions`` (and resized / tiled); boolean per-step keys
    are OR-reduced over the real steps each kept position stands for (the steps after the
    previous kept position, up to its own; on a padded clip, a kept position on padding hands
    its real steps to a real one: :func:`vlmrb_torchrl._frames.step_owners`), so an event
    between two subsampled frames is not lost; other per-step keys are taken at ``positions``.
    A clip whose kept positions are all padding (one frame, the last step, without the
    outcome) counts its last kept position as real: it stands for the clip's real steps.
    With ``final_frame`` the clips are ``[B, L + 1]`` in the :class:`~vlmrb_torchrl.ClipBatch`
    layout: position ``L`` is the outcome frame, no step (it stands for the steps after the
    previous kept position only, none when that is ``L - 1``), and its packed ``"mask"`` is
    ``True``. With a
    ``frame_pool`` (see :attr:`vlmrb_torchrl.ClipBatch.frames`) the frames are gathered from
    it through ``("clip", "frame_row")``, only at ``positions``
    (:meth:`~vlmrb_torchrl.ClipBatch.pooled_frames`). Tiling follows
    :func:`vlmrb_torchrl._frames.tile_frames`, the rule the scorer backends use too.
    ``renderers`` maps a frame key to the :class:`~vlmrb_torchrl.scoring.render.StateRenderer` that
    draws it: the clips (or the pool) then hold its ``state_key`` instead, and only the states at
    ``positions`` are rendered, each pooled row once. Pooled clips packed without ``grid`` keep
    ``("clip", "frame_row")`` at ``positions``: frames with one row are one frame, which a scorer
    may show (and embed) once.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> clips = TensorDict(pixels=torch.zeros(2, 8, 16, 16, 3, dtype=torch.uint8),
        ...                    mask=torch.ones(2, 8, dtype=torch.bool),
        ...                    event=torch.arange(8).expand(2, 8) == 2, batch_size=[2, 8])
        >>> packed = pack_frames(clips, positions=torch.tensor([0, 4, 7]), frame_keys=["pixels"],
        ...                      frame_size=(8, 8))
        >>> packed["pixels"].shape, packed["event"].tolist()
        (torch.Size([2, 3, 8, 8, 3]), [[False, True, False], [False, True, False]])
    """
    b, width = clips.batch_size[:2]
    steps = width - int(final_frame)
    positions = positions.to(torch.long)
    # a kept frame is real if its own step is real; the outcome is if any step is
    real_steps = clips.get(MASK_KEY)[:, :steps].to(torch.bool)
    real = torch.cat([real_steps, real_steps.any(1, keepdim=True)], 1) if final_frame else real_steps
    mask = real[:, positions]
    # one kept frame (frames=1) without the outcome is the last step, padding on a tail clip:
    # it then stands for the clip's real steps and shows what padding repeats, the last real frame
    orphan = real_steps.any(1) & ~mask.any(1)
    if orphan.any():
        mask[orphan, -1] = True
    owners = None
    out = {MASK_KEY: mask}
    renderers = renderers or {}
    state_keys = [r.state_key for r in renderers.values()]
    for key, value in clips.items(include_nested=True, leaves_only=True):
        if key in frame_keys or key in state_keys or key in (FRAME_ROW_KEY, MASK_KEY):
            continue
        if value.dtype == torch.bool:  # OR over the real steps each kept position stands for
            if owners is None:
                owners = step_owners(positions, real_steps, mask)
            flat = value[:, :steps].reshape(b, steps, -1).long()
            index = owners[..., None].expand_as(flat)
            reduced = flat.new_zeros(b, len(positions) + 1, flat.shape[-1])  # + 1: padded steps
            value = reduced.scatter_reduce_(1, index, flat, "amax")[:, :-1].bool().reshape(
                b, len(positions), *value.shape[2:])
        else:
            value = value[:, positions]
        out[key] = value
    for key in frame_keys:
        renderer = renderers.get(key)
        if renderer is not None:
            frames = _rendered(clips, frame_pool, renderer, positions)
        elif frame_pool is None:
            frames = clips.get(key)[:, positions]
        else:
            frames = ClipBatch.pooled_frames(clips, frame_pool, key, positions)
        if frames.ndim != 5 or frames.shape[-1] not in (1, 3, 4) or frames.dtype != torch.uint8:
            raise ValueError(
                f"VLMScoreTransform expects {key!r} as uint8 frames [B, T, H, W, C] with C in "
                f"(1, 3, 4); got dtype {frames.dtype} and shape {tuple(frames.shape)}."
            )
        if frame_size is not None:
            flat = _resize(frames.reshape(-1, *frames.shape[2:]), frame_size)
            frames = flat.reshape(b, len(positions), *flat.shape[1:])
        out[key] = frames
    if frame_pool is not None and not grid:
        # which pooled row each packed frame shows: frames of one row are one frame (a scorer may read
        # and embed each once; HFContrastiveScorer does)
        out[FRAME_ROW_KEY] = clips.get(FRAME_ROW_KEY)[:, positions]
    if grid:
        packed_mask = None
        for key in frame_keys:
            out[key], packed_mask = _grid(out[key], mask)
        for key in list(out):
            if key in frame_keys:
                continue
            value = out[key]
            out[key] = value.any(1, keepdim=True) if value.dtype == torch.bool else value[:, -1:]
        out[MASK_KEY] = packed_mask
    return TensorDict(out, batch_size=[b, 1 if grid else len(positions)])


def _rendered(clips: TensorDictBase, frame_pool: TensorDictBase | None, renderer: StateRenderer,
              positions: Tensor) -> Tensor:
    """``[B, F, H, W, C]`` frames drawn from the states at ``positions``: a pooled state once however
    many clips show it; inline states (no pool) once per clip position."""
    if frame_pool is None:
        states = clips.get(renderer.state_key)[:, positions]
        b, f = states.shape[:2]
        frames = render_states(renderer, states.reshape(b * f, *states.shape[2:]))
        return frames.reshape(b, f, *frames.shape[1:])
    rows = clips.get(FRAME_ROW_KEY)[:, positions]
    unique, inverse = torch.unique(rows, return_inverse=True)
    pool = frame_pool.get(renderer.state_key)
    frames = render_states(renderer, torch.index_select(pool, 0, unique.to(pool.device)))
    return frames[inverse.to(frames.device)]


class VLMScoreTransform(Transform):
    """Scores sub-trajectory slices (clips) with a frozen scorer and writes one score per clip.

    ``forward`` takes slices either as ``[B, T]`` or in the flat ``[B*T]`` layout TorchRL's
    slice samplers return (``T = clip_len``), and returns the same shape with ``out_keys[0]``
    holding each clip's score broadcast over the clip's records. In between it packs the
    frames for the scorer: subsampling to ``frames`` evenly spaced positions (as
    :meth:`ClipSpec.frame_indices`), resizing to ``frame_size`` (bilinear, no torchvision
    needed) and, with ``grid=True``, tiling them into one image for image-only models.
    Per-step boolean keys the scorer needs (privileged events) are OR-reduced over the steps
    each kept frame stands for. ``"mask"`` (False on padded steps) is read from the input when
    present, else all steps count as real.

    The outcome frame (``final_frame=True``, the default, when the transform reads frames): a
    clip of ``clip_len`` steps is shown with the frame after its last real step too, so
    ``clip_len + 1`` frames (``frames=F`` subsamples them and always keeps that last one; see
    :meth:`ClipSpec.frame_indices`). The clips a :class:`~vlmrb_torchrl.ClipStream` emits
    carry it at position ``clip_len``; in ``[B, clip_len]`` slices it is read from
    ``("next", <frame key>)`` at the last real step, and when that entry is absent (e.g. a
    buffer that stores no ``"next"`` frames) the clips are shown without it, as with
    ``final_frame=False``. A transform without frame keys (the oracle) shows no frames, so
    the outcome changes nothing there.

    Where it runs:

    - **In** :class:`~vlmrb_torchrl.AsyncScorer`, on the clips a
      :class:`~vlmrb_torchrl.ClipStream` emits (:meth:`score_clips`).
      :func:`~vlmrb_torchrl.make_clip_scoring` builds the matching stream and transform.
    - **As a replay-buffer transform** over slices, the TorchRL way: pass it as
      ``TensorDictReplayBuffer(transform=...)`` or ``rb.append_transform(...)`` with a
      ``SliceSampler(slice_len=clip_len)``. ``rb.sample()`` calls :meth:`forward` (the
      sampled slices get their score); ``rb.extend()`` calls :meth:`inv`, which passes the
      data through untouched. As in TorchRL's slice-aware transforms (``CatFrames``,
      ``ModuleTransform``), :meth:`forward` is overridden as a whole instead of the per-leaf
      ``_apply_transform``: a score reads several entries of several records at once.
    - **On an offline dataset**: call it on ``[B, T]`` (or flat) slices.
    - **Not in an environment**: a clip needs steps that have not happened yet, so
      ``env.reset()`` and ``env.step()`` raise a ``RuntimeError`` saying so. The spec
      methods still describe the output (:meth:`transform_observation_spec` adds the score
      key), so the transform composes with spec-aware containers.

    .. note::
        The scorer is kept out of the module tree, so ``rb.state_dict()`` / ``rb.dumps()``
        do not save a copy of the VLM's weights with every checkpoint.

    Args:
        scorer: any object with ``score(clips: TensorDict) -> Tensor[B]`` and ``in_keys``
            (see :class:`vlmrb_torchrl.scorers.Scorer`).

    Keyword Args:
        clip_spec (ClipSpec, optional): the clip geometry (``clip_len``, ``frames``, ``final_frame``;
            the :class:`~vlmrb_torchrl.ClipStream` that cuts the clips holds the same spec). Give it, or
            ``clip_len`` (and ``frames``, ``final_frame``), not both.
        clip_len (int, optional): records per clip, ``T``.
        in_keys (sequence of NestedKey): frame keys. Defaults to ``("pixels",)``.
        out_keys (sequence of NestedKey): where the score goes. Defaults to ``("vlm_score",)``.
        frames (int, optional): frames sent to the scorer per clip; ``None`` = all.
        frame_size (int or (int, int), optional): resize frames to this size; ``None`` keeps them.
        grid (bool): tile the frames into one image per clip. Defaults to ``False``.
        final_frame (bool, optional): show each clip's outcome frame (see above). Defaults to ``True``.
        renderer (StateRenderer, optional): ψ, drawing the frame key (``in_keys[0]``, one frame key) from
            the states the env stored under ``renderer.state_key``: the clips carry those states, and
            the frames the scorer is shown are rendered here, only at the positions it is shown
            (:mod:`vlmrb_torchrl.scoring.render`). Defaults to ``None``: the clips carry frames.

    Attributes:
        clip_spec (ClipSpec): the clip geometry the transform expects (``clip_spec``, or
            ``ClipSpec(clip_len, frames=frames, final_frame=...)``); its ``final_frame`` is ``False``
            when the transform reads no frames.
        scorer: the scorer (not a submodule).
        renderer (StateRenderer or None): ψ, see above.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl import ClipSpec, VLMScoreTransform
        >>> class Brightness:  # a stand-in scorer: mean pixel value of the last real frame
        ...     in_keys = ["pixels"]
        ...     prompt = ""
        ...     provenance = {"backend": "example"}
        ...     def score(self, clips):
        ...         return clips["pixels"][:, -1].float().mean((-1, -2, -3)) / 255
        >>> t = VLMScoreTransform(Brightness(), clip_spec=ClipSpec(clip_len=4, frames=2))
        >>> px = torch.arange(8, dtype=torch.uint8).mul(30).view(8, 1, 1, 1).expand(8, 2, 2, 3)
        >>> out = t(TensorDict(pixels=px.clone(), batch_size=[8]))  # two flat clips of 4
        >>> out.shape, [round(x, 3) for x in out["vlm_score"].tolist()]
        (torch.Size([8]), [0.353, 0.353, 0.353, 0.353, 0.824, 0.824, 0.824, 0.824])

        As a replay-buffer transform over slices:

        >>> from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), batch_size=4,
        ...                             sampler=SliceSampler(slice_len=4, traj_key="episode"))
        >>> rb.append_transform(t)
        TensorDictReplayBuffer(...)
        >>> _ = rb.extend(TensorDict(pixels=px.clone(), episode=torch.arange(8) // 4, batch_size=[8]))
        >>> sample = rb.sample()  # one slice of 4 records, all of one trajectory
        >>> "vlm_score" in rb.storage[:].keys(), sample["vlm_score"].unique().numel()
        (False, 1)
        >>> from torchrl.data import Composite
        >>> t.transform_observation_spec(Composite(shape=[4]))["vlm_score"].dtype
        torch.float32
    """

    def __init__(
        self,
        scorer,
        *,
        clip_spec: ClipSpec | None = None,
        clip_len: int | None = None,
        in_keys: Sequence[NestedKey] = ("pixels",),
        out_keys: Sequence[NestedKey] = ("vlm_score",),
        frames: int | None = None,
        frame_size: int | tuple[int, int] | None = None,
        grid: bool = False,
        final_frame: bool | None = None,
        renderer: StateRenderer | None = None,
    ) -> None:
        if not callable(getattr(scorer, "score", None)):
            raise TypeError(
                f"scorer must have a score(clips) method (see vlmrb_torchrl.scorers.Scorer); "
                f"got {type(scorer).__name__}."
            )
        if clip_spec is None:
            if clip_len is None:
                raise TypeError("VLMScoreTransform needs clip_spec= (a ClipSpec) or clip_len=.")
            final_frame = True if final_frame is None else final_frame
            if not isinstance(final_frame, bool):
                raise TypeError(f"final_frame must be a bool, got final_frame={final_frame!r}.")
            clip_spec = ClipSpec(clip_len=clip_len, frames=frames, final_frame=final_frame)
        elif not isinstance(clip_spec, ClipSpec):
            raise TypeError(f"clip_spec must be a ClipSpec, got {type(clip_spec).__name__}.")
        elif clip_len is not None or frames is not None or final_frame is not None:
            raise ValueError(f"VLMScoreTransform: give clip_spec={clip_spec} or clip_len=, frames=, final_frame=, "
                             "not both (they are the ClipSpec's fields).")
        if clip_spec.final_frame and len(in_keys) == 0:  # no frames read: no outcome frame either
            clip_spec = dataclasses.replace(clip_spec, final_frame=False)
        if isinstance(frame_size, int) and not isinstance(frame_size, bool):
            frame_size = (frame_size, frame_size)
        if frame_size is not None and (
            len(frame_size) != 2 or any(not isinstance(s, int) or s < 1 for s in frame_size)
        ):
            raise ValueError(f"frame_size must be an int or (height, width) >= 1, got {frame_size!r}.")
        if len(out_keys) != 1:
            raise ValueError(f"VLMScoreTransform writes one score key; got out_keys={out_keys!r}.")
        if renderer is not None and (len(in_keys) != 1 or not isinstance(renderer, StateRenderer)):
            raise ValueError(f"VLMScoreTransform(renderer=...) draws one frame key from a StateRenderer (state_key "
                             f"and __call__); got in_keys={list(in_keys)!r}, renderer={type(renderer).__name__}.")
        super().__init__(in_keys=list(in_keys), out_keys=list(out_keys))
        self.clip_spec = clip_spec
        self.frame_size = frame_size
        self.grid = grid
        self.renderer = renderer
        self.__dict__["scorer"] = scorer  # not a submodule: see the class note

    @property
    def source_keys(self) -> list[NestedKey]:
        """What the clips carry for each frame key: the frames themselves, or ``renderer.state_key``."""
        if self.renderer is None:
            return list(self.in_keys)
        return [self.renderer.state_key]

    def _renderers(self) -> dict[NestedKey, StateRenderer]:
        return {} if self.renderer is None else {self.in_keys[0]: self.renderer}

    @property
    def positions(self) -> Tensor:
        """Positions along a clip of the frames sent to the scorer (:meth:`ClipSpec.frame_indices`)."""
        return self.clip_spec.frame_indices()

    def _positions(self, outcome: bool) -> Tensor:
        # clips without their outcome frame (absent from the input) show their steps' frames
        if outcome or not self.clip_spec.final_frame:
            return self.positions
        spec = self.clip_spec
        return evenly_spaced(spec.clip_len, spec.frames)

    def _with_outcome(self, clips: TensorDictBase) -> TensorDictBase | None:
        """``[B, L]`` clips + their ``("next", frame)`` entries → the ``[B, L + 1]`` stream layout;
        ``None`` when an outcome frame is absent."""
        sources = self.source_keys
        next_keys = [unravel_key(("next", key)) for key in sources]
        present = set(clips.keys(include_nested=True, leaves_only=True))
        if any(k not in present for k in next_keys):
            return None
        b, length = clips.batch_size[:2]
        if MASK_KEY in present:
            real = clips[MASK_KEY].to(torch.bool)
            last = torch.where(real.any(1), length - 1 - real.flip(1).long().argmax(1), length - 1)
        else:
            last = torch.full((b,), length - 1, dtype=torch.long, device=clips.device)
        rows = torch.arange(b, device=last.device)
        out = clips.exclude(*next_keys)
        extended = {}
        for key, value in out.items(include_nested=True, leaves_only=True):
            tail = value[rows, last][:, None]  # per-step entries repeat the last real step
            if key == MASK_KEY:
                tail = torch.zeros_like(tail)
            elif key in sources:
                tail = clips.get(unravel_key(("next", key)))[rows, last][:, None]
            extended[key] = torch.cat([value, tail], 1)
        if MASK_KEY not in extended:
            mask = torch.ones(b, length + 1, dtype=torch.bool, device=clips.device)
            mask[:, length] = False
            extended[MASK_KEY] = mask
        return TensorDict(extended, batch_size=[b, length + 1], device=clips.device)

    def score_key_list(self) -> list[NestedKey]:
        """Keys the scorer needs besides frames and the mask (carried per step by clips)."""
        frame_keys = set(self.in_keys) | set(self.source_keys)
        return [k for k in getattr(self.scorer, "in_keys", []) if k not in frame_keys and k != MASK_KEY]

    def score_clips(self, clips: TensorDictBase, frames: TensorDictBase | None = None) -> Tensor:
        """Scores ``[B, clip_len]`` clips (``[B, clip_len + 1]`` with their outcome frame, as a
        :class:`~vlmrb_torchrl.ClipStream` emits them); returns float32 ``[B]`` in [0, 1].

        ``frames`` is the frame pool of a :class:`~vlmrb_torchrl.ClipBatch` built with
        ``pool_frames=True``: only the frames sent to the scorer are gathered from it.
        """
        clip_len = self.clip_spec.clip_len
        final = self.clip_spec.final_frame
        widths = (clip_len, clip_len + 1) if final else (clip_len,)
        if clips.batch_dims < 2 or clips.batch_size[1] not in widths:
            hint = ""
            if clips.batch_dims >= 2 and clips.batch_size[1] == clip_len + 1 and self.in_keys:
                hint = (" Clips of clip_len + 1 carry their outcome frame (ClipSpec.final_frame=True): build "
                        "the transform with final_frame=True too (make_clip_scoring builds both from one ClipSpec).")
            raise ValueError(
                f"score_clips expects clips with batch [B, {' or '.join(map(str, widths))}]; got "
                f"{tuple(clips.batch_size)}.{hint}"
            )
        outcome = final and clips.batch_size[1] == clip_len + 1
        if final and not outcome and frames is None:
            extended = self._with_outcome(clips)
            if extended is not None:
                clips, outcome = extended, True
        sources = self.source_keys
        needed = sources + self.score_key_list()
        present = set(clips.keys(include_nested=True, leaves_only=True))
        if frames is not None:
            present |= set(frames.keys(include_nested=True, leaves_only=True))
            needed_in_clips = [k for k in needed if k not in sources] + [FRAME_ROW_KEY]
        else:
            needed_in_clips = needed
        missing = [k for k in needed if k not in present and (k,) not in present]
        if missing:
            raise KeyError(
                f"VLMScoreTransform needs {missing} in its input; found {sorted(map(str, present))}. "
                "Render frames at collection time (e.g. make_minigrid_env(render=True)) or pass in_keys=."
            )
        selected = clips.select(*needed_in_clips)
        if MASK_KEY not in present:
            selected[MASK_KEY] = torch.ones(clips.batch_size[:2], dtype=torch.bool, device=clips.device)
        else:
            selected[MASK_KEY] = clips[MASK_KEY].to(torch.bool)
        if clips.batch_dims > 2:
            raise ValueError(f"clips must have batch [B, T]; got {tuple(clips.batch_size)}.")
        packed = pack_frames(selected, positions=self._positions(outcome), frame_keys=self.in_keys,
                             frame_size=self.frame_size, grid=self.grid, frame_pool=frames,
                             final_frame=outcome, renderers=self._renderers())
        # checked here too: a scorer written to the protocol need not validate what it returns
        return validate_scores(self.scorer.score(packed), clips.batch_size[0], scorer=self.scorer)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes each clip's score on its records: ``[B*T]`` or ``[B, T]`` in, same shape out.

        Called by ``rb.sample()`` when the transform is a replay-buffer transform.
        """
        shape = tensordict.shape
        length = self.clip_spec.clip_len
        if len(shape) == 1:
            if shape[0] % length:
                raise ValueError(
                    f"A flat batch of {shape[0]} records is not a whole number of clips of "
                    f"clip_len={length}: sample with SliceSampler(slice_len={length})."
                )
            clips = tensordict.reshape(-1, length)
        elif len(shape) == 2 and shape[1] == length:
            clips = tensordict
        else:
            raise ValueError(f"VLMScoreTransform expects [B*{length}] or [B, {length}] input; got {tuple(shape)}.")
        scores = self.score_clips(clips)
        tensordict.set(self.out_keys[0], scores[:, None].expand(clips.shape).reshape(shape).clone())
        return tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "VLMScoreTransform scores clips of several steps: use it on replay-buffer slices or "
            "with AsyncScorer, not inside an environment's step."
        )

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)  # fail at the first reset, not the first step

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict  # rb.extend passes data through untouched

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """Adds the score entry: an unbounded float32 spec with the records' shape."""
        observation_spec[self.out_keys[0]] = Unbounded(
            shape=observation_spec.shape, dtype=torch.float32, device=observation_spec.device
        )
        return observation_spec

    def __repr__(self) -> str:
        spec = self.clip_spec
        return (f"{type(self).__name__}(scorer={type(self.scorer).__name__}, clip_len={spec.clip_len}, "
                f"frames={spec.frames}, final_frame={spec.final_frame}, frame_size={self.frame_size}, grid={self.grid}, "
                f"in_keys={self.in_keys}, out_keys={self.out_keys}"
                + ("" if self.renderer is None else f", renderer={type(self.renderer).__name__}") + ")")
