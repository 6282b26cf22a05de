"""The minigrid family (its record comes with the family registry)."""
