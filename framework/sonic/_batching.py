"""Cross-event batching: the requests of events in flight for one model, merged into one call.

No CMSSW counterpart: CMSSW's ``TritonClient`` sends one request per event and leaves the
merging to Triton's dynamic batcher on the server. This is its client-side twin, which also
pays the client's, gRPC's and the server's per-request cost once per call instead of once
per event (measured: ``cmsbench client-overhead``, ``docs/performance.md``).

``Client.batching = cms.PSet(maxRows=cms.untracked.uint32(64), maxDelay=cms.untracked.uint32(200))``
(off by default, ``maxRows = 0``):

* the requests of one client (one module: the same model, version and requested outputs)
  that go to the same server and whose inputs have the same inner shapes (all but the
  batch dimension) are joined along the batch dimension into one gRPC call (each
  input's parts written one after the other into the request or the shared-memory
  region: one copy) of at most ``maxRows`` rows (and at most the model's ``max_batch_size``); each
  event gets its own rows of the outputs back, views of the response. The model must treat
  rows independently, as Triton's own dynamic batcher assumes; then every event's result is
  identical to that of an unbatched call.
* the first request of a merged call waits for others until no other task can run (every
  other event waits for something outside: none can join before that answers), at most
  ``maxDelay`` microseconds (0: only for those that arrive in the same trio scheduler
  tick); a full call goes at once. A lone event thus never waits for nothing.
  The scheduler hands events to every idle stream in one tick (``framework/core/_scheduler.py``),
  so that they reach the model together.
* one gRPC deadline per call (``Client.timeout``); its completion re-enters trio once (one
  ``TrioToken.run_sync_soon``) for all its events.
* a failed merged call fails that try of each of its events; each event then retries on
  its own, unbatched, under ``Client.retries`` (``framework.sonic._retry``).
* an event cancelled before its call goes leaves the call; after, its rows are dropped on
  arrival; a call whose events were all cancelled is cancelled (``CallContext.cancel``).

Threads: everything here runs on the trio thread except :meth:`Batcher._arrived`, gRPC's
callback, which only hands the outcome to trio (the rule of ``framework/core/_bridge.py``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import trio
import trio.testing

import framework.config as cms
from framework.utilities import ConfigurationError, ExternalFailure

from ._data import TensorSpec, output_array
from ._retry import DEADLINE_STATUS
from ._wire import StackedRows

if TYPE_CHECKING:
    from ._client_stats import ClientCounters
    from ._server_info import ServerInfo
    from ._transport import Call, TensorTransport

__all__ = ["BatchClient", "Batcher", "BatchingOptions", "batching_description", "parse_batching"]

GRACE = 1.0  # seconds past Client.timeout after which the events give up on a call themselves


@dataclasses.dataclass(frozen=True)
class BatchingOptions:
    """``Client.batching``, validated.

    Attributes:
        max_rows: rows of a merged call at most (0 = batching off).
        max_delay: seconds the first request of a call waits for others at most (0 = the same tick).
    """

    max_rows: int = 0
    max_delay: float = 0.0


def batching_description() -> cms.ParameterSetDescription:
    """The ``Client.batching`` PSet."""
    desc = cms.ParameterSetDescription()
    desc.add(
        "maxRows",
        cms.untracked.uint32(0),
        "rows of a merged call at most (limited to the model's max_batch_size); 0 = batching off",
    )
    desc.add(
        "maxDelay",
        cms.untracked.uint32(100),
        "microseconds the first request of a merged call waits for others at most (less once no other "
        "task can run); 0 = only those of the same scheduler tick",
    )
    return desc


def parse_batching(params: Any, what: str) -> BatchingOptions:
    """The validated ``Client.batching`` (``maxRows``, ``maxDelay`` in microseconds).

    Raises:
        ConfigurationError: ``maxDelay`` above 10 s (surely a unit mistake); names the client.
    """
    if params.maxDelay > 10_000_000:
        raise ConfigurationError(f"{what}: Client.batching.maxDelay = {params.maxDelay} microseconds is above 10 s")
    return BatchingOptions(int(params.maxRows), params.maxDelay * 1e-6)


class BatchClient(Protocol):
    """What the batcher uses of its :class:`~framework.sonic.TritonClient` (set by ``connect``)."""

    what: str
    model_name: str
    requested_outputs: tuple[str, ...]
    timeout: float | None
    counters: ClientCounters
    transport: TensorTransport  # how the merged call's tensors travel (shared memory or payloads)

    @property
    def inputs(self) -> Mapping[str, TensorSpec]: ...

    @property
    def outputs(self) -> Mapping[str, TensorSpec]: ...

    def call_options(self) -> dict[str, Any]: ...


class _Slot:
    """One event's part of a merged call: its inputs, then its outputs or the call's error."""

    __slots__ = ("arrays", "rows", "done", "outputs", "error", "dropped")

    def __init__(self, arrays: list[np.ndarray[Any, Any]], rows: int) -> None:
        self.arrays = arrays
        self.rows = rows
        self.done = trio.Event()
        self.outputs: dict[str, np.ndarray[Any, Any]] | None = None
        self.error: BaseException | None = None
        self.dropped = False


class _Batch:
    """One merged call, open (collecting slots) until sent."""

    __slots__ = (
        "key",
        "server",
        "grpc_client",
        "slots",
        "rows",
        "sent",
        "hold",
        "deadline",
        "context",
        "sent_bytes",
        "call",
    )

    def __init__(self, key: tuple[Any, ...], server: ServerInfo, grpc_client: Any, deadline: float) -> None:
        self.key = key
        self.server = server
        self.grpc_client = grpc_client
        self.slots: list[_Slot] = []
        self.rows = 0
        self.sent = False
        self.hold: trio.CancelScope | None = None  # the first request's wait, ended when the call goes
        self.deadline = deadline  # trio clock: the events give up on the call after it
        self.context: Any = None  # tritonclient's CallContext, once sent
        self.sent_bytes = 0
        self.call: Call | None = None  # its tensors (shared memory or payloads), once sent


class Batcher:
    """Merges one client's concurrent requests into calls of up to ``max_rows`` rows (trio thread).

    Args:
        options: ``Client.batching``; max_rows is limited to ``max_batch_size``.
        client: the client (model, specs, requested outputs, call options, counters).
        max_batch_size: the model's (> 0).

    Attributes:
        max_rows: rows per merged call at most; requests with more rows are not merged.
    """

    def __init__(self, options: BatchingOptions, client: BatchClient, max_batch_size: int) -> None:
        self.max_rows = min(options.max_rows, max_batch_size)
        self.max_delay = options.max_delay
        self.client = client
        self._open: dict[tuple[Any, ...], _Batch] = {}  # key -> the call collecting requests

    async def infer(
        self, arrays: list[np.ndarray[Any, Any]], rows: int, server: ServerInfo, grpc_client: Any
    ) -> dict[str, np.ndarray[Any, Any]]:
        """One try of one event's request, as part of a merged call on ``server``.

        Args:
            arrays: the request's inputs in model order, each ``(rows, *inner dims)``.
            rows: the request's batch rows (<= :attr:`max_rows`).

        Returns:
            requested output name -> this event's rows of it, ``(rows, *dims)`` views.

        Raises:
            InferenceServerException: the call failed; the caller's retry policy decides.
            ExternalFailure: no answer within ``Client.timeout`` + 1 s (``status``
                ``DEADLINE_EXCEEDED``, ``retryable``); the caller's retry policy decides.
            ExternalFailure: the call's outputs do not match the model metadata.
            trio.Cancelled: propagated; this event's rows leave the call.
        """
        key = (server.name, *(a.shape[1:] for a in arrays))
        batch = self._open.get(key)
        owner = batch is None or batch.rows + rows > self.max_rows
        if owner:
            if batch is not None:
                self._send(batch)  # no room for these rows: the open call goes now
            timeout = self.client.timeout
            deadline = trio.current_time() + self.max_delay + (timeout + GRACE if timeout else math.inf)
            batch = self._open[key] = _Batch(key, server, grpc_client, deadline)
        assert batch is not None
        slot = _Slot(arrays, rows)
        batch.slots.append(slot)
        batch.rows += rows
        if batch.rows >= self.max_rows:
            self._send(batch)
        if owner:
            try:
                await self._hold(batch)
            except BaseException:
                self._drop(batch, slot)
                raise
            finally:
                self._send(batch)  # also when this event was cancelled: the others' call goes
        try:
            with trio.move_on_at(batch.deadline) as scope:
                await slot.done.wait()
        except BaseException:
            self._drop(batch, slot)
            raise
        if scope.cancelled_caught:
            self._drop(batch, slot)
            raise ExternalFailure(
                f"no answer to a merged call within Client.timeout + {GRACE:g} s; the event gave up on it",
                model=self.client.model_name,
                server=server.name,
                status=DEADLINE_STATUS,
                retryable=True,
            )
        if slot.error is not None:
            raise slot.error
        assert slot.outputs is not None
        return slot.outputs

    async def _hold(self, batch: _Batch) -> None:
        """The first request's wait for others: until trio is idle, ``max_delay`` at most
        (0: one scheduler tick)."""
        if batch.sent:
            return
        if self.max_delay > 0:
            # Wait until no task can run any more (trio.testing.wait_all_tasks_blocked: every
            # other event waits for something outside, so none can join before that answers),
            # at most max_delay; a full call ends the wait early (_send cancels it). A plain
            # timer would also wait when nothing can join, and never less than ~1 ms, the
            # resolution of trio's epoll wait.
            with trio.move_on_after(self.max_delay) as batch.hold:
                await trio.testing.wait_all_tasks_blocked()
        else:
            await trio.lowlevel.checkpoint()  # the other tasks of this tick run first

    def _drop(self, batch: _Batch, slot: _Slot) -> None:
        """A cancelled (or timed-out) event leaves its call."""
        if slot.dropped:
            return
        slot.dropped = True
        if not batch.sent:
            batch.slots.remove(slot)
            batch.rows -= slot.rows
        elif batch.context is not None and all(s.dropped for s in batch.slots):
            batch.context.cancel()  # nobody waits for this call any more

    def _send(self, batch: _Batch) -> None:
        """Send the merged call of ``batch`` (once; nothing if every event left it)."""
        if batch.sent:
            return
        batch.sent = True
        if self._open.get(batch.key) is batch:
            del self._open[batch.key]
        if batch.hold is not None:
            batch.hold.cancel()
        if not batch.slots:
            return
        client = self.client
        try:
            # Each input's parts are not joined here: the request (or the shared-memory
            # region) receives them one after the other, one copy of the merged tensor.
            arrays: dict[str, np.ndarray[Any, Any] | StackedRows] = {}
            for index, spec in enumerate(client.inputs.values()):
                parts = [slot.arrays[index] for slot in batch.slots]
                arrays[spec.name] = parts[0] if len(parts) == 1 else StackedRows(parts)
                batch.sent_bytes += arrays[spec.name].nbytes
            # The merged call's tensors travel as a single request's would: through shared
            # memory when the server is on this host (Client.useSharedMemory), else in gRPC.
            batch.call = client.transport.call(
                batch.server,
                batch.grpc_client,
                client.inputs,
                [client.outputs[n] for n in client.requested_outputs],
                arrays,
                batch.rows,
                all_outputs=len(client.requested_outputs) == len(client.outputs),
            )
            callback = functools.partial(self._arrived, trio.lowlevel.current_trio_token(), batch)
            options = client.call_options()
            batch.context = batch.call.send(batch.grpc_client, client.model_name, options, callback)
        except Exception as exc:  # noqa: BLE001 - e.g. the channel is closed: each event's retry policy decides
            self._complete(batch, None, exc)

    def _arrived(self, token: trio.lowlevel.TrioToken, batch: _Batch, result: Any = None, error: Any = None) -> None:
        # gRPC's callback thread: only hand the outcome over (one re-entry per call); never raise.
        with contextlib.suppress(trio.RunFinishedError):  # the run is over: nobody waits any more
            token.run_sync_soon(self._complete, batch, result, error)

    def _complete(self, batch: _Batch, result: Any, error: BaseException | None) -> None:
        """Give every event of the call its rows, or the call's error (trio thread; never raises)."""
        slots = batch.slots
        client = self.client
        call = batch.call
        try:
            if error is not None:
                # A server restarted on the same port forgot our regions: recoverable.
                raise client.transport.lost_registration(batch.server, error, [call] if call else []) or error
            what = f"{client.what} (merged call of {len(slots)} events on {batch.server.describe()})"
            non_empty = all(a.size > 0 for slot in slots for a in slot.arrays)
            read = None if call is None else call.as_numpy
            outputs = {
                name: output_array(result, client.outputs[name], batch.rows, what, non_empty, read=read)
                for name in client.requested_outputs
            }
        except Exception as exc:  # noqa: BLE001 - handed to each event, whose retry policy decides
            if call is not None:
                call.done(False)  # the server may still write into its region: not reused
            for slot in slots:
                slot.error = _own_copy(exc)
                slot.done.set()
            return
        if call is not None:
            call.done(True)  # the outputs are copies (or views of the response): the region is free
        live = [slot for slot in slots if not slot.dropped]
        client.counters.add_calls(
            batch.server.name,
            calls=1,
            requests=len(live),
            inferences=batch.rows,
            sent=batch.sent_bytes,
            received=sum(a.nbytes for a in outputs.values()),
        )
        offset = 0
        for slot in slots:
            end = offset + slot.rows
            if not slot.dropped:
                slot.outputs = {name: array[offset:end] for name, array in outputs.items()}
                slot.done.set()
            offset = end


def _own_copy(exc: BaseException) -> BaseException:
    """A copy of ``exc`` for one event (each raise extends its own traceback); never raises."""
    from tritonclient.utils import InferenceServerException

    try:
        if isinstance(exc, InferenceServerException):
            copied: BaseException = InferenceServerException(exc.message(), exc.status(), exc.debug_details())
            return copied
        return copy.copy(exc)
    except Exception:  # noqa: BLE001 - an exception type that cannot be copied: share it
        return exc
