"""Environment factories with rendering and privileged progress events.

Each backend imports its simulator lazily: importing this package needs neither gymnasium nor
minigrid (``pip install 'vlmrb-torchrl[minigrid]'`` when building a MiniGrid env).
"""

from __future__ import annotations

from vlmrb_torchrl.envs.minigrid import MINIGRID_EVENT_KEYS, MiniGridEnv, make_minigrid_env

__all__ = ["MINIGRID_EVENT_KEYS", "MiniGridEnv", "make_minigrid_env"]
