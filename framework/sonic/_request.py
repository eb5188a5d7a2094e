"""TritonRequest: one event's inference on Triton, under the client's retry policy.

Made by :meth:`TritonClient.new_request`; see ``_client`` for the threading and fault rules.
The request sees its client only through :class:`RequestClient` (public attributes); it
tries each server through the client's :class:`~framework.sonic._retry.RetryPolicy`.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import trio

from framework.core import ThreadSafeFuture
from framework.utilities import ExternalFailure

from ._data import (
    BatchRows,
    TensorSpec,
    TritonInputData,
    TritonInputMap,
    TritonOutputData,
    TritonOutputMap,
    output_array,
)
from ._retry import DEADLINE_STATUS

if TYPE_CHECKING:
    from ._batching import Batcher
    from ._client_stats import ClientCounters
    from ._retry import RetryPolicy
    from ._server_info import ServerInfo
    from ._transport import Call, HttpCall, TensorTransport

__all__ = ["RequestClient", "TIMEOUT_GRACE", "TritonRequest"]

logger = logging.getLogger("pysonic.sonic")

# Async mode: seconds past Client.timeout after which the client cancels a call itself, in
# case gRPC's own deadline never calls back.
TIMEOUT_GRACE = 1.0


class RequestClient(Protocol):
    """What a :class:`TritonRequest` uses of its :class:`~framework.sonic.TritonClient`.

    The job-fixed side of one model: its metadata, the client's options, its counters and
    its retry policy (all set by ``connect``).
    """

    what: str
    model_name: str
    mode: str
    max_batch_size: int
    requested_outputs: tuple[str, ...]
    timeout: float | None
    timeout_text: str
    counters: ClientCounters
    batcher: Batcher | None
    verbose: bool

    @property
    def inputs(self) -> Mapping[str, TensorSpec]: ...

    @property
    def outputs(self) -> Mapping[str, TensorSpec]: ...

    @property
    def retry_policy(self) -> RetryPolicy: ...

    def call_options(self) -> dict[str, Any]: ...

    @property
    def batch_mode(self) -> str: ...

    def server_side_status(self) -> dict[str, Any]: ...

    def report_server_side_stats(
        self, start: Mapping[str, Any], end: Mapping[str, Any], event_id: Any = None
    ) -> None: ...

    @property
    def transport(self) -> TensorTransport: ...


class TritonRequest:
    """One event's inference: inputs to fill, then one of the ``infer_*`` calls, then outputs.

    Made by :meth:`TritonClient.new_request`. Not shared between events or tasks.

    Attributes:
        input: name -> :class:`TritonInputData` (every model input).
        output: name -> :class:`TritonOutputData` (every model output; only the requested
            ones get data).
        event_id: the event this request belongs to (for logs and errors), or None.
        server: the :class:`ServerInfo` that answered (after a successful inference).
        tries: tries made so far (1 after a success without retry).
    """

    def __init__(self, client: RequestClient, event_id: Any = None) -> None:
        self.client = client
        self.event_id = event_id
        what = self.what = client.what + (f", event {event_id}" if event_id is not None else "")
        self.server: ServerInfo | None = None
        self.tries = 0
        self._rows = BatchRows(what)
        self._ragged = client.batch_mode == "Ragged"
        self._last_server: str | None = None  # the server of the previous try (failover: release its regions)
        self.input = TritonInputMap(
            what, {n: TritonInputData(s, what, self._rows, self._ragged) for n, s in client.inputs.items()}
        )
        requested = client.requested_outputs
        self.output = TritonOutputMap(
            what, {n: TritonOutputData(s, what, n in requested) for n, s in client.outputs.items()}
        )

    @property
    def batch_size(self) -> int:
        """Rows of this request, the inputs' leading dimension (batching models; 0 before
        any input is set), or 1 (models without batching)."""
        if self.client.max_batch_size == 0 and not self._ragged:
            return 1
        return self._rows.rows or 0

    # -- preparing the calls -----------------------------------------------------------

    def _chunks(self) -> list[Any]:
        """What each gRPC call sends. Rectangular: row ranges (slices); batches above
        max_batch_size are split (as CMSSW does for its "many" batch mode) and the outputs
        joined again. Ragged: entry indices (ints), one call per entry, all issued together
        (CMSSW's InferMulti). None at all for a batch of 0 rows."""
        missing = [name for name, tensor in self.input.items() if tensor.data is None and tensor.entries is None]
        if missing:
            raise ExternalFailure(f"{self.what}: input(s) {', '.join(missing)} not set (call to_server)")
        rows = self.batch_size
        if rows == 0:  # nothing to send (CMSSW's TritonClient skips the call too)
            return []
        if self._ragged:
            return list(range(rows))
        limit = self.client.max_batch_size
        if limit == 0:
            return [slice(None)]
        return [slice(start, min(start + limit, rows)) for start in range(0, rows, limit)]

    def _call(self, server: ServerInfo, grpc_client: Any, chunk: Any) -> Call:
        """One gRPC call's inputs and requested outputs, through shared memory or payloads
        (``framework.sonic._transport``); the caller ends it with ``call.done(ok)``."""
        client = self.client
        if self._ragged:  # one entry, sent as a batch of 1 for a batching model
            batched = client.max_batch_size > 0
            arrays = {
                t.name: t.entries[chunk][None] if batched else t.entries[chunk]  # type: ignore[index]
                for t in self.input.values()
            }
            rows: int | None = 1 if batched else None
        else:
            arrays = {t.name: t.data[chunk] for t in self.input.values()}
            rows = len(range(*chunk.indices(self.batch_size))) if client.max_batch_size else None
        if self._last_server not in (None, server.name):
            client.transport.failed_over(self._last_server)
        self._last_server = server.name
        return client.transport.call(
            server,
            grpc_client,
            client.inputs,
            [client.outputs[n] for n in client.requested_outputs],
            arrays,
            rows,
            all_outputs=len(client.requested_outputs) == len(client.outputs),
        )

    def _sent_bytes(self) -> int:
        if self._ragged:
            return sum(e.nbytes for t in self.input.values() for e in (t.entries or ()))
        return sum(t.data.nbytes for t in self.input.values() if t.data is not None)

    def _finish_empty(self) -> TritonRequest:
        # Batch 0: nothing to send (CMSSW's TritonClient skips the call too).
        for tensor in self.output.values():
            if tensor.name in self.client.requested_outputs and self._ragged:
                tensor.data = []
            elif tensor.name in self.client.requested_outputs:
                shape = (0,) + tuple(max(d, 0) for d in tensor.spec.dims)
                tensor.data = np.zeros(shape, tensor.spec.dtype)
        return self

    def _finish(self, results: list[Any], chunks: list[Any], server: ServerInfo, calls: list[Call]) -> TritonRequest:
        client = self.client
        received = 0
        for name in client.requested_outputs:
            tensor = self.output[name]
            parts = [
                self._check_output(result, tensor.spec, chunk, call)
                for result, chunk, call in zip(results, chunks, calls, strict=True)
            ]
            if self._ragged:  # per entry, without the batch dimension of 1
                tensor.data = [part[0] for part in parts] if tensor.spec.batched else parts
                received += sum(part.nbytes for part in parts)
                continue
            try:
                tensor.data = parts[0] if len(parts) == 1 else np.concatenate(parts)
            except ValueError as err:
                raise ExternalFailure(
                    f"{self.what}: output '{name}' of the {len(parts)} split requests cannot be joined: {err}"
                ) from None
            received += tensor.data.nbytes
        client.counters.add_calls(
            server.name, calls=len(chunks), inferences=self.batch_size, sent=self._sent_bytes(), received=received
        )
        self.server = server
        return self

    def _check_output(self, result: Any, spec: TensorSpec, chunk: Any, call: Call) -> np.ndarray[Any, Any]:
        if not spec.batched:
            expected_rows = None
        elif self._ragged:
            expected_rows = 1
        else:
            expected_rows = len(range(*chunk.indices(self.batch_size)))
        return output_array(result, spec, expected_rows, self.what, self._inputs_non_empty(), read=call.as_numpy)

    def _inputs_non_empty(self) -> bool:
        if self._ragged:
            return all(t.entries and all(e.size > 0 for e in t.entries) for t in self.input.values())
        return all(t.data is not None and t.data.size > 0 for t in self.input.values())

    # -- the three modes ---------------------------------------------------------------

    async def infer(self) -> TritonRequest:
        """Run the inference in the client's ``mode`` (Async, Sync or PseudoAsync).

        With ``Client.verbose`` the model's server-side statistics are read before and
        after (as CMSSW does; on a worker thread, except in Sync mode, which blocks anyway)
        and their difference is logged.
        """
        client = self.client
        if client.mode == "Sync":
            return self.infer_sync()  # reports the statistics itself
        if not client.verbose or self.batch_size == 0:  # nothing to process: no call, no statistics (CMSSW)
            return await (self.infer_async() if client.mode == "Async" else self.infer_pseudo_async())
        start = await trio.to_thread.run_sync(client.server_side_status)
        result = await (self.infer_async() if client.mode == "Async" else self.infer_pseudo_async())
        end = await trio.to_thread.run_sync(client.server_side_status)
        client.report_server_side_stats(start, end, self.event_id)
        return result

    async def infer_async(self) -> TritonRequest:
        """Non-blocking inference (``Async``): ``async_infer`` calls, one per chunk, all in flight.

        The gRPC callback re-enters trio through :class:`~framework.ThreadSafeFuture`. A try
        that outlives ``Client.timeout`` (+ ``TIMEOUT_GRACE``) or whose task is cancelled
        cancels its pending calls (``CallContext.cancel``); failed tries are retried by
        ``Client.retries`` with ``trio.sleep`` between them.

        Returns:
            self, with the outputs filled.

        Raises:
            ExternalFailure: non-recoverable server error, malformed outputs, or tries
                exhausted (names model, module, event, servers and the last error).
            trio.Cancelled: propagated unchanged.
        """
        chunks = self._chunks()
        if not chunks:
            return self._finish_empty()
        batcher = self.client.batcher
        if batcher is not None and not self._ragged and len(chunks) == 1 and self.batch_size <= batcher.max_rows:
            return await self.client.retry_policy.run(
                self.what, lambda server, grpc_client: self._try_batched(batcher, server, grpc_client, chunks)
            )
        return await self.client.retry_policy.run(
            self.what, lambda server, grpc_client: self._try_async(server, grpc_client, chunks)
        )

    async def _try_batched(
        self, batcher: Batcher, server: ServerInfo, grpc_client: Any, chunks: list[slice]
    ) -> TritonRequest:
        # The first try goes in a merged call (Client.batching); retries go on their own.
        if self.tries:
            return await self._try_async(server, grpc_client, chunks)
        self.tries += 1
        self._last_server = server.name  # a failover after the merged call releases its regions too
        arrays = [tensor.data for tensor in self.input.values()]
        outputs = await batcher.infer(arrays, self.batch_size, server, grpc_client)
        for name, data in outputs.items():
            self.output[name].data = data
        self.server = server
        return self

    async def _try_async(self, server: ServerInfo, grpc_client: Any, chunks: list[Any]) -> TritonRequest:
        client = self.client
        self.tries += 1
        first = self._call(server, grpc_client, chunks[0])
        if first.http is not None:  # over HTTP: awaited here, on trio's own sockets
            return await self._try_http(server, grpc_client, chunks, first)
        futures: list[ThreadSafeFuture] = []
        contexts: list[Any] = []
        calls: list[Call] = []
        options = client.call_options()

        def cancel_all() -> None:
            for context in contexts:
                context.cancel()

        limit = client.timeout + TIMEOUT_GRACE if client.timeout else math.inf
        try:
            with trio.move_on_after(limit) as scope:
                for index, chunk in enumerate(chunks):
                    future = ThreadSafeFuture()
                    calls.append(call := self._call(server, grpc_client, chunk) if index else first)
                    contexts.append(
                        call.send(grpc_client, client.model_name, options, functools.partial(_deliver, future))
                    )
                    futures.append(future)
                results = [await future.wait(on_cancel=cancel_all) for future in futures]
        except BaseException as exc:
            cancel_all()  # cancelled, or one chunk failed: the other chunks are of no use
            raise self._failed_calls(server, calls, exc) from None
        if scope.cancelled_caught:  # wait() has cancelled the calls already
            _end_failed(calls)
            raise ExternalFailure(
                f"no answer within {client.timeout_text} + {TIMEOUT_GRACE:g} s; the call was cancelled by the client",
                model=client.model_name,
                server=server.name,
                status=DEADLINE_STATUS,
                retryable=True,
            )
        return self._finish_calls(results, chunks, server, calls)

    async def _try_http(self, server: ServerInfo, grpc_client: Any, chunks: list[Any], first: Call) -> TritonRequest:
        """One try over HTTP: each chunk's call awaited in this task (several chunks: all
        in flight together, each on its own connection); ``Client.timeout`` is each
        call's deadline. A cancelled or failed call closes its connection."""
        options = self.client.call_options()
        calls: list[Call] = [first]
        try:
            if len(chunks) == 1:
                results: list[Any] = [await _http_call(first).exchange(options)]
            else:
                calls += [self._call(server, grpc_client, chunk) for chunk in chunks[1:]]
                results = [None] * len(calls)

                async def one(index: int) -> None:
                    results[index] = await _http_call(calls[index]).exchange(options)

                async with trio.open_nursery() as nursery:
                    for index in range(len(calls)):
                        nursery.start_soon(one, index)
        except BaseException as exc:
            if isinstance(exc, BaseExceptionGroup):  # the first chunk's failure stands for the try
                exc = _first_failure(exc)
            raise self._failed_calls(server, calls, exc) from None
        return self._finish_calls(results, chunks, server, calls)

    def infer_sync(self) -> TritonRequest:
        """Blocking inference (``Sync``): one ``infer`` call per chunk, in turn.

        Retries (``Client.retries``) block too, backoff included (``time.sleep``), as
        CMSSW's SonicClientSync blocks its thread. With ``Client.verbose`` the server-side
        statistics of the call are logged (see :meth:`infer`).

        Returns:
            self, with the outputs filled.

        Raises:
            ExternalFailure: as :meth:`infer_async`.
        """
        chunks = self._chunks()
        if not chunks:
            return self._finish_empty()
        client = self.client
        start = client.server_side_status() if client.verbose else {}
        result = client.retry_policy.run_blocking(
            self.what, lambda server, grpc_client: self._try_sync(server, grpc_client, chunks)
        )
        if client.verbose:
            client.report_server_side_stats(start, client.server_side_status(), self.event_id)
        return result

    def _try_sync(self, server: ServerInfo, grpc_client: Any, chunks: list[Any]) -> TritonRequest:
        client = self.client
        self.tries += 1
        calls: list[Call] = []
        options = client.call_options()
        try:
            results = []
            for chunk in chunks:
                calls.append(call := self._call(server, grpc_client, chunk))
                results.append(call.infer(grpc_client, client.model_name, options))
        except BaseException as exc:
            raise self._failed_calls(server, calls, exc) from None
        return self._finish_calls(results, chunks, server, calls)

    def _finish_calls(
        self, results: list[Any], chunks: list[Any], server: ServerInfo, calls: list[Call]
    ) -> TritonRequest:
        """:meth:`_finish`, then end the calls (their regions reused only if all went well)."""
        try:
            finished = self._finish(results, chunks, server, calls)
        except BaseException:
            _end_failed(calls)
            raise
        for call in calls:
            call.done(True)
        return finished

    def _failed_calls(self, server: ServerInfo, calls: list[Call], exc: BaseException) -> BaseException:
        """End the calls of a failed or cancelled try; the error to raise: ``exc``, or a
        recoverable one if the server lost our regions."""
        lost = self.client.transport.lost_registration(server, exc, calls)  # before the regions go
        _end_failed(calls)
        return lost or exc

    async def infer_pseudo_async(self) -> TritonRequest:
        """``PseudoAsync``: each blocking try on a worker thread (CMSSW's SonicClientPseudoAsync).

        The retry loop itself runs in trio (backoff with ``trio.sleep``). A try is not
        abandoned on cancellation: its thread finishes the call (bounded by the timeout)
        before ``trio.Cancelled`` propagates.
        """
        chunks = self._chunks()
        if not chunks:
            return self._finish_empty()

        async def attempt(server: ServerInfo, grpc_client: Any) -> TritonRequest:
            return await trio.to_thread.run_sync(self._try_sync, server, grpc_client, chunks, abandon_on_cancel=False)

        return await self.client.retry_policy.run(self.what, attempt)


def _http_call(call: Call) -> HttpCall:
    assert call.http is not None  # every chunk of a try goes the same way
    return call.http


def _first_failure(group: BaseExceptionGroup[Any]) -> BaseException:
    """The exception a try reports for a nursery's group: a cancellation if there is one
    (trio.Cancelled must propagate), else the first failure."""
    cancelled, rest = group.split(trio.Cancelled)
    if cancelled is not None:
        return cancelled.exceptions[0]
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


def _end_failed(calls: list[Call]) -> None:
    # A failed, cancelled or timed-out call: its region is not reused (the server may
    # still write into it).
    for call in calls:
        call.done(False)


def _deliver(future: ThreadSafeFuture, result: Any = None, error: Any = None) -> None:
    # gRPC callback thread: only hand the outcome over; must never raise.
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
