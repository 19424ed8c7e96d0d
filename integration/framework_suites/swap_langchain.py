"""pytest plugin: LangChain's ``InMemoryChatMessageHistory``, swapped for
CompozyChatMessageHistory (each history a memory of its own, as each in-memory one is)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import langchain_core.chat_history
import pytest
from langchain_core.messages import BaseMessage

from compozy_memory._model.tokens import default_counter
from compozy_memory._wire.scripts import library
from compozy_memory.adapters.langchain import CompozyChatMessageHistory
from integration.framework_suites import engine as suite


class InMemoryChatMessageHistory(CompozyChatMessageHistory):
    """Stands for ``langchain_core.chat_history.InMemoryChatMessageHistory``."""

    def __init__(self, *, messages: Sequence[BaseMessage] = ()) -> None:
        super().__init__(suite.memory("langchain", uuid.uuid4().hex))
        if messages:
            self.add_messages(messages)


def pytest_configure(config: pytest.Config) -> None:
    del config
    # The server starts, the token encoder and the scripts load now, not inside the first
    # test's event loop (whose blocking-call checks would flag them, not the adapter).
    suite.url()
    default_counter()
    library()  # every script, read from lua/ once
    langchain_core.chat_history.InMemoryChatMessageHistory = InMemoryChatMessageHistory  # type: ignore[assignment,misc]


def pytest_sessionfinish(session: pytest.Session) -> None:
    suite.finish(session.config)
