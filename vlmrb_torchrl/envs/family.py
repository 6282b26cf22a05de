"""Environment families: one record per family, and the registry the rest of the package asks.

What the package knows about a family of environments (MiniGrid, Atari, robosuite, OGBench Scene)
is one :class:`EnvFamily` record, in the family's own folder (``vlmrb_torchrl/envs/<family>/``,
whose ``__init__.py`` holds the record as ``FAMILY``): which env ids it owns, its env factory, its
privileged oracle, its built-in scorers, its scripted policies, the frames its scorers read, what
``vlmrb build-scorer`` trains on it, and the recipe's defaults and checks for it. The recipes,
``scorer=auto``, the oracle specs, ``vlmrb build-scorer`` and the scorer-quality benchmark look
families up here (:func:`family_of`, :func:`get_family`); nothing else tests env-id prefixes.

Families are plugins: this module imports none of them. :data:`FAMILY_MODULES` names the shipped
ones by module, imported at the first lookup; :func:`register_family` adds one at run time.
A record module imports nothing heavy: its env, policies and training code are named by import
path (``"module:attribute"``, :func:`load`) and imported when first used.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import json
import threading
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["EnvFamily", "FAMILY_MODULES", "families", "family_of", "get_family", "load", "register_family",
           "rendered_frames", "unregister_family"]

#: The families that ship with the package, by the module that holds each one's record (its ``FAMILY``).
#: Adding a family is its folder under ``vlmrb_torchrl/envs/`` and one line here.
FAMILY_MODULES: tuple[str, ...] = (
    "vlmrb_torchrl.envs.minigrid",
    "vlmrb_torchrl.envs.atari",
    "vlmrb_torchrl.envs.robosuite",
    "vlmrb_torchrl.envs.ogbench",
)


def load(target: Any) -> Any:
    """``"package.module:attribute"`` -> that attribute (its module imported now); anything else as it is.

    Examples:
        >>> load("math:pi") > 3, load(len) is len
        (True, True)
    """
    if not isinstance(target, str):
        return target
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"expected 'package.module:attribute', got {target!r}.")
    value = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


class EnvFamily:
    """Everything the package knows about one family of environments: a record, one per family.

    A family subclasses it, sets the class attributes below and overrides the hooks it needs; the
    defaults describe a family with nothing special (an env factory, a ``("next", "progress_event")``
    oracle). The record module keeps its imports light: code is named by ``"module:attribute"``
    (:func:`load`) and imported when used.

    Attributes:
        name (str): the family's name (``"minigrid"``), also its oracle's default spec name.
        title (str): what messages call it (``"MiniGrid and BabyAI"``).
        id_prefixes (tuple of str): the env ids it owns start with one of these (:meth:`owns`).
        example_id (str): an id to show in messages.
        recipe (str): the recipe that trains on it, ``"dqn"`` (discrete actions) or ``"sac"``.
        env_factory (str or callable): ``factory(env_id, **kwargs)`` -> a TorchRL env; module-level, so
            that ``functools.partial`` of it pickles.
        batched_env (str or callable, optional): ``cls(num_envs, env_id, **kwargs)``: copies stepped together
            in one env class of the family's own (the recipes' collector, evaluations and gallery use it).
        batched_collector (str or callable, optional): ``cls(env, policy, frames_per_batch=, total_frames=)``:
            a collector over :attr:`batched_env` for policies that act on tensors (``policy.act``).
        event_keys (str or tuple of str): the per-step event flags the envs write (``("next", key)``).
        oracles (mapping): ``oracle:<name>`` spec name -> the event key that oracle reads.
        builtin_scorers (tuple of str): the ``builtin:<name>`` models trained on this family's frames.
        training_domains (mapping): ``vlmrb build-scorer <name>`` -> ``"module:factory"`` of its
            :class:`~vlmrb_torchrl.scorer_training.domains.Domain`.
        frame_states (mapping): the classes of the states a frame cache of this family holds: class
            name -> module (nothing else is rebuilt from a cache file).
        policies (mapping): scripted policy name -> ``"module:factory"``, ``factory(env, **kwargs)``.
        quick_preset (mapping, optional): ``--quick``'s keys for this family's envs, in place of the recipe's.
        frame_views (tuple of str): what the scorer's frames of this family's envs can show (the recipes'
            ``frame_view`` key, the env's ``frame_view=``), the default first; empty: one view, nothing to pick.
        owned_keys (mapping): recipe config keys only this family reads -> the values a run on another
            family's env must keep.
        has_missions (bool): its episodes carry a mission text a scorer can be told.

    Examples:
        >>> minigrid = family_of("MiniGrid-DoorKey-8x8-v0")
        >>> minigrid.name, minigrid.recipe, minigrid.specs()[:2]
        ('minigrid', 'dqn', ['builtin:minigrid', 'builtin:minigrid_goal'])
        >>> minigrid.default_scorer("BabyAI-GoToLocal-v0")  # scorer=auto: what the missions ask for
        'builtin:minigrid_agent'
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    id_prefixes: ClassVar[tuple[str, ...]] = ()
    example_id: ClassVar[str] = ""
    recipe: ClassVar[str] = "dqn"
    env_factory: ClassVar[Any] = None
    batched_env: ClassVar[Any] = None
    batched_collector: ClassVar[Any] = None
    event_keys: ClassVar[Any] = ("progress_event",)
    oracles: ClassVar[Mapping[str, Any]] = {}
    builtin_scorers: ClassVar[tuple[str, ...]] = ()
    training_domains: ClassVar[Mapping[str, str]] = {}
    frame_states: ClassVar[Mapping[str, str]] = {}
    policies: ClassVar[Mapping[str, Any]] = {}
    quick_preset: ClassVar[Mapping[str, Any] | None] = None
    frame_views: ClassVar[tuple[str, ...]] = ()
    owned_keys: ClassVar[Mapping[str, tuple[Any, ...]]] = {}
    has_missions: ClassVar[bool] = False

    # ------------------------------------------------------------------ ids
    def owns(self, env_id: str) -> bool:
        """Whether ``env_id`` is one of this family's ids."""
        return isinstance(env_id, str) and env_id.startswith(self.id_prefixes)

    @property
    def id_help(self) -> str:
        """What messages say this family's ids look like."""
        article = "an" if self.title[:1].upper() in "AEIOU" else "a"
        return f"{article} {self.title} id ({self.example_id}, ...)"

    def known_ids(self) -> Collection[str] | None:
        """The ids of this family its simulator can build, read from the simulator's own registry; ``None`` when
        the family cannot tell (its simulator is not installed: building the env then names the extra to install)."""
        return None

    def id_problem(self, env_id: str) -> str | None:
        """What an id of this family must be, when ``env_id`` is not one it can build (with the closest known id);
        ``None`` when it can, or cannot tell. The recipes check this before anything that depends on the env (the
        scorer ``auto`` picks, a built-in scorer's task), so that a typo in ``env`` is blamed on ``env``.

        Examples:
            >>> get_family("ogbench").id_problem("ogbench/scene-task9")
            'ogbench/scene-task1 ... ogbench/scene-task5'
        """
        known = self.known_ids()
        if known is None or env_id in known:
            return None
        close = difflib.get_close_matches(env_id, sorted(known), n=1, cutoff=0.8)
        return f"{self.id_help}, one that is registered" + (f" (did you mean {close[0]!r}?)" if close else "")

    def check_id(self, env_id: str) -> None:
        """Raises ``ValueError`` for an id this family owns but cannot build (found before an env is made):
        :meth:`id_problem`'s."""
        problem = self.id_problem(env_id)
        if problem is not None:
            raise ValueError(f"unknown {self.title} env {env_id!r}: expected {problem}.")

    # ------------------------------------------------------------------ envs
    def make_env(self, env_id: str, **kwargs: Any) -> Any:
        """The env ``env_id`` (``env_factory(env_id, **kwargs)``)."""
        return load(self.env_factory)(env_id, **kwargs)

    def env_fn(self, env_id: str, *, train: bool = True, render: bool = False, **kwargs: Any) -> functools.partial:
        """A picklable zero-argument constructor of the env ``env_id`` for the recipes (``train``: a training
        env, or an evaluation one; only families whose envs differ override this to pass it on)."""
        self.check_id(env_id)
        return functools.partial(load(self.env_factory), env_id, render=render, **kwargs)

    def env_kwargs(self, cfg: Any, *, scorer: Any = None) -> dict[str, Any]:
        """The env factory's keyword arguments that the recipe config ``cfg`` (and its scorer) decide beyond
        the recipe's own (episode limit, camera, ...): the config-to-env mapping of this family."""
        return {}

    def scripted_policy(self, env: Any, name: str = "scripted", *, seed: int = 0, epsilon: float = 0.0,
                        burst_prob: float = 0.0) -> Any:
        """The scripted agent ``name`` (:attr:`policies`) acting in ``env``, every episode scripted (no random
        episodes of its own), with ``epsilon``-random actions and random bursts where it has them: what the
        scorer-quality benchmark plays. A family whose agents take other arguments overrides this."""
        return self.policy_class(name)(env, seed=seed, random_share=0.0)

    def policy_class(self, name: str) -> Any:
        """The class of the scripted policy ``name`` (:attr:`policies`)."""
        if name not in self.policies:
            raise ValueError(f"the {name} policy is not one of {self.title}'s (its scripted policies: "
                             f"{', '.join(sorted(self.policies)) or 'none'}).")
        return load(self.policies[name])

    # ------------------------------------------------------------------ scorers
    def default_scorer(self, env_id: str, *, seed: int = 0) -> str | None:
        """The built-in scorer that knows ``env_id``; ``None``: none does (``scorer=auto`` is then the oracle,
        :meth:`auto_scorer`)."""
        return None

    def auto_scorer(self, env_id: str, *, seed: int = 0) -> tuple[str | None, str | None]:
        """What ``scorer=auto`` runs on ``env_id``, and the line to print when that is not a model of frames: the
        family's built-in scorer (:meth:`default_scorer`) where one knows the env, else the family's first oracle,
        which reads the env's privileged event flags. ``(None, None)``: a family with neither.

        Examples:
            >>> get_family("atari").auto_scorer("ALE/Pong-v5")
            ('builtin:atari', None)
            >>> spec, line = get_family("atari").auto_scorer("ALE/Tennis-v5")
            >>> spec, line.split(" (")[0]
            ('oracle:atari', 'scorer=auto: no built-in scorer knows ALE/Tennis-v5; scoring with oracle:atari, which is privileged')
        """
        spec = self.default_scorer(env_id, seed=seed)
        if spec is not None or not self.oracles:
            return spec, None
        oracle = f"oracle:{next(iter(self.oracles))}"
        return oracle, (f"scorer=auto: no built-in scorer knows {env_id}; scoring with {oracle}, which is privileged "
                        "(it reads the env's event flags, not frames). For a real VLM pass scorer=clip:<dir>, hf:<dir>, "
                        "openai:<url>#<model> or python:<module>:<callable>.")

    def resolve_scorer(self, scorer: str, env_id: str) -> str:
        """``scorer`` as the run on ``env_id`` uses it (a built-in model's env-specific form)."""
        return scorer

    def scorer_frame_view(self, scorer: str) -> str | None:
        """The view of this family's frames the model of ``scorer`` was trained on; ``None``: the default."""
        return None

    def frame_view(self, scorer: str) -> str:
        """What ``frame_view=auto`` means on this family's envs with ``scorer``: the view its model was trained
        on, else the family's default view (``"grid"`` for a family with one view, as config.json records it).

        Examples:
            >>> get_family("atari").frame_view("builtin:atari"), get_family("atari").frame_view("oracle:atari")
            ('score', 'screen')
        """
        return self.scorer_frame_view(scorer) or (self.frame_views[0] if self.frame_views else "grid")

    def scorer_task_kwargs(self, cfg: Any) -> dict[str, Any]:
        """What the recipe tells its scorer about the task of ``cfg.env`` (``make_scorer`` keyword arguments)."""
        return {}

    def specs(self) -> list[str]:
        """The ``builtin:`` and ``oracle:`` specs of this family.

        Examples:
            >>> get_family("atari").specs()
            ['builtin:atari', 'oracle:atari']
        """
        return [f"builtin:{name}" for name in self.builtin_scorers] + [f"oracle:{name}" for name in self.oracles]

    def scores_with(self, scorer: str) -> bool:
        """Whether ``scorer`` is one of this family's ``builtin:`` / ``oracle:`` specs (``builtin:scene-task3``
        counts as ``builtin:scene``)."""
        kind, _, name = str(scorer).partition(":")
        if kind == "builtin":
            return (name.split("-task")[0] or "minigrid") in self.builtin_scorers
        return kind == "oracle" and name in self.oracles

    # ------------------------------------------------------------------ recipes
    def recipe_defaults(self, env_id: str) -> dict[str, Any]:
        """The recipe keys whose ``None`` (the env's own) this family fills in for ``env_id``."""
        return {}

    def config_checks(self, cfg: Any) -> list[tuple[str, bool, str]]:
        """The family's own checks of a recipe config: ``(key, ok, what is accepted)`` triples."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, id_prefixes={self.id_prefixes!r})"


def rendered_frames(scorer: str) -> dict[str, Any]:
    """What the frames a ``clip:<dir>`` scorer's model was trained on looked like: ``frames_rendered`` of its
    ``training.json`` (``vlmrb build-scorer`` writes it: a view, a camera, a size); ``{}`` for any other spec or
    a directory without a readable one.

    Examples:
        >>> rendered_frames("builtin:minigrid"), rendered_frames("clip:/no/such/dir")
        ({}, {})
    """
    kind, _, rest = str(scorer).partition(":")
    report = Path(rest) / "training.json"
    if kind != "clip" or not report.is_file():
        return {}
    try:
        rendered = json.loads(report.read_text()).get("frames_rendered") or {}
    except (OSError, ValueError, RecursionError, AttributeError):
        return {}
    return rendered if isinstance(rendered, dict) else {}


_REGISTERED: dict[str, EnvFamily] = {}
_LOCK = threading.Lock()
_LOADED = False


def _load_shipped() -> None:
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        for module in FAMILY_MODULES:
            family = importlib.import_module(module).FAMILY
            _REGISTERED.setdefault(family.name, family)
        _LOADED = True


def families(recipe: str | None = None) -> list[EnvFamily]:
    """The registered families (those of ``recipe`` only, when given), the shipped ones first.

    Examples:
        >>> [family.name for family in families()]
        ['minigrid', 'atari', 'robosuite', 'ogbench']
        >>> [family.name for family in families("sac")]
        ['robosuite', 'ogbench']
    """
    _load_shipped()
    return [f for f in _REGISTERED.values() if recipe is None or f.recipe == recipe]


def family_of(env_id: str) -> EnvFamily | None:
    """The family that owns ``env_id``; ``None`` when none does.

    Examples:
        >>> family_of("BabyAI-GoToLocal-v0").name, family_of("ogbench/scene-task2").name
        ('minigrid', 'ogbench')
        >>> family_of("CartPole-v1") is None
        True
    """
    return next((family for family in families() if family.owns(env_id)), None)


def get_family(name: str) -> EnvFamily:
    """The family called ``name``.

    Examples:
        >>> get_family("robosuite").recipe
        'sac'
    """
    for family in families():
        if family.name == name:
            return family
    raise KeyError(f"no env family {name!r}; registered: {[f.name for f in families()]}.")


def register_family(family: EnvFamily, *, overwrite: bool = False) -> EnvFamily:
    """Adds ``family`` to the registry (its ids, oracle specs and build-scorer domains become known).

    Examples:
        >>> class Corridor(EnvFamily):
        ...     name, title, id_prefixes, example_id = "corridor", "Corridor", ("Corridor-",), "Corridor-v0"
        ...     oracles = {"corridor": ("next", "progress_event")}
        >>> _ = register_family(Corridor())
        >>> family_of("Corridor-v0").name, get_family("corridor").specs()
        ('corridor', ['oracle:corridor'])
        >>> unregister_family("corridor")
    """
    if not isinstance(family, EnvFamily) or not family.name:
        raise TypeError(f"register_family needs an EnvFamily instance with a name, got {family!r}.")
    _load_shipped()
    with _LOCK:
        if family.name in _REGISTERED and not overwrite:
            raise ValueError(f"an env family named {family.name!r} is registered already; pass overwrite=True.")
        _REGISTERED[family.name] = family
    return family


def unregister_family(name: str) -> None:
    """Removes the family ``name`` from the registry (see :func:`register_family`).

    Examples:
        >>> class Maze(EnvFamily):
        ...     name, title, id_prefixes = "maze", "Maze", ("Maze-",)
        >>> _ = register_family(Maze())
        >>> unregister_family("maze")
        >>> family_of("Maze-v0") is None
        True
    """
    _load_shipped()
    with _LOCK:
        _REGISTERED.pop(name, None)

