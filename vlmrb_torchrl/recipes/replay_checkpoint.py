"""A replay buffer in a checkpoint: only the filled slots, in compact dtypes, read back without pickle.

TorchRL's ``rb.dumps`` writes the storage at its full capacity (a 1M-slot buffer holding 6,000
transitions writes 1M rows) and a pickled prefetch queue. :func:`save_replay` writes what the
buffer holds instead, and :func:`load_replay` restores it exactly (the resumed run samples the
same indices and reads the same bits):

- the storage's ``len(rb)`` filled rows, each entry stored losslessly in the smallest form that
  holds it (:func:`compact`: 0/1 values as bits, integer-valued floats as small integers, float64
  as float32, int64 as a smaller integer — only when converting back gives the same bits);
- the writer's cursor, the buffer's generator state and batch size;
- the sampler: :class:`~vlmrb_torchrl.VLMPrioritizedSampler`'s per-slot arrays up to the last
  slot that differs from a fresh sampler's, TorchRL's ``PrioritizedSampler``'s priorities of the
  filled slots, any other sampler's ``state_dict()``.

Everything goes into ``replay.pt`` (tensors, numbers, strings: ``torch.load(weights_only=True)``
reads it) and ``replay.json`` (what the tensors are). Supported: a ``TensorDictReplayBuffer``
(or :class:`~vlmrb_torchrl.VLMReplayBuffer`) on a 1-D ``LazyTensorStorage`` / ``LazyMemmapStorage``
with a round-robin writer: what the recipes build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import PrioritizedSampler

__all__ = ["FORMAT", "save_replay", "load_replay", "compact", "expand"]

#: ``replay.json``'s ``format``: what :func:`load_replay` reads.
FORMAT = "vlmrb-replay-1"
_INT_RANGES = [(torch.uint8, 0, 255), (torch.int8, -128, 127), (torch.int16, -2**15, 2**15 - 1),
               (torch.int32, -2**31, 2**31 - 1)]


# ---------------------------------------------------------------------------------- lossless compaction
def compact(tensor: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
    """``tensor`` in the smallest lossless form and the note :func:`expand` needs to restore it bit for bit.

    Examples:
        >>> x = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
        >>> stored, note = compact(x)
        >>> note["encoding"], stored.dtype, stored.numel()  # 6 float32 zeros and ones -> 1 byte of bits
        ('bits', torch.uint8, 1)
        >>> torch.equal(expand(stored, note), x)
        True
        >>> compact(torch.tensor([3.0, -2.0]))[1]["encoding"], compact(torch.tensor([0.5]))[1]["encoding"]
        ('int8', 'raw')
        >>> compact(torch.tensor([-0.0, 1.0]))[1]["encoding"]  # -0.0 would come back as +0.0
        'raw'
    """
    tensor = tensor.detach().cpu().contiguous()
    note = {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape), "encoding": "raw"}
    if tensor.numel() == 0 or tensor.dtype == torch.bool and tensor.numel() < 8:
        return tensor.clone(), note
    if tensor.dtype == torch.bool or tensor.dtype.is_floating_point or tensor.dtype in (torch.int64, torch.int32,
                                                                                           torch.int16, torch.uint8):
        if tensor.dtype.is_floating_point:
            finite = bool(torch.isfinite(tensor).all())
            negative_zero = bool((torch.signbit(tensor) & (tensor == 0)).any())
            integral = finite and not negative_zero and bool((tensor == tensor.round()).all())
        else:
            integral = True
        if integral:
            low, high = (0, 1) if tensor.dtype == torch.bool else (float(tensor.min()), float(tensor.max()))
            if low >= 0 and high <= 1:
                bits = np.packbits(tensor.reshape(-1).numpy().astype(bool))
                return torch.from_numpy(bits), {**note, "encoding": "bits"}
            for dtype, lo, hi in _INT_RANGES:
                if lo <= low and high <= hi and dtype.itemsize < tensor.dtype.itemsize:
                    return tensor.to(dtype), {**note, "encoding": str(dtype).removeprefix("torch.")}
        if tensor.dtype == torch.float64:
            single = tensor.to(torch.float32)
            if torch.equal(single.to(torch.float64).view(torch.int64), tensor.view(torch.int64)):
                return single, {**note, "encoding": "float32"}
    # a view (the filled rows of a storage) would be saved with the whole storage it views: copy what it shows
    return tensor.clone() if tensor.untyped_storage().nbytes() > tensor.numel() * tensor.element_size() else tensor, note


def expand(stored: torch.Tensor, note: dict[str, Any]) -> torch.Tensor:
    """Undoes :func:`compact`."""
    dtype = getattr(torch, note["dtype"])
    shape = tuple(note["shape"])
    if note["encoding"] == "bits":
        n = int(np.prod(shape, dtype=np.int64))
        flat = np.unpackbits(stored.numpy(), count=n).astype(bool)
        return torch.from_numpy(flat).reshape(shape).to(dtype)
    return stored.to(dtype).reshape(shape)


# ---------------------------------------------------------------------------------- save / load
def save_replay(rb: Any, path: Path) -> None:
    """Writes ``rb`` into the directory ``path`` (``replay.pt`` and ``replay.json``)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    storage = rb.storage
    _check_supported(rb)
    n = len(rb)
    tensors: dict[str, Any] = {"storage": [], "sampler": {}}
    meta: dict[str, Any] = {"format": FORMAT, "len": n, "capacity": int(storage.max_size),
                            "storage_keys": [], "storage_notes": [], "writer": _writer_state(rb._writer),
                            "batch_size": rb._batch_size}
    if n:
        rows = storage._storage[:n]
        for key, value in rows.items(include_nested=True, leaves_only=True):
            stored, note = compact(value)
            tensors["storage"].append(stored)
            meta["storage_keys"].append([key] if isinstance(key, str) else list(key))
            meta["storage_notes"].append(note)
    if rb._rng is not None:
        tensors["rng"] = rb._rng.get_state().clone()
    meta["sampler"] = _save_sampler(rb.sampler, n, tensors["sampler"])
    torch.save(tensors, path / "replay.pt")
    (path / "replay.json").write_text(json.dumps(meta, indent=1))


def load_replay(rb: Any, path: Path) -> None:
    """Restores :func:`save_replay`'s ``path`` into ``rb`` (a buffer built with the same settings).

    Raises:
        ValueError: the files do not match ``rb`` (capacity, sampler kind) or are not this format.
    """
    path = Path(path)
    meta = json.loads((path / "replay.json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path / 'replay.json'}: format {meta.get('format')!r}, expected {FORMAT!r}.")
    _check_supported(rb)
    storage = rb.storage
    if meta["capacity"] != storage.max_size:
        raise ValueError(f"the checkpoint's buffer holds {meta['capacity']} slots, this run's {storage.max_size} "
                         "(buffer_size must match).")
    try:
        tensors = torch.load(path / "replay.pt", weights_only=True, map_location="cpu")
    except Exception as err:
        raise ValueError(f"{path / 'replay.pt'} cannot be read: {type(err).__name__}: {err}") from err
    n = int(meta["len"])
    if n:
        rows = TensorDict({tuple(key): expand(stored, note) for key, stored, note in
                           zip(meta["storage_keys"], tensors["storage"], meta["storage_notes"], strict=True)},
                          batch_size=[n])
        storage.set(torch.arange(n), rows)
    if len(storage) != n:
        raise ValueError(f"restored {len(storage)} transitions, the checkpoint holds {n}.")
    rb._writer.load_state_dict(meta["writer"])
    rb._batch_size = meta["batch_size"]
    if "rng" in tensors:
        generator = torch.Generator()
        generator.set_state(tensors["rng"])
        rb.set_rng(generator)
    _load_sampler(rb.sampler, meta["sampler"], tensors["sampler"], n)


def _check_supported(rb: Any) -> None:
    storage = rb.storage
    if getattr(storage, "ndim", 1) != 1 or not hasattr(storage, "_storage") or not isinstance(
            getattr(rb._writer, "_cursor", None), int):
        raise TypeError(f"replay checkpoints support 1-D tensor storages with a round-robin writer; got "
                        f"{type(storage).__name__}(ndim={getattr(storage, 'ndim', '?')}) with "
                        f"{type(rb._writer).__name__}.")


def _writer_state(writer: Any) -> dict[str, int]:
    return {k: int(v) for k, v in writer.state_dict().items()}


def _save_sampler(sampler: Any, n: int, tensors: dict[str, Any]) -> dict[str, Any]:
    from vlmrb_torchrl.replay.sampler import VLMPrioritizedSampler

    if isinstance(sampler, VLMPrioritizedSampler):
        state = sampler.state_dict()
        arrays = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
        touched = torch.zeros(next(iter(arrays.values())).shape[0], dtype=torch.bool)
        for value in arrays.values():
            touched |= value.reshape(value.shape[0], -1).ne(0).any(-1)
        used = int(touched.nonzero().max()) + 1 if bool(touched.any()) else 0
        notes = {}
        for name, value in arrays.items():
            tensors[name], notes[name] = compact(value[:used])
        scalars = {k: v for k, v in state.items() if k not in arrays}
        return {"kind": "vlm", "used": used, "capacity": int(next(iter(arrays.values())).shape[0]),
                "notes": notes, "scalars": scalars}
    if isinstance(sampler, PrioritizedSampler):
        index = torch.arange(n)
        tensors["sum"] = torch.as_tensor(sampler._sum_tree[index]) if n else torch.zeros(0)  # the trees' dtype
        tensors["min"] = torch.as_tensor(sampler._min_tree[index]) if n else torch.zeros(0)
        tensors["max_priority"] = list(sampler._max_priority)
        return {"kind": "prioritized", "alpha": sampler._alpha, "beta": sampler._beta, "eps": sampler._eps}
    tensors["state"] = sampler.state_dict()
    return {"kind": "state_dict", "class": type(sampler).__name__}


def _load_sampler(sampler: Any, meta: dict[str, Any], tensors: dict[str, Any], n: int) -> None:
    from vlmrb_torchrl.replay.sampler import VLMPrioritizedSampler

    kind = meta["kind"]
    if kind == "vlm":
        if not isinstance(sampler, VLMPrioritizedSampler):
            raise ValueError(f"the checkpoint's sampler is a VLMPrioritizedSampler, this run's {type(sampler).__name__}.")
        state = dict(meta["scalars"])
        for name, note in meta["notes"].items():
            used = expand(tensors[name], note)
            full = torch.zeros((meta["capacity"], *used.shape[1:]), dtype=used.dtype)
            full[:meta["used"]] = used
            state[name] = full
        sampler.load_state_dict(state)
    elif kind == "prioritized":
        if not isinstance(sampler, PrioritizedSampler) or isinstance(sampler, VLMPrioritizedSampler):
            raise ValueError(f"the checkpoint's sampler is TorchRL's PrioritizedSampler, this run's "
                             f"{type(sampler).__name__}.")
        sampler._alpha, sampler._beta, sampler._eps = meta["alpha"], meta["beta"], meta["eps"]
        sampler._init()  # empty trees
        if n:
            index = torch.arange(n)
            sampler._sum_tree[index] = tensors["sum"]
            sampler._min_tree[index] = tensors["min"]
        sampler._max_priority = tuple(tensors["max_priority"])
    else:
        if type(sampler).__name__ != meta["class"]:
            raise ValueError(f"the checkpoint's sampler is a {meta['class']}, this run's {type(sampler).__name__}.")
        sampler.load_state_dict(tensors["state"])
