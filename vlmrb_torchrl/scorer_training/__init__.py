"""Training the package's built-in scorers: captioned frames of an environment -> a small CLIP model.

``vlmrb build-scorer minigrid|lift --out DIR`` runs :func:`build_scorer` with that
:class:`~vlmrb_torchrl.scorer_training.domains.Domain` (one tool, several environments).
transformers, tokenizers, Pillow and the simulator (minigrid, robosuite) are imported when a
model is built.
"""

from vlmrb_torchrl.scorer_training.domains import DOMAINS, BuildConfig, Domain, get_domain
from vlmrb_torchrl.scorer_training.train import build_lift_scorer, build_minigrid_scorer, build_scorer, weights_sha256

__all__ = ["BuildConfig", "DOMAINS", "Domain", "build_lift_scorer", "build_minigrid_scorer", "build_scorer",
           "get_domain", "weights_sha256"]
