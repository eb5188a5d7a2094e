"""SONIC module bases: the module author fills inputs and reads outputs, never the client.

CMSSW counterparts: ``SonicEDProducer`` / ``SonicEDFilter`` / ``SonicOneEDAnalyzer``
(HeterogeneousCore/SonicCore) with ``TritonEDProducer`` / ``TritonEDFilter`` /
``TritonOneEDAnalyzer``; :class:`SonicEDAnalyzer` (an analyzer in any mode) is pysonic's.
A subclass writes::

    class MyTagger(SonicEDProducer):
        @classmethod
        def fill_descriptions(cls, desc):
            super().fill_descriptions(desc)            # the Client PSet
            desc.add("src", cms.InputTag("inputs"), "input builder")

        def __init__(self, params):
            super().__init__(params)                   # client + TritonService registration
            self.src = self.consumes(params.src)
            self.produces()

        def acquire(self, event, input):              # sync: fill the request
            input["x"].to_server(event.get(self.src))  # float32 (batch, ...)

        def produce(self, event, output):             # sync: read the response
            event.put(output["y"].from_server())

and the base owns the wait in between (ExternalWork): in ``Async`` mode other events run
while the request is in flight. Retries and failover (``Client.retries``) happen inside
that wait, in the event's own task: ``produce`` sees only the final answer, once.

Threads: SONIC modules are NOT ``thread_safe``: ``acquire`` runs on the trio thread,
where the request is handed to the event's task (``holder.run_async``). Keep
``acquire``/``produce`` light (build heavy inputs in a separate, thread-safe producer,
as ``modules/`` does); the request itself never blocks the trio thread except in
``Sync`` mode, which blocks it on purpose (CMSSW's SonicClientSync).
"""

from __future__ import annotations

import logging
from typing import Any

import framework.config as cms
from framework.core import EDAnalyzer, EDFilter, EDProducer, Event, ExternalWork, WaitingTaskHolder, get_service

from ._client import TritonClient, client_description
from ._data import TritonInputMap, TritonOutputMap
from ._request import TritonRequest

__all__ = ["SonicEDAnalyzer", "SonicEDFilter", "SonicEDProducer", "SonicOneEDAnalyzer"]

logger = logging.getLogger("pysonic.sonic")


class _Sonic(ExternalWork):
    """What the SONIC module bases share: the client and the three modes."""

    thread_safe = False  # acquire must run on the trio thread (see the module docstring)
    client: TritonClient

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        """Adds the ``Client`` PSet; subclasses call ``super().fill_descriptions(desc)`` first."""
        desc.add("Client", client_description(), "Triton client settings (CMSSW TritonClient)")

    def __init__(self, params: Any) -> None:
        super().__init__(params)  # type: ignore[call-arg]  # a mixin: EDModule.__init__ at run time
        label = getattr(self, "label", type(self).__name__)
        self.client = TritonClient(params.Client, debug_name=label)
        self._triton = get_service("TritonService", create=True)
        self._triton.add_model(
            self.client.model_name, label, self.client.preferred_server, self.client.model_config_path
        )

    def begin_job(self) -> None:
        """Connect the client to the server TritonService chose (fetches the model metadata)."""
        self._triton.connect(self.client)

    def _fw_acquire(self, event: Event, holder: WaitingTaskHolder) -> None:
        # The event id goes with the request: every retry is logged with it.
        request = self.client.new_request(event.id)
        self.acquire(event, request.input)
        if self.client.mode == "Sync":  # block right here, as CMSSW's SonicClientSync does
            holder.done_waiting(request.infer_sync())
        else:  # Async or PseudoAsync (request.infer also reports Client.verbose's statistics)
            holder.run_async(request.infer)

    def acquire(self, event: Event, input: TritonInputMap) -> None:  # type: ignore[override]  # SONIC: (event, Triton map), as in CMSSW
        """Fill ``input["<name>"].to_server(array)`` for every model input. Synchronous."""
        raise NotImplementedError(f"{type(self).__name__} must implement acquire(event, input)")


class SonicEDProducer(_Sonic, EDProducer):
    """An EDProducer whose work is a Triton inference: implement ``acquire`` and ``produce``.

    ``acquire(event, input)``: fill every input with ``input[name].to_server(array)``.
    ``produce(event, output)``: read ``output[name].from_server()`` and ``event.put``.
    """

    def _fw_complete(self, event: Event, request: TritonRequest) -> None:
        self.produce(event, request.output)

    def produce(self, event: Event, output: TritonOutputMap) -> None:  # type: ignore[override]  # SONIC: (event, Triton map), as in CMSSW
        """Read ``output["<name>"].from_server()`` and put products. Synchronous."""
        raise NotImplementedError(f"{type(self).__name__} must implement produce(event, output)")


class SonicEDFilter(_Sonic, EDFilter):
    """An EDFilter deciding on a Triton inference: implement ``acquire`` and ``filter``.

    ``filter(event, output) -> bool`` reads ``output[name].from_server()``.
    """

    def _fw_complete(self, event: Event, request: TritonRequest) -> bool:
        return self.filter(event, request.output)

    def filter(self, event: Event, output: TritonOutputMap) -> bool:  # type: ignore[override]  # SONIC: (event, Triton map), as in CMSSW
        """Decide from ``output["<name>"].from_server()``. Synchronous."""
        raise NotImplementedError(f"{type(self).__name__} must implement filter(event, output)")


class SonicEDAnalyzer(_Sonic, EDAnalyzer):
    """An EDAnalyzer reading a Triton inference: implement ``acquire`` and ``analyze``.

    ``analyze(event, output)`` reads ``output[name].from_server()`` and puts nothing (fill
    histograms, write a tree). The client runs in any of the three modes, as a producer's:
    in ``Async`` other events run while the request is in flight. A pysonic extension:
    CMSSW has no stream analyzer with ExternalWork, only :class:`SonicOneEDAnalyzer`.
    """

    def _fw_complete(self, event: Event, request: TritonRequest) -> None:
        self.analyze(event, request.output)

    def analyze(self, event: Event, output: TritonOutputMap) -> None:  # type: ignore[override]  # SONIC: (event, Triton map), as in CMSSW
        """Read ``output["<name>"].from_server()``; put nothing. Synchronous."""
        raise NotImplementedError(f"{type(self).__name__} must implement analyze(event, output)")


class SonicOneEDAnalyzer(SonicEDAnalyzer):
    """CMSSW's ``SonicOneEDAnalyzer``: an analyzer whose client is always ``Sync``.

    CMSSW's one-modules cannot use ExternalWork, so its ``SonicOneEDAnalyzer`` resets any
    other ``Client.mode`` to ``Sync`` with a warning ("Resetting client mode to Sync for
    SonicOneEDAnalyzer", category ResetClientMode), and the request blocks the analyzer's
    ``analyze`` call: here it blocks the trio thread, and no other event runs meanwhile.
    Implement ``acquire`` and ``analyze`` as for :class:`SonicEDAnalyzer`.
    """

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        if self.client.mode != "Sync":
            label = getattr(self, "label", type(self).__name__)
            logger.warning("%s: Resetting client mode to Sync for SonicOneEDAnalyzer (was %s)", label, self.client.mode)
            self.client.mode = "Sync"
