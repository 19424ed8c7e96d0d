"""Ctrl-C on the CLI as a terminal delivers it (SIGINT to the whole process group): one line at
most, no traceback, exit 130, and nothing left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "compozy-memory"


def _interruptible() -> None:
    """In the child: SIGINT as a terminal gives it, even when the tests run where it is
    ignored (a background job), which the child would otherwise inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups in /proc")
def test_ctrl_c_stops_the_demo_at_once_without_tracebacks() -> None:
    replicas = 3
    process = subprocess.Popen(
        [str(SCRIPT), "demo", "--replicas", str(replicas), "--conversations", "6",
         "--turns", "1000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=_interruptible,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        # Running: this process, the embedded server (and its watchdog), the replicas.
        while len(_group(process.pid)) < replicas + 2:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the demo's replicas did not start"
            time.sleep(0.1)
        time.sleep(1.0)  # writing and flushing
        os.killpg(process.pid, signal.SIGINT)
        started = time.monotonic()
        _, err = process.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip() == "interrupted: the replicas and the embedded server are stopped"
    assert took < 10, f"took {took:.1f} s to stop"  # 9 s of replica retries before the fix
    deadline = time.monotonic() + 10
    while _group(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group(process.pid) == []


def test_ctrl_c_while_the_cli_loads_is_exit_130_without_a_traceback(tmp_path: Path) -> None:
    """SIGINT lands while a module loads: here made certain by raising KeyboardInterrupt as
    pydantic is imported, where the console script's own import took it before."""
    (tmp_path / "sitecustomize.py").write_text(
        textwrap.dedent(
            """
            import sys

            class Interrupt:
                def find_spec(self, name, path=None, target=None):
                    if name == "pydantic":
                        raise KeyboardInterrupt
                    return None

            sys.meta_path.insert(0, Interrupt())
            """
        )
    )
    entry = "import sys; from compozy_memory._ops.entry import main; sys.exit(main())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    done = subprocess.run(
        [sys.executable, "-c", entry, "ls", "-p", "acme"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr == ""


def test_the_console_script_enters_through_the_guarded_main() -> None:
    text = SCRIPT.read_text() if SCRIPT.exists() else ""
    if not text:
        pytest.skip("no compozy-memory console script beside this interpreter")
    assert "from compozy_memory._ops.entry import main" in text
