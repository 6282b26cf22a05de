"""Privileged success detectors for ablations: score clips from env-provided event flags."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from vlmrb_torchrl._keys import is_nested_key
from vlmrb_torchrl.scorers._hashing import prompt_hash
from vlmrb_torchrl.scorers.base import check_clips, register_scorer, validate_scores

__all__ = ["OracleScorer", "ORACLE_EVENT_KEYS"]


class _OracleEventKeys(Mapping):
    """``oracle:<name>`` -> the event key it reads, from the env families' records (read when asked, so that a
    family registered at run time has its oracle too)."""

    def _table(self) -> dict[str, NestedKey]:
        from vlmrb_torchrl.envs.family import families

        return {name: key for family in families() for name, key in family.oracles.items()}

    def __getitem__(self, name: str) -> NestedKey:
        return self._table()[name]

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return repr(self._table())


#: The event key each ``"oracle:<name>"`` spec reads: the oracles of the env families
#: (:attr:`~vlmrb_torchrl.envs.EnvFamily.oracles`), e.g. ``oracle:minigrid`` reads ``("next", "progress_event")``.
ORACLE_EVENT_KEYS: Mapping[str, NestedKey] = _OracleEventKeys()

DEFAULT_ORACLE_PROMPT = "privileged oracle: does any step of the clip have a progress event?"


class OracleScorer:
    """Privileged "perfect VLM" for ablations: 1.0 if a real step of the clip has an event, else 0.0.

    Reads a boolean per-step event flag written by the environment (e.g. MiniGrid's
    ``("next", "progress_event")``: first key pickup, first door opening, goal reached; see
    :class:`~vlmrb_torchrl.envs.MiniGridEnv`) and the clip mask. Padded steps (``mask``
    ``False``) are ignored, so an event repeated by padding does not count twice and an event
    outside the clip's real steps does not leak in. Works for any env family that writes such
    a flag: pass its key as ``events_key``.

    Args:
        events_key (NestedKey, optional): the per-step event entry in the clips, bool (or 0/1)
            of shape ``[B, T]`` or ``[B, T, *]`` (trailing dims are OR-ed, e.g. the ``[1]`` of
            env flags). Defaults to ``("next", "progress_event")``.

    Keyword Args:
        prompt (str, optional): description of what the oracle detects, recorded in the
            provenance (the oracle does not read it). Defaults to a short description.
        mask_key (NestedKey, optional): the clip validity mask, bool ``[B, T]``. Defaults to
            ``"mask"``.

    Attributes:
        in_keys: ``[events_key, mask_key]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> events = torch.tensor([[0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.bool)
        >>> mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
        >>> clips = TensorDict({("next", "progress_event"): events.unsqueeze(-1), "mask": mask},
        ...                    batch_size=[3, 4])
        >>> OracleScorer().score(clips)  # clip 1's event sits on a padded step
        tensor([1., 0., 0.])
    """

    def __init__(
        self,
        events_key: NestedKey = ("next", "progress_event"),
        *,
        prompt: str = DEFAULT_ORACLE_PROMPT,
        mask_key: NestedKey = "mask",
    ) -> None:
        for arg, key in (("events_key", events_key), ("mask_key", mask_key)):
            if not is_nested_key(key):
                raise TypeError(f"OracleScorer.{arg} must be a str or a tuple of str, got {key!r}.")
        if not isinstance(prompt, str):
            raise TypeError(f"OracleScorer.prompt must be a str, got {type(prompt).__name__}.")
        self.events_key = events_key
        self.mask_key = mask_key
        self.prompt = prompt
        self.in_keys = [events_key, mask_key]
        self.provenance = {
            "backend": "oracle",
            "events_key": events_key,
            "prompt_hash": prompt_hash(prompt),
            "dtype": "bool",
        }

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """1.0 for clips with an event on a real (``mask`` True) step, else 0.0: float32 ``[B]``."""
        batch = check_clips(clips, self.in_keys, scorer=self)
        events = clips.get(self.events_key)
        mask = clips.get(self.mask_key)
        b, t = clips.batch_size
        if tuple(events.shape[:2]) != (b, t) or tuple(mask.shape) != (b, t):
            raise ValueError(
                f"OracleScorer expects {self.events_key!r} of shape [B, T, ...] and {self.mask_key!r} of shape "
                f"[B, T]={[b, t]}, got {list(events.shape)} and {list(mask.shape)}."
            )
        hit = events.reshape(b, t, -1).bool().any(-1) & mask.bool()
        return validate_scores(hit.any(-1), batch, scorer=self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(events_key={self.events_key!r})"


def _make_oracle(rest: str, **kwargs: Any) -> OracleScorer:
    if rest not in ORACLE_EVENT_KEYS:
        raise ValueError(
            f"Unknown oracle scorer 'oracle:{rest}'. Valid forms: "
            + ", ".join(repr(f"oracle:{name}") for name in ORACLE_EVENT_KEYS)
            + " (pass events_key=... to read another flag)."
        )
    kwargs.setdefault("events_key", ORACLE_EVENT_KEYS[rest])
    return OracleScorer(**kwargs)


register_scorer("oracle", _make_oracle, form="oracle:minigrid", overwrite=True)  # the others: ORACLE_EVENT_KEYS
