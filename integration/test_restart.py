"""Server crashes under load: SIGKILL, and a modelled power cut, with each appendfsync mode.

A SIGKILL (process crash) loses nothing the server has written to its append-only file: the
operating system still holds those bytes. A power cut also loses what was written but not yet
fsynced. ``native/powercut.c``, preloaded into the server, logs the size of each AOF file at
every successful fsync; after the SIGKILL the test truncates each file to its last fsynced
size, which is what the disk would hold after the power came back.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from compozy_memory import (
    MemoryInstance,
    RetryPolicy,
    connect,
)
from compozy_memory._model.keys import InstanceKeys
from compozy_memory.embedded import EmbeddedServer, find_binary, start_server
from integration.engines import require_redis7
from integration.faults import Load, consistency_problems, tally
from integration.memories import COUNTER

# Run by scripts/reliability: its counts become rows of RELIABILITY.md.
pytestmark = pytest.mark.faults

PROJECT = "restart"
SHIM = Path(__file__).parent / "native" / "powercut.c"
DEFAULT = RetryPolicy()  # the default policy rides out these restarts


@pytest.fixture(scope="session")
def powercut_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the power-cut shim")
    out = tmp_path_factory.mktemp("shim") / "powercut.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM), "-ldl"],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(params=["valkey", "redis7"])
def server_binary(request: pytest.FixtureRequest) -> Path:
    if request.param == "valkey":
        return find_binary("valkey-server")
    return Path(require_redis7())


@dataclass
class Crashable:
    """A server with an append-only file that the test can kill and start again."""

    binary: Path
    directory: Path
    fsync: str
    shim: Path
    server: EmbeddedServer | None = None

    @property
    def log(self) -> Path:
        return self.directory / "fsync.log"

    def start(self, monkeypatch: pytest.MonkeyPatch, port: int | None = None) -> EmbeddedServer:
        with monkeypatch.context() as env:
            env.setenv("LD_PRELOAD", str(self.shim))
            env.setenv("COMPOZY_FSYNC_LOG", str(self.log))
            self.server = start_server(
                self.binary,
                port=port,
                directory=self.directory,
                extra_args=["--appendonly", "yes", "--appendfsync", self.fsync],
            )
        return self.server

    def kill(self) -> None:
        assert self.server is not None
        self.server.process.kill()
        self.server.process.wait()

    def lose_unsynced_writes(self) -> int:
        """Truncate every AOF increment to its last fsynced size; return the bytes dropped."""
        synced: dict[str, int] = {}
        for line in self.log.read_text().splitlines():
            size, path = line.split(" ", 1)
            synced[path] = int(size)
        dropped = 0
        for increment in self.directory.rglob("*.incr.aof"):
            keep = synced.get(str(increment.resolve()), 0)
            length = increment.stat().st_size
            if length > keep:
                dropped += length - keep
                with increment.open("r+b") as f:
                    f.truncate(keep)
        return dropped


@pytest.fixture
def crashable(
    server_binary: Path, powercut_library: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[str], Crashable]]:
    made: list[Crashable] = []

    def make(fsync: str) -> Crashable:
        c = Crashable(server_binary, tmp_path / "data", fsync, powercut_library)
        made.append(c)
        return c

    yield make
    for c in made:
        if c.server is not None:
            c.server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("fsync", ["always", "everysec"])
@pytest.mark.parametrize("crash", ["sigkill", "power-cut"])
async def test_a_crash_under_load(
    crashable: Callable[[str], Crashable],
    server_binary: Path,
    fsync: str,
    crash: str,
    monkeypatch: pytest.MonkeyPatch,
    record: Callable[..., None],
) -> None:
    """6 writers on 3 memories; the server dies mid-load and comes back on the same port and
    files. The writers keep going: their calls wait (bounded retries) and never fail."""
    crashing = crashable(fsync)
    server = crashing.start(monkeypatch)
    port = server.port
    client = connect(server.url, socket_timeout=2, socket_connect_timeout=1)
    assert isinstance(client, Redis)  # connect() leaves retries to the handles' RetryPolicy
    counter = COUNTER
    mems = [
        MemoryInstance.open(client, project=PROJECT, key=f"m{i}", counter=counter, retry=DEFAULT)
        for i in range(3)
    ]
    stop = asyncio.Event()
    load = Load(lambda w, s: mems[w % 3], stop=stop)
    acked_at, writers = load.acked_at, load.start(6)
    await asyncio.sleep(1.0)
    acked_before = len(acked_at)
    crashing.kill()
    killed_at = time.monotonic()
    dropped = crashing.lose_unsynced_writes() if crash == "power-cut" else 0
    await asyncio.sleep(0.3)
    crashing.start(monkeypatch, port=port)
    await asyncio.sleep(1.0)
    stop.set()
    await asyncio.gather(*writers)
    # Connections pooled before the crash and idle since are dead: the handles' retries got
    # past theirs, the raw reads of the tally have none.
    await client.connection_pool.disconnect()
    t = await tally(client, [m.keys for m in mems], load.attempted, load.acknowledged)
    failed = load.failed
    for mem in mems:
        assert await consistency_problems(client, mem.keys) == []
    stored = await stored_contents(client, mems)
    lost = [c for c in acked_at if c not in stored]
    window_ms = (killed_at - min(acked_at[c] for c in lost)) * 1000 if lost else 0.0
    stats = await client.info("commandstats")
    loads = stats.get("cmdstat_function|load", {}).get("calls", 0)
    fcalls = stats.get("cmdstat_fcall", {}).get("calls", 0)
    await client.aclose()

    assert failed == 0
    assert t.duplicated == 0
    # The functions library was persisted with the data: the restarted server served the
    # writers' FCALLs without being given it again.
    assert fcalls > 0
    assert loads == 0
    # Only writes the dead server had answered: replies already in flight may be read just
    # after the kill, never after the restart.
    assert all(acked_at[c] < killed_at + 0.2 for c in lost)
    if fsync == "always" or crash == "sigkill":
        assert t.lost == 0
    else:
        # everysec: the last second or so of acknowledged writes, and never more than two.
        assert window_ms < 2_500
    what = {"sigkill": "server SIGKILLed", "power-cut": "power cut (SIGKILL + unsynced AOF lost)"}
    promise = (
        "nothing lost, nothing duplicated"
        if fsync == "always" or crash == "sigkill"
        else "loses at most the last ~1 s (2 s worst case) of acknowledged writes; "
        "nothing duplicated"
    )
    record(
        group="restarts",
        fault=f"{what[crash]} mid-load, back 0.3 s later; appendfsync {fsync}",
        engine="valkey" if "valkey" in server_binary.name else "redis7",
        promise=promise,
        tally=t,
        observed=(
            f"{acked_before} acked before the crash; {dropped} unsynced AOF bytes dropped; "
            + (f"lost writes acked in the last {window_ms:.0f} ms" if lost else "none lost")
            + f"; {failed} calls failed (default RetryPolicy); the functions library "
            f"survived the restart ({fcalls} FCALL, {loads} FUNCTION LOAD after it)"
        ),
    )


async def stored_contents(client: Redis, mems: list[MemoryInstance]) -> set[str]:
    out: set[str] = set()
    for mem in mems:
        keys: InstanceKeys = mem.keys
        out |= {json.loads(e)["content"] for e in await client.lrange(keys.msgs, 0, -1)}
    return out
