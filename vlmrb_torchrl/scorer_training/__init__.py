"""Training the package's built-in scorer: captioned MiniGrid frames -> a small CLIP model.

``vlmrb build-scorer minigrid --out DIR`` runs :func:`build_minigrid_scorer`. transformers,
tokenizers, Pillow and minigrid are imported when a model is built.
"""

from vlmrb_torchrl.scorer_training.train import BuildConfig, build_minigrid_scorer, weights_sha256

__all__ = ["BuildConfig", "build_minigrid_scorer", "weights_sha256"]
