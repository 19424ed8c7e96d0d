"""The project's YAML: schema, loader, registry, agents, key templates."""
