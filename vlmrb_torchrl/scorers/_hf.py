"""Helpers shared by the Hugging Face backends: lazy imports, model resolution (:class:`ModelSource`),
provenance.

Nothing here imports ``transformers`` or ``PIL`` at module import time, nor the scorers package's
public modules: frame helpers live in :mod:`~vlmrb_torchrl.scorers._frames`, prompt hashing in
:mod:`~vlmrb_torchrl.scorers._hashing`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import numbers
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict.utils import NestedKey

from vlmrb_torchrl.scorers._frames import FrameInput
from vlmrb_torchrl.scorers._hashing import prompt_hash

VLM_EXTRA_HINT = "pip install 'vlmrb-torchrl[vlm]'"

#: ``config.json`` model types loaded by the contrastive backend (``"clip:"``); every other model
#: type is treated as a generative image-text-to-text model (``"hf:"``).
CONTRASTIVE_MODEL_TYPES = frozenset({"clip", "siglip", "siglip2", "metaclip_2", "chinese_clip", "altclip"})

_TRUE = {"1", "true", "yes", "on"}
_IMPORT_LOCK = threading.Lock()


def require(owner: str, *modules: str) -> None:
    """Raises an ImportError naming the extra when a heavy optional dependency is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"{owner} needs {' and '.join(missing)}: {VLM_EXTRA_HINT}.")


def import_transformers(owner: str):
    """Imports transformers (once, under a lock: concurrent first imports can deadlock)."""
    require(owner, "transformers")
    with _IMPORT_LOCK:
        import transformers

    return transformers


def is_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` forbid network access (read now)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return True
    try:  # huggingface_hub reads the variable at import time; honour a value set that way too
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except ImportError:  # pragma: no cover - huggingface_hub ships with transformers
        return False


def _looks_like_path(model: str) -> bool:
    return (
        model.startswith(("/", "./", "../", "~", "\\"))
        or model.count("/") > 1
        or (len(model) > 1 and model[1] == ":")  # Windows drive
    )


def _local_hint(model: str) -> str:
    name = model.rstrip("/").split("/")[-1] or "model"
    return (
        f"Pass the path of a local directory holding the weights instead (saved with save_pretrained, or "
        f"downloaded on a machine with network by `hf download {model} --local-dir ./{name}`), e.g. "
        f"make_scorer('hf:./{name}')."
    )


def resolve_model(
    model: str,
    *,
    owner: str,
    revision: str | None = None,
    local_files_only: bool | None = None,
    cache_dir: str | os.PathLike | None = None,
    hub_timeout: float = 5.0,
) -> dict[str, Any]:
    """Finds where ``model`` (a local directory or a Hub id) loads from, failing fast if it can't.

    Returns a dict with ``source`` ("local" or "hub"), ``path`` (what to give ``from_pretrained``),
    ``local_files_only`` and ``revision``. Raises :class:`FileNotFoundError` naming the model and
    how to pass a local directory when the weights cannot be had: a path that does not exist, or a
    Hub id that is neither cached nor downloadable (offline mode, Hub unreachable within
    ``hub_timeout`` seconds, unknown repository). No download is attempted here.
    """
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"{owner}: model must be a Hub id or a local directory path, got {model!r}.")
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{owner}: directory {str(path)!r} has no config.json; point it at a directory written by "
                "save_pretrained (model and processor) or by `hf download <id> --local-dir DIR`."
            )
        return {"source": "local", "path": str(path.resolve()), "local_files_only": True, "revision": None}
    if path.exists() or _looks_like_path(model):
        raise FileNotFoundError(
            f"{owner}: model {model!r} is not a directory. Pass a directory holding config.json and the weights "
            "(written by save_pretrained or `hf download <id> --local-dir DIR`), or a Hub id such as "
            "'HuggingFaceTB/SmolVLM-256M-Instruct'."
        )
    cached = _cached_snapshot(model, revision, cache_dir)
    offline = is_offline()
    if cached is not None:
        return {
            "source": "hub",
            "path": model,
            "local_files_only": True if local_files_only is None else bool(local_files_only),
            "revision": cached.get("commit") or revision,
        }
    if offline or local_files_only:
        why = "HF_HUB_OFFLINE=1 forbids downloading it" if offline else "local_files_only=True forbids downloading it"
        raise FileNotFoundError(
            f"{owner}: model {model!r} is not a local directory and not in the Hugging Face cache, and {why}. "
            + _local_hint(model)
        )
    _probe_hub(model, revision=revision, owner=owner, timeout=hub_timeout)
    return {"source": "hub", "path": model, "local_files_only": False, "revision": revision}


def _cached_snapshot(repo_id: str, revision: str | None, cache_dir: str | os.PathLike | None = None) -> dict | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir, revision=revision)
    except Exception:  # noqa: BLE001 - malformed ids etc.: not cached
        return None
    if not isinstance(found, str):
        return None
    snapshot = Path(found).parent
    return {"path": str(snapshot), "commit": snapshot.name if snapshot.parent.name == "snapshots" else None}


def _probe_hub(repo_id: str, *, revision: str | None, owner: str, timeout: float) -> None:
    """One bounded request to the Hub, so a missing network fails in seconds, not after retries."""
    try:
        from huggingface_hub import HfApi, constants
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
    except ImportError:  # pragma: no cover
        return
    endpoint = os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
    try:
        HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, timeout=timeout)
    except GatedRepoError as err:
        raise FileNotFoundError(
            f"{owner}: model {repo_id!r} is gated on the Hub; accept its licence and set HF_TOKEN, or "
            + _local_hint(repo_id)
        ) from err
    except (RepositoryNotFoundError, RevisionNotFoundError) as err:
        raise FileNotFoundError(
            f"{owner}: model {repo_id!r} (revision {revision or 'main'}) was not found on the Hub at {endpoint} "
            "(or it is private: set HF_TOKEN). Check the id, or " + _local_hint(repo_id)
        ) from err
    except Exception as err:  # noqa: BLE001 - connection errors, timeouts, proxies...
        raise FileNotFoundError(
            f"{owner}: model {repo_id!r} is not in the local Hugging Face cache and the Hub at {endpoint} could not "
            f"be reached within {timeout:g} s ({type(err).__name__}). "
            + _local_hint(repo_id)
            + " Set HF_HUB_OFFLINE=1 on machines without network."
        ) from err


def read_config(path: str | os.PathLike) -> dict:
    """The ``config.json`` of a local model directory as a dict (empty if missing/unreadable)."""
    try:
        with open(Path(path) / "config.json", encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError, RecursionError):
        return {}
    return config if isinstance(config, dict) else {}


def detect_backend(path: str | os.PathLike) -> str:
    """``"clip"`` for a local CLIP/SigLIP directory, ``"hf"`` for any other model with a config.json."""
    model_type = read_config(path).get("model_type")
    return "clip" if model_type in CONTRASTIVE_MODEL_TYPES else "hf"


def weights_fingerprint(path: str | os.PathLike, *, full_hash_below: int = 64 << 20) -> str:
    """A short, stable fingerprint of a local weights directory (16 hex digits).

    Hashes every file's relative path and size; files under ``full_hash_below`` bytes (configs,
    tokenizers, small weights) are hashed in full; larger ones by their safetensors header (tensor
    names, shapes, dtypes, offsets) or, for other formats, their first and last MiB. Changing the
    weights, config or tokenizer changes it; it costs milliseconds even for multi-GB checkpoints.
    """
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file() and ".cache" not in p.parts):
        rel = file.relative_to(root).as_posix()
        size = file.stat().st_size
        digest.update(f"{rel}\0{size}\0".encode())
        with open(file, "rb") as f:
            if size < full_hash_below:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
                continue
            head = f.read(8)
            header_len = int.from_bytes(head, "little") if len(head) == 8 else 0
            if file.suffix == ".safetensors" and 0 < header_len < min(size, 100 << 20):
                digest.update(f.read(header_len))
            else:
                digest.update(head + f.read(1 << 20))
            f.seek(max(size - (1 << 20), 0))
            digest.update(f.read())
    return digest.hexdigest()[:16]


def locate_model(
    model: str, *, owner: str, revision: str | None, local_files_only: bool | None, cache_dir: Any,
    hub_timeout: float, trust_remote_code: bool,
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Checks the extras, resolves ``model`` (hub id or directory) and returns
    ``(transformers, where, load)``: the module, :func:`resolve_model`'s answer and the keyword
    arguments every ``from_pretrained`` call of a scorer shares."""
    require(owner, "transformers", "PIL")
    where = resolve_model(model, owner=owner, revision=revision, local_files_only=local_files_only,
                          cache_dir=cache_dir, hub_timeout=hub_timeout)
    transformers = import_transformers(owner)
    load = {"revision": revision, "local_files_only": where["local_files_only"],
            "trust_remote_code": trust_remote_code, "cache_dir": cache_dir}
    return transformers, where, load


def check_sizes(owner: str, *, batch_size: Any, max_frames: Any) -> None:
    """Raises ValueError unless ``batch_size`` is an int >= 1 and ``max_frames`` is one or None."""
    for name, value in (("batch_size", batch_size), ("max_frames", max_frames)):
        if name == "max_frames" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{owner}.{name} must be an int >= 1, got {name}={value!r}.")


def check_dicts(owner: str, **values: Any) -> None:
    """Raises TypeError naming the first of ``values`` (keyword arguments) that is neither a dict nor None."""
    for name, value in values.items():
        if value is not None and not isinstance(value, dict):
            raise TypeError(f"{owner}.{name} must be a dict or None, got {type(value).__name__}.")


def default_device_dtype(device: Any, dtype: Any, *, owner: str) -> tuple[torch.device, torch.dtype]:
    """``device=None`` → CUDA if available else CPU; ``dtype=None`` → bfloat16 on CUDA, float32 elsewhere."""
    try:
        device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"{owner}: device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}.") from err
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    elif isinstance(dtype, str):
        name = dtype.replace("torch.", "")
        aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
        resolved = getattr(torch, aliases.get(name, name), None)
        if not isinstance(resolved, torch.dtype):
            raise ValueError(
                f"{owner}: dtype must be a floating torch dtype or one of 'bfloat16', 'float16', 'float32', "
                f"got {dtype!r}."
            )
        dtype = resolved
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{owner}: dtype must be a floating torch dtype (e.g. torch.bfloat16), got {dtype!r}.")
    return device, dtype


def load_model(
    auto_class: Any, transformers: Any, where: dict[str, Any], load: dict[str, Any], *,
    device: torch.device, dtype: torch.dtype, model_kwargs: dict | None, owner: str = "scorer",
) -> Any:
    """``auto_class.from_pretrained`` of the located model at ``dtype``, moved to ``device``, in eval
    mode with gradients off (scorers only run inference). A weights file that cannot be read (truncated,
    damaged) is a one-line ``ValueError`` naming ``owner`` and the model's directory."""
    try:
        model = auto_class.from_pretrained(
            where["path"], **dtype_kwarg(transformers, dtype), **load, **(model_kwargs or {})
        )
    except Exception as err:
        if type(err).__name__ != "SafetensorError":  # safetensors' own error type (a Rust extension's)
            raise
        raise ValueError(f"{owner}: the weights in {where['path']} cannot be read ({str(err).strip()[:200]}): a truncated or "
                         "damaged file; download or build the model again.") from err
    return model.to(device).eval().requires_grad_(False)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a Hugging Face scorer's model comes from and how it loads.

    The constructor arguments :class:`~vlmrb_torchrl.scorers.HFGenerativeScorer` and
    :class:`~vlmrb_torchrl.scorers.HFContrastiveScorer` share, with their checks and loading
    steps in one place: :meth:`device_dtype` (cheap checks, nothing loaded), :meth:`locate`
    (extras present, weights found: fails fast otherwise) and :meth:`load`. The scorers keep
    their keyword arguments; they build one of these from them.

    Examples:
        >>> source = ModelSource("org/model", device="cpu")
        >>> source.device_dtype("MyScorer")
        (device(type='cpu'), torch.float32)
        >>> ModelSource("org/model", model_kwargs=[1]).device_dtype("MyScorer")
        Traceback (most recent call last):
        ...
        TypeError: MyScorer.model_kwargs must be a dict or None, got list.
    """

    model: str
    device: Any = None
    dtype: Any = None
    revision: str | None = None
    local_files_only: bool | None = None
    cache_dir: str | os.PathLike | None = None
    trust_remote_code: bool = False
    model_kwargs: dict | None = None
    hub_timeout: float = 5.0

    def device_dtype(self, owner: str) -> tuple[torch.device, torch.dtype]:
        """Checks ``model_kwargs`` and resolves the device and dtype (:func:`default_device_dtype`)."""
        check_dicts(owner, model_kwargs=self.model_kwargs)
        return default_device_dtype(self.device, self.dtype, owner=owner)

    def locate(self, owner: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """``(transformers, where, load)``: see :func:`locate_model`."""
        return locate_model(
            self.model, owner=owner, revision=self.revision, local_files_only=self.local_files_only,
            cache_dir=self.cache_dir, hub_timeout=self.hub_timeout, trust_remote_code=self.trust_remote_code,
        )

    def load(
        self, auto_class: Any, transformers: Any, where: dict[str, Any], load: dict[str, Any], *,
        device: torch.device, dtype: torch.dtype, owner: str = "scorer",
    ) -> Any:
        """The model in eval mode on ``device`` (:func:`load_model` with ``model_kwargs``)."""
        return load_model(auto_class, transformers, where, load, device=device, dtype=dtype,
                          model_kwargs=self.model_kwargs, owner=owner)


def set_scorer_attributes(
    scorer: Any, model: str, *, frame_key: NestedKey, mask_key: NestedKey, max_frames: int | None, batch_size: int,
) -> None:
    """Sets what every HF scorer keeps about its model and inputs: ``model_name``, ``inputs`` (a
    :class:`~vlmrb_torchrl.scorers._frames.FrameInput`) and its ``frame_key``, ``mask_key``, ``in_keys``,
    ``max_frames``, then ``batch_size``, ``name``, and the lock that serialises its calls."""
    scorer.model_name = model
    scorer.inputs = FrameInput(frame_key, mask_key, max_frames)
    scorer.frame_key = frame_key
    scorer.mask_key = mask_key
    scorer.in_keys = scorer.inputs.in_keys
    scorer.max_frames = max_frames
    scorer.batch_size = int(batch_size)
    scorer.name = f"{type(scorer).__name__}({model})"
    scorer._lock = threading.RLock()


def provenance(
    backend: str, model_name: str, where: dict[str, Any], model: Any, *, prompt: str, dtype: torch.dtype,
    max_frames: int | None, transformers: Any, **specific: Any,
) -> dict[str, Any]:
    """The provenance every HF scorer records, with the backend's ``specific`` entries after the
    prompt's. Checkpoints store it and resuming compares it: keep key names and values stable."""
    local = where["source"] == "local"
    return {
        "backend": backend,
        "model": model_name,
        "source": where["source"],
        "path": where["path"] if local else None,
        "revision": where["revision"] or getattr(model.config, "_commit_hash", None),
        "weights_hash": weights_fingerprint(where["path"]) if local else None,
        "model_type": getattr(model.config, "model_type", None),
        "prompt": prompt,
        "prompt_hash": prompt_hash(prompt),
        **specific,
        "dtype": dtype_name(dtype),
        "max_frames": max_frames,
        "transformers": transformers.__version__,
    }


def rebuild(cls: type, kwargs: dict) -> Any:
    """Unpickling helper: a scorer is pickled as its constructor arguments and rebuilt (reloaded)."""
    return cls(**kwargs)


def dtype_kwarg(transformers: Any, dtype: torch.dtype) -> dict:
    """``{"dtype": dtype}`` for transformers >= 4.56, ``{"torch_dtype": dtype}`` before (renamed)."""
    try:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    except ValueError:
        return {"dtype": dtype}
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def to_device(inputs: Mapping[str, Any], device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """Processor outputs for a forward pass: tensors moved to ``device``, floating ones (pixels)
    cast to the model's ``dtype``; other entries passed through."""
    batch = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.to(device)
            if value.is_floating_point():
                value = value.to(dtype)
        batch[key] = value
    return batch
