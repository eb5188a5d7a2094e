"""The interface between the scheduler and an event source, and the trivial EmptySource.

A source (CMSSW's ``edm::InputSource``) is declared in a config as
``process.source = cms.Source("PoolSource", fileNames=...)``, found through the module
registry like any module, validated against its ``fill_descriptions``, and constructed
with the validated parameters. The scheduler then calls, in order:

1. ``collections()``: what the input offers (collection name -> field names), so that
   output modules can select branches; may open the first file (raise FileOpenError).
2. ``set_branch_request(request)``: what the configured modules consume,
   ``{collection: set of fields, or None for every field}``: read nothing else.
3. ``await run(send_channel, max_events)``: read events and send one
   :class:`SourceEvent` per event, in input order, closing the channel at the end.
   Blocking I/O goes to worker threads so that reading overlaps processing.
4. ``close()``: release files (also after a failure).

``metadata()`` says which dataset the current input belongs to (modules read it as
``EDModule.metadata``, before ``begin_job`` and each ``begin_unit``); each
:class:`SourceEvent` carries the metadata of its own input (``Event.metadata``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import trio

from ._event import EventID

__all__ = ["Source", "SourceEvent", "EmptySource", "NO_METADATA"]

#: The metadata of an event or a job that belongs to no dataset: empty, read-only.
NO_METADATA: Mapping[str, Any] = MappingProxyType({})


class SourceEvent:
    """One event as the source delivers it.

    Attributes:
        id: the :class:`~framework.EventID`.
        collections: collection name -> per-event view (e.g. ``"Jet"`` -> the event's
            jets as an awkward record array). May be lazy.
        file_name: the file the event came from ("" for generated events).
        entry: the entry number in that file's tree (0-based).
        metadata: what modules read as ``event.metadata`` (coffea's ``events.metadata``):
            one read-only mapping shared by the events of one input range, never copied
            per event.
    """

    __slots__ = ("id", "collections", "file_name", "entry", "metadata")

    def __init__(
        self,
        id: EventID,
        collections: Mapping[str, Any],
        file_name: str = "",
        entry: int = 0,
        metadata: Mapping[str, Any] = NO_METADATA,
    ):
        self.id = id
        self.collections = collections
        self.file_name = file_name
        self.entry = entry
        self.metadata = metadata


class Source:
    """Base class of sources; see the module docstring for the protocol."""

    kind: ClassVar[str] = "Source"
    label = "source"
    type_name: str = ""

    @classmethod
    def fill_descriptions(cls, desc: Any) -> None:
        """Declare the source's parameters."""

    def __init__(self, params: Any) -> None:
        self.params = params

    def collections(self) -> dict[str, tuple[str, ...]]:
        return {}

    def set_branch_request(self, request: dict[str, set[str] | None]) -> None:
        pass

    def metadata(self) -> Mapping[str, Any]:
        """The dataset of the current input: ``{"dataset": name, **the fileset's metadata}``
        (what modules read as ``EDModule.metadata``), read-only; empty when the input belongs
        to no dataset (a config's own ``fileNames``, generated events). Default: empty."""
        return NO_METADATA

    async def run(self, send_channel: trio.MemorySendChannel[SourceEvent], max_events: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def report(self) -> list[Any]:
        """Renderables (rich tables or strings) for the end-of-job summary, as a service's
        ``report()`` (PoolSource: where its remote files were opened). Default: none."""
        return []

    def statistics(self) -> Any:
        """What the source did, as a dataclass or None (``--summary-json``'s ``source``)."""
        return None


class EmptySource(Source):
    """CMSSW's ``EmptySource``: events with ids and no data, for tests and benchmarks.

    Parameters: ``firstRun`` (uint32, default 1), ``firstLuminosityBlock`` (uint32, 1),
    ``firstEvent`` (uint32, 1), ``numberEventsInLuminosityBlock`` (uint32, 100);
    the number of events is ``process.maxEvents.input`` (required > 0 here).
    """

    @classmethod
    def fill_descriptions(cls, desc: Any) -> None:
        from framework import config as cms

        desc.add("firstRun", cms.untracked.uint32(1), "run number of the events")
        desc.add("firstLuminosityBlock", cms.untracked.uint32(1), "first luminosity block")
        desc.add("firstEvent", cms.untracked.uint32(1), "first event number")
        desc.add("numberEventsInLuminosityBlock", cms.untracked.uint32(100), "events per luminosity block")

    async def run(self, send_channel: trio.MemorySendChannel[SourceEvent], max_events: int) -> None:
        if max_events < 0:
            from framework.utilities import ConfigurationError

            raise ConfigurationError("EmptySource needs process.maxEvents.input >= 0 (it has no end)")
        p = self.params
        per_lumi = max(1, p.numberEventsInLuminosityBlock)
        with send_channel:
            for i in range(max_events):
                lumi = p.firstLuminosityBlock + i // per_lumi
                event_id = EventID(p.firstRun, lumi, p.firstEvent + i)
                try:
                    await send_channel.send(SourceEvent(event_id, {}))
                except trio.BrokenResourceError:
                    return  # every stream has stopped (the job is failing): nothing to do
