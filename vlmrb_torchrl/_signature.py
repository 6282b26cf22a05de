"""The signature a class shows: its ``__init__``'s, also under a metaclass ``__call__(*args, **kwargs)``."""

from __future__ import annotations

import inspect
from typing import TypeVar

T = TypeVar("T", bound=type)


def init_signature(cls: T) -> T:
    """Class decorator: ``inspect.signature(cls)`` (``help()``, IDEs, the API pages) becomes ``cls.__init__``'s,
    without ``self``.

    TorchRL's samplers, replay buffers and envs have a metaclass whose ``__call__(*args, **kwargs)`` hides
    the constructor's arguments from ``inspect.signature`` (and Sphinx). Applied to each class (a
    subclass would inherit its base's ``__signature__`` otherwise: decorate it too).

    Examples:
        >>> class Meta(type):
        ...     def __call__(cls, *args, **kwargs):
        ...         return super().__call__(*args, **kwargs)
        >>> class Hidden(metaclass=Meta):
        ...     def __init__(self, capacity, *, alpha=0.6): ...
        >>> str(inspect.signature(Hidden)), str(inspect.signature(init_signature(Hidden)))
        ('(*args, **kwargs)', '(capacity, *, alpha=0.6)')
    """
    signature = inspect.signature(cls.__init__)
    cls.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
    return cls
