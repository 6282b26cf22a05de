"""Frames rendered from stored state where the scorer runs: the paper's ψ(s).

An env that can draw its frame from a small state (MiniGrid: the grid's cell codes, the agent's
position, direction and carried object) writes that state per step instead of the frame, and hands
a :class:`StateRenderer` to the scoring side. The clip stream then carries a few bytes per step
instead of an image, and the scoring transform renders, in the scorer's thread, process or Ray
actor, only the frames its clips show (:meth:`~vlmrb_torchrl.ClipSpec.frame_indices`), each once
per scoring call. Frames rendered this way must be the pixels the env would have written, so a
scorer's numbers do not depend on where its frames were drawn.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from tensordict.utils import NestedKey
from torch import Tensor

__all__ = ["StateRenderer", "render_states"]


@runtime_checkable
class StateRenderer(Protocol):
    """ψ: what turns the states an env stored into the frames its scorer reads.

    Any picklable object with these two members (it travels with the scoring transform to a
    ``"process"`` child or a Ray actor, where it renders):

    - ``state_key``: the entry the env writes per step in place of its frame (e.g. ``"frame_state"``);
    - ``__call__(states)``: ``[N, *state_shape]`` states -> uint8 ``[N, H, W, C]`` frames, the frames
      the env writes when it renders them itself.

    Give it to :func:`~vlmrb_torchrl.make_vlm_replay_buffer` or
    :func:`~vlmrb_torchrl.make_clip_scoring` (``renderer=``). The recipes ask the training env for
    one (its ``state_renderer`` attribute; :class:`~vlmrb_torchrl.envs.MiniGridEnv` has it) and build
    that env with ``render="state"``; an env without it passes frames.

    Examples:
        >>> import torch
        >>> class Bars:  # a state of one number per step, drawn as a bar of that height
        ...     state_key = "level"
        ...     def __call__(self, states):
        ...         rows = torch.arange(8).view(1, 8, 1, 1)
        ...         return ((rows < states.view(-1, 1, 1, 1)) * 255).to(torch.uint8).expand(-1, 8, 4, 3)
        >>> isinstance(Bars(), StateRenderer), render_states(Bars(), torch.tensor([2, 5])).shape
        (True, torch.Size([2, 8, 4, 3]))
    """

    state_key: NestedKey

    def __call__(self, states: Tensor) -> Tensor: ...


def render_states(renderer: StateRenderer, states: Tensor) -> Tensor:
    """``renderer(states)`` for ``[N, *state_shape]`` states, checked: uint8 ``[N, H, W, C]``, ``C`` in (1, 3, 4).

    Examples:
        >>> import torch
        >>> class Grey:
        ...     state_key = "shade"
        ...     def __call__(self, states):
        ...         return states.to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 2, 2, 3)
        >>> render_states(Grey(), torch.tensor([7, 9]))[:, 0, 0, 0].tolist()
        [7, 9]
    """
    frames = renderer(states)
    if (not isinstance(frames, Tensor) or frames.dtype != torch.uint8 or frames.ndim != 4
            or frames.shape[0] != states.shape[0] or frames.shape[-1] not in (1, 3, 4)):
        got = f"{frames.dtype} {tuple(frames.shape)}" if isinstance(frames, Tensor) else type(frames).__name__
        raise ValueError(f"{type(renderer).__name__}({tuple(states.shape)} states) must return uint8 frames "
                         f"[{states.shape[0]}, H, W, C] with C in (1, 3, 4); got {got}.")
    return frames
