"""What counts as a hand-written entry key: the one check behind every ``*_key`` argument.

A leaf module (it imports nothing from the package), shared by the clip stream and the scorers.
"""

from __future__ import annotations

__all__ = ["is_nested_key"]


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
