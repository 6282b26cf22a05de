"""MiniGrid environments for VLM-RB: symbolic observations for the agent, frames for the VLM.

The agent sees MiniGrid's partial egocentric view as a one-hot vector; the scorer sees a
low-resolution RGB rendering of the *full* grid. Privileged progress events (first key
pickup, first door opening, goal reached) are exposed for the oracle scorer used in
ablations.

gymnasium and minigrid are optional dependencies, imported when an env is built:
``pip install 'vlmrb-torchrl[minigrid]'``.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from vlmrb_torchrl._signature import init_signature
from vlmrb_torchrl.envs._base import FRAME_STATE_KEY, step_output
from vlmrb_torchrl.envs.minigrid.missions import MISSION_BYTES, Mission, MissionTracker, encode_mission, parse_mission

__all__ = ["MiniGridEnv", "BatchedMiniGridEnv", "BatchedMiniGridCollector", "make_minigrid_env", "MINIGRID_EVENT_KEYS",
           "DOORKEY_ACTIONS", "FRAME_VIEWS", "OBSERVATION_ENCODINGS", "OBSERVATION_VIEWS", "GridFrame", "grid_frame_layout",
           "minigrid_has_doors", "minigrid_missions", "register_extra_envs", "FRAME_STATE_KEY", "MiniGridStateRenderer"]

_has_minigrid = (
    importlib.util.find_spec("minigrid") is not None
    and importlib.util.find_spec("gymnasium") is not None
)

MISSING_MINIGRID = (
    "MiniGrid environments need gymnasium and minigrid, which are not installed: "
    "pip install 'vlmrb-torchrl[minigrid]'"
)

#: Boolean per-step event entries written by :class:`MiniGridEnv` (``("next", key)`` in
#: collector data). ``"progress_event"`` is ``"subgoal"`` or ``"success"`` when the mission
#: parses, else the OR of the others (see :class:`MiniGridEnv`).
MINIGRID_EVENT_KEYS = (
    "key_picked_up",
    "door_opened",
    "goal_reached",
    "success",
    "subgoal",
    "progress_event",
)
_FLAG_KEYS = (*MINIGRID_EVENT_KEYS, "terminated", "truncated", "done")
#: The encodings of ``"observation"`` (``MiniGridEnv(observation=...)``).
OBSERVATION_ENCODINGS = ("onehot", "indices")
#: What ``"observation"`` shows (``MiniGridEnv(view=...)``): MiniGrid's egocentric partial view, or
#: the fully observed state (the whole grid, the agent's position and direction, what it carries).
OBSERVATION_VIEWS = ("partial", "full", "both")
#: What ``"pixels"`` shows: ``"grid"``, the whole grid from above; ``"agent"``, MiniGrid's agent-centred
#: ``V x V`` view (the agent at the bottom centre, facing up: the cell it faces is always the one above it).
FRAME_VIEWS = ("grid", "agent")

# FRAME_STATE_KEY (from envs._base): where ``MiniGridEnv(render="state")`` writes each step's frame state
# (:class:`MiniGridStateRenderer` draws the frame from it where the scorer runs).

#: The actions DoorKey needs. Dropping ``drop`` and ``done`` (no-ops there) lifts a random
#: policy's success on DoorKey-5x5 from ~6% to ~22% of episodes, which is what makes
#: epsilon-greedy DQN find the goal early.
DOORKEY_ACTIONS = ("left", "right", "forward", "pickup", "toggle")


class GridFrame(NamedTuple):
    """Where a whole-grid frame puts the grid (:func:`grid_frame_layout`): ``tile``-px cells, a
    ``height x width`` frame, the grid's top-left corner at pixel ``(top, left)``; the pixels around it
    are black."""

    tile: int
    height: int
    width: int
    top: int
    left: int


def grid_frame_layout(grid_width: int, grid_height: int, frame_size: int = 64) -> GridFrame:
    """The layout of a ``frame_view="grid"`` frame of a ``grid_width x grid_height`` grid.

    Cells are ``max(4, frame_size // max(grid_width, grid_height))`` px and the frame is the grid
    itself, except on a square grid where that gives 5-px cells (11x11 and 12x12 at ``frame_size=64``:
    DoorKey-12x12, LavaCrossing / SimpleCrossing S11N5, MemoryS11, BabyAI OneRoomS12): there the cells
    are 4 px and the grid sits in the middle of a black ``frame_size x frame_size`` frame, its top-left
    corner on a multiple of 4 px.

    Why: scorers resize every frame to their input size, so a 60-px frame of 12x12 reaches a 64-px
    model as 5.3-px cells, a scale the shipped grid model (``builtin:minigrid``) never saw: it was
    trained on 4-px cells (16x16) and 8-12 px ones (DoorKey 5x5-8x8), and its goal check scored F1
    0.03 on 12x12. A 48-px grid on a 64-px frame is not resized: its cells are 16x16's, on 16x16's cell
    lattice (docs/builtin_scorer.md, the goal-only prompt set). Black is what a 4-px floor cell is.
    Every other grid's frame is what this rule gave before (tested, pixel for pixel).

    Examples:
        >>> grid_frame_layout(8, 8), grid_frame_layout(5, 5)
        (GridFrame(tile=8, height=64, width=64, top=0, left=0), GridFrame(tile=12, height=60, width=60, top=0, left=0))
        >>> grid_frame_layout(12, 12), grid_frame_layout(11, 11)
        (GridFrame(tile=4, height=64, width=64, top=8, left=8), GridFrame(tile=4, height=64, width=64, top=8, left=8))
        >>> grid_frame_layout(11, 6)  # UnlockPickup: not square, unchanged
        GridFrame(tile=5, height=30, width=55, top=0, left=0)
    """
    tile = max(4, frame_size // max(grid_width, grid_height))
    if tile == 5 and grid_width == grid_height:
        # on 16x16's lattice: each 8-px patch of the model sees 2x2 whole cells, as in its training frames
        margin = (frame_size - 4 * grid_width) // 2 // 4 * 4
        return GridFrame(4, frame_size, frame_size, margin, margin)
    return GridFrame(tile, grid_height * tile, grid_width * tile, 0, 0)


@functools.lru_cache(maxsize=1024)
def _parsed_mission(text: str) -> Mission | None:
    # missions repeat across episodes (most envs have a handful): parse each string once
    return parse_mission(text)


def _import_minigrid():
    if not _has_minigrid:
        raise ImportError(MISSING_MINIGRID)
    import gymnasium
    import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
    from minigrid.core import constants

    register_extra_envs()
    return gymnasium, constants


#: Ids this package registers with gymnasium on top of minigrid's own: DoorKey-12x12, a grid size
#: the VLM-RB paper evaluates that minigrid does not register (it has 5, 6, 8 and 16), with the
#: standard DoorKey dynamics (``max_steps = 10 * size**2``).
EXTRA_ENV_IDS = {"MiniGrid-DoorKey-12x12-v0": ("minigrid.envs:DoorKeyEnv", {"size": 12})}


def register_extra_envs() -> list[str]:
    """Registers :data:`EXTRA_ENV_IDS` with gymnasium (idempotent); returns the ids registered by this call.

    Called whenever this module builds an env, so the ids work wherever MiniGrid ids are accepted
    (the recipes, :class:`BatchedMiniGridEnv`, the scorer benchmarks and the scorer training); call
    it yourself before ``gymnasium.make`` on them in your own code.

    Examples:
        >>> import gymnasium
        >>> _ = register_extra_envs()
        >>> env = gymnasium.make("MiniGrid-DoorKey-12x12-v0")
        >>> env.unwrapped.width, env.unwrapped.max_steps
        (12, 1440)
    """
    if not _has_minigrid:
        raise ImportError(MISSING_MINIGRID)
    import gymnasium

    added = []
    for env_id, (entry_point, kwargs) in EXTRA_ENV_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point, kwargs=kwargs)
            added.append(env_id)
    return added


class _OneHotEncoder:
    """Vectorised one-hot encoding of MiniGrid's ``[V, V, 3]`` symbolic view + direction."""

    def __init__(self, view_size: int, n_objects: int, n_colors: int, n_states: int) -> None:
        self.n_channels = n_objects + n_colors + n_states
        self.n_cells = view_size * view_size
        self.dim = self.n_cells * self.n_channels + 4
        # flat index of the "1" of each of the 3 channels of each cell
        self._offsets = (
            np.arange(self.n_cells, dtype=np.int64)[:, None] * self.n_channels
            + np.array([0, n_objects, n_objects + n_colors], dtype=np.int64)
        )
        self._dir_offset = self.n_cells * self.n_channels

    @property
    def n_active(self) -> int:
        """Ones in every encoding: 3 per cell (object, colour, state) and the direction."""
        return self.n_cells * 3 + 1

    def indices(self, image: np.ndarray, direction: int) -> np.ndarray:
        """Positions of the ones of :meth:`__call__`'s vector, cell by cell, then the direction's (int16)."""
        out = np.empty(self.n_active, dtype=np.int16)
        out[:-1] = (self._offsets + image.reshape(self.n_cells, 3)).ravel()
        out[-1] = self._dir_offset + direction
        return out

    def __call__(self, image: np.ndarray, direction: int) -> np.ndarray:
        out = np.zeros(self.dim, dtype=np.float32)
        out[self._offsets + image.reshape(self.n_cells, 3)] = 1.0
        out[self._dir_offset + direction] = 1.0
        return out


class _GridWatcher:
    """Tells whether a MiniGrid grid's cells may encode (or occlude) differently than at the last call.

    Re-encoding every cell at every step costs a Python call per cell (~70 us on a 16x16 grid); the
    cells change only when an object is placed, removed or moved (the grid's list of objects
    changes: compared element by element by identity, in C) or when an object whose class has its
    own ``encode`` or ``see_behind`` changes state (a door opens: those few objects are re-read at
    every call). Encoders re-encode the grid only when :meth:`changed` says so.
    """

    def __init__(self) -> None:
        self._grid = None
        self._cells: list = []
        self._stateful: list = []

    def changed(self, grid) -> bool:
        cells = grid.grid
        if grid is self._grid and cells == self._cells and all(
                obj.encode() == code and obj.see_behind() == see for obj, code, see in self._stateful):
            return False
        from minigrid.core.world_object import Wall, WorldObj

        static_see = (WorldObj.see_behind, Wall.see_behind)
        self._grid, self._cells = grid, list(cells)
        self._stateful = [(obj, obj.encode(), obj.see_behind()) for obj in cells if obj is not None and (
            type(obj).encode is not WorldObj.encode or type(obj).see_behind not in static_see)]
        return True


class _RowVisibility(dict):
    """MiniGrid's ``Grid.process_vis`` one row of a ``v x v`` view at a time, memoised.

    Row ``j``'s cells visible after both sweeps, and the cells they make visible in row ``j - 1``,
    depend only on the row's cells visible before the sweeps (bits of ``m``) and which of its cells
    can be seen through (bits of ``s``): ``self[m | s << v]`` is that pair of bit masks, computed
    the first time it is asked for (a 7-cell row has at most 16384 cases; larger views stay cheap
    as only the cases met are stored). ``bits[r]`` is row bits ``r`` as booleans (``2**v`` rows: views
    up to :attr:`MAX_VIEW` cells wide). One instance per view size is shared by all envs (:meth:`of`).
    """

    MAX_VIEW = 15

    def __init__(self, v: int) -> None:
        super().__init__()
        self.v = v
        self.bits = ((np.arange(1 << v)[:, None] >> np.arange(v)) & 1).astype(bool)

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def of(v: int) -> _RowVisibility:
        return _RowVisibility(v)

    def __missing__(self, case: int) -> tuple[int, int]:
        v = self.v
        mask, see, up = case & ((1 << v) - 1), case >> v, 0
        for i in range(v - 1):  # left to right
            if mask >> i & 1 and see >> i & 1:
                mask |= 1 << (i + 1)
                up |= 0b11 << i
        for i in range(v - 1, 0, -1):  # right to left
            if mask >> i & 1 and see >> i & 1:
                mask |= 1 << (i - 1)
                up |= 0b11 << (i - 1)
        self[case] = mask, up
        return mask, up


class _FullStateEncoder:
    """One-hot of the fully observed state: every cell of the grid, the agent's position, direction and
    carried object.

    Each cell has an object channel group (MiniGrid's ``OBJECT_TO_IDX``), a colour group
    (``COLOR_TO_IDX``) and a state group (``STATE_TO_IDX``), like the partial view, but *reference-coded*:
    one value of each group has no channel and encodes as all zeros — ``empty`` for the object, ``grey``
    for the colour (MiniGrid gives empty cells colour 0, a filler this encoding treats as grey) and
    ``open`` for the state. A first linear layer represents exactly the same functions either way (the
    reference value's weight moves into the bias), but an empty cell costs no active input and a
    wall only one, so a DoorKey-16x16 state has ~85 ones instead of the 772 of a full one-hot: the
    cost of a :class:`~vlmrb_torchrl.modules.OneHotLinear` layer follows the ones. Then the agent's
    cell (one-hot over the grid), its direction (4) and the carried object's type and colour
    (reference-coded: carrying nothing is all zeros).

    Cells are in ``grid.grid`` order (row-major: ``y * width + x``).
    """

    def __init__(self, width: int, height: int, constants) -> None:
        objects, colors, states = constants.OBJECT_TO_IDX, constants.COLOR_TO_IDX, constants.STATE_TO_IDX
        self.n_cells = width * height

        def channels(table: dict[str, int], reference: str) -> np.ndarray:
            # table value -> channel within the group, -1 for the reference value
            out = np.full(max(table.values()) + 1, -1, dtype=np.int64)
            for i, value in enumerate(v for name, v in sorted(table.items(), key=lambda kv: kv[1]) if name != reference):
                out[value] = i
            return out

        self._obj_ch, self._col_ch, self._state_ch = (channels(objects, "empty"), channels(colors, "grey"),
                                                      channels(states, "open"))
        n_obj, n_col, n_state = len(objects) - 1, len(colors) - 1, len(states) - 1
        self.n_channels = n_obj + n_col + n_state
        # per-channel-group offset inside a cell's block
        self._group = np.array([0, n_obj, n_obj + n_col], dtype=np.int64)
        self._pos_offset = self.n_cells * self.n_channels
        self._dir_offset = self._pos_offset + self.n_cells
        self._carry_obj_offset = self._dir_offset + 4
        self._carry_col_offset = self._carry_obj_offset + n_obj
        self.dim = self._carry_col_offset + n_col
        # at most 3 ones a cell, then position, direction and the carried object's type and colour
        self.max_active = self.n_cells * 3 + 4
        self._cell_base = (np.arange(self.n_cells, dtype=np.int64) * self.n_channels)[:, None] + self._group
        self._wall = objects["wall"], colors["grey"], states["open"]
        self._empty = objects["empty"], colors["grey"], states["open"]
        self._watcher = _GridWatcher()
        self._cell_ones = np.zeros(0, dtype=np.int64)

    def _positions(self, menv) -> np.ndarray:
        """Sorted positions of the ones (int64)."""
        if self._watcher.changed(menv.grid):  # the cells' ones, re-encoded only when a cell changed
            empty, wall = self._empty, self._wall
            codes = np.array(
                [empty if o is None else (wall if o.type == "wall" else o.encode()) for o in menv.grid.grid],
                dtype=np.int64)
            channel = np.stack([self._obj_ch[codes[:, 0]], self._col_ch[codes[:, 1]], self._state_ch[codes[:, 2]]], 1)
            self._cell_ones = (self._cell_base + channel)[channel >= 0]
        ones = self._cell_ones
        ax, ay = int(menv.agent_pos[0]), int(menv.agent_pos[1])
        extra = [self._pos_offset + ay * menv.width + ax, self._dir_offset + int(menv.agent_dir)]
        carrying = menv.carrying
        if carrying is not None:
            obj, col, _ = carrying.encode()
            if self._obj_ch[obj] >= 0:
                extra.append(self._carry_obj_offset + int(self._obj_ch[obj]))
            if self._col_ch[col] >= 0:
                extra.append(self._carry_col_offset + int(self._col_ch[col]))
        return np.concatenate([ones, np.asarray(extra, dtype=np.int64)])

    @property
    def index_dtype(self):
        return np.int16 if self.dim <= np.iinfo(np.int16).max else np.int32

    def indices(self, menv) -> np.ndarray:
        """The positions of the ones, then ``-1`` padding up to :attr:`max_active` (int16; int32 on huge grids)."""
        out = np.full(self.max_active, -1, dtype=self.index_dtype)
        ones = self._positions(menv)
        out[: len(ones)] = ones
        return out

    def __call__(self, menv) -> np.ndarray:
        out = np.zeros(self.dim, dtype=np.float32)
        out[self._positions(menv)] = 1.0
        return out


class _ConcatEncoder:
    """The partial view's one-hot followed by the full state's (``view="both"``): the full state tells
    the agent where everything is; the egocentric view, in its own frame, what is in front of it, which
    a memoryless MLP on the full state alone has to learn as a conjunction of positions and direction
    (on DoorKey-5x5 the full state alone learns several times slower). Indices: the partial view's 148
    positions, then the full state's, shifted past the partial one-hot, padded with -1."""

    def __init__(self, partial: _OneHotEncoder, full: _FullStateEncoder) -> None:
        self.partial, self.full = partial, full
        self.dim = partial.dim + full.dim
        self.max_active = partial.n_active + full.max_active
        self.index_dtype = np.int16 if self.dim <= np.iinfo(np.int16).max else np.int32

    def indices(self, image: np.ndarray, direction: int, menv) -> np.ndarray:
        out = np.full(self.max_active, -1, dtype=self.index_dtype)
        n = self.partial.n_active
        out[:n] = self.partial.indices(image, direction)
        ones = self.full._positions(menv)
        out[n : n + len(ones)] = ones + self.partial.dim
        return out

    def __call__(self, image: np.ndarray, direction: int, menv) -> np.ndarray:
        return np.concatenate([self.partial(image, direction), self.full(menv)])


class _FastPartialView:
    """Drop-in for ``MiniGridEnv.gen_obs`` that returns the identical observation dict, faster.

    MiniGrid builds the egocentric view by slicing the grid into a new ``Grid`` (allocating
    ``Wall`` objects), rotating it ``agent_dir + 1`` times and running ``process_vis`` on numpy
    scalars. This keeps the grid's cell codes and see-through flags in arrays padded with walls
    (what MiniGrid shows outside the grid), re-encoded only when a cell changed
    (:class:`_GridWatcher`), gathers the view with precomputed per-direction index maps and
    computes the occlusion row by row from memoised row cases (:class:`_RowVisibility`). It is
    installed on the raw env instance only when the env class does not override the view code;
    tests check it against ``MiniGridEnv.gen_obs`` on random rollouts.
    """

    def __init__(self, menv) -> None:
        from minigrid.core.world_object import Wall

        self._menv = menv
        v = menv.agent_view_size
        self._v = v
        self._agent_cell = (v // 2) * v + (v - 1)  # view (v//2, v-1), flattened i * v + j
        self._oob = Wall()
        si0, sj0 = np.meshgrid(np.arange(v), np.arange(v), indexing="ij")
        # top-left corner of the sliced window relative to the agent (MiniGrid's get_view_exts)
        tops = {0: (0, -(v // 2)), 1: (-(v // 2), 0), 2: (-v + 1, -(v // 2)), 3: (-(v // 2), -v + 1)}
        self._offsets = []
        for d in range(4):
            si, sj = si0, sj0
            for _ in range(d + 1):  # Grid.rotate_left: new[a, b] = old[v - 1 - b, a]
                si, sj = si[::-1, :].T, sj[::-1, :].T
            self._offsets.append(((si + tops[d][0]).ravel(), (sj + tops[d][1]).ravel()))
        self._rows = _RowVisibility.of(v)
        self._row_weights = 1 << np.arange(v)
        self._watcher = _GridWatcher()
        self._codes = self._see = None
        self._width = 0

    def _encode_grid(self, grid) -> None:
        """The padded cell codes ``[(H + 2v) * (W + 2v), 3]`` and see-through flags."""
        v = self._v
        self._width = grid.width + 2 * v
        codes = np.empty((grid.height + 2 * v, self._width, 3), dtype=np.uint8)
        codes[...] = self._oob.encode()
        see = np.zeros(codes.shape[:2], dtype=bool)
        inner_codes = codes[v : v + grid.height, v : v + grid.width]
        inner_see = see[v : v + grid.height, v : v + grid.width]
        for k, obj in enumerate(grid.grid):  # row-major: k = y * width + x
            y, x = divmod(k, grid.width)
            inner_codes[y, x] = (1, 0, 0) if obj is None else obj.encode()
            inner_see[y, x] = obj is None or obj.see_behind()
        self._codes, self._see = codes.reshape(-1, 3), see.reshape(-1)

    def __call__(self) -> dict:
        menv = self._menv
        v = self._v
        grid = menv.grid
        if self._watcher.changed(grid):
            self._encode_grid(grid)
        d = int(menv.agent_dir)
        offx, offy = self._offsets[d]
        flat = (offy + (int(menv.agent_pos[1]) + v)) * self._width + (offx + (int(menv.agent_pos[0]) + v))
        image = self._codes[flat]  # [v * v, 3], view cell (i, j) at i * v + j
        if not menv.see_through_walls:
            see_rows = (self._row_weights @ self._see[flat].reshape(v, v)).tolist()  # bit i of row j: cell (i, j)
            table, rows, m = self._rows, [0] * v, 1 << (v // 2)  # the agent's cell is visible
            for j in range(v - 1, -1, -1):
                rows[j], m = table[m | (see_rows[j] << v)]
            image[~table.bits[rows].T.reshape(-1)] = 0
        carrying = menv.carrying
        image[self._agent_cell] = carrying.encode() if carrying else (1, 0, 0)
        return {"image": image.reshape(v, v, 3), "direction": menv.agent_dir, "mission": menv.mission}


def _uses_stock_view(menv) -> bool:
    from minigrid.minigrid_env import MiniGridEnv as _Raw

    cls = type(menv)
    return all(getattr(cls, name) is getattr(_Raw, name) for name in ("gen_obs", "gen_obs_grid", "get_view_exts"))


class _FullGridRenderer:
    """Renders the whole grid like ``get_frame(highlight=False)``, without the python pixel loop.

    Tiles come from MiniGrid's own tile renderer (and cache); they are gathered into an atlas
    and assembled with one numpy fancy-index per frame. Output is pixel-identical to
    ``env.unwrapped.get_frame(highlight=False, tile_size=tile_size)``, placed in a larger black frame
    when ``layout`` (a :class:`GridFrame`) says so.
    """

    def __init__(self, tile_size: int, layout: GridFrame | None = None) -> None:
        from minigrid.core.grid import Grid

        self._grid_cls = Grid
        self.tile_size = tile_size
        self.layout = layout
        self._index: dict[Any, int] = {}
        self._tiles: list[np.ndarray] = []
        self._atlas = np.zeros((0, tile_size, tile_size, 3), dtype=np.uint8)
        self._agent_tiles: dict[Any, np.ndarray] = {}

    def _render_tile(self, obj, agent_dir: int | None) -> np.ndarray:
        tile = self._grid_cls.render_tile(obj, agent_dir=agent_dir, highlight=False, tile_size=self.tile_size)
        # MiniGrid's tiles are float (supersampled means); Grid.render casts them on assignment
        return tile.astype(np.uint8)

    def _tile_index(self, obj) -> int:
        key = None if obj is None else obj.encode()
        idx = self._index.get(key)
        if idx is None:
            idx = len(self._tiles)
            self._tiles.append(self._render_tile(obj, None))
            self._index[key] = idx
            self._atlas = np.stack(self._tiles)
        return idx

    def _code_index(self, code: tuple[int, int, int], agent_dir: int | None = None) -> int:
        """The atlas index of the tile of a cell encoded as ``code`` (MiniGrid's ``(type, colour, state)``), with
        the agent on it facing ``agent_dir`` unless that is ``None``."""
        from minigrid.core.world_object import WorldObj

        obj = WorldObj.decode(*code)  # None for an empty cell, whose key is None as in __call__
        key = None if obj is None else obj.encode()
        if agent_dir is None:
            idx = self._index.get(key)
            return self._tile_index(obj) if idx is None else idx
        tile_key = ("agent", key, agent_dir)
        if tile_key not in self._index:
            self._index[tile_key] = len(self._tiles)
            self._tiles.append(self._agent_tile(obj, (key, agent_dir)))
            self._atlas = np.stack(self._tiles)
        return self._index[tile_key]

    def _agent_tile(self, cell, key) -> np.ndarray:
        tile = self._agent_tiles.get(key)
        if tile is None:
            tile = self._agent_tiles[key] = self._render_tile(cell, key[1])
        return tile

    def _placed(self, frames: np.ndarray) -> np.ndarray:
        """``[..., h * t, w * t, 3]`` grid pixels in the layout's frame."""
        lay = self.layout
        if lay is None or (lay.height, lay.width) == frames.shape[-3:-1]:
            return frames
        out = np.zeros((*frames.shape[:-3], lay.height, lay.width, 3), dtype=np.uint8)
        out[..., lay.top : lay.top + frames.shape[-3], lay.left : lay.left + frames.shape[-2], :] = frames
        return out

    def render_codes(self, codes: np.ndarray, agent: np.ndarray, width: int, height: int) -> np.ndarray:
        """``[N, H, W, 3]`` frames of ``N`` states: cell codes ``[N, height * width, 3]`` (row-major, as
        ``grid.grid``) and the agent's ``[N, 3]`` ``(x, y, direction)``; the same pixels as :meth:`__call__`.

        One fancy index for the whole batch: each distinct code (and agent cell) is looked up once.
        """
        n, t = len(codes), self.tile_size
        wide = codes.astype(np.int64)
        keys = (wide[..., 0] << 16) | (wide[..., 1] << 8) | wide[..., 2]  # codes are uint8
        agent = agent.astype(np.int64)
        cell = agent[:, 1] * width + agent[:, 0]
        # the agent's cell: its code and direction, a key no plain cell has (bit 24 set)
        keys[np.arange(n), cell] = (1 << 26) | (agent[:, 2] << 24) | keys[np.arange(n), cell]
        unique, inverse = np.unique(keys, return_inverse=True)
        lut = np.array([self._code_index((int(k) >> 16 & 255, int(k) >> 8 & 255, int(k) & 255),
                                         int(k) >> 24 & 3 if k >> 26 else None) for k in unique], dtype=np.int64)
        frames = (
            self._atlas[lut[inverse.reshape(n, -1)]]
            .reshape(n, height, width, t, t, 3)
            .transpose(0, 1, 3, 2, 4, 5)
            .reshape(n, height * t, width * t, 3)
        )
        return self._placed(frames)

    def __call__(self, env) -> np.ndarray:
        grid = env.grid
        w, h, t = grid.width, grid.height, self.tile_size
        index = self._index
        idx = []
        for obj in grid.grid:  # row-major: j * width + i
            i = index.get(None if obj is None else obj.encode())
            idx.append(self._tile_index(obj) if i is None else i)
        frame = (
            self._atlas[np.asarray(idx, dtype=np.int64)]
            .reshape(h, w, t, t, 3)
            .transpose(0, 2, 1, 3, 4)
            .reshape(h * t, w * t, 3)
        )
        ax, ay = int(env.agent_pos[0]), int(env.agent_pos[1])
        cell = grid.get(ax, ay)
        key = (None if cell is None else cell.encode(), int(env.agent_dir))
        frame[ay * t : (ay + 1) * t, ax * t : (ax + 1) * t] = self._agent_tile(cell, key)
        return self._placed(frame)


class _AgentViewRenderer:
    """Renders MiniGrid's agent-centred view, ``env.get_pov_render(tile_size)``: the agent's ``V x V``
    view rotated so that it faces up, the agent at the bottom centre (drawn over what it carries), the
    cells it sees highlighted. What the agent faces and holds sits at the same pixels in every frame."""

    def __init__(self, tile_size: int) -> None:
        self.tile_size = tile_size

    def __call__(self, env) -> np.ndarray:
        return np.asarray(env.get_pov_render(self.tile_size), dtype=np.uint8)


#: The code MiniGrid's ``Grid.encode`` gives an empty cell (and the state gives "carrying nothing").
_EMPTY_CODE = (1, 0, 0)


class _FrameStateEncoder:
    """Writes the state a :class:`MiniGridStateRenderer` draws a frame from: uint8 ``[H * W * 3 + 6]``.

    The cells' ``(type, colour, state)`` codes in ``grid.grid`` order (row-major), re-encoded only when a
    cell may have changed (:class:`_GridWatcher`), then the agent's ``x, y, direction`` and the code of
    what it carries (:data:`_EMPTY_CODE` for nothing).
    """

    def __init__(self) -> None:
        self._watcher = _GridWatcher()
        self._cells = np.zeros(0, dtype=np.uint8)

    def __call__(self, menv) -> np.ndarray:
        if self._watcher.changed(menv.grid):
            self._cells = np.array([_EMPTY_CODE if o is None else o.encode() for o in menv.grid.grid],
                                   dtype=np.uint8).reshape(-1)
        carrying = menv.carrying
        tail = (int(menv.agent_pos[0]), int(menv.agent_pos[1]), int(menv.agent_dir),
                *(carrying.encode() if carrying is not None else _EMPTY_CODE))
        return np.concatenate([self._cells, np.asarray(tail, dtype=np.uint8)])


@functools.lru_cache(maxsize=1)
def _state_view_class():
    """A stand-in for a MiniGrid env holding only what ``get_pov_render`` reads (the grid, the agent, what it
    carries, the view's size and occlusion): MiniGrid's own view code runs on it, unchanged."""
    from minigrid.minigrid_env import MiniGridEnv as _Raw

    class _StateView:
        get_view_exts = _Raw.get_view_exts
        gen_obs_grid = _Raw.gen_obs_grid
        get_pov_render = _Raw.get_pov_render

        def __init__(self, grid, agent_pos, agent_dir, carrying, agent_view_size, see_through_walls) -> None:
            self.grid, self.agent_pos, self.agent_dir, self.carrying = grid, agent_pos, agent_dir, carrying
            self.agent_view_size, self.see_through_walls = agent_view_size, see_through_walls

    return _StateView


class MiniGridStateRenderer:
    """ψ for MiniGrid: draws the frames a :class:`MiniGridEnv` renders from the states it writes with
    ``render="state"`` (:data:`FRAME_STATE_KEY`), pixel for pixel (tested for every frame view and layout).

    A state is uint8 ``[H * W * 3 + 6]``: every cell's MiniGrid code ``(type, colour, state)`` in row-major
    order, the agent's ``x, y, direction`` and the code of what it carries (``(1, 0, 0)``: nothing), 81
    bytes on DoorKey-5x5 where its frame is 10,800. Cells are drawn as MiniGrid draws the object its code
    decodes to (``WorldObj.decode``), which is what the env's own renderer draws for MiniGrid's objects.
    A :class:`~vlmrb_torchrl.StateRenderer`: get it from :attr:`MiniGridEnv.state_renderer` and give it to
    :func:`~vlmrb_torchrl.make_vlm_replay_buffer` (``renderer=``); it pickles small (its tile caches are
    rebuilt where it renders).

    Args:
        width (int): grid width in cells.
        height (int): grid height in cells.

    Keyword Args:
        tile_size (int): cell size in pixels.
        frame_view (str): ``"grid"`` or ``"agent"`` (:data:`FRAME_VIEWS`).
        layout (GridFrame, optional): where a ``"grid"`` frame puts the grid (:func:`grid_frame_layout`).
        agent_view_size (int): the ``"agent"`` view's size in cells. Defaults to ``7``.
        see_through_walls (bool): whether the ``"agent"`` view ignores occlusion. Defaults to ``False``.

    Examples:
        >>> env = MiniGridEnv("MiniGrid-DoorKey-5x5-v0", seed=0, render="state")
        >>> psi = env.state_renderer
        >>> states = env.reset()[FRAME_STATE_KEY][None]
        >>> states.shape, psi(states).shape, psi.state_key
        (torch.Size([1, 81]), torch.Size([1, 60, 60, 3]), 'frame_state')
        >>> frame = MiniGridEnv("MiniGrid-DoorKey-5x5-v0", seed=0, render=True).reset()["pixels"]
        >>> bool((psi(states)[0] == frame).all())  # the frame render=True writes
        True
    """

    state_key = FRAME_STATE_KEY

    def __init__(self, width: int, height: int, *, tile_size: int, frame_view: str = "grid",
                 layout: GridFrame | None = None, agent_view_size: int = 7, see_through_walls: bool = False) -> None:
        if frame_view not in FRAME_VIEWS:
            raise ValueError(f"MiniGridStateRenderer.frame_view must be one of {FRAME_VIEWS}, got {frame_view!r}.")
        self.width, self.height, self.tile_size = int(width), int(height), int(tile_size)
        self.frame_view = frame_view
        self.layout = layout
        self.agent_view_size = int(agent_view_size)
        self.see_through_walls = bool(see_through_walls)
        self._grid_renderer: _FullGridRenderer | None = None
        self._objects: dict[tuple[int, int, int], Any] = {}

    @property
    def state_size(self) -> int:
        """Bytes of one state: ``H * W * 3 + 6``."""
        return self.width * self.height * 3 + 6

    def __call__(self, states: torch.Tensor) -> torch.Tensor:
        """uint8 ``[N, H', W', 3]`` frames of ``[N, state_size]`` states."""
        array = states.detach().cpu().numpy().astype(np.uint8, copy=False).reshape(len(states), self.state_size)
        n_cells = self.width * self.height
        codes = array[:, : n_cells * 3].reshape(len(array), n_cells, 3)
        agent = array[:, n_cells * 3 :]
        if self.frame_view == "grid":
            if self._grid_renderer is None:
                _import_minigrid()
                self._grid_renderer = _FullGridRenderer(self.tile_size, self.layout)
            frames = self._grid_renderer.render_codes(codes, agent[:, :3], self.width, self.height)
        else:
            frames = np.stack([self._pov(c, a) for c, a in zip(codes, agent)])
        return torch.from_numpy(np.ascontiguousarray(frames))

    def _object(self, code) -> Any:
        key = tuple(int(c) for c in code)
        if key not in self._objects:  # objects are only read while drawing: one per code is enough
            from minigrid.core.world_object import WorldObj

            self._objects[key] = WorldObj.decode(*key)
        return self._objects[key]

    def _pov(self, codes: np.ndarray, agent: np.ndarray) -> np.ndarray:
        _import_minigrid()
        from minigrid.core.grid import Grid

        grid = Grid(self.width, self.height)
        grid.grid = [self._object(code) for code in codes]
        view = _state_view_class()(grid, (int(agent[0]), int(agent[1])), int(agent[2]), self._object(agent[3:6]),
                                   self.agent_view_size, self.see_through_walls)
        return np.asarray(view.get_pov_render(self.tile_size), dtype=np.uint8)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_grid_renderer": None, "_objects": {}}  # caches: rebuilt where it renders

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(width={self.width}, height={self.height}, tile_size={self.tile_size}, "
                f"frame_view={self.frame_view!r})")


@init_signature
class MiniGridEnv(EnvBase):
    """TorchRL environment for any MiniGrid task, with rendered frames and progress events.

    The agent observes MiniGrid's partial egocentric ``V x V`` symbolic view (``V`` = the env's
    ``agent_view_size``, 7 by default), one-hot encoded per cell, plus a one-hot of the agent's
    direction — or, with ``view="full"``, the fully observed state. A low-resolution RGB frame of the *full* grid (what a VLM scorer sees) is
    rendered every step when ``render=True``. The env steps the raw MiniGrid env directly (no
    gymnasium wrapper stack), so it works with any ``MiniGrid-*`` or ``BabyAI-*`` id.

    Args:
        env_id (str): a registered MiniGrid id. Defaults to ``"MiniGrid-DoorKey-5x5-v0"``.

    Keyword Args:
        seed (int, optional): seed of the first reset (see :meth:`set_seed`). Defaults to ``None``.
        render (bool or str, optional): write ``"pixels"`` every step; ``"state"``: write, in its place,
            the few bytes the frame is drawn from (:data:`FRAME_STATE_KEY`, uint8 ``[H * W * 3 + 6]``), which
            :attr:`state_renderer` turns into the same pixels where the scorer runs. Defaults to ``True``.
        frame_size (int, optional): target frame width/height in pixels. Tiles are
            ``max(4, frame_size // max(grid_width, grid_height))`` px, so a frame is
            ``[grid_height * tile, grid_width * tile, 3]`` (DoorKey-5x5: 60x60, 8x8 and 16x16:
            64x64), except where that gives 5-px tiles on a square grid (12x12, 11x11 at 64): 4-px
            tiles in the middle of a black ``frame_size x frame_size`` frame (:func:`grid_frame_layout`
            says why). With ``frame_view="agent"``: ``max(4, frame_size // V)`` px tiles, a
            ``[V * tile, V * tile, 3]`` frame (63x63 for a 7x7 view). Defaults to ``64``.
        frame_view (str, optional): what the frame shows (:data:`FRAME_VIEWS`): ``"grid"``, the
            whole grid from above, or ``"agent"``, MiniGrid's agent-centred ``V x V`` view (the
            agent at the bottom centre facing up, what it carries drawn under it; the cells it
            sees highlighted): what the agent faces, holds and has next to it is always at the same
            pixels, at the same scale on every grid size; the rest of the grid is not shown (the
            scorer ``builtin:minigrid_agent`` reads these frames). Defaults to ``"grid"``.
        max_episode_steps (int, optional): truncate episodes after this many steps, on top of
            MiniGrid's own ``max_steps`` (e.g. ``10 * size**2`` for DoorKey), which also
            truncates and sets the success-reward scale. Defaults to ``None``.
        device (torch.device, optional): device of the specs and outputs. Defaults to ``"cpu"``.
        env_kwargs (dict, optional): extra keyword arguments for ``gymnasium.make`` (e.g.
            ``{"max_steps": 100}`` or ``{"agent_view_size": 5}``). Defaults to ``None``.
        fast_obs (bool, optional): compute MiniGrid's partial view with an equivalent
            re-implementation of ``gen_obs`` (~30 us instead of 80-140 us per step; identical
            output, checked in the tests). Envs that override the view code, and views wider
            than 15 cells, always use MiniGrid's own. Defaults to ``True``.
        actions (sequence of str, optional): the subset of MiniGrid action names the agent
            may take, in the order of the categorical action (e.g. :data:`DOORKEY_ACTIONS`).
            Defaults to ``None``: all of MiniGrid's actions.
        observation (str, optional): how ``"observation"`` encodes the view: ``"onehot"`` (the
            float vector below) or ``"indices"`` (int16 ``[V * V * 3 + 1]``: the positions of that
            vector's ones, 148 for a 7x7 view — the same information in 15x fewer bytes, read by
            :class:`~vlmrb_torchrl.modules.OneHotLinear`; the spec is ``Bounded(0, D - 1)`` with
            ``D`` the one-hot size). Defaults to ``"onehot"``.
        view (str, optional): what the observation shows: ``"partial"`` (MiniGrid's egocentric
            ``V x V`` view, below) or ``"full"``, the fully observed state: every cell of the grid,
            the agent's cell and direction, and what it carries, one-hot with one *reference*
            value per channel group encoded as zeros (an empty cell is all zeros, a wall one
            channel; the same functions for a linear first layer, and far fewer ones). Its size
            is ``W * H * 17 + W * H + 4 + 15`` (DoorKey-16x16: 4627); with ``"indices"`` the
            positions of the ones are padded with ``-1`` to ``3 * W * H + 4`` entries (a state has
            as many ones as it has non-empty cells and walls, plus ~4), and the spec is
            ``Bounded(-1, D - 1)``. Defaults to ``"partial"``.
        write_mission (bool, optional): also write ``"mission"``, the episode's mission string
            as uint8 ``[256]`` (UTF-8, zero-padded: :func:`~vlmrb_torchrl.envs.minigrid.missions.decode_mission`),
            so that clips carry their episode's mission: what ``builtin:minigrid`` reads with
            ``mission_key="mission"`` on envs whose mission changes every episode (BabyAI,
            GoToObject, Fetch, ...). Defaults to ``False``.

    Entries written (all with ``batch_size=[]``; under ``"next"`` after a step):

    - ``"observation"``: float32 ``[V * V * C + 4]``, ``C = len(OBJECT_TO_IDX) +
      len(COLOR_TO_IDX) + len(STATE_TO_IDX) = 11 + 6 + 3 = 20``: cells in the order of
      MiniGrid's ``image[i, j]`` (``i`` outer), each ``[object | colour | state]``, then the
      direction one-hot. 984 inputs for a 7x7 view.
    - ``"pixels"`` (only if ``render=True``): uint8 ``[H, W, 3]`` full-grid RGB frame
      (``get_frame(highlight=False)``, without the agent's view highlight; on 11x11 and 12x12 grids
      in the middle of a black frame: ``env.frame_layout``, :func:`grid_frame_layout`).
    - ``"key_picked_up"``, ``"door_opened"``, ``"goal_reached"``, ``"success"``,
      ``"subgoal"``, ``"progress_event"``: bool ``[1]``, privileged progress events (all
      ``False`` on reset). ``key_picked_up`` fires on the step a key becomes carried,
      ``door_opened`` on the step a door's ``is_open`` flips to ``True``, each only the *first*
      time per episode for a given key/door object (drop + re-pickup, close + reopen do not
      fire again; envs with several doors fire once per door). ``goal_reached``: the agent
      stepped onto a goal tile. ``success``: the episode terminated with a positive reward
      (the task was solved). ``subgoal``: a sub-goal of the episode's mission was reached for
      the first time (:class:`~vlmrb_torchrl.envs.minigrid.missions.MissionTracker`: the
      mission's own go to / pick up / open / put next to / reach the goal, in the mission's
      order, and the sub-goals its layout implies: the doors on the way to a target and the
      keys of locked ones); never when the mission does not parse
      (:func:`~vlmrb_torchrl.envs.minigrid.missions.parse_mission`). ``progress_event`` is what
      ``oracle:minigrid`` labels: ``subgoal`` or ``success`` when the mission parses, else the
      OR of the four others. On DoorKey (one key, one locked door, the goal: "use the key to
      open the door and then get to the goal") both are the first key pickup, the first door
      opening and the goal.
    - ``"reward"`` float32 ``[1]`` (MiniGrid's ``1 - 0.9 * step_count / max_steps`` on
      success, else 0), ``"done"``, ``"terminated"``, ``"truncated"`` bool ``[1]``; time limits
      are reported as ``truncated`` (not ``terminated``).

    The action is categorical (int64 scalar, ``Categorical(n=7)``): MiniGrid's full action set
    ``left, right, forward, pickup, drop, toggle, done`` (see :attr:`action_names`), usable as
    is by :class:`~torchrl.modules.QValueActor` and :class:`~torchrl.objectives.DQNLoss`.
    ``actions=`` restricts it to a subset (``Categorical(n=len(actions))``, index ``i`` is
    ``actions[i]``), e.g. :data:`DOORKEY_ACTIONS` without DoorKey's no-ops ``drop`` and ``done``.

    The mission string is not written to the TensorDict; read it from :attr:`mission` (it can
    change at every reset in some envs, e.g. GoToDoor). Batched envs: ``SerialEnv.mission`` is
    a list; on a ``ParallelEnv`` use ``list(env.mission)``.

    .. note:: The one-hot uses MiniGrid's own table sizes (3 door states), so a 7x7 view gives
        984 inputs, not the 1033 (= 49 * 21 + 4, 4 states) of some DoorKey baselines; the
        extra state channel would always be zero. Read the size from
        ``env.observation_spec["observation"].shape``.

    .. note:: The event flags are observation entries, so ``step_mdp`` also carries them to
        the root of the next step (the previous step's flags). Use the ``("next", key)`` entries.

    Examples:
        >>> env = MiniGridEnv("MiniGrid-DoorKey-5x5-v0", seed=0)
        >>> td = env.reset()
        >>> td["observation"].shape, td["pixels"].shape, td["pixels"].dtype
        (torch.Size([984]), torch.Size([60, 60, 3]), torch.uint8)
        >>> env.mission
        'use the key to open the door and then get to the goal'
        >>> td = env.rand_step(td)
        >>> td["next", "progress_event"]
        tensor([False])

        The fully observed state, as the positions of its ones (padded with -1):

        >>> full = MiniGridEnv("MiniGrid-DoorKey-16x16-v0", seed=0, render=False, view="full", observation="indices")
        >>> obs = full.reset()["observation"]
        >>> obs.shape, full.observation_spec["observation"].space.high.max().item() + 1, bool((obs >= 0).sum() < 100)
        (torch.Size([772]), 4627, True)
    """

    def __init__(
        self,
        env_id: str = "MiniGrid-DoorKey-5x5-v0",
        *,
        seed: int | None = None,
        render: bool | str = True,
        frame_size: int = 64,
        max_episode_steps: int | None = None,
        device: torch.device | str | None = "cpu",
        env_kwargs: dict | None = None,
        fast_obs: bool = True,
        actions: Sequence[str] | None = None,
        observation: str = "onehot",
        view: str = "partial",
        write_mission: bool = False,
        frame_view: str = "grid",
    ) -> None:
        gymnasium, constants = _import_minigrid()
        if observation not in OBSERVATION_ENCODINGS:
            raise ValueError(f"MiniGridEnv.observation must be one of {OBSERVATION_ENCODINGS}, got {observation!r}.")
        if view not in OBSERVATION_VIEWS:
            raise ValueError(f"MiniGridEnv.view must be one of {OBSERVATION_VIEWS}, got {view!r}.")
        if not isinstance(frame_size, int) or frame_size < 1:
            raise ValueError(f"MiniGridEnv.frame_size must be an int >= 1, got frame_size={frame_size!r}.")
        if frame_view not in FRAME_VIEWS:
            raise ValueError(f"MiniGridEnv.frame_view must be one of {FRAME_VIEWS}, got {frame_view!r}.")
        if max_episode_steps is not None and (not isinstance(max_episode_steps, int) or max_episode_steps < 1):
            raise ValueError(
                "MiniGridEnv.max_episode_steps must be None or an int >= 1, "
                f"got max_episode_steps={max_episode_steps!r}."
            )
        super().__init__(device=device, batch_size=torch.Size([]))
        if render not in (True, False, "state"):
            raise ValueError(f"MiniGridEnv.render must be True, False or 'state', got render={render!r}.")
        self.env_id = env_id
        self.from_pixels = render is True
        self.from_state = render == "state"
        self.frame_size = frame_size
        self.frame_view = frame_view
        self.max_episode_steps = max_episode_steps
        self.observation = observation
        self.view = view
        self.write_mission = bool(write_mission)
        self._mission_codes: dict[str, np.ndarray] = {}
        self._env_kwargs = dict(env_kwargs or {})
        try:
            self._gym_env = gymnasium.make(env_id, **self._env_kwargs)
        except gymnasium.error.Error as err:
            raise ValueError(
                f"MiniGridEnv could not make env_id={env_id!r}: {err}. Pass a registered "
                "MiniGrid id such as 'MiniGrid-DoorKey-5x5-v0'."
            ) from err
        menv = self._gym_env.unwrapped
        from minigrid.minigrid_env import MiniGridEnv as _RawMiniGridEnv

        if not isinstance(menv, _RawMiniGridEnv):
            raise ValueError(f"MiniGridEnv needs a MiniGrid env id, got env_id={env_id!r} ({type(menv).__name__}).")
        self._menv = menv
        all_names = [a.name for a in menv.actions]
        names = list(all_names if actions is None else actions)
        unknown = [a for a in names if a not in all_names]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(
                f"MiniGridEnv.actions={actions!r} is invalid: expected distinct names from {all_names}."
            )
        self._action_names = names
        self._action_values = [int(menv.actions[a]) for a in names]
        # MiniGrid's step()/reset() call self.gen_obs(): swap in the identical, faster version; the
        # full view reads the grid itself, so MiniGrid's partial view is not computed at all
        self.fast_obs = bool(fast_obs) and _uses_stock_view(menv) and menv.agent_view_size <= _RowVisibility.MAX_VIEW
        partial_view = _OneHotEncoder(
            menv.agent_view_size,
            len(constants.OBJECT_TO_IDX),
            len(constants.COLOR_TO_IDX),
            len(constants.STATE_TO_IDX),
        )
        if view == "partial":
            self._encoder = partial_view
        else:
            full_state = _FullStateEncoder(menv.width, menv.height, constants)
            self._encoder = full_state if view == "full" else _ConcatEncoder(partial_view, full_state)
        if view == "full":
            if _uses_stock_view(menv):
                menv.gen_obs = lambda: {"direction": menv.agent_dir, "mission": menv.mission}
        elif self.fast_obs:
            menv.gen_obs = _FastPartialView(menv)
        if frame_view == "agent":
            self.frame_layout = None
            self.tile_size = max(4, frame_size // menv.agent_view_size)
            self._renderer = _AgentViewRenderer(self.tile_size) if self.from_pixels else None
        else:
            self.frame_layout = grid_frame_layout(menv.width, menv.height, frame_size)
            self.tile_size = self.frame_layout.tile
            self._renderer = _FullGridRenderer(self.tile_size, self.frame_layout) if self.from_pixels else None
        if self.from_state and self.state_renderer is None:
            raise ValueError(f"MiniGridEnv(render='state', frame_view='agent') needs MiniGrid's own view code; "
                             f"{type(menv).__name__} overrides it: use render=True.")
        self._state_encoder = _FrameStateEncoder() if self.from_state else None
        self._pending_seed: int | None = None
        self._elapsed = 0
        self._doors: list = []
        self._door_was_open: list[bool] = []
        self._opened_doors: set[int] = set()
        self._picked_keys: set[int] = set()
        self._goal_reached = False
        self._tracker: MissionTracker | None = None
        self._make_specs(menv)
        if seed is not None:
            self.set_seed(seed)

    # ------------------------------------------------------------------ specs
    def _make_specs(self, menv) -> None:
        flag = Categorical(n=2, shape=(1,), dtype=torch.bool, device=self.device)
        if self.observation == "indices" and self.view != "partial":
            dtype = torch.int16 if self._encoder.index_dtype == np.int16 else torch.int32
            view = Bounded(-1, self._encoder.dim - 1, shape=(self._encoder.max_active,), dtype=dtype,
                           device=self.device)
        elif self.observation == "indices":
            view = Bounded(0, self._encoder.dim - 1, shape=(self._encoder.n_active,), dtype=torch.int16,
                           device=self.device)
        else:
            view = Bounded(0.0, 1.0, shape=(self._encoder.dim,), dtype=torch.float32, device=self.device)
        obs = {"observation": view}
        if self.from_pixels:
            if self.frame_view == "agent":
                h = w = menv.agent_view_size * self.tile_size
            else:
                h, w = self.frame_layout.height, self.frame_layout.width
            obs["pixels"] = Bounded(0, 255, shape=(h, w, 3), dtype=torch.uint8, device=self.device)
        if self.from_state:
            obs[FRAME_STATE_KEY] = Bounded(0, 255, shape=(menv.width * menv.height * 3 + 6,), dtype=torch.uint8,
                                           device=self.device)
        if self.write_mission:
            obs["mission"] = Bounded(0, 255, shape=(MISSION_BYTES,), dtype=torch.uint8, device=self.device)
        for key in MINIGRID_EVENT_KEYS:
            obs[key] = flag.clone()
        self.observation_spec = Composite(obs, shape=(), device=self.device)
        self.action_spec = Categorical(n=len(self._action_values), shape=(), dtype=torch.int64, device=self.device)
        self.reward_spec = Unbounded(shape=(1,), dtype=torch.float32, device=self.device)
        self.done_spec = Composite(
            done=flag.clone(), terminated=flag.clone(), truncated=flag.clone(), shape=(), device=self.device
        )

    # ------------------------------------------------------------ attributes
    @property
    def mission(self) -> str:
        """The current mission string of the underlying MiniGrid env (set at each reset)."""
        return self._menv.mission

    @property
    def state_renderer(self) -> MiniGridStateRenderer | None:
        """ψ: the :class:`MiniGridStateRenderer` that draws this env's frames from the states it writes with
        ``render="state"`` (whatever ``render`` it was built with); ``None`` where it cannot (the ``"agent"``
        view of an env with its own view code)."""
        menv = self._menv
        if self.frame_view == "agent" and not _uses_stock_view(menv):
            return None
        return MiniGridStateRenderer(menv.width, menv.height, tile_size=self.tile_size, frame_view=self.frame_view,
                                     layout=self.frame_layout, agent_view_size=menv.agent_view_size,
                                     see_through_walls=bool(menv.see_through_walls))

    @property
    def mission_tracker(self) -> MissionTracker | None:
        """The episode's :class:`~vlmrb_torchrl.envs.minigrid.missions.MissionTracker` (its parsed mission,
        the sub-goals the layout implies); ``None`` before the first reset or when the mission does not parse."""
        return self._tracker

    @property
    def action_names(self) -> list[str]:
        """Names of the categorical actions, by index."""
        return list(self._action_names)

    @property
    def unwrapped(self):
        """The raw ``minigrid.minigrid_env.MiniGridEnv`` (grid, agent position, carried object)."""
        return self._menv

    # ------------------------------------------------------------------ core
    def _set_seed(self, seed: int | None) -> None:
        # applied at the next reset: reset(seed=s) reproduces gymnasium's reset(seed=s) layout,
        # later resets continue the seeded RNG stream deterministically.
        self._pending_seed = None if seed is None else int(seed)

    def _obs(self, obs: dict) -> np.ndarray:
        if self.view == "full":
            return self._encoder.indices(self._menv) if self.observation == "indices" else self._encoder(self._menv)
        if self.view == "both":
            encode = self._encoder.indices if self.observation == "indices" else self._encoder
            return encode(obs["image"], int(obs["direction"]), self._menv)
        if self.observation == "indices":
            return self._encoder.indices(obs["image"], int(obs["direction"]))
        return self._encoder(obs["image"], int(obs["direction"]))

    def _arrays(self, obs: dict) -> dict[str, np.ndarray]:
        """The observation entries of the current state as arrays (``"observation"``, ``"pixels"``)."""
        out = {"observation": self._obs(obs)}
        if self._renderer is not None:
            out["pixels"] = self._renderer(self._menv)
        elif self._state_encoder is not None:
            out[FRAME_STATE_KEY] = self._state_encoder(self._menv)
        if self.write_mission:
            mission = self._menv.mission
            code = self._mission_codes.get(mission)
            if code is None:
                code = self._mission_codes[mission] = encode_mission(mission)
            out["mission"] = code
        return out

    def _scan_doors(self) -> None:
        self._doors = [o for o in self._menv.grid.grid if o is not None and o.type == "door"]
        self._door_was_open = [bool(d.is_open) for d in self._doors]
        self._opened_doors = set()
        self._picked_keys = set()
        self._goal_reached = False
        mission = _parsed_mission(self._menv.mission)
        self._tracker = None if mission is None else MissionTracker(mission)
        if self._tracker is not None:
            self._tracker.reset(self._menv)

    def _output(self, arrays: dict[str, np.ndarray], flags: list[bool], reward: float | None) -> TensorDictBase:
        # flags: the MINIGRID_EVENT_KEYS values, then terminated, truncated, done
        return step_output({key: torch.from_numpy(value) for key, value in arrays.items()}, _FLAG_KEYS, flags, reward,
                           self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        return self._output(self._reset_arrays(), [False] * len(_FLAG_KEYS), None)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._output(*self._step_arrays(int(tensordict.get("action"))))

    def _reset_arrays(self) -> dict[str, np.ndarray]:
        """Resets the raw env (with the pending seed); the first observation's arrays."""
        seed, self._pending_seed = self._pending_seed, None
        obs, _ = self._menv.reset(seed=seed)
        self._elapsed = 0
        self._scan_doors()
        return self._arrays(obs)

    def _step_arrays(self, action_index: int) -> tuple[dict[str, np.ndarray], list[bool], float]:
        """One step of action ``action_index``: the observation's arrays, the flags (:data:`MINIGRID_EVENT_KEYS`,
        then terminated, truncated, done) and the reward. :class:`BatchedMiniGridEnv` stacks these."""
        menv = self._menv
        action = self._action_values[action_index]
        carried_before = menv.carrying
        obs, reward, terminated, truncated, _ = menv.step(action)
        terminated, truncated = bool(terminated), bool(truncated)
        self._elapsed += 1
        if self.max_episode_steps is not None and self._elapsed >= self.max_episode_steps:
            truncated = True

        # privileged events: each key / door fires only the first time in the episode
        key_picked = False
        carrying = menv.carrying
        if carrying is not None and carrying is not carried_before and carrying.type == "key":
            if id(carrying) not in self._picked_keys:
                self._picked_keys.add(id(carrying))
                key_picked = True
        door_opened = False
        for i, door in enumerate(self._doors):
            is_open = bool(door.is_open)
            if is_open and not self._door_was_open[i] and i not in self._opened_doors:
                self._opened_doors.add(i)
                door_opened = True
            self._door_was_open[i] = is_open
        goal = False
        if not self._goal_reached:
            cell = menv.grid.get(*menv.agent_pos)
            if cell is not None and cell.type == "goal":
                goal = self._goal_reached = True
        success = terminated and reward > 0
        if self._tracker is None:
            subgoal, progress = False, key_picked or door_opened or goal or success
        else:
            subgoal = self._tracker.step()
            progress = subgoal or success
        flags = [key_picked, door_opened, goal, success, subgoal, progress, terminated, truncated,
                 terminated or truncated]
        return self._arrays(obs), flags, float(reward)

    def close(self, *, raise_if_closed: bool = True) -> None:
        gym_env = self.__dict__.get("_gym_env")
        if gym_env is not None:
            gym_env.close()
        super().close(raise_if_closed=raise_if_closed)

    def __repr__(self) -> str:
        render = "'state'" if self.from_state else self.from_pixels
        return f"{type(self).__name__}(env_id={self.env_id!r}, render={render}, device={self.device})"


@init_signature
class BatchedMiniGridEnv(EnvBase):
    """``num_envs`` :class:`MiniGridEnv` copies stepped together in one env of ``batch_size=[num_envs]``.

    The same data as ``SerialEnv(num_envs, lambda: MiniGridEnv(env_id, **kwargs))`` — the same
    observations, frames, flags and rewards step for step, the same per-copy seeds from
    :meth:`set_seed` (checked in the tests) — built as one TensorDict per step from stacked
    NumPy arrays instead of one TensorDict per copy that ``SerialEnv`` then stacks: ~6x less
    overhead per step, which is most of a small DQN's collection time. Copies that are done are
    reset through TorchRL's partial-reset protocol (``"_reset"``), as in any batched env.

    Args:
        num_envs (int): env copies.
        env_id (str): a registered MiniGrid id.
        **kwargs: :class:`MiniGridEnv`'s keyword arguments (``render``, ``actions``,
            ``observation``, ...), the same for every copy; ``seed`` seeds the copies as
            :meth:`set_seed` does.

    Attributes:
        envs (list[MiniGridEnv]): the copies (``envs[i].unwrapped`` is copy ``i``'s raw MiniGrid env).

    Examples:
        >>> env = BatchedMiniGridEnv(4, "MiniGrid-DoorKey-5x5-v0", render=False, observation="indices")
        >>> _ = env.set_seed(0)
        >>> rollout = env.rollout(3)
        >>> rollout.batch_size, rollout["next", "observation"].shape, rollout["next", "observation"].dtype
        (torch.Size([4, 3]), torch.Size([4, 3, 148]), torch.int16)
    """

    def __init__(self, num_envs: int, env_id: str = "MiniGrid-DoorKey-5x5-v0", **kwargs: Any) -> None:
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"BatchedMiniGridEnv.num_envs must be an int >= 1, got num_envs={num_envs!r}.")
        seed = kwargs.pop("seed", None)
        device = kwargs.pop("device", "cpu")
        self.envs = [MiniGridEnv(env_id, device="cpu", **kwargs) for _ in range(num_envs)]
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        self.env_id = env_id
        self.num_envs = num_envs
        first = self.envs[0]
        self.observation_spec = first.observation_spec.expand(num_envs).to(self.device)
        self.action_spec = first.action_spec.expand(num_envs).to(self.device)
        self.reward_spec = first.reward_spec.expand(num_envs, *first.reward_spec.shape).to(self.device)
        self.done_spec = first.done_spec.expand(num_envs).to(self.device)
        self._last: list[dict[str, np.ndarray]] = [{} for _ in self.envs]
        if seed is not None:
            self.set_seed(seed)

    @property
    def mission(self) -> list[str]:
        """Each copy's mission string."""
        return [env.mission for env in self.envs]

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds the copies in turn as ``SerialEnv.set_seed`` does (each copy gets the seed the previous
        one returned) and returns the next seed."""
        for env in self.envs:
            seed = env.set_seed(seed, static_seed=static_seed)
        return seed

    def _set_seed(self, seed: int | None) -> None:  # set_seed seeds the copies itself
        raise NotImplementedError

    def _batch(self, arrays: list[dict[str, np.ndarray]], flags: np.ndarray, rewards: list[float] | None):
        out = {key: torch.from_numpy(np.stack([a[key] for a in arrays])) for key in arrays[0]}
        flags_t = torch.from_numpy(flags).unsqueeze(-1)
        out.update(zip(_FLAG_KEYS, flags_t.unbind(1)))
        if rewards is not None:
            out["reward"] = torch.tensor(rewards, dtype=torch.float32).unsqueeze(-1)
        td = TensorDict(out, batch_size=self.batch_size)
        return td if self.device is None or self.device.type == "cpu" else td.to(self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        reset = tensordict.get("_reset", None) if tensordict is not None else None
        which = range(self.num_envs) if reset is None else reset.reshape(self.num_envs).nonzero().flatten().tolist()
        for i in which:
            self._last[i] = self.envs[i]._reset_arrays()
        # copies not reset keep their current data: TorchRL takes only the reset rows of this output
        return self._batch(self._last, np.zeros((self.num_envs, len(_FLAG_KEYS)), dtype=bool), None)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        steps = [env._step_arrays(a) for env, a in zip(self.envs, tensordict.get("action").tolist())]
        self._last = [arrays for arrays, _, _ in steps]
        return self._batch(self._last, np.array([flags for _, flags, _ in steps], dtype=bool),
                           [reward for _, _, reward in steps])

    def close(self, *, raise_if_closed: bool = True) -> None:
        for env in self.__dict__.get("envs", []):
            env.close(raise_if_closed=False)
        super().close(raise_if_closed=raise_if_closed)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, env_id={self.env_id!r}, device={self.device})"


class BatchedMiniGridCollector:
    """TorchRL's ``Collector`` over a :class:`BatchedMiniGridEnv`, stepping the copies' arrays: the same batches, faster.

    Yields what ``Collector(env, policy, frames_per_batch=..., total_frames=...)`` yields —
    ``[num_envs, frames_per_batch // num_envs]`` TensorDicts (time dimension named ``"time"``) with
    the policy's outputs, the observations, the flags at the root and under ``"next"``, the rewards
    and ``("collector", "traj_ids")`` — value for value, drawing the same random numbers (tested
    against TorchRL's collector). Per step, TorchRL's collector runs the policy's TensorDict
    modules, ``EnvBase.step_and_maybe_reset`` (step, ``step_mdp``, partial reset) and its own
    bookkeeping on TensorDicts, ~4x the time of the MiniGrid steps themselves; this calls the
    policy on the observation tensor (``policy.act``), steps the copies' arrays and builds one
    TensorDict per batch.

    Args:
        env (BatchedMiniGridEnv): the env copies, seeded (``env.set_seed``); reset here.
        policy: a TensorDict policy with ``act(observation) -> {"action": ..., ...}`` computing its
            outputs on a ``[num_envs, *obs]`` tensor, exploring as under ``ExplorationType.RANDOM``
            (e.g. :class:`~vlmrb_torchrl.recipes.dqn.EGreedyQPolicy`). Parameters are read at each
            step: there are no weights to sync.

    Keyword Args:
        frames_per_batch (int): frames per batch, a multiple of ``env.num_envs``.
        total_frames (int): frames to collect (rounded up to whole batches), as ``Collector``'s.

    Like ``Collector`` at construction, it resets the env and calls the policy once on the first
    observations (which draws the same random numbers), and it numbers trajectories from 0 in env
    order, giving a copy the next number when its episode ends.

    Examples:
        >>> from torchrl.data import Categorical
        >>> from torchrl.modules import QValueActor
        >>> from vlmrb_torchrl.modules import OneHotLinear
        >>> from vlmrb_torchrl.recipes.dqn import make_policy
        >>> env = BatchedMiniGridEnv(4, "MiniGrid-DoorKey-5x5-v0", render=False, observation="indices")
        >>> _ = env.set_seed(0)
        >>> qnet = QValueActor(OneHotLinear(env.envs[0]._encoder.dim, 7), in_keys=["observation"],
        ...                    spec=Categorical(7))
        >>> policy = make_policy(qnet, Categorical(7), eps_init=0.5, eps_end=0.5, steps=1)
        >>> collector = BatchedMiniGridCollector(env, policy, frames_per_batch=32, total_frames=64)
        >>> [batch.batch_size for batch in collector]
        [torch.Size([4, 8]), torch.Size([4, 8])]
        >>> collector.shutdown()
    """

    def __init__(self, env: BatchedMiniGridEnv, policy: Any, *, frames_per_batch: int, total_frames: int) -> None:
        if frames_per_batch % env.num_envs:
            raise ValueError(f"BatchedMiniGridCollector.frames_per_batch={frames_per_batch} must be a multiple of "
                             f"num_envs={env.num_envs}.")
        if not callable(getattr(policy, "act", None)):
            raise TypeError("BatchedMiniGridCollector needs a policy with act(observation) (e.g. EGreedyQPolicy); "
                            "use torchrl.collectors.Collector for other policies.")
        if env.device is not None and env.device.type != "cpu":
            raise ValueError(f"BatchedMiniGridCollector steps CPU arrays; got an env on {env.device}.")
        self.env = env
        self.policy = policy
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self._frames = 0
        n = env.num_envs
        self._arrays = [copy._reset_arrays() for copy in env.envs]  # each copy's current observation arrays
        self._flags = np.zeros((n, len(_FLAG_KEYS)), dtype=bool)  # the flags at the root (step_mdp's)
        self._traj_ids = np.arange(n, dtype=np.int64)
        self._next_traj = n
        # Collector calls the policy once at construction to read its output keys: the same draws here
        self.policy.act(self._observation())

    def _observation(self) -> torch.Tensor:
        return torch.from_numpy(np.stack([arrays["observation"] for arrays in self._arrays]))

    def __iter__(self):
        while self._frames < self.total_frames:
            batch = self.rollout()
            self._frames += batch.numel()
            yield batch

    def rollout(self) -> TensorDictBase:
        """The next batch ``[num_envs, frames_per_batch // num_envs]``."""
        envs, n, steps = self.env.envs, self.env.num_envs, self.frames_per_batch // self.env.num_envs
        keys = list(self._arrays[0])
        root = {key: [] for key in keys}
        nxt = {key: [] for key in keys}
        root_flags, next_flags, rewards, traj_ids = [], [], [], []
        policy_out: dict[str, list[torch.Tensor]] = {}
        for _ in range(steps):
            for key in keys:
                root[key].append(np.stack([arrays[key] for arrays in self._arrays]))
            observation = torch.from_numpy(root["observation"][-1])
            out = self.policy.act(observation)
            for key, value in out.items():
                policy_out.setdefault(key, []).append(value)
            results = [copy._step_arrays(a) for copy, a in zip(envs, out["action"].tolist())]
            for key in keys:
                nxt[key].append(np.stack([arrays[key] for arrays, _, _ in results]))
            flags = np.array([f for _, f, _ in results], dtype=bool)
            root_flags.append(self._flags)
            next_flags.append(flags)
            rewards.append([r for _, _, r in results])
            traj_ids.append(self._traj_ids)
            # step_mdp: the next observation and flags move to the root; copies that are done reset
            self._arrays = [arrays for arrays, _, _ in results]
            self._flags = flags.copy()
            done = np.flatnonzero(flags[:, -1])
            if done.size:
                self._traj_ids = self._traj_ids.copy()
                for i in done.tolist():
                    self._arrays[i] = envs[i]._reset_arrays()
                    self._flags[i] = False
                    self._traj_ids[i] = self._next_traj
                    self._next_traj += 1
        return self._batch(root, nxt, root_flags, next_flags, rewards, traj_ids, policy_out)

    def _batch(self, root, nxt, root_flags, next_flags, rewards, traj_ids, policy_out) -> TensorDictBase:
        def time_stack(arrays):  # [steps] x [n, ...] -> [n, steps, ...]
            return torch.from_numpy(np.stack(arrays, axis=1))

        def flag_entries(flags):  # [n, steps, 1] per flag key
            stacked = torch.from_numpy(np.stack(flags, axis=1)).unsqueeze(-1)
            return dict(zip(_FLAG_KEYS, stacked.unbind(-2)))

        data = {key: time_stack(value) for key, value in root.items()}
        data.update(flag_entries(root_flags))
        data.update({key: torch.stack(value, dim=1) for key, value in policy_out.items()})
        data["collector"] = {"traj_ids": time_stack(traj_ids)}
        next_data = {key: time_stack(value) for key, value in nxt.items()}
        next_data.update(flag_entries(next_flags))
        next_data["reward"] = torch.tensor(rewards, dtype=torch.float32).t().unsqueeze(-1)
        data["next"] = next_data
        n, steps = self.env.num_envs, len(rewards)
        return TensorDict(data, batch_size=[n, steps], names=[None, "time"])

    def update_policy_weights_(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to do: the policy is called in place."""

    def shutdown(self) -> None:
        """Closes the env."""
        if not self.env.is_closed:
            self.env.close()


def make_minigrid_env(
    env_id: str = "MiniGrid-DoorKey-5x5-v0",
    *,
    seed: int | None = None,
    render: bool | str = True,
    frame_size: int = 64,
    max_episode_steps: int | None = None,
    device: torch.device | str | None = "cpu",
    env_kwargs: dict | None = None,
    fast_obs: bool = True,
    actions: Sequence[str] | None = None,
    observation: str = "onehot",
    view: str = "partial",
    write_mission: bool = False,
    frame_view: str = "grid",
) -> MiniGridEnv:
    """Builds a :class:`MiniGridEnv`: symbolic one-hot observations, frames, progress events.

    A module-level function, so ``functools.partial(make_minigrid_env, env_id, seed=...)`` is
    a picklable factory for :class:`~torchrl.envs.ParallelEnv` and
    :class:`~torchrl.collectors.Collector`. No transforms are added; compose
    ``StepCounter``/``RewardSum``/``InitTracker`` yourself when a recipe needs them.

    Args:
        env_id (str): a registered MiniGrid id. Defaults to ``"MiniGrid-DoorKey-5x5-v0"``.

    Keyword Args:
        seed (int, optional): seed of the first reset. Defaults to ``None``.
        render (bool or str, optional): write ``"pixels"`` (full-grid RGB uint8) every step;
            ``"state"``: the state it is drawn from (:class:`MiniGridEnv`). Defaults to ``True``.
        frame_size (int, optional): target frame size in pixels. Defaults to ``64``.
        max_episode_steps (int, optional): extra time limit (reported as ``truncated``).
            Defaults to ``None`` (MiniGrid's own ``max_steps`` only).
        device (torch.device, optional): device of the outputs. Defaults to ``"cpu"``.
        env_kwargs (dict, optional): extra ``gymnasium.make`` keyword arguments.
        fast_obs (bool, optional): use the faster, identical partial-view code. Defaults to
            ``True``.
        actions (sequence of str, optional): the action names the agent may take (e.g.
            :data:`DOORKEY_ACTIONS`). Defaults to ``None`` (all).
        observation (str, optional): ``"onehot"`` (float vector) or ``"indices"`` (the
            positions of its ones, int16). Defaults to ``"onehot"``.
        view (str, optional): ``"partial"`` (the egocentric view) or ``"full"`` (the whole
            grid, the agent's cell and direction, the carried object). Defaults to ``"partial"``.
        write_mission (bool, optional): write the episode's mission (``"mission"``, uint8
            ``[256]``). Defaults to ``False``.
        frame_view (str, optional): ``"grid"`` (the whole grid) or ``"agent"`` (the agent-centred
            view) in ``"pixels"``. Defaults to ``"grid"``.

    Returns:
        MiniGridEnv: see its docstring for the entries written.

    Raises:
        ImportError: gymnasium/minigrid missing (``pip install 'vlmrb-torchrl[minigrid]'``).
        ValueError: unknown ``env_id`` or bad ``frame_size``/``max_episode_steps``.

    Examples:
        >>> from functools import partial
        >>> from torchrl.envs import SerialEnv
        >>> env = SerialEnv(2, partial(make_minigrid_env, "MiniGrid-Empty-5x5-v0", render=False))
        >>> _ = env.set_seed(0)  # returns the next seed
        >>> env.rollout(3)["next", "observation"].shape
        torch.Size([2, 3, 984])
    """
    return MiniGridEnv(
        env_id,
        seed=seed,
        render=render,
        frame_size=frame_size,
        max_episode_steps=max_episode_steps,
        device=device,
        env_kwargs=env_kwargs,
        fast_obs=fast_obs,
        actions=actions,
        observation=observation,
        view=view,
        write_mission=write_mission,
        frame_view=frame_view,
    )


def minigrid_missions(env_id: str, *, seed: int = 0, episodes: int = 8) -> list[str]:
    """The distinct missions of the first ``episodes`` episodes of a MiniGrid / BabyAI env (resets
    with seeds ``seed``, ``seed + 1``, ...), in order of appearance: one when the task is fixed
    (DoorKey), several when it changes every episode (GoToObject, most BabyAI levels).

    Examples:
        >>> minigrid_missions("MiniGrid-DoorKey-5x5-v0")
        ['use the key to open the door and then get to the goal']
        >>> len(minigrid_missions("MiniGrid-GoToObject-6x6-N2-v0")) > 1
        True
    """
    return list(_first_episodes(env_id, seed, episodes)[0])


def minigrid_has_doors(env_id: str, *, seed: int = 0, episodes: int = 8) -> bool:
    """Whether a door is in the layout of any of the first ``episodes`` episodes of a MiniGrid / BabyAI
    env (the resets of :func:`minigrid_missions`). ``False`` tells the mission-reading scorers to leave
    out the door checks a mission only implies (``make_builtin_scorer(doors=False)``): in a single room
    they could only fire on noise.

    Examples:
        >>> minigrid_has_doors("MiniGrid-DoorKey-5x5-v0"), minigrid_has_doors("BabyAI-GoToObjS6-v1")
        (True, False)
    """
    return _first_episodes(env_id, seed, episodes)[1]


@functools.lru_cache(maxsize=32)
def _first_episodes(env_id: str, seed: int, episodes: int) -> tuple[tuple[str, ...], bool]:
    # kept per process: a run asks more than once at start-up (scorer=auto picks the model, then its checks are set)
    env = make_minigrid_env(env_id, render=False)
    try:
        missions, doors = [], False
        for i in range(episodes):
            env.set_seed(seed + i)
            env.reset()
            missions.append(env.mission)
            doors = doors or any(obj is not None and obj.type == "door" for obj in env.unwrapped.grid.grid)
        return tuple(dict.fromkeys(missions)), doors
    finally:
        env.close()
