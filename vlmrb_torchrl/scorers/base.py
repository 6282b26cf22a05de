"""The :class:`Scorer` protocol, score validation, :class:`CallableScorer` and :func:`make_scorer`.

A scorer maps a batch of clips (a TensorDict with batch ``[B, T]``) to one float32 score per
clip in ``[0, 1]``; higher means more task progress. Scores become replay priorities.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from vlmrb_torchrl.scorers._hashing import prompt_hash

__all__ = [
    "Scorer",
    "CallableScorer",
    "make_scorer",
    "register_scorer",
    "registered_scorer_forms",
    "prompt_hash",
    "validate_scores",
    "check_clips",
    "scorer_stats",
    "scorer_factory",
    "spec_loads_code",
]


@runtime_checkable
class Scorer(Protocol):
    """Protocol every scorer follows: ``score(clips) -> Tensor[B]`` plus three attributes.

    ``clips`` is a :class:`~tensordict.TensorDictBase` with batch size ``[B, T]`` holding:

    - the frame entry the scorer reads, e.g. ``"pixels"``: uint8 ``[B, T, H, W, 3]``;
    - ``"mask"``: bool ``[B, T]``, ``False`` on padded steps (clips near an episode end are
      padded by repeating the last frame);
    - any other per-step entries the scorer lists in :attr:`in_keys`.

    Attributes:
        prompt (str): the task prompt (may be empty for scorers that do not use one).
        in_keys (list of NestedKey): clip entries read by :meth:`score`.
        provenance (dict): what produced the scores: ``backend``, model id, revision,
            ``prompt_hash``, dtype, ... Saved with the sampler state so that a resumed run
            knows where its scores came from.

    :meth:`score` returns a float32 tensor of shape ``[B]`` with values in ``[0, 1]``. It must
    be safe to call from a worker thread (the ``AsyncScorer`` calls it off the main thread).
    Any class with these members is a scorer; subclassing is not needed.

    A scorer may also have ``stats() -> dict[str, float]``: its own counters (requests, retries,
    cache hits, ...). It is optional (not part of the ``isinstance`` check); read it with
    :func:`scorer_stats`, which gives ``{}`` for scorers without one. A wrapper returns its
    inner scorer's stats merged with its own, so the outermost scorer reports everything; the
    recipes log them as ``scorer_<name>`` columns without knowing the backend.

    Examples:
        >>> import torch
        >>> class ConstantScorer:
        ...     prompt = ""
        ...     in_keys = ["pixels"]
        ...     provenance = {"backend": "constant"}
        ...     def score(self, clips):
        ...         return torch.full(clips.batch_size[:1], 0.5)
        >>> isinstance(ConstantScorer(), Scorer)
        True
    """

    prompt: str
    in_keys: list[NestedKey]
    provenance: dict

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """Scores ``clips`` (batch ``[B, T]``): float32 ``[B]`` in ``[0, 1]``."""
        ...


def _scorer_name(scorer: Any) -> str:
    if isinstance(scorer, str):
        return scorer
    name = getattr(scorer, "name", None)
    return name if isinstance(name, str) and name else type(scorer).__name__


class ScorerInputError(KeyError):
    """A scorer was given clips without an entry it reads (a ``KeyError``, whose message is one line
    naming the entry and how to declare it). The recipes report it as such, not as a worker's traceback.

    Examples:
        >>> str(ScorerInputError("needs ('next', 'reward')"))  # no quotes around it, unlike a KeyError's
        "needs ('next', 'reward')"
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def check_clips(clips: Any, in_keys: Sequence[NestedKey], *, scorer: Any = "scorer") -> int:
    """Checks that ``clips`` is a ``[B, T]`` TensorDict holding ``in_keys``; returns ``B``.

    Args:
        clips (TensorDictBase): the clips passed to ``score``.
        in_keys (sequence of NestedKey): entries the scorer needs.

    Keyword Args:
        scorer (str or Scorer): the scorer (or its name), for the error messages.

    Raises:
        TypeError: ``clips`` is not a TensorDict.
        ValueError: ``clips`` does not have 2 batch dimensions.
        ScorerInputError: an entry of ``in_keys`` is missing (a ``KeyError``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> clips = TensorDict(mask=torch.ones(3, 4, dtype=torch.bool), batch_size=[3, 4])
        >>> check_clips(clips, ["mask"])
        3
    """
    name = _scorer_name(scorer)
    if not isinstance(clips, TensorDictBase):
        raise TypeError(f"{name}.score expects clips as a TensorDict with batch [B, T], got {type(clips).__name__}.")
    if clips.batch_dims != 2:
        raise ValueError(
            f"{name}.score expects clips with batch size [B, T], got batch_size={list(clips.batch_size)}. "
            "Pack per-step data into clips first (vlmrb_torchrl.ClipStream)."
        )
    missing = [key for key in in_keys if clips.get(key, None) is None]
    if missing:
        found = sorted(clips.keys(include_nested=True, leaves_only=True), key=str)
        raise ScorerInputError(f"{name} needs {missing} in its clips; found {found}.")
    return clips.batch_size[0]


def validate_scores(scores: Any, batch: int | TensorDictBase, *, scorer: Any = "scorer") -> torch.Tensor:
    """Checks a scorer's output and returns it as a detached float32 tensor of shape ``[B]``.

    Every scorer calls this on what it returns, so bad scores fail where they are produced, with
    the scorer's name in the message, instead of corrupting replay priorities later.

    Args:
        scores (Tensor, array or sequence): the raw scores. Bool and integer values are cast.
        batch (int or TensorDictBase): the expected number of clips ``B``, or the clips.

    Keyword Args:
        scorer (str or Scorer): the scorer (or its name), for the error messages.

    Returns:
        torch.Tensor: float32 ``[B]`` with values in ``[0, 1]``, on the device of ``scores``.

    Raises:
        TypeError: ``scores`` is not numeric.
        ValueError: wrong shape, non-finite values or values outside ``[0, 1]``.

    Examples:
        >>> validate_scores([0, 1, 0.5], 3)
        tensor([0.0000, 1.0000, 0.5000])
        >>> validate_scores(torch.tensor([1.5]), 1, scorer="my_vlm")
        Traceback (most recent call last):
        ...
        ValueError: my_vlm returned scores outside [0, 1] (min=1.5, max=1.5); ...
    """
    name = _scorer_name(scorer)
    expected = batch.batch_size[0] if isinstance(batch, TensorDictBase) else int(batch)
    if not isinstance(scores, torch.Tensor):
        if isinstance(scores, (str, bytes)) or (isinstance(scores, Sequence) and scores
                                                 and isinstance(scores[0], (str, bytes))):
            raise TypeError(f"{name} must return numbers (a float tensor of shape [B]={[expected]}), got text: "
                            f"{str(scores)[:80]!r}. Map answers to scores in [0, 1] inside the scorer.")
        try:
            scores = torch.as_tensor(scores)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(
                f"{name} must return a float tensor of shape [B]={[expected]}, got {type(scores).__name__} "
                f"({type(err).__name__}: {err})."
            ) from err
    if scores.device.type == "meta":
        raise TypeError(f"{name} returned a tensor on the meta device (a shape without values): a model left on "
                        "'meta' (loaded with device_map or init_empty_weights?) must be materialised before scoring.")
    if scores.is_complex():
        raise TypeError(f"{name} must return real-valued scores, got dtype={scores.dtype}.")
    if scores.shape != (expected,):
        raise ValueError(
            f"{name} returned scores of shape {list(scores.shape)}; expected one score per clip, "
            f"shape [B]={[expected]}."
        )
    scores = scores.detach().to(torch.float32)
    finite = torch.isfinite(scores)
    if not bool(finite.all()):
        bad = (~finite).nonzero().flatten()[:5].tolist()
        raise ValueError(
            f"{name} returned non-finite scores (NaN or inf) at clip indices {bad}; scores must be finite in [0, 1]."
        )
    if scores.numel() and bool(((scores < 0) | (scores > 1)).any()):
        raise ValueError(
            f"{name} returned scores outside [0, 1] (min={scores.min().item():.4g}, "
            f"max={scores.max().item():.4g}); map them to [0, 1] (e.g. a sigmoid or a threshold)."
        )
    return scores


def scorer_stats(scorer: Any) -> dict[str, float]:
    """The optional ``stats()`` of ``scorer`` as ``{name: float}``; ``{}`` when it has none.

    Non-numeric values are left out and booleans become 0.0/1.0, so every value can go to a
    metrics row as is.

    Examples:
        >>> from vlmrb_torchrl.scorers import CachedScorer, OracleScorer
        >>> scorer_stats(OracleScorer())
        {}
        >>> scorer_stats(CachedScorer(OracleScorer()))
        {'score_cache_hits': 0.0, 'score_cache_misses': 0.0, 'score_cache_size': 0.0}
    """
    stats = getattr(scorer, "stats", None)
    if not callable(stats):
        return {}
    out = stats()
    if not isinstance(out, dict):
        raise TypeError(f"{_scorer_name(scorer)}.stats() must return a dict of str -> float, got {type(out).__name__}.")
    return {str(k): float(v) for k, v in out.items() if isinstance(v, (int, float))}


def _callable_name(fn: Callable) -> str:
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{qualname}"


class CallableScorer:
    """Wraps a user function ``fn(clips) -> Tensor[B]`` as a :class:`Scorer`, validating its outputs.

    Args:
        fn (Callable[[TensorDictBase], Tensor]): maps clips (batch ``[B, T]``) to ``B`` scores in
            ``[0, 1]`` (a tensor, array or sequence; bool/int values are cast to float32).

    Keyword Args:
        prompt (str, optional): the task prompt, recorded in the provenance. Defaults to ``""``.
        in_keys (sequence of NestedKey, optional): clip entries ``fn`` reads: only these (and
            ``"mask"``) are carried to it, and they are checked before ``fn`` is called. A nested key
            may be given as a list (``["next", "reward"]``, as JSON writes it). Defaults to
            ``("pixels",)``: the frames alone.
        name (str, optional): name used in error messages and provenance. Defaults to the
            function's qualified name.

    Raises:
        TypeError: ``fn`` is not callable (at construction); ``fn`` returned something that is
            not numeric (at scoring).
        ValueError: ``fn`` returned a wrong shape, non-finite values or values outside
            ``[0, 1]``; the message names the scorer.
        KeyError: the clips lack an entry of ``in_keys``, or ``fn`` reads an entry that is not
            among them (one line naming the entry and how to declare it).

    .. note:: ``fn`` is called as is: make it thread-safe if it keeps state, since scoring may
        run in a worker thread.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> def brightness(clips):
        ...     return clips["pixels"].float().mean(dim=(1, 2, 3, 4)) / 255
        >>> scorer = CallableScorer(brightness, prompt="is it bright?")
        >>> clips = TensorDict(
        ...     pixels=torch.full((2, 4, 8, 8, 3), 255, dtype=torch.uint8),
        ...     mask=torch.ones(2, 4, dtype=torch.bool), batch_size=[2, 4])
        >>> scorer.score(clips)
        tensor([1., 1.])
        >>> scorer.provenance["backend"], scorer.provenance["callable"]
        ('python', '...brightness')
    """

    def __init__(
        self,
        fn: Callable[[TensorDictBase], torch.Tensor],
        *,
        prompt: str = "",
        in_keys: Sequence[NestedKey] = ("pixels",),
        name: str | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"CallableScorer needs a callable fn(clips) -> Tensor[B], got {type(fn).__name__}.")
        if not isinstance(prompt, str):
            raise TypeError(f"CallableScorer.prompt must be a str, got {type(prompt).__name__}.")
        if isinstance(in_keys, str):
            in_keys = (in_keys,)
        self.fn = fn
        self.prompt = prompt
        # JSON (scorer_kwargs on the command line) has no tuples: ["next", "reward"] is the nested key
        self.in_keys = [tuple(key) if isinstance(key, list) else key for key in in_keys]
        self.name = name if name is not None else f"CallableScorer({getattr(fn, '__qualname__', type(fn).__name__)})"
        self.provenance = {
            "backend": "python",
            "callable": _callable_name(fn),
            "name": self.name,
            "prompt_hash": prompt_hash(prompt),
        }

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """Scores ``clips`` with ``fn``: float32 ``[B]`` in ``[0, 1]``."""
        batch = check_clips(clips, self.in_keys, scorer=self)
        try:
            scores = self.fn(clips)
        except KeyError as err:
            if isinstance(err, ScorerInputError):
                raise
            raise ScorerInputError(_undeclared_key_message(self, err, clips)) from err
        return validate_scores(scores, batch, scorer=self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fn={self.provenance['callable']}, in_keys={self.in_keys})"


def _undeclared_key_message(scorer: CallableScorer, err: KeyError, clips: TensorDictBase) -> str:
    """One line for a function that read an entry its clips do not carry (they carry ``in_keys`` and
    ``"mask"`` only): which entry, what the clips hold, how to declare it.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> clips = TensorDict(pixels=torch.zeros(1, 2, 4, 4, 3), mask=torch.ones(1, 2), batch_size=[1, 2])
        >>> scorer = CallableScorer(lambda c: c["next", "reward"].sum((1, 2)), name="rewarded")
        >>> scorer.score(clips)
        Traceback (most recent call last):
        ...
        vlmrb_torchrl.scorers.base.ScorerInputError: rewarded read an entry its clips do not carry ("next"): ...
    """
    import re

    found = re.search(r'key "([^"]+)" not found', str(err.args[0]) if err.args else "")
    what = f'("{found.group(1)}")' if found else f"({err})"
    held = sorted(str(k) for k in clips.keys(include_nested=True, leaves_only=True))
    return (f"{scorer.name} read an entry its clips do not carry {what}: clips hold only the scorer's in_keys "
            f"({scorer.in_keys}, default ('pixels',)) and 'mask', here {held}. Declare every entry it reads: "
            "CallableScorer(fn, in_keys=[('next', 'reward'), 'mask']) in Python, or on the command line "
            "scorer_kwargs='{\"in_keys\": [[\"next\", \"reward\"], \"mask\"]}'.")


# ---------------------------------------------------------------------------------------------
# registry
_REGISTRY: dict[str, tuple[Callable[..., Scorer], str]] = {}
_REGISTRY_LOCK = threading.Lock()
#: backends living in their own modules, imported on first use (make_scorer with their prefix,
#: registered_scorer_forms, or an attribute of vlmrb_torchrl.scorers): prefix -> module name.
_LAZY_BACKENDS: dict[str, str] = {
    "oracle": "vlmrb_torchrl.scorers.oracle",
    "hf": "vlmrb_torchrl.scorers.generative",
    "clip": "vlmrb_torchrl.scorers.contrastive",
    "openai": "vlmrb_torchrl.scorers.openai",
    "builtin": "vlmrb_torchrl.scorers.builtin",
    "distill": "vlmrb_torchrl.scorers.distill",
}


def register_scorer(
    prefix: str,
    factory: Callable[..., Scorer],
    *,
    form: str | None = None,
    overwrite: bool = False,
) -> None:
    """Registers a scorer backend for :func:`make_scorer` under ``"<prefix>:<rest>"`` specs.

    Backends (``"hf:"``, ``"clip:"``, ``"openai:"``, user ones) call this from their own module,
    so the core never imports their heavy dependencies.

    Args:
        prefix (str): the backend name before the first ``:`` (letters, digits, ``_``, ``-``,
            ``.``).
        factory (Callable): ``factory(rest: str, **kwargs) -> Scorer``; ``rest`` is the text
            after ``"<prefix>:"`` and ``kwargs`` are those given to :func:`make_scorer`.

    Keyword Args:
        form (str, optional): how the spec is written, shown in the unknown-spec error.
            Defaults to ``"<prefix>:<...>"``.
        overwrite (bool, optional): replace an existing backend with the same prefix. Defaults
            to ``False``.

    Raises:
        ValueError: bad prefix, or prefix already registered without ``overwrite=True``.
        TypeError: ``factory`` is not callable.

    Examples:
        >>> import torch
        >>> def make_constant(rest, **kwargs):
        ...     value = float(rest)
        ...     return CallableScorer(lambda clips: torch.full(clips.batch_size[:1], value),
        ...                           in_keys=["mask"], name="constant")
        >>> register_scorer("constant", make_constant, form="constant:<value>", overwrite=True)
        >>> make_scorer("constant:0.25").name
        'constant'
    """
    if not isinstance(prefix, str) or not prefix or not all(c.isalnum() or c in "_-." for c in prefix):
        raise ValueError(
            f"register_scorer: prefix must be a non-empty name of letters, digits, '_', '-' or '.', got {prefix!r}."
        )
    if not callable(factory):
        raise TypeError(f"register_scorer: factory must be callable, got {type(factory).__name__}.")
    with _REGISTRY_LOCK:
        if prefix in _REGISTRY and not overwrite:
            raise ValueError(
                f"register_scorer: a scorer backend is already registered for {prefix!r}; pass overwrite=True "
                "to replace it."
            )
        _REGISTRY[prefix] = (factory, form or f"{prefix}:<...>")


def registered_scorer_forms() -> list[str]:
    """The spec forms :func:`make_scorer` accepts now (built-in and registered backends).

    Examples:
        >>> forms = registered_scorer_forms()
        >>> "oracle:minigrid" in forms, "python:<module>:<callable>" in forms
        (True, True)
    """
    _load_lazy_backends()
    with _REGISTRY_LOCK:
        return [form for _, form in _REGISTRY.values()]


def _load_lazy_backends(prefix: str | None = None) -> None:
    names = [prefix] if prefix is not None else list(_LAZY_BACKENDS)
    for name in names:
        module = _LAZY_BACKENDS.get(name)
        if module is not None and name not in _REGISTRY:
            importlib.import_module(module)


def make_scorer(spec: str, **kwargs: Any) -> Scorer:
    """Builds a scorer from a spec string ``"<backend>:<rest>"``.

    Built-in forms:

    - ``"hf:<hub id or local dir>"``: :class:`~vlmrb_torchrl.scorers.HFGenerativeScorer`, a
      generative VLM's P(yes) (``kwargs``: ``prompt``, ``env_family``, ``task``, ``input_mode``,
      ``max_frames``, ``device``, ``dtype``, ...).
    - ``"clip:<hub id or local dir>"``: :class:`~vlmrb_torchrl.scorers.HFContrastiveScorer`,
      CLIP / SigLIP similarity to a goal text.
    - ``"openai:<base_url>#<model>"``: :class:`~vlmrb_torchrl.scorers.OpenAIScorer`, a vLLM /
      SGLang / OpenAI-compatible server, e.g. ``"openai:http://localhost:8000/v1#Qwen/Qwen2.5-VL-3B-Instruct"``.
    - a local model directory (no prefix): ``"clip:"`` if its ``config.json`` is a CLIP/SigLIP
      model, else ``"hf:"``.
    - ``"oracle:minigrid"``: :class:`~vlmrb_torchrl.scorers.OracleScorer` on MiniGrid's
      privileged ``("next", "progress_event")`` flags (ablations; needs no model).
    - ``"builtin:minigrid"``: the small CLIP model shipped inside the package, with its prompt
      set (:func:`~vlmrb_torchrl.scorers.builtin.make_builtin_scorer`; no download).
    - ``"distill:<teacher spec>"``: :class:`~vlmrb_torchrl.scorers.DistilledScorer`, a small
      student trained online from the teacher built from ``<teacher spec>``, which then scores
      only ``teacher_fraction`` of the clips (its keyword arguments are taken, the others go to
      the teacher).
    - ``"python:<module>:<callable>"``: imports ``<module>`` and reads ``<callable>`` (a dotted path inside
      it, not through another module), which must be defined in ``<module>`` (or a submodule of it).
      Before anything is called it must be one of: a scorer instance (used as is); a Scorer class (it
      has ``score(clips)``), instantiated with ``kwargs``; a factory, called with ``kwargs``, only when
      marked with :func:`scorer_factory` or named as one, ``"python:<module>:<function>()"``; or a score
      function ``fn(clips) -> Tensor[B]`` (one required argument), wrapped in :class:`CallableScorer`
      (``kwargs``: ``prompt``, ``in_keys``, ``name``) and called only with clips. ``kwargs`` must fit
      the target's signature. Importing the module runs its code: a ``python:`` spec, like any config
      naming one, is code — run only configs you trust (``vlmrb train ... resume=`` refuses one read
      from a run directory unless ``trust_checkpoint=true``).

    Other backends plug in with :func:`register_scorer`.

    Args:
        spec (str): the backend spec.
        **kwargs: passed to the backend factory (e.g. ``prompt=``, ``in_keys=``).

    Returns:
        Scorer: the scorer.

    Raises:
        ValueError: unknown or malformed spec; the message lists the valid forms.
        ImportError: the module of a ``python:`` spec cannot be imported.
        TypeError: a ``python:`` target does not produce a :class:`Scorer`.

    Examples:
        >>> scorer = make_scorer("oracle:minigrid")
        >>> scorer.in_keys
        [('next', 'progress_event'), 'mask']
        >>> make_scorer("python:vlmrb_torchrl.scorers:OracleScorer", events_key="success")
        OracleScorer(events_key='success')
        >>> make_scorer("python:subprocess:Popen", args="echo hi", shell=True)
        Traceback (most recent call last):
        ...
        TypeError: make_scorer('python:subprocess:Popen'): 'Popen' is a class without score(clips), not a Scorer class (nothing was called).
        >>> make_scorer("nope:x")
        Traceback (most recent call last):
        ...
        ValueError: Unknown scorer spec 'nope:x'. Valid forms: ...
    """
    if not isinstance(spec, str):
        raise TypeError(f"make_scorer expects a spec string such as 'oracle:minigrid', got {type(spec).__name__}.")
    prefix, sep, rest = spec.partition(":")
    if sep:
        _load_lazy_backends(prefix)
    entry = _REGISTRY.get(prefix) if sep else None
    if entry is None and spec and os.path.isdir(os.path.expanduser(spec)):
        return _make_local_dir_scorer(spec, **kwargs)
    if entry is None:
        raise ValueError(
            f"Unknown scorer spec {spec!r}. Valid forms: "
            + ", ".join(repr(f) for f in registered_scorer_forms())
            + ". Register more backends with vlmrb_torchrl.scorers.register_scorer(prefix, factory)."
        )
    factory, _ = entry
    try:
        scorer = factory(rest, **kwargs)
    except TypeError as err:
        unknown = _unexpected_keyword(err, kwargs)
        if unknown is None:
            raise
        raise TypeError(f"make_scorer({spec!r}): unknown keyword argument {unknown!r} ({err}).") from err
    if not isinstance(scorer, Scorer):
        raise TypeError(
            f"make_scorer({spec!r}) built a {type(scorer).__name__}, which is not a Scorer "
            "(needs score(clips), prompt, in_keys and provenance)."
        )
    return scorer


def _make_local_dir_scorer(path: str, **kwargs: Any) -> Scorer:
    """A bare local directory: the contrastive backend for CLIP/SigLIP configs, else generative."""
    from vlmrb_torchrl.scorers._hf import detect_backend, read_config  # _hf is heavy-ish and rarely needed

    if not read_config(os.path.expanduser(path)):
        raise ValueError(
            f"make_scorer({path!r}): the directory has no readable config.json, so it is not a model saved with "
            "save_pretrained. Valid forms: " + ", ".join(repr(f) for f in registered_scorer_forms()) + "."
        )
    return make_scorer(f"{detect_backend(os.path.expanduser(path))}:{path}", **kwargs)


def _required_positional(fn: Callable) -> int | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return sum(
        1
        for p in sig.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    )


def _unexpected_keyword(err: TypeError, kwargs: dict[str, Any]) -> str | None:
    """The keyword of ``kwargs`` a ``TypeError`` says a call did not accept (``None``: another error)."""
    match = re.search(r"unexpected keyword argument '([^']+)'", str(err))
    return match.group(1) if match and match.group(1) in kwargs else None


def _check_keywords(target: Callable, kwargs: dict[str, Any], spec: str, what: str) -> None:
    """Raises a ``TypeError`` naming the keyword arguments ``target`` does not take, and those it takes.

    A target taking ``**kwargs`` (or one whose signature cannot be read) accepts anything here.
    """
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = [name for name, p in params.items()
                if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    unknown = [name for name in kwargs if name not in accepted]
    if unknown:
        raise TypeError(
            f"make_scorer({spec!r}): {what} takes no keyword argument {', '.join(map(repr, unknown))}; "
            f"it takes: {', '.join(accepted) or 'none'}."
        )


#: the keyword arguments make_scorer passes to CallableScorer for a plain score function.
_CALLABLE_SCORER_KWARGS = ("prompt", "in_keys", "name")
#: the attribute :func:`scorer_factory` sets: a function a ``python:`` spec may call as a factory.
_FACTORY_MARK = "__vlmrb_scorer_factory__"


def scorer_factory(fn: Callable[..., Scorer]) -> Callable[..., Scorer]:
    """Marks ``fn`` as a scorer factory: a ``python:`` spec naming it calls it with the keyword arguments.

    A ``python:<module>:<function>`` spec calls a function without a ``clips`` argument only when it
    is marked with this decorator or named as a factory in the spec (``python:<module>:<function>()``):
    a config cannot get ``vlmrb`` to call some other zero-argument function of an installed package.

    Examples:
        >>> import torch
        >>> @scorer_factory
        ... def make_constant(value: float = 0.5):
        ...     return CallableScorer(lambda clips: torch.full(clips.batch_size[:1], value), in_keys=["mask"])
        >>> make_constant.__vlmrb_scorer_factory__
        True
    """
    if inspect.isclass(fn) or not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        raise TypeError(f"scorer_factory marks a function that returns a Scorer, got {type(fn).__name__}.")
    setattr(fn, _FACTORY_MARK, True)
    return fn


def spec_loads_code(spec: Any) -> bool:
    """Whether a scorer spec imports and runs code named in it: a ``python:`` spec, also inside another
    (``distill:python:...``).

    Examples:
        >>> spec_loads_code("python:my_scorers:RewardScorer"), spec_loads_code("distill:python:m:f")
        (True, True)
        >>> spec_loads_code("builtin:minigrid"), spec_loads_code("openai:http://h:8000/v1#m")
        (False, False)
    """
    if not isinstance(spec, str):
        return False
    prefix, sep, rest = spec.partition(":")
    return bool(sep) and (prefix == "python" or spec_loads_code(rest))


def _import_module(module_name: str) -> Any:
    """Imports ``module_name``; a module in the working directory is found too (as ``python -m`` does), so
    ``vlmrb train dqn scorer=python:myscorer:fn`` works from the directory holding ``myscorer.py``.

    The working directory is appended to ``sys.path`` only when the module is not found otherwise (it
    stays there, so that a ``"process"`` backend's child finds the module too).
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        top = module_name.split(".")[0]
        cwd = os.getcwd()
        if err.name != top or cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as retry:
            if retry.name == top:
                sys.path.remove(cwd)
            raise


def _resolve_python_target(spec: str, module_name: str, attr_path: str) -> Any:
    """Imports ``module_name`` and reads ``attr_path`` in it, never through another module: what the spec names
    is what loads (``python:my_pkg:os.system`` is refused)."""
    try:
        obj: Any = _import_module(module_name)
    except ImportError as err:
        where = (f" (not on sys.path, nor in the working directory {os.getcwd()})"
                 if isinstance(err, ModuleNotFoundError) and err.name == module_name.split(".")[0] else "")
        raise ImportError(f"make_scorer({spec!r}): cannot import module {module_name!r}{where}: {err}") from err
    for i, part in enumerate(attr_path.split(".")):
        if i and inspect.ismodule(obj):
            raise TypeError(f"make_scorer({spec!r}): {attr_path!r} goes through the module {obj.__name__!r}; name "
                            f"the module that defines the scorer (python:{obj.__name__}:...) (nothing was called).")
        try:
            obj = getattr(obj, part)
        except AttributeError as err:
            raise ValueError(
                f"make_scorer({spec!r}): module {module_name!r} has no attribute {attr_path!r}."
            ) from err
    return obj


def _check_python_target(obj: Any, spec: str, module_name: str, attr_path: str, factory: bool) -> str:
    """The kind of a ``python:`` target, checked before anything is called: ``"class"`` (a Scorer class),
    ``"factory"`` (marked with :func:`scorer_factory` or named ``name()``) or ``"function"`` (a score function
    ``fn(clips)``, called only at scoring). Anything else raises ``TypeError`` (nothing was called)."""
    def refuse(why: str) -> TypeError:
        return TypeError(f"make_scorer({spec!r}): {attr_path!r} {why} (nothing was called).")

    if inspect.isclass(obj):
        kind = "class"
    elif inspect.isfunction(obj) or inspect.ismethod(obj):
        kind = "factory" if factory or getattr(obj, _FACTORY_MARK, False) else "function"
    elif callable(obj):
        raise refuse(f"is a {type(obj).__name__}: a python: spec names a Scorer class, a scorer instance, a "
                     "factory or a score function fn(clips) written in Python")
    else:
        raise refuse(f"is a {type(obj).__name__}, not a callable")
    origin = getattr(obj, "__module__", None) or ""
    if origin != module_name and not origin.startswith(module_name + "."):
        raise refuse(f"is defined in module {origin!r}, not in {module_name!r}: a python: spec loads only what it "
                     f"names; name it where it is defined (python:{origin}:{getattr(obj, '__qualname__', attr_path)})")
    if kind == "class":
        score = getattr(obj, "score", None)
        if not callable(score):
            raise refuse("is a class without score(clips), not a Scorer class")
        try:
            inspect.signature(score).bind(None, None)  # (self, clips)
        except TypeError:
            raise refuse("is a class whose score() does not take one clips argument, not a Scorer class") from None
        except ValueError:  # a signature that cannot be read (a C method): taken as it is
            pass
    required = _required_positional(obj) if kind != "class" else None
    if kind == "factory" and required:
        raise refuse(f"is named as a factory but has {required} required positional argument(s); a factory takes "
                     "keyword arguments only")
    if kind == "function" and required != 1:
        raise refuse("takes no clips argument, so it would be called as a factory: name it as one "
                     f"(python:{module_name}:{attr_path}()) or mark it with @vlmrb_torchrl.scorers.scorer_factory"
                     if required == 0 else
                     f"takes {required} required positional arguments; a score function takes one, clips")
    return kind


def _make_python_scorer(rest: str, **kwargs: Any) -> Scorer:
    module_name, sep, attr_path = rest.rpartition(":")
    spec = f"python:{rest}"
    factory = attr_path.endswith("()")
    attr_path = attr_path[:-2] if factory else attr_path
    if not sep or not module_name or not attr_path:
        raise ValueError(
            f"A python scorer spec is 'python:<module>:<callable>' (e.g. 'python:my_pkg.scoring:score_fn'), "
            f"got {spec!r}."
        )
    obj = _resolve_python_target(spec, module_name, attr_path)
    if isinstance(obj, Scorer) and not inspect.isclass(obj):
        if kwargs or factory:
            raise TypeError(f"make_scorer({spec!r}) names a scorer instance; it takes no keyword arguments"
                            + (f", got {sorted(kwargs)}." if kwargs else " and is not a factory: drop the ()."))
        return obj
    # checked before the target is called: a config naming it must not get to run whatever it names
    kind = _check_python_target(obj, spec, module_name, attr_path, factory)
    if kind == "class":
        _check_keywords(obj, kwargs, spec, f"class {attr_path}")
        scorer = obj(**kwargs)
    elif kind == "factory":
        _check_keywords(obj, kwargs, spec, f"factory {attr_path}()")
        scorer = obj(**kwargs)
    else:
        unknown = [name for name in kwargs if name not in _CALLABLE_SCORER_KWARGS]
        if unknown:
            raise TypeError(
                f"make_scorer({spec!r}): {attr_path} is a score function fn(clips), wrapped in CallableScorer, "
                f"which takes only {', '.join(_CALLABLE_SCORER_KWARGS)}; got {', '.join(map(repr, unknown))}. "
                "To take options, make it a factory (a function without required arguments returning a "
                "Scorer, marked with @vlmrb_torchrl.scorers.scorer_factory) or a class."
            )
        scorer = CallableScorer(obj, **kwargs)
    if not isinstance(scorer, Scorer):
        raise TypeError(
            f"make_scorer({spec!r}): {attr_path!r} returned a {type(scorer).__name__}, not a Scorer "
            "(needs score(clips), prompt, in_keys and provenance)."
        )
    return scorer


register_scorer("python", _make_python_scorer, form="python:<module>:<callable>")
