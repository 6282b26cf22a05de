"""The robosuite family (its record comes with the family registry)."""
