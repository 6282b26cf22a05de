"""vlmrb_torchrl: VLM-guided experience replay (VLM-RB) components for TorchRL.

A frozen vision-language model scores short clips of the agent's own experience;
the scores become replay priorities, and the learner samples from a mixture of
VLM-prioritized and uniform replay (arXiv 2602.01915).
"""

from vlmrb_torchrl.buffer import VLMReplayBuffer, make_vlm_replay_buffer
from vlmrb_torchrl.clip_scoring import ClipScoring, make_clip_scoring
from vlmrb_torchrl.clips import ClipBatch, ClipSpec, ClipStream
from vlmrb_torchrl.sampler import VLMPrioritizedSampler
from vlmrb_torchrl.scoring_backends import make_async_scorer
from vlmrb_torchrl.transform import VLMScoreTransform
from vlmrb_torchrl.worker import AsyncScorer

__version__ = "0.1.0"

__all__ = [
    "AsyncScorer",
    "ClipBatch",
    "ClipScoring",
    "ClipSpec",
    "ClipStream",
    "VLMPrioritizedSampler",
    "VLMReplayBuffer",
    "VLMScoreTransform",
    "make_async_scorer",
    "make_clip_scoring",
    "make_vlm_replay_buffer",
]
