"""What :class:`~vlmrb_torchrl.VLMPrioritizedSampler` accepts: index and value conversion,
setting checks and the checked-setting descriptors. Private to the sampler (and its tests).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from vlmrb_torchrl.replay._slot_state import UnscoredMode

__all__ = ["DEFAULT_WARMUP", "PrioritySetting", "Setting", "as_index_like", "as_values", "check_arguments", "check_ceiling",
           "check_nonneg", "check_range", "check_threshold", "check_unit", "check_unscored", "check_warmup",
           "check_weights_defined", "default_warmup", "flatten_index", "int_array", "scalar", "to_numpy"]

#: The warm-up of a sampler whose run length is unknown: 100,000 sample calls (the paper's).
DEFAULT_WARMUP = 100_000


def default_warmup(sample_calls: int | None = None) -> int:
    """The sampler's warm-up when none is given: half of the run's sample calls when the caller knows them
    (the recipes: their gradient updates), else :data:`DEFAULT_WARMUP`. The only warm-up default.

    Examples:
        >>> default_warmup(), default_warmup(7_000), default_warmup(1)
        (100000, 3500, 1)
    """
    return DEFAULT_WARMUP if sample_calls is None else max(1, sample_calls // 2)


# ---------------------------------------------------------------------- argument conversion
def int_array(index: Any, name: str = "index") -> np.ndarray:
    """``index`` as an int64 NumPy array of the same shape; floats and bools are refused."""
    if isinstance(index, torch.Tensor):
        if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got dtype {index.dtype}.")
        return index.detach().to("cpu", torch.int64).numpy()
    arr = np.asarray(index)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}.")
    return arr.astype(np.int64, copy=False)


def flatten_index(index: Any, trailing: tuple[int, ...] | None) -> np.ndarray:
    """A storage index as 1-D int64 slot numbers (no range check; negatives kept as -1).

    ``trailing`` is ``storage.shape[1:]`` of a storage with ``ndim > 1`` (``None`` for a
    1-D storage). Such a storage's index arrives as coordinates: a tuple of ``ndim``
    tensors (what :meth:`VLMPrioritizedSampler.sample` returns) or a tensor whose last
    dimension has ``ndim`` entries (what ``rb.extend`` returns, and the stacked
    ``"index"`` of a sampled batch). A slot is the row-major flattening of its
    coordinates, as in :class:`~torchrl.data.PrioritizedSampler`'s trees; a row with a
    negative coordinate becomes -1. Any other index is read as slot numbers.
    """
    k = 1 if trailing is None else len(trailing) + 1
    if isinstance(index, tuple):
        if len(index) == 1:
            return int_array(index[0]).reshape(-1)
        if len(index) != k:
            seen = "only 1-D storages" if trailing is None else f"a storage of ndim={k}"
            raise ValueError(
                f"Got a {len(index)}-tuple index (coordinates of an ndim={len(index)} storage) "
                f"but this sampler has seen {seen}: pass slot numbers, or extend the "
                "buffer first so that the sampler learns the storage's shape."
            )
        columns = np.broadcast_arrays(*(int_array(c).reshape(-1) for c in index))
        coords = np.stack(columns, -1)
    else:
        arr = int_array(index)
        if trailing is None or arr.ndim < 2 or arr.shape[-1] != k:
            return arr.reshape(-1)
        coords = arr.reshape(-1, k)
    negative = (coords < 0).any(-1)
    bounds = np.asarray(trailing, dtype=np.int64)
    beyond = ~negative & (coords[:, 1:] >= bounds).any(-1)
    if beyond.any():
        raise ValueError(
            f"index coordinates {coords[beyond][0].tolist()} lie outside the storage's "
            f"trailing shape {list(trailing)}."
        )
    strides = np.cumprod((1, *trailing[::-1]))[::-1].astype(np.int64)  # row-major
    return np.where(negative, -1, coords @ strides)


def check_range(arr: np.ndarray, capacity: int) -> np.ndarray:
    if arr.size and (arr.min() < 0 or arr.max() >= capacity):
        raise ValueError(
            f"index out of range: storage slots are 0..{capacity - 1}, got values in "
            f"[{int(arr.min())}, {int(arr.max())}]."
        )
    return arr


def as_values(values: float | torch.Tensor | np.ndarray, n: int, name: str) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        arr = values.detach().reshape(-1).cpu().numpy().astype(np.float64)
    else:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 1 and n != 1:
        arr = np.full(n, arr[0])
    if arr.size != n:
        raise ValueError(f"{name} has {arr.size} values but index has {n} entries.")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite; got NaN or inf.")
    return arr


def as_index_like(generation: torch.Tensor | np.ndarray, n: int) -> np.ndarray:
    arr = int_array(generation, "generation").reshape(-1)  # a float would be truncated
    if arr.size != n:
        raise ValueError(f"generation has {arr.size} values but index has {n} entries.")
    return arr


def to_numpy(value: torch.Tensor | np.ndarray | Any) -> np.ndarray:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


# ---------------------------------------------------------------------- argument checks
def scalar(value: Any) -> Any:
    """A one-element tensor or NumPy scalar as a Python number (what schedulers assign)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype == torch.bool or value.is_complex():
            return value  # refused by the caller's type check
        return value.item()
    if isinstance(value, np.generic) and not isinstance(value, np.bool_):
        return value.item()
    return value


def check_nonneg(name: str, value: float) -> float:
    value = scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {name}={value!r}.")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {name}={value!r}.")
    return float(value)


def check_unit(name: str, value: float) -> float:
    value = scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number in [0, 1], got {name}={value!r}.")
    value = float(value)
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be in [0, 1], got {name}={value!r}.")
    return value


def check_threshold(name: str, value: float | None) -> float | None:
    return None if value is None else check_unit(name, value)


def check_warmup(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0 (sample calls), got {name}={value!r}.")
    return value


def check_ceiling(name: str, value: float | None) -> float | None:
    """``None`` (no ceiling) or a finite number >= 1 (1 = uniform replay)."""
    if value is None:
        return None
    value = scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be None or a number >= 1, got {name}={value!r}.")
    if not math.isfinite(value) or value < 1.0:
        raise ValueError(
            f"{name} must be None (no ceiling) or a finite number >= 1 (how many times as often as under "
            f"uniform replay a slot may be drawn; 1 = uniform replay), got {name}={value!r}."
        )
    return float(value)


def check_spread(name: str, value: float | None) -> float | None:
    """``None`` (no episode credit) or a per-step decay in ``(0, 1]``."""
    if value is None:
        return None
    value = scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be None or a number in (0, 1], got {name}={value!r}.")
    if not 0.0 < value <= 1.0:
        raise ValueError(
            f"{name} must be None (no episode credit) or a per-step decay in (0, 1] (a slot d steps before a "
            f"positive gets credit {name}**d), got {name}={value!r}."
        )
    return float(value)


def check_unscored(name: str, value: UnscoredMode) -> UnscoredMode:
    if isinstance(value, str):
        if value not in ("mean", "max"):
            raise ValueError(f"{name} must be 'mean', 'max' or a float >= 0, got {value!r}.")
        return value
    return check_nonneg(name, value)


def check_weights_defined(eps: float, beta: float, lam: float) -> None:
    """Refuses settings whose importance weights are undefined (``eps=0``, ``beta>0``, lambda 1)."""
    if eps == 0.0 and beta > 0.0 and lam >= 1.0:
        raise ValueError(
            f"eps=0 with beta={beta} > 0 and lambda reaching 1 leaves the importance weights "
            "undefined: a slot of priority 0 then has sampling probability 0, the weights' "
            "normaliser (N q_min) ** -beta is infinite and every weight would be 0 or NaN. "
            "Use eps > 0 (e.g. 0.01), beta=0, or lambda_max (and lambda_) < 1."
        )


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {name}={value!r}.")
    return value


#: Each keyword argument of the sampler that has a range, and its check.
ARGUMENT_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "lambda_max": check_unit, "warmup": check_warmup, "unscored_priority": check_unscored,
    "threshold": check_threshold, "eps": check_nonneg, "td_boost": check_bool, "alpha": check_nonneg,
    "beta": check_nonneg, "max_oversampling": check_ceiling, "spread": check_spread,
}


def check_arguments(**kwargs: Any) -> dict[str, Any]:
    """Checks sampler keyword arguments as the constructor does (each one's range, then that the importance
    weights are defined) and returns them normalised; raises the constructor's ``ValueError`` / ``TypeError``.

    Examples:
        >>> check_arguments(eps=0.0, beta=0.4, lambda_max=0.5)["beta"]
        0.4
        >>> check_arguments(spread=1.5)
        Traceback (most recent call last):
        ...
        ValueError: spread must be None (no episode credit) or a per-step decay in (0, 1] ...
    """
    unknown = sorted(set(kwargs) - set(ARGUMENT_CHECKS))
    if unknown:
        raise TypeError(f"unknown sampler arguments {unknown}; checked ones: {sorted(ARGUMENT_CHECKS)}.")
    checked = {name: ARGUMENT_CHECKS[name](name, value) for name, value in kwargs.items()}
    if {"eps", "beta", "lambda_max"} <= set(checked):
        check_weights_defined(checked["eps"], checked["beta"], checked["lambda_max"])
    return checked


# ---------------------------------------------------------------------- public settings
class Setting:
    """A sampler setting stored in ``_<name>``, checked on every assignment."""

    def __init__(self, check: Callable[[str, Any], Any], doc: str) -> None:
        self._check = check
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self._name, self._attr = name, f"_{name}"

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self if obj is None else getattr(obj, self._attr)

    def __set__(self, obj: Any, value: Any) -> None:
        value = self._check(self._name, value)
        if hasattr(obj, "_state"):  # fully built: check the combination
            obj._validate_setting(self._name, value)
        setattr(obj, self._attr, value)


class PrioritySetting:
    """A :class:`PriorityConfig` field seen through the sampler; read-only without ``check``.

    An assignment is checked, then applied under the sampler's lock (the slot state
    rebuilds its trees when their leaves depend on the field).
    """

    def __init__(self, field: str, doc: str, check: Callable[[str, Any], Any] | None = None) -> None:
        self._field, self._check = field, check
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self if obj is None else getattr(obj._state.config, self._field)

    def __set__(self, obj: Any, value: Any) -> None:
        if self._check is None:
            raise AttributeError(
                f"{self._name} is fixed at construction (load_state_dict restores a checkpoint's)."
            )
        value = self._check(self._name, value)
        with obj._lock:
            obj._state.reconfigure(**{self._field: value})
