"""Scorers: map clips (TensorDict ``[B, T]``) to per-clip task-progress scores in ``[0, 1]``.

Build one from a spec string with :func:`make_scorer` (``"oracle:minigrid"``,
``"python:<module>:<callable>"``, or any backend added with :func:`register_scorer`), wrap a
function with :class:`CallableScorer`, or write any class following the :class:`Scorer`
protocol.
"""

from __future__ import annotations

from vlmrb_torchrl.scorers.base import (
    CallableScorer,
    Scorer,
    check_clips,
    make_scorer,
    prompt_hash,
    register_scorer,
    registered_scorer_forms,
    validate_scores,
)
from vlmrb_torchrl.scorers.oracle import ORACLE_EVENT_KEYS, OracleScorer
from vlmrb_torchrl.scorers.wrappers import NoisyScorer

__all__ = [
    "Scorer",
    "CallableScorer",
    "OracleScorer",
    "NoisyScorer",
    "make_scorer",
    "register_scorer",
    "registered_scorer_forms",
    "prompt_hash",
    "validate_scores",
    "check_clips",
    "ORACLE_EVENT_KEYS",
]
