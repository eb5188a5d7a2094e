"""Events as modules see them: ids, products, and the per-module view of an event.

An :class:`EventPrincipal` (CMSSW's name) holds one event's data while it is in flight:
the source's per-event collections and the products put by modules. A module never sees
the principal itself, only an :class:`Event` view bound to that module, so that
``put`` knows which module label a product belongs to even when several modules of one
event run at the same time.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from framework.utilities import ProductNotFound

__all__ = ["EventID", "Event", "EventPrincipal", "product_key"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class EventID(NamedTuple):
    """CMSSW's ``edm::EventID``: run, luminosity block and event number.

    ``str(event_id)`` gives CMSSW's ``run:lumi:event`` form.
    """

    run: int
    luminosityBlock: int
    event: int

    def __str__(self) -> str:
        return f"{self.run}:{self.luminosityBlock}:{self.event}"


def product_key(tag: Any) -> tuple[str, str]:
    """``(label, instance)`` of an InputTag, an ``"label:instance"`` string or a key tuple."""
    if isinstance(tag, tuple):
        return tag
    if isinstance(tag, str):
        parts = tag.split(":")
        return parts[0], parts[1] if len(parts) > 1 else ""
    return tag.label, tag.instance


class EventPrincipal:
    """All data of one event in flight (framework side).

    Attributes:
        id: the :class:`~framework.EventID`.
        stream: index of the stream processing the event, 0 <= stream < numberOfStreams.
        index: position of the event in the job (0 for the first event read).
        source: the source's per-event collections, ``Mapping[str, Any]`` (collection name
            -> per-event view, e.g. ``"Jet"`` -> awkward record array of that event's jets).
        products: ``(label, instance) -> value`` put by modules.
        path_results: Path name -> passed (bool), filled as Paths finish; EndPaths and
            ``SelectEvents`` read it (CMSSW's ``TriggerResults``). A Path that met a
            module failure under TryToContinue counts as not passed.
        errors: the module failures this event survived (TryToContinue, IgnoreCompletely).
        metadata: the source's metadata of the event's input (``Event.metadata``).
    """

    __slots__ = ("id", "stream", "index", "source", "products", "path_results", "errors", "metadata")

    def __init__(
        self,
        id: EventID,
        stream: int,
        index: int,
        source: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self.id = id
        self.stream = stream
        self.index = index
        self.source = source
        self.metadata: Mapping[str, Any] = _EMPTY if metadata is None else metadata
        self.products: dict[tuple[str, str], Any] = {}
        self.path_results: dict[str, bool] = {}
        self.errors: list[Exception] = []


class Event:
    """One event as seen by one module (CMSSW's ``edm::Event``).

    ``get`` reads products of other modules or source collections; ``put`` stores this
    module's products. Both are synchronous: the framework has already run (prefetched)
    every module whose products this module declared with ``consumes``.
    """

    __slots__ = ("_principal", "_label", "_produces")

    def __init__(self, principal: EventPrincipal, label: str, produces: frozenset[str]) -> None:
        self._principal = principal
        self._label = label
        self._produces = produces

    @property
    def id(self) -> EventID:
        """This event's :class:`EventID` (``str()`` gives ``run:lumi:event``)."""
        return self._principal.id

    @property
    def stream(self) -> int:
        """Index of the stream processing this event."""
        return self._principal.stream

    @property
    def metadata(self) -> Mapping[str, Any]:
        """What the event's input is, as coffea's ``events.metadata`` (read-only).

        From a fileset (``cmsrun --dataset``, on Dask too): ``dataset`` (the fileset key),
        ``filename``, ``treename``, ``entrystart`` and ``entrystop`` (the event's work unit:
        entries [entrystart, entrystop) of that file), then the dataset's fileset
        ``metadata`` keys as given (``isMC``, ``xsec``, ...; a key of the fileset with one of
        those names takes precedence, as in coffea). From a config's own ``fileNames``: the
        file keys only, no ``dataset``; from EmptySource: empty. The dataset's keys alone,
        constant for a job, are the module's :attr:`~framework.core.EDModule.metadata`.
        """
        return self._principal.metadata

    def get(self, tag: Any) -> Any:
        """Return a product or source collection.

        Args:
            tag: what ``consumes`` returned, an ``InputTag``, or ``"label[:instance]"``.
                A label that is no module's is a source collection (``"Jet"``, ``"PFCands"``).

        Raises:
            ProductNotFound: nothing by that tag is in the event (the message names it,
                this module and the event).
        """
        key = product_key(tag)
        products = self._principal.products
        if key in products:
            return products[key]
        label, instance = key
        if not instance and label in self._principal.source:
            return self._principal.source[label]
        raise ProductNotFound(
            f"module '{self._label}' asked for product '{_tag_str(key)}' in event "
            f"{self._principal.id}, which holds no such product (was it declared with "
            f"consumes(), and did its producer run and put it?)"
        )

    def put(self, value: Any, instance: str = "") -> None:
        """Store a product of this module under ``(module label, instance)``.

        Values that output modules can write: a number (scalar branch), a 1-D numpy array
        (one entry per object, e.g. per jet), or a dict of equal-length 1-D arrays (a
        collection; fields become ``<name>_<field>`` branches).

        Raises:
            ProductNotFound: ``instance`` was not declared with ``produces`` (CMSSW
                requires the declaration too); or ValueError if it was already put.
        """
        if instance not in self._produces:
            declared = ", ".join(repr(i) for i in sorted(self._produces)) or "none"
            raise ProductNotFound(
                f"module '{self._label}' put product instance '{instance}' in event "
                f"{self._principal.id} without declaring it with produces() (declared: {declared})"
            )
        key = (self._label, instance)
        if key in self._principal.products:
            raise ValueError(f"module '{self._label}' put '{_tag_str(key)}' twice in event {self.id}")
        self._principal.products[key] = value

    @property
    def path_results(self) -> Mapping[str, bool]:
        """Path name -> accepted, for the Paths finished so far (CMSSW ``TriggerResults``)."""
        return self._principal.path_results


def _tag_str(key: tuple[str, str]) -> str:
    label, instance = key
    return f"{label}:{instance}" if instance else label
