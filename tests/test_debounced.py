"""``Debounced.of_steps``: the same steps as a background job on a task or on a thread."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import pytest

from compozy_memory._io.sync_transport import drive
from compozy_memory._io.transport import adrive
from compozy_memory._wire.background import Debounced
from compozy_memory._wire.effects import Call, Sleep
from compozy_memory._wire.steps import Steps
from compozy_memory.errors import CompozyMemoryError, ConflictError

T = TypeVar("T")


class SyncIO:
    """A sync driver of steps that make no call."""

    synchronous = True
    metrics: Any = None

    def call(self, call: Call[Any]) -> Any:
        raise AssertionError(f"no call expected, got {call}")

    def drive(self, steps: Steps[T]) -> T:
        return drive(steps, self)


class AsyncIO:
    """An async driver of steps that make no call."""

    synchronous = False
    metrics: Any = None

    async def call(self, call: Call[Any]) -> Any:
        raise AssertionError(f"no call expected, got {call}")

    async def drive(self, steps: Steps[T]) -> T:
        return await adrive(steps, self)


def counting(runs: list[int], fail: bool = False) -> Steps[None]:
    yield from Sleep(0)
    runs.append(len(runs) + 1)
    if fail:
        raise ConflictError("lost a race")


@pytest.mark.parametrize("io", [SyncIO(), AsyncIO()])
async def test_a_burst_of_fires_costs_one_or_two_runs_on_either_kind(io: Any) -> None:
    runs: list[int] = []
    job = Debounced.of_steps(lambda: counting(runs), io, 0.01)
    for _ in range(50):
        job.fire()
    await job.wait_idle()
    assert job.wait_idle_sync(5.0)
    assert 1 <= len(runs) <= 2


@pytest.mark.parametrize("io", [SyncIO(), AsyncIO()])
async def test_a_library_error_goes_to_the_handler(io: Any) -> None:
    runs: list[int] = []
    seen: list[CompozyMemoryError] = []
    job = Debounced.of_steps(lambda: counting(runs, fail=True), io, 0.0, failed=seen.append)
    job.fire()
    await job.wait_idle()
    assert job.wait_idle_sync(5.0)
    assert runs == [1]
    assert [type(e) for e in seen] == [ConflictError]


async def test_without_a_handler_the_error_ends_the_task() -> None:
    runs: list[int] = []
    job = Debounced.of_steps(lambda: counting(runs, fail=True), AsyncIO(), 0.0)
    job.fire()
    with pytest.raises(ConflictError):
        await job.wait_idle()
    await asyncio.sleep(0)
    assert runs == [1]


async def test_a_coroutine_standing_in_for_the_steps_is_awaited() -> None:
    runs: list[int] = []

    async def work() -> None:
        runs.append(1)

    job = Debounced.of_steps(work, AsyncIO(), 0.0)  # type: ignore[arg-type]
    job.fire()
    await job.wait_idle()
    assert runs == [1]


@pytest.mark.parametrize("io", [SyncIO(), AsyncIO()])
async def test_a_sooner_fire_moves_a_held_back_run_forward(io: Any) -> None:
    # The indexer holds a write back for a batch (a long delay); a fire with the debounce
    # (enough writes) runs it then, once, not at the long delay's end as well.
    runs: list[int] = []
    job = Debounced.of_steps(lambda: counting(runs), io, 0.01)
    job.fire(60.0)
    await asyncio.sleep(0.2)
    assert runs == []  # held back
    job.fire()
    for _ in range(200):
        if runs:
            break
        await asyncio.sleep(0.01)
    assert runs == [1]
    await asyncio.sleep(0.2)
    assert runs == [1]
    assert job.wait_idle_sync(5.0)
    await job.wait_idle()


@pytest.mark.parametrize("io", [SyncIO(), AsyncIO()])
async def test_waiting_for_a_held_back_run_starts_it_at_once(io: Any) -> None:
    runs: list[int] = []
    job = Debounced.of_steps(lambda: counting(runs), io, 0.01)
    job.fire(60.0)
    job.fire(30.0)  # a later fire does not push the due run back, nor add one
    started = asyncio.get_running_loop().time()
    if isinstance(io, SyncIO):
        assert job.wait_idle_sync(5.0)
    else:
        await job.wait_idle()
    assert runs == [1]
    assert asyncio.get_running_loop().time() - started < 5.0


@pytest.mark.parametrize("io", [SyncIO(), AsyncIO()])
async def test_a_held_back_run_is_dropped_on_close(io: Any) -> None:
    runs: list[int] = []
    job = Debounced.of_steps(lambda: counting(runs), io, 0.01)
    job.fire(60.0)
    job.close()
    job.hurry()
    await asyncio.sleep(0.1)
    assert job.wait_idle_sync(5.0)
    await job.wait_idle()
    assert runs == []


@pytest.mark.parametrize("io", [SyncIO(), AsyncIO()])
async def test_a_fire_while_a_waited_for_run_works_is_not_held_back(io: Any) -> None:
    # A write during the step a wait started asks for a batch's delay: the waiter still gets
    # its run at once, not 60 s later.
    runs: list[int] = []
    holder: list[Debounced] = []

    def steps() -> Steps[None]:
        yield from Sleep(0)
        runs.append(len(runs) + 1)
        if len(runs) == 1:
            holder[0].fire(60.0)

    job = Debounced.of_steps(steps, io, 0.01)
    holder.append(job)
    job.fire(60.0)
    started = asyncio.get_running_loop().time()
    if isinstance(io, SyncIO):
        assert job.wait_idle_sync(5.0)
    else:
        await asyncio.wait_for(job.wait_idle(), 5.0)
    assert runs == [1, 2]
    assert asyncio.get_running_loop().time() - started < 5.0
