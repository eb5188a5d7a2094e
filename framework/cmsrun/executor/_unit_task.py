"""The worker side of ``cmsrun --executor dask``: a job built once per worker, then unit after unit.

A Dask task :func:`run_unit_task` runs one :class:`~framework.io.WorkUnit`. The worker's
:class:`JobCache` (a Dask ``WorkerPlugin``) keeps the jobs it built, by config and dataset
(:class:`JobSpec` key): the config is loaded and built, and the job begun
(``framework.core.begin_job``: services' and modules' ``begin_job``, the source's
layout from the dataset's first file, which every worker reads alike so that the parts
agree), ONCE per worker and dataset; then each unit runs in its own ``trio.run``
(``process_events``: its own streams), its outputs written as the unit's parts
(``output_naming(unit=...)``) and committed together when the unit succeeded
(``framework.utilities._commit``): the parts of a unit are every file it committed, whatever wrote
it. A worker with several threads keeps one job per thread in use. The jobs end
(``end_job``) when the driver asks (:func:`end_worker_jobs`, once every unit is done), or
when the worker closes.

A unit that fails with a ``FrameworkError`` returns a failed :class:`UnitOutcome` (the
error in one line naming file and entry range) instead of raising, so that Dask does not
retry what fails deterministically; the job that failed is dropped (aborted). Any other
exception is raised: Dask retries it (``retries=``). A worker that dies is Dask's to handle:
its task runs again elsewhere (``distributed.scheduler.allowed-failures``).

Exactly once: a task may run after the driver has merged (Dask recomputes a result that was
lost with a worker while the driver still holds its future) or twice at once. Every run of
cmsrun writes its parts into folders of its own (:class:`RunFolders`), created by the driver
before the units and removed by it after the merge; a task whose folders are gone runs
nothing (``UnitOutcome.discarded``), and writes that come after the removal fail: nothing
is written after the merge. Two runs of one unit write the same part name atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from framework import config as cms
from framework.core import Job, abort_job, begin_job, build_job, end_job, process_events
from framework.io import WorkUnit, output_naming
from framework.utilities import FileOpenError, FileReadError, FrameworkError, commit_outputs

from .._summary import unit_record
from ._host_triton import HOST_SERVER, host_server, host_server_http

__all__ = [
    "JobCache",
    "JobSpec",
    "RunFolders",
    "UnitOutcome",
    "changed_files",
    "end_worker_jobs",
    "run_unit_task",
    "snapshot",
    "watched_folders",
]


@dataclass(frozen=True)
class RunFolders:
    """One cmsrun run's parts folders (``framework.io.run_parts_folder``).

    Attributes:
        run: the run's name, unique (the last component of every folder).
        folders: every folder the driver created for the run's outputs (absolute paths).
    """

    run: str
    folders: tuple[str, ...]

    def live(self) -> bool:
        """True while the driver has not removed the folders (the run is not over)."""
        return all(os.path.isdir(folder) for folder in self.folders)


@dataclass(frozen=True)
class JobSpec:
    """What a worker needs to build the job: the config and the command line's overrides.

    Attributes:
        config: absolute path of the ``_cfg.py`` (workers must see the same file system).
        args: the config's ``name=value`` arguments.
        streams, threads: ``-j``/``-t`` overrides (None: the config's).
        cwd: the folder relative output names are relative to (cmsrun's).
        host_tag: the run's host Triton server tag (``_host_triton.host_tag``); "" = none.
        digest: sha1 of the config file's text and of the fields above.
    """

    config: str
    args: tuple[str, ...]
    streams: int | None
    threads: int | None
    cwd: str
    host_tag: str = ""
    digest: str = field(default="", compare=False)

    @classmethod
    def make(
        cls, config: str, args: list[str], streams: int | None, threads: int | None, host_tag: str = ""
    ) -> JobSpec:
        path = str(Path(config).resolve())
        text = Path(path).read_bytes()
        key = repr((path, tuple(args), streams, threads, host_tag, os.getcwd())).encode()
        digest = hashlib.sha1(text + b"\0" + key).hexdigest()
        return cls(path, tuple(args), streams, threads, os.getcwd(), host_tag, digest)


@dataclass
class UnitOutcome:
    """What one unit task did (picklable; sent back to cmsrun).

    Attributes:
        unit: the unit.
        parts: the part files written (one per output of the config), as strings.
        record: ``framework.cmsrun.unit_record`` of the unit's run; None if it failed.
        error: the one-line error if it failed ("" if not); ``bad_file``: it was a
            FileOpenError/FileReadError (what ``--skip-bad-files`` skips).
        worker, host: the Dask worker's address and host name.
        started, finished: ``time.time()`` at the task's start and end (s).
        events_time: seconds in ``process_events`` (the events alone); the rest of the
            task (job lookup, part writing, report) is per-unit overhead.
        built: the job was built for this unit (the worker's first of the dataset).
        services: the services' ``statistics()`` after the unit (cumulative per worker job).
        undeclared: files that appeared or changed in the watched folders while the unit
            ran (``watched_folders``), which no declaration covers: a module writing a
            file of its own (under Dask each worker would write its own copy).
        discarded: the run was over (its parts folders removed) before the task began or
            before it ended: what it wrote is gone with the folders, ``parts`` is empty.
        streams, threads: what the worker's job runs with (``framework.core.concurrency``
            on the worker: ``numberOfThreads`` 0 is that worker's cores); 0 if no job ran.
    """

    unit: WorkUnit
    parts: tuple[str, ...] = ()
    record: dict[str, Any] | None = None
    error: str = ""
    bad_file: bool = False
    worker: str = ""
    host: str = ""
    started: float = 0.0
    finished: float = 0.0
    events_time: float = 0.0
    built: bool = False
    services: dict[str, Any] = field(default_factory=dict)
    undeclared: tuple[str, ...] = ()
    discarded: bool = False
    streams: int = 0
    threads: int = 0


class JobCache(WorkerPlugin):
    """Per worker: the jobs built, idle ones by (spec digest, dataset); ended at teardown."""

    name = "pysonic-jobs"

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str], list[Job]] = {}
        self._lock: threading.Lock | None = None

    def setup(self, worker: Any) -> None:
        self._lock = threading.Lock()  # made on the worker: a lock does not pickle
        # A unit that raised is reported by the driver in one line (after Dask's retry);
        # the worker's "Compute Failed" block with the traceback would precede it on the
        # user's terminal (a LocalCluster's workers share it).
        worker_log = logging.getLogger("distributed.worker")
        if not any(isinstance(f, _NoComputeFailed) for f in worker_log.filters):
            worker_log.addFilter(_NoComputeFailed())

    def take(self, spec: JobSpec, first: WorkUnit, unit: WorkUnit) -> tuple[Job, bool]:
        """An idle job for ``spec`` and ``unit``'s dataset, or a new one, begun. Blocking.

        A new job takes its layout from ``first`` (the dataset's first unit); if that file
        cannot be read (``--skip-bad-files`` goes on without it), from ``unit``'s file.
        """
        with self._lock or threading.Lock():
            idle = self._idle.get((spec.digest, unit.dataset))
            if idle:
                return idle.pop(), False
        try:
            return _build(spec, first), True
        except (FileOpenError, FileReadError):
            if first == unit:
                raise
        return _build(spec, unit), True

    def give_back(self, spec: JobSpec, dataset: str, job: Job) -> None:
        with self._lock or threading.Lock():
            self._idle.setdefault((spec.digest, dataset), []).append(job)

    def end_jobs(self) -> list[str]:
        """End every idle job (``end_job``); returns one line per failure: a module's or
        service's ``end_job`` that raised, a file one of them wrote there (under Dask a file
        written at the end of a worker's job is that worker's alone: never committed), or a
        service's output changed after its last part (``Service.unwritten_outputs``)."""
        with self._lock or threading.Lock():
            jobs = [j for js in self._idle.values() for j in js]
            self._idle.clear()
        problems = []
        for job in jobs:
            try:
                # A commit never committed: what end_job writes is reported, then removed.
                with commit_outputs("the end of a worker's job") as commit:
                    trio.run(end_job, job)
                    written = commit.discard()
                problems += [line for svc in job.services.services.values() for line in svc.unwritten_outputs()]
                problems += [
                    f"'{path}' was written at the end of a worker's job (end_job): under --executor dask "
                    f"each worker would write its own; write it per run of events (end_unit) or book it "
                    f"with TFileService"
                    for path in written
                ]
            except FrameworkError as exc:
                problems.append(str(exc.args[0] if exc.args else exc).partition("\n")[0])
        return problems

    def teardown(self, worker: Any) -> None:
        with contextlib.suppress(Exception):  # the worker is closing; the units are done
            self.end_jobs()


def end_worker_jobs(dask_worker: Any) -> list[str]:
    """``client.run`` target: end this worker's jobs (:meth:`JobCache.end_jobs`)."""
    cache = dask_worker.plugins.get(JobCache.name)
    return cache.end_jobs() if isinstance(cache, JobCache) else []


def watched_folders(job: Job) -> list[Path]:
    """Where a module's undeclared file would most likely land: the current folder (the
    driver's) and the folders of the job's declared outputs."""
    folders = {Path.cwd().resolve()}
    for _who, path in job.declared_outputs():
        folders.add((Path.cwd() / path).parent.resolve())
    return sorted(folders)


def snapshot(folders: list[Path]) -> dict[Path, tuple[int, int, int]]:
    """The files (not folders) directly in ``folders``: path -> (inode, size, mtime in ns)."""
    files: dict[Path, tuple[int, int, int]] = {}
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    files[Path(entry.path)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return files


def changed_files(before: dict[Path, tuple[int, int, int]], after: dict[Path, tuple[int, int, int]]) -> list[Path]:
    """Files new or changed from ``before`` to ``after`` (:func:`snapshot`), but the logs of
    ``logging`` file handlers (MessageLogger's ``files``: appended to by every worker alike)
    and temporary outputs (``<name>.tmp-...``: a job's, removed or renamed by it)."""
    logs = {Path(h.baseFilename).resolve() for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)}
    return sorted(
        p for p, facts in after.items() if before.get(p) != facts and p.resolve() not in logs and ".tmp-" not in p.name
    )


class _NoComputeFailed(logging.Filter):
    """Drops distributed's "Compute Failed" records (the driver reports the failure)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Compute Failed")


def _build(spec: JobSpec, first: WorkUnit) -> Job:
    folder = os.path.dirname(spec.config)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # module types given as "file:Class" next to the config
    process = cms.load_config(spec.config, list(spec.args))
    if spec.host_tag:
        add_host_server(process, spec.host_tag)
    if "skipEvents" in process.source.parameterNames_():
        # The driver cut the dataset's units at skipEvents and maxEvents (limit_units): a
        # unit is read whole.
        process.source.skipEvents = cms.untracked.uint32(0)
    job = build_job(process, max_events=-1, streams=spec.streams, threads=spec.threads)
    # The layout output modules see comes from the dataset's first file, on every worker.
    job.source.set_units([first])  # type: ignore[attr-defined]
    trio.run(begin_job, job)
    return job


def add_host_server(process: Any, tag: str) -> None:
    """Add this host's shared server (if it runs) to ``process``'s TritonService servers,
    creating the service if the config has none: TritonService then finds the models there
    and starts no fallback of its own."""
    address = host_server(tag)
    if address is None:
        return
    host, _, port = address.rpartition(":")
    entry = cms.PSet(
        name=cms.untracked.string(HOST_SERVER), address=cms.untracked.string(host), port=cms.untracked.uint32(int(port))
    )
    http = host_server_http(tag)
    if http is not None:  # its HTTP endpoint: Client.transport auto uses it, as for TritonService's own fallback
        entry.httpPort = cms.untracked.uint32(int(http.rpartition(":")[2]))
    if "TritonService" in process.services_():
        service = process.TritonService
        if "servers" in service:
            service.servers.append(entry)
        else:
            service.servers = cms.untracked.VPSet(entry)
    else:
        process.TritonService = cms.Service("TritonService", servers=cms.untracked.VPSet(entry))


def run_unit_task(spec: JobSpec, unit: WorkUnit, first: WorkUnit, run: RunFolders | None = None) -> UnitOutcome:
    """The Dask task: run ``unit`` with this worker's job for ``spec`` (see the module docstring).

    Args:
        first: the first unit of ``unit``'s dataset (whose file gives the job's layout).
        run: the run's parts folders: the parts go there; if they are gone (the run is
            over), nothing runs and the outcome is ``discarded``. None: the unit's parts go
            to ``<output>.parts/`` (``framework.io.part_path``).

    Raises:
        Exception: anything but a FrameworkError (Dask retries the task).
    """
    worker = get_worker()
    cache = worker.plugins.get(JobCache.name)
    if not isinstance(cache, JobCache):  # registered by cmsrun; a worker that joined later gets it too, but be safe
        cache = JobCache()
        cache.setup(worker)
        worker.plugins[JobCache.name] = cache
    outcome = UnitOutcome(unit, worker=worker.address, host=os.uname().nodename, started=time.time())
    if run is not None and not run.live():
        outcome.discarded = True
        outcome.finished = time.time()
        return outcome
    job = None
    if os.getcwd() != spec.cwd and os.path.isdir(spec.cwd):
        os.chdir(spec.cwd)  # relative output names are relative to cmsrun's folder
    try:
        here = snapshot([Path.cwd().resolve()])  # before the job's begin_job, if it is built now
        job, outcome.built = cache.take(spec, first, unit)
        outcome.streams, outcome.threads = job.streams, job.threads
        folders = watched_folders(job)
        before = {**snapshot(folders), **here}
        job.reset_counters()
        job.source.set_units([unit])  # type: ignore[attr-defined]
        # trio.run copies this context: the unit's files are named as its parts, and
        # committed (renamed into the run's folder) only if the whole unit succeeded.
        with (
            output_naming(unit=unit, run=run.run if run is not None else None),
            commit_outputs(f"work unit {unit.describe()}") as commit,
        ):
            t0 = time.perf_counter()
            report = trio.run(process_events, job)
            outcome.events_time = time.perf_counter() - t0
        outcome.parts = tuple(str(p) for p in commit.committed)
        outcome.undeclared = tuple(str(p) for p in changed_files(before, snapshot(folders)))
        outcome.record = unit_record(job, report)
        outcome.services = {name: stats for name, svc in job.services.services.items() if (stats := svc.statistics())}
        cache.give_back(spec, unit.dataset, job)
    except FrameworkError as exc:
        if job is not None:
            trio.run(abort_job, job)  # its state after a failure is not trusted for the next unit
        if run is not None and not run.live():
            outcome.discarded = True  # its writes failed: the run ended meanwhile
        else:
            outcome.error = _one_line(exc, unit)
            outcome.bad_file = isinstance(exc, (FileOpenError, FileReadError))
    except BaseException:
        if job is not None:
            trio.run(abort_job, job)
        raise
    if run is not None and not run.live():  # written before the removal: removed with the folders
        outcome.discarded, outcome.parts = True, ()
    outcome.finished = time.time()
    return outcome


def _one_line(exc: FrameworkError, unit: WorkUnit) -> str:
    message = str(exc.args[0] if exc.args else exc).partition("\n")[0]
    if "entries [" not in message:  # name the file and entry range whatever failed
        message += f" (work unit: {unit.describe()})"
    return message
