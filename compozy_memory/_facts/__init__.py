"""Session facts, as one feature: how one fact is checked, counted and shown
(:mod:`~compozy_memory._facts.lines`), a memory's capped map of them as steps
(:mod:`~compozy_memory._facts.facts`), their script calls, which the memory's gateway mixes in
(:mod:`~compozy_memory._facts.calls`), and their Lua in ``lua/facts/``."""
