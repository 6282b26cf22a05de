"""The ogbench family (its record comes with the family registry)."""
