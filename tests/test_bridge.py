"""ThreadSafeFuture and WaitingTaskHolder: completions from foreign threads re-entering trio.

No server. Threads are real (``threading.Thread``); "the waiter is parked" is proved with
``trio.testing.wait_all_tasks_blocked`` rather than with sleeps.
"""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from framework import ThreadSafeFuture, WaitingTaskHolder


def in_thread(fn, *args) -> threading.Thread:
    thread = threading.Thread(target=fn, args=args)
    thread.start()
    return thread


async def test_result_from_another_thread_wakes_the_waiter():
    future = ThreadSafeFuture()
    seen = []

    async def waiter():
        seen.append(await future.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert not future.done()
        in_thread(future.set_result, 42).join()
    assert seen == [42]
    assert future.done()


async def test_exception_from_another_thread_is_raised_by_wait():
    future = ThreadSafeFuture()
    in_thread(future.set_exception, ValueError("server said no")).join()
    with pytest.raises(ValueError, match="server said no"):
        await future.wait()


async def test_set_on_the_trio_thread_before_the_wait():
    # async_infer may call back in the caller's thread when the call is already over
    future = ThreadSafeFuture()
    assert future.set_result("early")
    assert await future.wait() == "early"


async def test_set_on_the_trio_thread_while_waiting():
    future = ThreadSafeFuture()
    seen = []

    async def waiter():
        seen.append(await future.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        future.set_result("late")
    assert seen == ["late"]


async def test_second_set_is_ignored():
    future = ThreadSafeFuture()
    assert future.set_result(1)
    assert not future.set_result(2)
    assert not future.set_exception(RuntimeError("too late"))
    assert await future.wait() == 1


async def test_callback_after_the_waiter_was_cancelled_is_harmless():
    future = ThreadSafeFuture()
    cancelled = []
    with trio.move_on_after(0.01) as scope:
        await future.wait(on_cancel=lambda: cancelled.append(True))
    assert scope.cancelled_caught
    assert cancelled == [True]
    # the gRPC callback arrives afterwards: stored, nobody reads it, nothing raises
    in_thread(future.set_result, "orphan").join()
    await trio.testing.wait_all_tasks_blocked()
    assert future.done()


async def test_failing_cancel_hook_does_not_mask_cancelled():
    future = ThreadSafeFuture()

    def bad_hook():
        raise RuntimeError("cancel failed")

    with trio.move_on_after(0.01) as scope:
        await future.wait(on_cancel=bad_hook)
    assert scope.cancelled_caught


def test_callback_after_the_run_ended_is_dropped():
    kept = []

    async def main():
        kept.append(ThreadSafeFuture())

    trio.run(main)
    # trio.RunFinishedError is swallowed: the foreign thread sees a normal return
    errors = []

    def late():
        try:
            kept[0].set_result("after the run")
        except BaseException as exc:  # noqa: BLE001 - the point of the test
            errors.append(exc)

    in_thread(late).join()
    assert errors == []
    assert not kept[0].set_result("again")  # still one-shot


async def test_holder_done_waiting_from_a_thread():
    holder = WaitingTaskHolder()
    seen = []

    async def framework_side():
        seen.append(await holder.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(framework_side)
        await trio.testing.wait_all_tasks_blocked()
        in_thread(holder.done_waiting, {"y": 2.0}).join()
        assert holder.used
    assert seen == [{"y": 2.0}]


async def test_holder_done_waiting_with_an_exception():
    holder = WaitingTaskHolder()
    holder.done_waiting(exception=KeyError("missing"))
    with pytest.raises(KeyError, match="missing"):
        await holder.wait()


async def test_holder_run_async_runs_the_function_in_the_wait_and_returns_its_value():
    holder = WaitingTaskHolder()
    calls = []

    async def work(x):
        calls.append(x)
        await trio.sleep(0)
        return 2 * x

    holder.run_async(work, 21)
    assert calls == []  # only run by the framework's wait
    assert await holder.wait() == 42
    assert calls == [21]
    assert not hasattr(holder, "start_soon")  # the old name suggested a task of its own: gone


@pytest.mark.parametrize("first", ["done_waiting", "run_async"])
@pytest.mark.parametrize("second", ["done_waiting", "run_async"])
async def test_holder_used_twice_is_an_error(first, second):
    holder = WaitingTaskHolder()

    async def work():
        return 1

    use = {"done_waiting": lambda: holder.done_waiting(1), "run_async": lambda: holder.run_async(work)}
    use[first]()
    with pytest.raises(RuntimeError, match="already completed"):
        use[second]()


async def test_holder_on_cancel_hook_runs_when_the_event_is_cancelled():
    holder = WaitingTaskHolder()
    aborted = []
    holder.on_cancel(lambda: aborted.append(True))
    with trio.move_on_after(0.01):
        await holder.wait()
    assert aborted == [True]
    holder.done_waiting("late")  # the work finishing later is harmless
