"""Which of each framework's test files run, and with which swap plugin."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SUITES", "Suite"]


@dataclass(frozen=True)
class Suite:
    framework: str  # the section of deselected.toml
    package: str  # whose sdist holds the tests
    plugin: str  # the pytest plugin that swaps the session class
    paths: tuple[str, ...]


SUITES = (
    Suite(
        "openai-agents",
        "openai-agents",
        "integration.framework_suites.swap_openai_agents",
        (
            "tests/memory/test_session.py",
            "tests/memory/test_session_limit.py",
            "tests/memory/test_session_persistence_sanitize.py",
            "tests/memory/test_session_context_wrapper.py",
            "tests/memory/test_openai_responses_compaction_session.py",
            "tests/memory/test_compaction_suffix.py",
            "tests/memory/test_compaction_model_visibility.py",
            "tests/memory/test_sqlalchemy_compaction.py",
            "tests/extensions/memory/test_async_sqlite_session.py",
            "tests/extensions/memory/test_redis_session.py",
            "tests/extensions/memory/test_sqlalchemy_session.py",
            "tests/extensions/memory/test_encrypt_session.py",
            "tests/test_agent_runner.py",
            "tests/test_agent_runner_streamed.py",
        ),
    ),
    Suite(
        "langchain-core",
        "langchain-core",
        "integration.framework_suites.swap_langchain",
        (
            "tests/unit_tests/chat_history/test_chat_history.py",
            "tests/unit_tests/runnables/test_history.py",
        ),
    ),
)
