"""Sessions, as one feature: a project's session index (every session of a project, per agent,
by last activity) in :mod:`~compozy_memory._sessions.index`, its script calls in
:mod:`~compozy_memory._sessions.calls`, and its Lua in ``lua/sessions/``."""
