"""The ``compozy-memory`` console script's entry point: the CLI, guarded while it loads."""

from __future__ import annotations

__all__ = ["main"]


def main() -> int:
    """The ``compozy-memory`` console script: the CLI (:func:`compozy_memory._ops.cli.main`),
    loaded here so that Ctrl-C while it loads ends as Ctrl-C does anywhere else in it: exit
    130, no traceback (the modules it imports take a second or more on a busy machine)."""
    try:
        from compozy_memory._ops.cli import main as run
    except KeyboardInterrupt:
        return 130
    return run()
