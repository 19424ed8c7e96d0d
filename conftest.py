"""Settings and fixtures shared by tests/ and integration/ (neither is imported from here)."""

from __future__ import annotations

import gc
import re
import sys
import warnings
from collections.abc import Iterator

import pytest
from hypothesis import settings

# The machines that run this suite are small and busy: a per-example deadline would fail
# property tests for being slow, not wrong. Examples stay bounded by max_examples.
settings.register_profile("compozy", deadline=None)
settings.load_profile("compozy")

# What redis-py and asyncio say when a client, connection, transport, stream or socket is
# collected without having been closed ("loop is closed": a stream left open past its loop).
UNCLOSED = re.compile(r"unclosed|loop is closed", re.IGNORECASE)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Fail the test that leaves a client, connection or transport open, not a later one.

    An unclosed connection is only reported when the garbage collector frees it, which may be
    during any later test (with ``filterwarnings = error`` that test then fails for another's
    leak). Collecting here, once the test's fixtures are finalised (and a module's, after
    its last test), pins the warning on the leaker as an error in its teardown.
    """
    result = yield
    # pytest keeps a failed test's traceback here (for post-mortem debugging), and with it
    # every client its frames held: drop it so they are collected now, not in a later test.
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    # What is still alive now belongs to longer-lived fixtures and caches: freezing it keeps
    # the next collection to what the next test makes (a full one costs ~50 ms here).
    gc.freeze()
    leaks = []
    for warning in caught:
        if issubclass(warning.category, ResourceWarning) and UNCLOSED.search(str(warning.message)):
            leaks.append(str(warning.message))
        else:  # not ours to judge: let the configured filters (error) decide
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    if leaks:
        listed = "\n  ".join(leaks)
        pytest.fail(f"the test left {len(leaks)} resource(s) open:\n  {listed}", pytrace=False)
    return result


def pytest_unconfigure() -> None:
    gc.unfreeze()
