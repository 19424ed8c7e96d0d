"""Settings and fixtures shared by tests/ and integration/ (neither is imported from here)."""

from __future__ import annotations

from hypothesis import settings

# The machines that run this suite are small and busy: a per-example deadline would fail
# property tests for being slow, not wrong. Examples stay bounded by max_examples.
settings.register_profile("compozy", deadline=None)
settings.load_profile("compozy")
