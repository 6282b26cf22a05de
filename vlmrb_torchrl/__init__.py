"""vlmrb_torchrl: VLM-guided experience replay (VLM-RB) components for TorchRL.

A frozen vision-language model scores short clips of the agent's own experience;
the scores become replay priorities, and the learner samples from a mixture of
VLM-prioritized and uniform replay (arXiv 2602.01915).

The components below are imported on first use (``from vlmrb_torchrl import VLMReplayBuffer``
works as usual): importing the package itself loads neither torch nor TorchRL, so that the
``vlmrb`` command answers ``--help``, ``--version`` and configuration errors at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vlmrb_torchrl._lazy import lazy_exports

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS = {
    "AsyncScorer": "vlmrb_torchrl.scoring.worker",
    "ClipBatch": "vlmrb_torchrl.scoring.clips",
    "ClipScoring": "vlmrb_torchrl.scoring.clip_scoring",
    "ClipSpec": "vlmrb_torchrl.scoring.clips",
    "ClipStream": "vlmrb_torchrl.scoring.clips",
    "StateRenderer": "vlmrb_torchrl.scoring.render",
    "VLMPrioritizedSampler": "vlmrb_torchrl.replay.sampler",
    "VLMReplayBuffer": "vlmrb_torchrl.replay.buffer",
    "VLMScoreTransform": "vlmrb_torchrl.scoring.transform",
    "make_async_scorer": "vlmrb_torchrl.scoring.backends",
    "make_clip_scoring": "vlmrb_torchrl.scoring.clip_scoring",
    "make_vlm_replay_buffer": "vlmrb_torchrl.replay.buffer",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from vlmrb_torchrl.replay.buffer import VLMReplayBuffer, make_vlm_replay_buffer
    from vlmrb_torchrl.scoring.clip_scoring import ClipScoring, make_clip_scoring
    from vlmrb_torchrl.scoring.clips import ClipBatch, ClipSpec, ClipStream
    from vlmrb_torchrl.scoring.render import StateRenderer
    from vlmrb_torchrl.replay.sampler import VLMPrioritizedSampler
    from vlmrb_torchrl.scoring.backends import make_async_scorer
    from vlmrb_torchrl.scoring.transform import VLMScoreTransform
    from vlmrb_torchrl.scoring.worker import AsyncScorer


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
