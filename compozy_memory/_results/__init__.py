"""Stored results, as one feature: large payloads kept once outside any memory, named by their
hash, and read back by reference (:mod:`~compozy_memory._results.store`), their script calls
(:mod:`~compozy_memory._results.calls`), and their Lua in ``lua/results/``."""
