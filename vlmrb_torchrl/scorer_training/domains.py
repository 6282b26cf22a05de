"""What the training tool needs to know about one environment: a :class:`Domain`, and the build recipe.

The tool (:mod:`~vlmrb_torchrl.scorer_training.train`) is the same for every environment: it
tokenises the domain's wordings, balances batches over its statements, trains with the
every-true-caption-beats-every-false-one loss and saves the model. A domain supplies the rest:

- ``generate(n_frames, seed)``: captioned frames, rendered exactly as the recipe's scorer sees them;
- ``statements()`` / ``true_statements(state)`` / ``wordings(statement)`` / ``vocabulary()``: the
  statements a state makes true (every other one is false in it: the loss's exact negatives);
- ``questions``: frame-level validation (groups of mutually exclusive statements);
- ``balanced(statement)``: which statements weight a frame in the balanced sampling;
- ``held_out`` (optional): frames of tasks never trained on, for transfer metrics;
- the model card's description and ``training.json``'s recipe fields;
- ``default_config``: the shipped model's recipe.

The domains live with their env families (``vlmrb_torchrl/envs/<family>/domain.py``, named in the
family's record): ``"minigrid"`` and ``"minigrid_agent"`` (``builtin:minigrid``, ``builtin:minigrid_agent``),
``"lift"`` and ``"lift_hand"`` (robosuite Lift, ``builtin:lift``), ``"atari"`` (Pong and Breakout,
``builtin:atari``) and ``"scene"`` (OGBench Scene, ``builtin:scene``); :data:`DOMAINS` lists them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BuildConfig", "Domain", "DOMAINS", "FrameCacheError", "FrameSet", "Statement", "get_domain", "library_versions",
           "save_frames", "load_frames", "table_vocabulary", "table_wordings"]

#: A statement a frame's state makes true or false: a tuple of words (``("holds", "red", "key")``).
Statement = tuple[str, ...]


@dataclasses.dataclass
class FrameSet:
    """Frames and their states.

    Attributes:
        frames (list of np.ndarray): uint8 ``[H, W, 3]`` frames as the env renders them.
        states (list): the state shown by each frame (the domain's state class, e.g. ``MiniGridState``).
        layout (np.ndarray): int64 ``[N]``, index of the frame's layout in ``layouts``.
        episode (np.ndarray): int64 ``[N]``, a global episode number.
        layouts (list of str): env ids.
    """

    frames: list[np.ndarray]
    states: list[Any]
    layout: np.ndarray
    episode: np.ndarray
    layouts: list[str]

    def __len__(self) -> int:
        return len(self.frames)


@dataclasses.dataclass
class BuildConfig:
    """What a build does (recorded in ``training.json`` and the model card).

    The defaults are the shipped MiniGrid model's recipe; each :class:`Domain` has its own
    ``default_config`` (``vlmrb build-scorer NAME`` starts from it).

    Attributes:
        frames (int): training + validation frames generated.
        steps (int): optimisation steps (batches).
        batch_size (int): frames per batch.
        lr (float): peak AdamW learning rate (linear warm-up over 5% of steps, cosine decay).
        seed (int): seeds data, initialisation, batches and captions.
        size (str): a key of :data:`~vlmrb_torchrl.scorer_training.model.MODEL_SIZES`.
        val_share (float): share of episodes held out for validation.
        held_out_frames (int): frames of the domain's held-out tasks (MiniGrid:
            :data:`~vlmrb_torchrl.envs.minigrid.training.HELD_OUT_LAYOUTS`, never trained on)
            generated for the transfer metrics (0 = skip; domains without held-out tasks skip it).
        eval_every (int): steps between validation passes.
        minutes (float or None): stop training after this many minutes (breaks determinism
            across machines of different speed).
        statement_texts (int or None): besides each frame's caption, every step embeds one
            wording of every statement seen in training (``None``), or of this many of them,
            drawn without replacement, rare statements first (MiniGrid's ~700 statements make
            the text tower the step's cost otherwise).
        aux_weight (float): weight of an auxiliary loss on the image tower alone: a linear head on
            the image embedding answers each validation question (cross-entropy over its exclusive
            options, on the frames where one is true, summed over the questions); the head is
            dropped after training. ``0``
            (the default): the contrastive loss alone. Where the cues are a few pixels (Atari's
            score digits), neither tower separates them at initialisation, so the contrastive
            loss sees no signal on either side and stays at constant predictions; the head gives
            the image tower one, and the text tower then aligns to it.
        device (str): where the model trains: ``"cpu"`` (the default: one thread, byte-identical
            weights for a seed), ``"cuda"`` / ``"cuda:N"``, or ``"auto"`` (a GPU if torch sees one).
            A GPU's arithmetic is not bit-identical to the CPU's: the weights then differ slightly.
        augment (bool): mirror the training frames: each frame of a batch is flipped by each of the
            domain's :attr:`Domain.symmetries` with probability 1/2, and its statements are mapped
            with the flip (MiniGrid: left-right and up-down; "the agent is in the left room"
            becomes "... the right room" under a left-right flip). Where every training layout
            puts the goal in the same corner, the model can answer "where is the goal" from where
            the agent is; mirrored frames leave it the goal tile to look at. Validation and held-out
            frames are not flipped. Defaults to ``False`` (the batches of earlier builds).
        opposite_texts (int): frames of each batch whose caption is followed by a wording of one
            of its true statements and one of that statement's :attr:`Domain.opposites` ("the
            agent faces the red ball" and "the agent does not face the red ball"), so that the
            decision a check makes is trained on every step. A frame's caption names its rarer
            statements; a complement true in most frames is otherwise almost never a text of the
            step, and a check against it ("go to X": faces X vs does not face X) then scores
            whatever the untrained text lands on. Defaults to ``0`` (none: the batches of
            earlier builds).
    """

    frames: int = 120_000
    steps: int = 2000
    batch_size: int = 128
    lr: float = 2e-3
    seed: int = 0
    size: str = "small"
    val_share: float = 0.03
    held_out_frames: int = 3_000
    eval_every: int = 200
    minutes: float | None = None
    statement_texts: int | None = None
    aux_weight: float = 0.0
    device: str = "cpu"
    augment: bool = False
    opposite_texts: int = 0


@dataclasses.dataclass(frozen=True)
class Domain:
    """One environment's frames, statements and model-card text (see the module docstring).

    Attributes:
        name (str): the name in ``vlmrb build-scorer NAME`` and ``builtin:NAME``.
        generate (callable): ``(n_frames, seed) -> FrameSet``.
        statements (callable): ``() -> list`` of every statement, in a fixed order.
        true_statements (callable): ``state -> frozenset`` of the statements true in it.
        wordings (callable): ``statement -> tuple`` of sentences (the first is canonical).
        vocabulary (callable): ``() -> list`` of the tokenizer's words.
        questions (mapping): validation question name -> mutually exclusive statements.
        balanced (callable): ``statement -> bool``: whether it weights frames in balanced sampling.
        default_config (BuildConfig): the shipped model's recipe.
        describe (callable): ``FrameSet -> dict`` of recipe fields for ``training.json``.
        versions (callable): ``() -> dict`` of library versions for ``training.json``.
        card_title (str), card_intro (callable), card_data (callable), card_validation (str):
            the model card's title, description and data paragraphs (``report -> str``) and
            what the validation episodes are.
        held_out (callable or None): ``(n_frames, seed) -> FrameSet`` of tasks never trained on.
        parallel (bool): ``generate`` takes a third argument, ``workers``: processes that play the
            episodes (the frames do not depend on it). Defaults to ``False``.
        frames_tag (str): what the frames' look depends on beyond the seed (camera, rendering), in the
            frame cache's file name, so that a cache of other frames is not read. Defaults to ``""``.
        symmetries (tuple): the image flips that keep a frame a frame of the domain, as
            ``(axis, statement -> statement)`` pairs, ``axis`` ``"horizontal"`` (a left-right flip) or
            ``"vertical"`` (up-down), the function giving what a true statement becomes in the
            flipped frame (:attr:`BuildConfig.augment`). Defaults to ``()``: none (gravity, a
            score display or a fixed camera give the frames an orientation).
        opposites (callable or None): ``statement -> tuple`` of the statements a prompt check
            weighs it against (:attr:`BuildConfig.opposite_texts`). Defaults to ``None``.
    """

    name: str
    generate: Callable[[int, int], FrameSet]
    statements: Callable[[], Sequence[Statement]]
    true_statements: Callable[[Any], frozenset]
    wordings: Callable[[Statement], tuple[str, ...]]
    vocabulary: Callable[[], Sequence[str]]
    questions: Mapping[str, tuple[Statement, ...]]
    balanced: Callable[[Statement], bool]
    default_config: BuildConfig
    describe: Callable[[FrameSet], dict[str, Any]]
    versions: Callable[[], dict[str, str]]
    card_title: str
    card_intro: Callable[[dict], str]
    card_data: Callable[[dict], str]
    card_validation: str = ""
    held_out: Callable[[int, int], FrameSet] | None = None
    parallel: bool = False
    frames_tag: str = ""
    symmetries: tuple[tuple[str, Callable[[Statement], Statement]], ...] = ()
    opposites: Callable[[Statement], tuple[Statement, ...]] | None = None


def library_versions(*names: str) -> dict[str, str]:
    """The versions a build records in ``training.json``: torch, transformers, the simulator's libraries
    ``names`` (their ``__version__``, else their installed distribution's), then Python.

    Examples:
        >>> list(library_versions("numpy"))
        ['torch', 'transformers', 'numpy', 'python']
    """
    import importlib.metadata
    import platform

    out = {}
    for name in ("torch", "transformers", *names):
        version = getattr(importlib.import_module(name), "__version__", None)
        out[name] = version if isinstance(version, str) else importlib.metadata.version(name)
    out["python"] = platform.python_version()
    return out


def table_wordings(table: Mapping[Statement, tuple[str, ...]], statement: Statement, domain: str) -> tuple[str, ...]:
    """The sentences of ``table`` that say ``statement`` (the first is the canonical one, used in prompts);
    a ``ValueError`` naming the ``domain`` for a statement it does not have."""
    try:
        return table[statement]
    except KeyError:
        raise ValueError(f"unknown {domain} statement {statement!r}") from None


def table_vocabulary(table: Mapping[Statement, tuple[str, ...]], extra: Iterable[str] = ()) -> list[str]:
    """The words of every wording of ``table`` (plus ``extra`` sentences, and "and", which joins a caption's
    statements), sorted: a tokenizer's vocabulary.

    Examples:
        >>> table_vocabulary({("held",): ("the cube is held",)}, ["A lid"])
        ['a', 'and', 'cube', 'held', 'is', 'lid', 'the']
    """
    words = {w for texts in table.values() for text in texts for w in text.split()}
    words |= {w for text in extra for w in text.lower().split()}
    words.add("and")
    return sorted(words)


def _state_classes() -> dict[str, str]:
    """The frame states a cache may hold, from the env families' records (class name -> module): nothing else is
    rebuilt from a cache file."""
    from vlmrb_torchrl.envs.family import families

    return {name: module for family in families() for name, module in family.frame_states.items()}


def save_frames(data: FrameSet, path: str | Path) -> None:
    """Writes a :class:`FrameSet` to ``path`` (``.npz``: the frames' pixels as one flat uint8 array and their
    shapes, frames of different sizes included (MiniGrid's grids differ); the states as JSON).

    Examples:
        >>> import tempfile
        >>> from vlmrb_torchrl.envs.robosuite.policies import LiftState
        >>> data = FrameSet([np.zeros((2, 2, 3), np.uint8)], [LiftState(True, False, False, False)],
        ...                 np.zeros(1, np.int64), np.zeros(1, np.int64), ["Lift"])
        >>> path = Path(tempfile.mkdtemp()) / "frames.npz"
        >>> save_frames(data, path)
        >>> load_frames(path).states
        [LiftState(gripper_open=True, near=False, grasped=False, lifted=False)]
        >>> data.frames.append(np.ones((1, 3, 3), np.uint8)); data.states.append(data.states[0])
        >>> save_frames(FrameSet(data.frames, data.states, np.zeros(2, np.int64), np.arange(2), ["Lift"]), path)
        >>> [f.shape for f in load_frames(path).frames]
        [(2, 2, 3), (1, 3, 3)]
    """
    states = [[type(s).__name__, [getattr(s, f.name) for f in dataclasses.fields(s)]] for s in data.states]
    unknown = sorted({name for name, _ in states} - set(_state_classes()))
    if unknown:
        raise TypeError(f"save_frames: states of type {', '.join(unknown)} cannot be cached (known: "
                        f"{', '.join(_state_classes())}).")
    np.savez(path, pixels=np.concatenate([f.reshape(-1) for f in data.frames]),
             shapes=np.asarray([f.shape for f in data.frames], dtype=np.int64), layout=data.layout, episode=data.episode,
             layouts=np.asarray(data.layouts), states_json=np.frombuffer(json.dumps(states).encode(), dtype=np.uint8))


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


class FrameCacheError(ValueError):
    """A frame cache file (``vlmrb build-scorer --cache``) that cannot be used: the message names it and says to
    delete it to rebuild."""


def load_frames(path: str | Path, *, frames: int | None = None) -> FrameSet:
    """Reads what :func:`save_frames` wrote, without pickle: a cache directory from elsewhere cannot run code.

    Everything is checked before it is used: the arrays a cache holds, their shapes against each other (every
    frame's pixels, one state, layout and episode per frame), the states' types (only the families' ``frame_states``)
    and fields, and, with ``frames``, the number of frames.

    Raises:
        FrameCacheError: the file is not a frame cache of this format (an older one held pickled states), or it
            is damaged or crafted; the message names it and says to delete it to rebuild.
    """
    import importlib

    def damaged(why: str) -> FrameCacheError:
        return FrameCacheError(f"frame cache {path} is {why}; delete it to rebuild (the build generates the frames "
                               "again).")

    try:
        cache = np.load(path, allow_pickle=False)
    except Exception as err:  # noqa: BLE001 - a truncated zip, not a zip, unreadable: the file is not usable
        raise damaged(f"unreadable ({type(err).__name__}: {str(err)[:200]})") from None
    with cache as f:
        if "states_json" not in f.files:
            raise damaged("not a frame cache of this version (no states_json)")
        try:
            states, known = [], _state_classes()
            for name, values in json.loads(f["states_json"].tobytes()):
                if name not in known:
                    raise ValueError(f"unknown state type {name!r}")
                cls = getattr(importlib.import_module(known[name]), name)
                if not isinstance(values, list) or len(values) != len(dataclasses.fields(cls)):
                    raise ValueError(f"a {name} with {len(values) if isinstance(values, list) else values!r} fields")
                states.append(cls(*(_tuples(v) for v in values)))
            pixels, shapes = f["pixels"], f["shapes"]
            layout, episode, layouts = f["layout"], f["episode"], [str(x) for x in f["layouts"]]
            if pixels.dtype != np.uint8 or pixels.ndim != 1:
                raise ValueError(f"pixels of dtype {pixels.dtype} and {pixels.ndim} dimensions (uint8, 1 expected)")
            if shapes.ndim != 2 or shapes.shape[1] != 3 or shapes.dtype.kind not in "iu" or (shapes <= 0).any():
                raise ValueError(f"frame shapes {shapes.shape} of dtype {shapes.dtype}")
            sizes = shapes.prod(1)
            if int(sizes.sum()) != len(pixels):
                raise ValueError(f"{len(pixels)} pixel values for frames of {int(sizes.sum())}")
            if not len(states) == len(shapes) == len(layout) == len(episode):
                raise ValueError(f"{len(shapes)} frames, {len(states)} states, {len(layout)} layout and "
                                 f"{len(episode)} episode entries")
            if len(layout) and (layout.min() < 0 or layout.max() >= len(layouts)):
                raise ValueError(f"layout indices outside the {len(layouts)} layouts")
            if frames is not None and len(shapes) != frames:
                raise ValueError(f"{len(shapes)} frames where its name says {frames}")
            frame_list = [pixels[end - n: end].reshape(shape) for end, n, shape in zip(np.cumsum(sizes), sizes, shapes)]
        except Exception as err:  # noqa: BLE001 - whatever a crafted or damaged file makes fail, it is not usable
            raise damaged(f"damaged ({type(err).__name__}: {str(err)[:200]})") from None
        return FrameSet(frame_list, states, layout, episode, layouts)


class _Domains(Mapping):
    """``vlmrb build-scorer`` name -> the factory of its :class:`Domain`, from the env families' records (read when
    asked: a family registered at run time adds its domains)."""

    def _table(self) -> dict[str, Callable[[], Domain]]:
        from vlmrb_torchrl.envs.family import families, load

        return {name: _Factory(path, load) for family in families() for name, path in family.training_domains.items()}

    def __getitem__(self, name: str) -> Callable[[], Domain]:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


class _Factory:
    """A domain factory named by import path, imported when called (each imports its simulator lazily)."""

    def __init__(self, path: str, load: Callable[[str], Any]) -> None:
        self.path, self._load = path, load

    def __call__(self) -> Domain:
        return self._load(self.path)()


#: The domains ``vlmrb build-scorer NAME`` trains on, by name: each env family's (its ``training_domains``),
#: built on demand.
DOMAINS: Mapping[str, Callable[[], Domain]] = _Domains()


def get_domain(name: str) -> Domain:
    """The domain called ``name`` (``"minigrid"``, ``"minigrid_agent"``, ``"lift"``, ``"lift_hand"``, ``"atari"``,
    ``"scene"``, or a registered family's).

    Examples:
        >>> get_domain("minigrid").default_config.frames
        120000
    """
    domains = DOMAINS
    if name not in domains:
        raise ValueError(f"Unknown scorer domain {name!r}: use one of {sorted(domains)}.")
    return domains[name]()
