"""The README's demo command keeps working (its example: integration/test_docs_blocks.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_replicas_demo_runs_on_the_embedded_engine() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "replicas_demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every memory exact" in done.stdout
    for key in (
        "customer-support:user:alice",
        "customer-support:user:bob",
        "sql-agent:session:wf-7",
    ):
        assert f"{key} " in done.stdout
    # the memories flushed while the replicas wrote, and alice's context shows a summary
    assert "summary of" in done.stdout, done.stdout + done.stderr
