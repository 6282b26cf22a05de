"""The atari family (its record comes with the family registry)."""
