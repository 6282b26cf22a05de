"""Training recipes (``vlmrb train dqn|sac``), each readable top to bottom in its own module (`dqn`,
`sac`), sharing one module per concern: `config`, `run` (run directory, checkpoints), `replay`
(the replay modes), `loop` (the collect -> store -> learn machinery), `evaluate`, `envs`, `gallery`."""
