"""Project folders the CLI tests write: one chat memory and one agent, as YAML."""

from __future__ import annotations

from pathlib import Path


def chat_project(
    folder: Path, project: str, *, key: str = "user:{{ .user }}", max_tokens: int = 4000
) -> Path:
    """Write ``compozy.yaml`` in ``folder``: memory ``chat`` (1 h TTL, keys from ``key``) and
    agent ``bot`` using it; returns the folder."""
    (folder / "compozy.yaml").write_text(
        f"project: {project}\n"
        "memories:\n"
        "  - id: chat\n"
        "    type: token_based\n"
        f"    max_tokens: {max_tokens}\n"
        "    persistence: {type: redis, ttl: 1h}\n"
        f'    default_key_template: "{key}"\n'
        "agents:\n"
        "  - id: bot\n"
        "    memory: chat\n"
    )
    return folder
