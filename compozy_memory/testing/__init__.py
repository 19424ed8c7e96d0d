"""pytest fixtures for code that uses compozy-memory (extra ``testing``).

The plugin (:mod:`compozy_memory.testing.plugin`) is registered as a ``pytest11`` entry
point, so installing compozy-memory makes its fixtures available to every test suite without
a line of configuration; ``-p no:compozy_memory`` turns it off. Its fixtures all start with
``compozy_``, and importing it imports neither fakeredis nor testcontainers, so a suite that
does not ask for them pays nothing.
"""
