"""vlmrb_torchrl: VLM-guided experience replay (VLM-RB) components for TorchRL.

A frozen vision-language model scores short clips of the agent's own experience;
the scores become replay priorities, and the learner samples from a mixture of
VLM-prioritized and uniform replay (arXiv 2602.01915).
"""

from vlmrb_torchrl.sampler import VLMPrioritizedSampler

__version__ = "0.1.0"

__all__ = ["VLMPrioritizedSampler"]
