"""Training the package's built-in scorers: captioned frames of an environment -> a small CLIP model.

``vlmrb build-scorer NAME --out DIR`` runs :func:`build_scorer` with that
:class:`~vlmrb_torchrl.scorer_training.domains.Domain` (one tool, several environments). The tool is
environment-free; each env family supplies its domains (``vlmrb_torchrl/envs/<family>/domain.py``,
named in its record: :data:`DOMAINS`). transformers, tokenizers, Pillow and the simulator are imported
when a model is built.
"""

from vlmrb_torchrl.scorer_training.domains import DOMAINS, BuildConfig, Domain, FrameSet, get_domain
from vlmrb_torchrl.scorer_training.train import build_scorer, weights_sha256

__all__ = ["BuildConfig", "DOMAINS", "Domain", "FrameSet", "build_scorer", "get_domain", "weights_sha256"]
