"""The frameworks' own session / chat-history tests, run against our adapters.

``python -m integration.framework_suites`` (``scripts/framework-tests``) downloads the sdist of
each installed framework version from the package index (nothing of theirs is kept in this
repository), runs the selected test files with a pytest plugin that swaps their session class
for ours (only the constructor changes), and fails on any failure. Tests that cannot apply to a
Redis-backed store are deselected by name, each with a reason, in ``deselected.toml``.
"""
