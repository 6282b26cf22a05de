"""ψ for MuJoCo envs: a few numbers per step in place of a frame, drawn where the scorer runs.

A MuJoCo frame is a function of the model (its geometry, colours, cameras, render settings) and of
the positions the data's kinematics were computed from (``qpos``, the mocap bodies' poses). An env
whose model is built once (robosuite with ``hard_reset=False``, OGBench Scene) writes per step:

- the positions the frame shows (:class:`StateLayout`: ``qpos``, ``mocap_pos``, ``mocap_quat``);
- the rows of ``geom_rgba`` / ``mat_rgba`` the env recolours during an episode (OGBench's buttons,
  handles and cube), if any;

and a :class:`MujocoStateRenderer` rebuilds the model where it renders, from the model's XML plus
a patch: every model array (and visual setting) where the env's live model differs from a fresh
compile of that XML (what the env changed after compiling: hidden sites, a transparent arm, no
multisampling). Velocities are not stored: a frame does not depend on them.

The renderer builds its model, data and GL context lazily, one per thread that calls it (an EGL
context is current in one thread at a time), and pickles without them.
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from vlmrb_torchrl.envs._base import FRAME_STATE_KEY

__all__ = ["StateLayout", "MujocoStateRenderer", "model_patch", "visual_settings", "apply_model_patch"]

#: The sub-structs of ``MjModel.vis`` whose fields a patch carries.
_VIS_GROUPS = ("global_", "quality", "headlight", "map", "scale", "rgba")


@dataclasses.dataclass(frozen=True)
class StateLayout:
    """Where each part of a MuJoCo frame state sits: float64 ``[nq + 7 * nmocap + 4 * (len(geoms) + len(materials))]``,
    ``qpos``, ``mocap_pos``, ``mocap_quat``, then the RGBA of the listed geoms and materials (the model rows
    an env recolours per step; ``float32`` in the model, exact in ``float64``).

    Examples:
        >>> import mujoco
        >>> model = mujoco.MjModel.from_xml_string(
        ...     "<mujoco><worldbody><body mocap='true'><geom size='.1'/></body>"
        ...     "<body><freejoint/><geom size='.1'/></body></worldbody></mujoco>")
        >>> layout = StateLayout(model.nq, model.nmocap, geoms=(1,))
        >>> data = mujoco.MjData(model)
        >>> state = layout.encode(model, data)
        >>> layout.size, state.shape, state.dtype
        (18, (18,), dtype('float64'))
    """

    nq: int
    nmocap: int
    geoms: tuple[int, ...] = ()
    materials: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        """Numbers in one state."""
        return self.nq + 7 * self.nmocap + 4 * (len(self.geoms) + len(self.materials))

    def positions(self, data) -> np.ndarray:
        """``qpos``, ``mocap_pos``, ``mocap_quat`` of ``data`` now (a copy): what the kinematics are computed from."""
        return np.concatenate([data.qpos, data.mocap_pos.reshape(-1), data.mocap_quat.reshape(-1)])

    def encode(self, model, data, positions: np.ndarray | None = None) -> np.ndarray:
        """The state: ``positions`` (default: :meth:`positions` of ``data``) and the listed RGBA rows of ``model``."""
        parts = [self.positions(data) if positions is None else positions]
        if self.geoms:
            parts.append(model.geom_rgba[list(self.geoms)].reshape(-1))
        if self.materials:
            parts.append(model.mat_rgba[list(self.materials)].reshape(-1))
        return np.concatenate(parts).astype(np.float64, copy=False)

    def decode_into(self, model, data, state: np.ndarray) -> None:
        """Writes ``state`` into ``model`` and ``data`` (call ``mj_forward`` next)."""
        nq, nm = self.nq, self.nmocap
        data.qpos[:] = state[:nq]
        data.mocap_pos[:] = state[nq : nq + 3 * nm].reshape(nm, 3)
        data.mocap_quat[:] = state[nq + 3 * nm : nq + 7 * nm].reshape(nm, 4)
        start = nq + 7 * nm
        if self.geoms:
            model.geom_rgba[list(self.geoms)] = state[start : start + 4 * len(self.geoms)].reshape(-1, 4)
            start += 4 * len(self.geoms)
        if self.materials:
            model.mat_rgba[list(self.materials)] = state[start : start + 4 * len(self.materials)].reshape(-1, 4)


def _arrays(model) -> dict[str, np.ndarray]:
    out = {}
    for name in dir(model):
        if name.startswith("_"):
            continue
        try:
            value = getattr(model, name)
        except Exception:  # noqa: BLE001 (properties that need arguments or are not readable)
            continue
        if isinstance(value, np.ndarray):
            out[name] = value
    return out


def visual_settings(model) -> dict[tuple[str, str], Any]:
    """Every field of ``model.vis``'s sub-structs (``global_``, ``quality``, ...), copied.

    Examples:
        >>> import mujoco
        >>> model = mujoco.MjModel.from_xml_string("<mujoco><worldbody/></mujoco>")
        >>> visual_settings(model)[("quality", "offsamples")]
        4
    """
    out = {}
    for group in _VIS_GROUPS:
        struct = getattr(model.vis, group)
        for name in dir(struct):
            if name.startswith("_"):
                continue
            value = getattr(struct, name)
            if callable(value):
                continue
            out[(group, name)] = np.array(value) if isinstance(value, np.ndarray) else value
    return out


def model_patch(live, fresh) -> dict[str, np.ndarray]:
    """The model arrays where ``live`` differs from ``fresh`` (the same XML compiled anew), copied from ``live``.

    Raises:
        ValueError: an array has another shape in ``fresh``: not the model ``live`` was compiled from.

    Examples:
        >>> import mujoco
        >>> xml = "<mujoco><worldbody><geom size='.1'/></worldbody></mujoco>"
        >>> live, fresh = mujoco.MjModel.from_xml_string(xml), mujoco.MjModel.from_xml_string(xml)
        >>> live.geom_rgba[0, 3] = 0.5
        >>> sorted(model_patch(live, fresh))
        ['geom_rgba']
    """
    theirs = _arrays(fresh)
    patch = {}
    for name, value in _arrays(live).items():
        other = theirs.get(name)
        if other is None or other.shape != value.shape:
            raise ValueError(f"model_patch: the model's {name} has shape {value.shape}, the recompiled one "
                             f"{None if other is None else other.shape}: not the model the env was built from.")
        if not np.array_equal(value, other, equal_nan=True):
            patch[name] = value.copy()
    return patch


def apply_model_patch(model, patch: dict[str, np.ndarray], vis: dict[tuple[str, str], Any]) -> None:
    """Writes :func:`model_patch`'s arrays and :func:`visual_settings` into ``model``."""
    for name, value in patch.items():
        getattr(model, name)[...] = value
    for (group, name), value in vis.items():
        struct = getattr(model.vis, group)
        if isinstance(value, np.ndarray):
            getattr(struct, name)[...] = value
        elif getattr(struct, name) != value:
            setattr(struct, name, value)


#: Renderers holding GL contexts, closed at exit: before EGL is torn down (``mujoco.egl`` terminates its display
#: at exit; a context's finaliser would run after that and fail).
_OPEN: weakref.WeakSet = weakref.WeakSet()


def _close_open_renderers() -> None:
    for renderer in list(_OPEN):
        renderer.close()


def _track(renderer: MujocoStateRenderer) -> None:
    if not _OPEN:  # registered after the GL backend's own exit handler, so it runs before it
        atexit.unregister(_close_open_renderers)
        atexit.register(_close_open_renderers)
    _OPEN.add(renderer)


class MujocoStateRenderer:
    """ψ for a MuJoCo env: draws the frames the env renders from the states it writes (:class:`StateLayout`).

    A :class:`~vlmrb_torchrl.StateRenderer`. Subclasses say how the env renders (:meth:`_make_context`,
    :meth:`_render`); this class rebuilds the env's model where it renders (its XML, compiled, then the
    patch: :func:`model_patch`, :func:`visual_settings`), sets each state, runs ``mj_forward`` and
    renders it. Model, data and context are built once per calling thread, never pickled.

    The last ``cache_frames`` frames drawn are kept by their state's bytes: a scoring call draws each
    frame its clips show once, but overlapping clips scored in consecutive calls (``clip_stride`` below
    ``clip_len``) show some frames again, and a MuJoCo frame costs tens of ms on a CPU where a lookup costs
    microseconds. A frame is a function of its state, so the cache changes no pixel.

    Args:
        xml (str): the XML the env's model was compiled from.
        patch (dict): :func:`model_patch` of the env's live model against that XML compiled anew.
        vis (dict): :func:`visual_settings` of the env's live model.
        layout (StateLayout): the states' layout.
        frame_shape (tuple of int): ``(H, W, 3)`` of a frame.

    Keyword Args:
        cache_frames (int): frames kept by state (``0``: none). Defaults to ``256`` (6 MB of 64x128 frames).
    """

    state_key = FRAME_STATE_KEY

    def __init__(self, xml: str, patch: dict[str, np.ndarray], vis: dict[tuple[str, str], Any], layout: StateLayout,
                 frame_shape: tuple[int, int, int], *, cache_frames: int = 256) -> None:
        self.cache_frames = int(cache_frames)
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self.xml = xml
        self.patch = patch
        self.vis = vis
        self.layout = layout
        self.frame_shape = tuple(int(n) for n in frame_shape)
        self._contexts: dict[int, Any] = {}
        self._lock = threading.Lock()

    @property
    def state_size(self) -> int:
        """Numbers in one state."""
        return self.layout.size

    def _assets(self) -> dict[str, bytes] | None:
        """The XML's assets (meshes, textures) where its files are not named by path. Defaults to ``None``."""
        return None

    def _make_context(self, model) -> Any:
        """What :meth:`_render` needs to draw (its data included), built in the calling thread."""
        raise NotImplementedError

    def _render(self, context: Any) -> np.ndarray:
        """One frame of the state set in ``context``'s data: uint8 :attr:`frame_shape`."""
        raise NotImplementedError

    def _data(self, context: Any):
        """``context``'s ``mujoco.MjData``."""
        raise NotImplementedError

    def _close_context(self, context: Any) -> None:
        """Frees ``context``'s GL resources. Defaults to nothing."""

    def close(self) -> None:
        """Frees the GL contexts built so far (the next call builds them anew)."""
        with self._lock:
            contexts, self._contexts = list(self._contexts.values()), {}
        for _, context in contexts:
            try:
                self._close_context(context)
            except Exception:  # noqa: BLE001 (a context of a thread that is gone, or EGL already torn down)
                pass

    def build_model(self):
        """The env's model, rebuilt here: the XML compiled, then the patch."""
        import mujoco

        model = mujoco.MjModel.from_xml_string(self.xml, self._assets() or {})
        apply_model_patch(model, self.patch, self.vis)
        return model

    def _context(self) -> tuple[Any, Any]:
        key = threading.get_ident()
        with self._lock:
            entry = self._contexts.get(key)
        if entry is None:
            model = self.build_model()
            entry = (model, self._make_context(model))
            with self._lock:
                self._contexts[key] = entry
            _track(self)
        return entry

    def __call__(self, states: torch.Tensor) -> torch.Tensor:
        """uint8 ``[N, H, W, 3]`` frames of ``[N, state_size]`` states."""
        import mujoco

        array = states.detach().cpu().numpy().astype(np.float64, copy=False).reshape(len(states), self.state_size)
        frames = np.empty((len(array), *self.frame_shape), dtype=np.uint8)
        keys = [state.tobytes() for state in array]
        with self._lock:
            missing = []
            for i, key in enumerate(keys):
                cached = self._cache.get(key)
                if cached is None:
                    missing.append(i)
                else:
                    self._cache.move_to_end(key)
                    frames[i] = cached
        if missing:
            model, context = self._context()
            data = self._data(context)
            for i in missing:
                self.layout.decode_into(model, data, array[i])
                mujoco.mj_forward(model, data)
                frames[i] = self._render(context)
            if self.cache_frames > 0:
                with self._lock:
                    for i in missing:
                        self._cache[keys[i]] = frames[i].copy()
                    while len(self._cache) > self.cache_frames:
                        self._cache.popitem(last=False)
        return torch.from_numpy(frames)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_contexts": {}, "_lock": None, "_cache": OrderedDict()}  # rebuilt where it renders

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(state_size={self.state_size}, frame_shape={self.frame_shape})"
