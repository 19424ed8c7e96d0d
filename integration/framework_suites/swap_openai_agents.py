"""pytest plugin: the OpenAI Agents SDK's session classes, swapped for CompozySession.

Each replacement keeps the constructor (and ``from_url``) of the class it stands for and maps
the store that class would use (database file and table, Redis client and key prefix, SQL
engine) and the session id to one memory, so two sessions the original would share share a
memory, and no others do.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import agents
import agents.extensions.memory.async_sqlite_session as async_sqlite_module
import agents.extensions.memory.redis_session as redis_module
import agents.extensions.memory.sqlalchemy_session as sqlalchemy_module
import agents.memory
import agents.memory.sqlite_session as sqlite_module
import pytest
from agents.memory import SessionSettings

from compozy_memory import MemoryInstance
from compozy_memory.adapters.openai_agents import CompozySession
from integration.framework_suites import engine as suite

Settings = SessionSettings | dict[str, Any] | None


def _database(db_path: str | Path) -> str:
    # Every in-memory SQLite session is a database of its own.
    return f"memory-{uuid.uuid4().hex}" if str(db_path) == ":memory:" else str(db_path)


class SQLiteSession(CompozySession):
    """Stands for ``agents.SQLiteSession`` (its close() is synchronous)."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Settings = None,
    ) -> None:
        del sessions_table
        memory = suite.memory("sqlite", _database(db_path), messages_table, session_id)
        super().__init__(memory, session_id=session_id, session_settings=session_settings)

    def close(self) -> None:  # type: ignore[override]  # SQLiteSession.close is synchronous
        self._closed = True  # the memory's client stays open: the original owns nothing more


class AsyncSQLiteSession(CompozySession):
    """Stands for ``agents.extensions.memory.AsyncSQLiteSession``."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Settings = None,
    ) -> None:
        del sessions_table
        memory = suite.memory("async-sqlite", _database(db_path), messages_table, session_id)
        super().__init__(memory, session_id=session_id, session_settings=session_settings)


class RedisSession(CompozySession):
    """Stands for ``agents.extensions.memory.RedisSession``."""

    def __init__(
        self,
        session_id: str,
        *,
        redis_client: Any,
        key_prefix: str = "agents:session",
        ttl: int | None = None,
        session_settings: Settings = None,
    ) -> None:
        del ttl
        name = suite.store_name(redis_client)
        memory = suite.memory("redis", name, key_prefix, session_id)
        super().__init__(memory, session_id=session_id, session_settings=session_settings)

    @classmethod
    def from_url(  # type: ignore[override]  # RedisSession.from_url's signature
        cls,
        session_id: str,
        *,
        url: str,
        redis_kwargs: dict[str, Any] | None = None,
        session_settings: Settings = None,
        **kwargs: Any,
    ) -> RedisSession:
        del redis_kwargs
        session = cls(session_id, redis_client=url, session_settings=session_settings, **kwargs)
        session._owns_client = True
        return session

    async def ping(self) -> bool:
        self._check_open()
        memory = self.memory
        assert isinstance(memory, MemoryInstance)  # the suites open async handles
        return bool(await memory.client.ping())


class SQLAlchemySession(CompozySession):
    """Stands for ``agents.extensions.memory.SQLAlchemySession``."""

    def __init__(
        self,
        session_id: str,
        *,
        engine: Any,
        create_tables: bool = False,
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Settings = None,
        ensure_ascii: bool = True,
    ) -> None:
        del create_tables, sessions_table, ensure_ascii
        name = engine if isinstance(engine, str) else _engine_name(engine)
        memory = suite.memory("sqlalchemy", name, messages_table, session_id)
        super().__init__(memory, session_id=session_id, session_settings=session_settings)

    @classmethod
    def from_url(  # type: ignore[override]  # SQLAlchemySession.from_url's signature
        cls,
        session_id: str,
        *,
        url: str,
        engine_kwargs: dict[str, Any] | None = None,
        session_settings: Settings = None,
        **kwargs: Any,
    ) -> SQLAlchemySession:
        del engine_kwargs
        database = _database(":memory:") if ":memory:" in url or url.endswith("://") else url
        return cls(session_id, engine=database, session_settings=session_settings, **kwargs)


def _engine_name(sql_engine: Any) -> str:
    url = str(getattr(sql_engine, "url", ""))
    if url and ":memory:" not in url and not url.endswith("://"):
        return url
    return suite.store_name(sql_engine)


SWAPS: list[tuple[Any, str, type[CompozySession]]] = [
    (agents, "SQLiteSession", SQLiteSession),
    (agents.memory, "SQLiteSession", SQLiteSession),
    (sqlite_module, "SQLiteSession", SQLiteSession),
    (async_sqlite_module, "AsyncSQLiteSession", AsyncSQLiteSession),
    (redis_module, "RedisSession", RedisSession),
    (sqlalchemy_module, "SQLAlchemySession", SQLAlchemySession),
]


def pytest_configure(config: pytest.Config) -> None:
    del config
    for module, name, replacement in SWAPS:
        setattr(module, name, replacement)


def pytest_sessionfinish(session: pytest.Session) -> None:
    suite.finish(session.config)
