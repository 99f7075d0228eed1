from workers import offline  # noqa: F401  (hub access off before any engine or the catalog loads)
