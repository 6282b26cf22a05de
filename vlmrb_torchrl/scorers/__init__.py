"""Scorers: map clips (TensorDict ``[B, T]``) to per-clip task-progress scores in ``[0, 1]``.

Build one from a spec string with :func:`make_scorer` (``"hf:<hub id or local dir>"``,
``"clip:<hub id or local dir>"``, ``"openai:<base_url>#<model>"``, ``"oracle:minigrid"``,
``"python:<module>:<callable>"``, ``"distill:<teacher spec>"`` (:class:`DistilledScorer`), ``"builtin:minigrid"`` (the small CLIP shipped with the
package, :func:`make_builtin_scorer`; it derives its checks from a MiniGrid / BabyAI mission,
:func:`mission_prompt_set`, :class:`MissionScorer`), a bare local model directory, or any backend added with
:func:`register_scorer`), wrap a function with :class:`CallableScorer`, or write any class
following the :class:`Scorer` protocol. The VLM backends import transformers / Pillow only when
a scorer is built (``pip install 'vlmrb-torchrl[vlm]'``); their modules themselves (``contrastive``,
``generative``, ``openai``) are imported on first use of one of their names or spec prefixes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vlmrb_torchrl.scorers.base import (
    CallableScorer,
    Scorer,
    ScorerInputError,
    check_clips,
    make_scorer,
    prompt_hash,
    register_scorer,
    registered_scorer_forms,
    scorer_factory,
    scorer_stats,
    spec_loads_code,
    validate_scores,
)
from vlmrb_torchrl.scorers.oracle import ORACLE_EVENT_KEYS, OracleScorer
from vlmrb_torchrl.scorers.prompts import ENV_FAMILIES, PromptCheck, contrastive_prompts, default_prompt
from vlmrb_torchrl.scorers.wrappers import CachedScorer, NoisyScorer, ThresholdScorer

if TYPE_CHECKING:  # imported lazily at run time: see __getattr__
    from vlmrb_torchrl.scorers.contrastive import HFContrastiveScorer
    from vlmrb_torchrl.scorers.generative import HFGenerativeScorer, answer_token_ids
    from vlmrb_torchrl.scorers.builtin import MINIGRID_PROMPT_SET, builtin_model_dir, make_builtin_scorer
    from vlmrb_torchrl.scorers.distill import ClipStudent, DistilledScorer
    from vlmrb_torchrl.scorers.openai import OpenAIScorer, OpenAIScorerError
    from vlmrb_torchrl.envs.minigrid.prompts import MissionScorer, mission_prompt_set, with_mission
    from vlmrb_torchrl.scorers.panels import PanelScorer, mean_logit

#: names of the backend modules, imported on first access: name -> module.
_LAZY_NAMES = {
    "HFContrastiveScorer": "vlmrb_torchrl.scorers.contrastive",
    "HFGenerativeScorer": "vlmrb_torchrl.scorers.generative",
    "answer_token_ids": "vlmrb_torchrl.scorers.generative",
    "OpenAIScorer": "vlmrb_torchrl.scorers.openai",
    "OpenAIScorerError": "vlmrb_torchrl.scorers.openai",
    "make_builtin_scorer": "vlmrb_torchrl.scorers.builtin",
    "builtin_model_dir": "vlmrb_torchrl.scorers.builtin",
    "MINIGRID_PROMPT_SET": "vlmrb_torchrl.scorers.builtin",
    "DistilledScorer": "vlmrb_torchrl.scorers.distill",
    "ClipStudent": "vlmrb_torchrl.scorers.distill",
    "MissionScorer": "vlmrb_torchrl.envs.minigrid.prompts",
    "mission_prompt_set": "vlmrb_torchrl.envs.minigrid.prompts",
    "with_mission": "vlmrb_torchrl.envs.minigrid.prompts",
    "PanelScorer": "vlmrb_torchrl.scorers.panels",
    "mean_logit": "vlmrb_torchrl.scorers.panels",
}

__all__ = [
    "Scorer",
    "CallableScorer",
    "HFGenerativeScorer",
    "HFContrastiveScorer",
    "PanelScorer",
    "mean_logit",
    "OpenAIScorer",
    "OpenAIScorerError",
    "OracleScorer",
    "CachedScorer",
    "NoisyScorer",
    "ThresholdScorer",
    "DistilledScorer",
    "ClipStudent",
    "make_scorer",
    "register_scorer",
    "registered_scorer_forms",
    "prompt_hash",
    "validate_scores",
    "check_clips",
    "ScorerInputError",
    "scorer_stats",
    "scorer_factory",
    "spec_loads_code",
    "answer_token_ids",
    "default_prompt",
    "contrastive_prompts",
    "PromptCheck",
    "ENV_FAMILIES",
    "ORACLE_EVENT_KEYS",
    "make_builtin_scorer",
    "builtin_model_dir",
    "MINIGRID_PROMPT_SET",
    "MissionScorer",
    "mission_prompt_set",
    "with_mission",
]


def __getattr__(name: str) -> Any:
    # PEP 562: the backend modules load when one of their names is first read, so importing
    # vlmrb_torchrl.scorers (or building an oracle / python scorer) does not import them.
    module = _LAZY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later reads skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

