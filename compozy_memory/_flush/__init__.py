"""Bringing a memory back under budget: settings, planner, summarizers, lock, flusher."""
