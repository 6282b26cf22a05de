"""Entry keys: the clip layout's entry names and what counts as a hand-written key.

A leaf module (it imports nothing from the package), shared by the clip stream, the transform
and the scorers, so no module reaches into another's private names for them.
"""

from __future__ import annotations

__all__ = ["MASK_KEY", "CLIP_INDEX_KEY", "FRAME_ROW_KEY", "is_nested_key"]

# The clip layout (see vlmrb_torchrl.ClipBatch, which re-exports them as class attributes):
#: bool ``[B, T]``: False on a clip's padded steps (and on its outcome frame).
MASK_KEY = "mask"
#: int ``[B, T]``: the step's row in the batch it was cut from (-1 for padding and the outcome frame).
CLIP_INDEX_KEY = ("clip", "index")
#: int ``[B, T]``: the step's row in a clip batch's frame pool (``pool_frames=True``).
FRAME_ROW_KEY = ("clip", "frame_row")


def is_nested_key(key: object) -> bool:
    """True for a key naming a TensorDict entry: a non-empty str, or a non-empty tuple of them.

    Tuples may nest (``("next", ("a", "b"))``, which tensordict flattens to
    ``("next", "a", "b")``). Stricter than :func:`tensordict.utils.unravel_key`, which also
    accepts ``""`` and non-str parts such as ``("a", 1)``: keys like that name no entry, so an
    argument holding one is a bug to report where it is passed.

    Examples:
        >>> is_nested_key("pixels"), is_nested_key(("next", "done")), is_nested_key(("next", ("a", "b")))
        (True, True, True)
        >>> is_nested_key(""), is_nested_key(()), is_nested_key(("a", 1)), is_nested_key(("a", ""))
        (False, False, False, False)
    """
    if isinstance(key, str):
        return bool(key)
    return isinstance(key, tuple) and bool(key) and all(is_nested_key(k) for k in key)
