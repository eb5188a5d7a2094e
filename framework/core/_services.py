"""Framework services (CMSSW's ``edm::Service``): job-wide helpers such as TritonService.

A service is declared in the config (``process.TritonService = cms.Service("TritonService",
...)``), constructed before any module, and reached by modules with
:func:`get_service` while they are constructed. Its ``begin_job`` runs before the modules'
(``async``: a service may start processes or open connections) and its ``end_job`` always
runs at the end, after a failure too. Around each run of events (the job, or one work
unit) its ``begin_unit`` runs before the modules' and its ``end_unit`` after theirs
(TFileService writes its file there).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ._activity import ActivityRegistry

__all__ = ["Service", "ServiceRegistry", "constructing_module", "get_service"]


class Service:
    """Base class of services.

    Class attributes a service type may set:
        outputs_per_unit: its declared outputs are written per run of events (in
            ``end_unit``, named by ``framework.io.output_path``), so that under
            ``--executor dask`` each work unit writes a part, merged per dataset (TFileService).
            False (the default): written at the end of the job, which under Dask every
            worker would do in turn; ``--executor dask`` refuses such outputs.
    """

    kind: ClassVar[str] = "Service"
    # True for a service whose begin_job starts processes or waits for servers (TritonService):
    # it begins after the source opened its first file, so that a wrong input is found first.
    begins_after_source: ClassVar[bool] = False
    outputs_per_unit: ClassVar[bool] = False
    label: str = ""
    type_name: str = ""

    @classmethod
    def fill_descriptions(cls, desc: Any) -> None:
        """Declare the service's parameters."""

    def __init__(self, params: Any) -> None:
        self.params = params

    def declared_outputs(self) -> dict[str, Any]:
        """The files this service writes: parameter name -> configured path (see
        ``EDModule.declared_outputs``). Default: none."""
        return {}

    async def begin_job(self) -> None:
        """Called once, after every module was constructed, before any module's begin_job."""

    async def end_job(self) -> None:
        """Called once at the end of the job, also after a failure. Must not raise."""

    def begin_unit(self) -> None:
        """Called before the events of a run (the whole job, or one work unit), before the
        modules' ``begin_unit``: a service that writes a file per run begins it here."""

    def end_unit(self) -> None:
        """Called after the modules' ``end_unit`` of a run that succeeded: write that run's
        file here (``framework.io.output_path`` names it; it is committed with the job's
        outputs). Raise ``FileWriteError`` if it cannot be written."""

    def abort_unit(self) -> None:
        """Called instead of ``end_unit`` when the run fails. Must not raise."""

    def unwritten_outputs(self) -> list[str]:
        """What of this service's outputs changed after it was last written (one line each):
        under ``--executor dask`` a module filling a booked object in ``end_job``, after the
        worker's last unit wrote its part. The executor fails the run on any. Default: none."""
        return []

    def subscribe(self, activity: ActivityRegistry) -> None:
        """Subscribe to the job's signals (``activity.post_event.connect(...)``): called once by
        the builder, after every service and module is constructed. Default: none."""

    def report(self) -> list[Any]:
        """Renderables (rich tables or strings) for the end-of-job summary."""
        return []

    def statistics(self) -> dict[str, Any]:
        """The service's end-of-job numbers as plain data (for ``--summary-json``)."""
        return {}


class ServiceRegistry:
    """The services of one job, by type name."""

    def __init__(self) -> None:
        self.services: dict[str, Service] = {}
        self._factory: Any = None  # set by the builder: creates a default service by type name

    def get(self, type_name: str, *, create: bool = False) -> Service:
        """The service of that type; with ``create``, a default one is made if none is configured.

        Raises:
            ConfigurationError: no such service configured and ``create`` is False.
        """
        if type_name not in self.services:
            if not create or self._factory is None:
                from framework.utilities import ConfigurationError

                raise ConfigurationError(
                    f"service '{type_name}' is needed but not configured "
                    f"(add process.{type_name} = cms.Service('{type_name}', ...))"
                )
            self.services[type_name] = self._factory(type_name)
        return self.services[type_name]


_current: ContextVar[ServiceRegistry] = ContextVar("pysonic_services")
_constructing: ContextVar[str | None] = ContextVar("pysonic_constructing_module", default=None)


def constructing_module() -> str | None:
    """The label of the module whose ``__init__`` is running (set by the builder), or None:
    what a service such as TFileService uses to name the caller's directory, as CMSSW's
    services watch ``preModuleConstruction``."""
    return _constructing.get()


def get_service(type_name: str, *, create: bool = False) -> Any:
    """The job's service of type ``type_name``; call it from a module's ``__init__``.

    Args:
        create: make a default-configured one if the config has none (used by SONIC
            modules, which need a TritonService and can run with its defaults).

    Raises:
        ConfigurationError: not configured (and ``create`` is False).
        LookupError: called outside the construction of a job.
    """
    return _current.get().get(type_name, create=create)
