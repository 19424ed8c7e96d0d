"""Bringing a memory back under budget, as one feature: settings, planner, summarizers, lock,
flusher, their script calls (``calls``, which the memory's gateway mixes in) and their Lua in
``lua/flush/``."""
