"""Segment trees (sum and min) over float64 leaves, for O(log N) prioritized sampling.

Two interchangeable backends:

- ``"torchrl"``: TorchRL's C++ ``SumSegmentTreeFp64`` / ``MinSegmentTreeFp64``. Fast,
  but the compiled extension only loads with the torch build TorchRL was compiled
  against (torchrl 0.14.1 fails to load it under torch 2.13 with an undefined symbol).
- ``"numpy"``: a vectorised NumPy implementation with the same semantics, always
  available. Every internal node is recomputed from its two children (never updated
  by a delta), so a tree updated incrementally is bit-identical to one built from
  the same leaves: that is what makes checkpoint round trips sample identically.

``"auto"`` picks ``"torchrl"`` when the extension loads, else ``"numpy"``.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
import torch

TreeBackend = Literal["auto", "torchrl", "numpy"]

_CPP_TREES: tuple[type, type] | None | bool = False  # False = not probed yet


def _cpp_trees() -> tuple[type, type] | None:
    global _CPP_TREES
    if _CPP_TREES is False:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from torchrl._torchrl import MinSegmentTreeFp64, SumSegmentTreeFp64

            _CPP_TREES = (SumSegmentTreeFp64, MinSegmentTreeFp64)
        except ImportError:
            _CPP_TREES = None
    return _CPP_TREES


def torchrl_trees_available() -> bool:
    """Whether TorchRL's compiled segment trees load with the installed torch."""
    return _cpp_trees() is not None


def resolve_backend(backend: TreeBackend) -> Literal["torchrl", "numpy"]:
    if backend not in ("auto", "torchrl", "numpy"):
        raise ValueError(
            f"tree_backend must be one of 'auto', 'torchrl', 'numpy'; got {backend!r}."
        )
    if backend == "auto":
        return "torchrl" if torchrl_trees_available() else "numpy"
    if backend == "torchrl" and not torchrl_trees_available():
        raise ImportError(
            "tree_backend='torchrl' needs TorchRL's compiled segment trees, which do not "
            f"load with torch {torch.__version__} (install the torch release your torchrl "
            "wheel was built against, e.g. torch==2.14.1 for torchrl 0.14.1), or use "
            "tree_backend='numpy'."
        )
    return backend


class _NumpyTree:
    """Complete binary tree stored in an array; leaves live at ``[size, 2 * size)``."""

    def __init__(self, capacity: int, kind: Literal["sum", "min"]) -> None:
        self.capacity = capacity
        self.size = 1 << max(0, (capacity - 1).bit_length())
        self.depth = self.size.bit_length() - 1
        self.kind = kind
        self.identity = 0.0 if kind == "sum" else np.inf
        self._op = np.add if kind == "sum" else np.minimum
        self.tree = np.full(2 * self.size, self.identity, dtype=np.float64)

    def update(self, index: np.ndarray, value: np.ndarray) -> None:
        t = self.tree
        node = index + self.size
        t[node] = value
        op = self._op
        for _ in range(self.depth):
            node = node >> 1
            # duplicates in `node` all write the same value: no need to deduplicate
            t[node] = op(t[2 * node], t[2 * node + 1])

    def build(self, leaves: np.ndarray) -> None:
        t = self.tree
        t[:] = self.identity
        t[self.size : self.size + len(leaves)] = leaves
        lo = self.size
        while lo > 1:
            hi, lo = lo, lo // 2
            t[lo:hi] = self._op(t[2 * lo : 2 * hi : 2], t[2 * lo + 1 : 2 * hi : 2])

    def root(self) -> float:
        return float(self.tree[1])

    def find(self, mass: np.ndarray) -> np.ndarray:
        """Index of the first leaf whose prefix sum exceeds ``mass`` (lower bound)."""
        t = self.tree
        node = np.ones(len(mass), dtype=np.int64)
        mass = mass.copy()
        for _ in range(self.depth):
            node = 2 * node
            left = t[node]
            right = mass > left
            mass -= left * right
            node += right
        return node - self.size


class _TorchRLTree:
    """Adapter giving TorchRL's C++ segment trees the :class:`_NumpyTree` interface."""

    def __init__(self, capacity: int, kind: Literal["sum", "min"]) -> None:
        sum_cls, min_cls = _cpp_trees()
        self.capacity = capacity
        self.kind = kind
        self.tree = (sum_cls if kind == "sum" else min_cls)(capacity)
        self.identity = 0.0 if kind == "sum" else np.inf

    def update(self, index: np.ndarray, value: np.ndarray) -> None:
        self.tree.update(torch.from_numpy(index), torch.from_numpy(value))

    def build(self, leaves: np.ndarray) -> None:
        full = np.full(self.capacity, self.identity, dtype=np.float64)
        full[: len(leaves)] = leaves
        self.update(np.arange(self.capacity, dtype=np.int64), full)

    def root(self) -> float:
        return float(self.tree.query(0, self.capacity))

    def find(self, mass: np.ndarray) -> np.ndarray:
        return self.tree.scan_lower_bound(torch.from_numpy(mass)).numpy()


def make_tree(
    capacity: int, kind: Literal["sum", "min"], backend: Literal["torchrl", "numpy"]
) -> _NumpyTree | _TorchRLTree:
    return (_TorchRLTree if backend == "torchrl" else _NumpyTree)(capacity, kind)
