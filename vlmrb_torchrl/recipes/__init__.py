"""Training recipes (``vlmrb train dqn|sac``): readable top to bottom, sharing `common`."""
