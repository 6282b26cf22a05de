"""Environment factories with rendering and privileged progress events.

Each backend imports its simulator lazily: importing this package needs neither gymnasium nor
minigrid (``pip install 'vlmrb-torchrl[minigrid]'`` when building a MiniGrid env) nor ale-py
(``pip install 'vlmrb-torchrl[atari]'`` when building an Atari env).
"""

from __future__ import annotations

from vlmrb_torchrl.envs.atari import ATARI_PROMPTS, AtariEnv, atari_prompt, make_atari_env
from vlmrb_torchrl.envs.minigrid import MINIGRID_EVENT_KEYS, MiniGridEnv, make_minigrid_env

__all__ = [
    "ATARI_PROMPTS",
    "AtariEnv",
    "MINIGRID_EVENT_KEYS",
    "MiniGridEnv",
    "atari_prompt",
    "make_atari_env",
    "make_minigrid_env",
]
