"""``cmsrun CONFIG --dataset FILESET --executor dask``: the datasets' work units on a Dask cluster.

The driver (this module, in the ``cmsrun`` process):

1. opens the cluster: a ``distributed.LocalCluster`` of worker PROCESSES (``--workers N``,
   default = cores, one thread each), or ``distributed.Client(--scheduler ADDRESS)`` for an
   existing one (dask-jobqueue's HTCondor/Slurm clusters, a coffea-casa facility), and
   prints the dashboard address (if the scheduler has a dashboard);
2. if the config uses Triton and a model is served by no configured server (asked as
   TritonService's begin_job asks them: ``discovery.wait``, saturated servers skipped),
   registers :class:`~framework.cmsrun.executor._host_triton.HostTritonServer` (one local
   server per host);
3. preprocesses the fileset on the cluster (one task per file; the cache next to the
   output is reused, ``framework.io.preprocess``) and splits it into work units;
4. submits one task per unit (``client.submit(run_unit_task, ...)``; the worker side is
   ``_unit_task``) and follows them with ``as_completed`` and a rich progress bar;
5. merges each dataset's parts in unit order into its outputs (``framework.io``), or
   keeps them with a manifest (``--keep-parts``), and prints ONE summary of the run
   (``_report``).

Exactly once, nothing left: the units write their parts into folders of this run only
(``<output>.parts/run-<random>/``), created here before any unit is submitted and removed
here after the merge (renamed, then deleted: a late write by path cannot land anywhere).
A unit that Dask runs again after the merge (a result lost with a worker) finds them gone
and writes nothing (``_unit_task``).

Faults: a worker that dies runs its unit again elsewhere (Dask). A unit that fails with a
framework error (a corrupt file) stops the run: the other units are cancelled, the cluster
closed, every part removed, and the one-line error names file and entry range; with
``--skip-bad-files`` (coffea's ``skipbadfiles``) a unit whose FILE is bad is skipped and
listed in the summary with its events. Ctrl-C / SIGTERM close the cluster, stop the host
servers and remove the parts (exit 130 / 143).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask.config
from distributed import Client, Future, LocalCluster, as_completed
from rich.console import Console

from framework import config as cms
from framework.core import Job, build_job
from framework.io import (
    Dataset,
    FileInfo,
    WorkUnit,
    atomic_write,
    dataset_output_path,
    final_path,
    limit_units,
    merge_unit_parts,
    new_run_name,
    parts_folder,
    remove_stale_runs,
    run_parts_folder,
)
from framework.utilities import (
    ConfigurationError,
    ExternalFailure,
    FileOpenError,
    FrameworkError,
    commit_outputs,
    stop_signals_handled,
)

from .._progress import progress_bar
from ._address import SCHEDULER_TIMEOUT, check_scheduler
from ._host_triton import HOST_SERVER, HostTritonServer, host_server, host_tag, stop_host_server
from ._report import print_run_summary, run_summary
from ._triton_stats import ServerCounters
from ._unit_task import (
    JobCache,
    JobSpec,
    RunFolders,
    UnitOutcome,
    changed_files,
    end_worker_jobs,
    run_unit_task,
    snapshot,
    watched_folders,
)

__all__ = ["DaskOptions", "run_on_dask"]

log = logging.getLogger("pysonic.executor")

_SCRATCH = "_pysonic_scratch"  # the LocalCluster's attribute: (its scratch folder, the dask.config.set)
RETRIES = 1  # Dask retries of a unit that raised something other than a framework error


@dataclass
class DaskOptions:
    """The command line of the executor (``cmsrun --executor dask ...``)."""

    config: str
    args: list[str]
    fileset: str
    chunk_size: int
    scheduler: str | None = None
    workers: int | None = None
    streams: int | None = None
    threads: int | None = None
    skip_bad_files: bool = False
    keep_parts: bool = False
    progress: bool = True
    summary: bool = True
    summary_json: str | None = None
    max_events: int | None = None  # -n; None: the config's maxEvents


@dataclass
class _Run:
    """What the driver tracks while units run."""

    plan: list[tuple[Dataset, list[WorkUnit]]]
    outcomes: dict[str, UnitOutcome] = field(default_factory=dict)  # unit id -> outcome
    skipped: list[UnitOutcome] = field(default_factory=list)
    retried: dict[str, int] = field(default_factory=dict)
    outputs: list[Path] = field(default_factory=list)  # declared output names, as configured
    name: str = field(default_factory=new_run_name)  # its parts folders' name (owner-tagged)
    folders: list[Path] = field(default_factory=list)  # the run's parts folders, as created

    def run_folders(self) -> RunFolders:
        return RunFolders(self.name, tuple(str(f.absolute()) for f in self.folders))


class _Stopped(KeyboardInterrupt):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise like Ctrl-C does (all end in the cleanup below); restored after."""

    def handler(signum: int, frame: Any) -> None:
        raise _Stopped(signum)

    with stop_signals_handled(handler):
        yield


def run_on_dask(process: Any, options: DaskOptions, console: Console) -> dict[str, Any]:
    """Run ``process`` over every dataset of ``options.fileset`` on a Dask cluster.

    The merged outputs and ``summary_json`` are committed together at the end
    (``framework.utilities._commit``): a run that fails or is stopped leaves earlier files of those
    names as they were.

    Returns:
        The run's summary (``_report.run_summary``).

    Raises:
        ConfigurationError: before any work: a module parameter names a file the module
            does not declare as an output, or a service writes its files at the end of
            the job (one per worker: FastTimerService).
        FrameworkError: a unit failed (one line naming file and entry range), unless
            ``skip_bad_files`` and its file is bad; a module wrote a file no declaration
            covers, or failed in ``end_job``; nothing of the run's parts is left.
        KeyboardInterrupt: SIGINT/SIGTERM/SIGHUP (``.signum``), after the same cleanup.
    """
    from .._datasets import plan_datasets

    job = build_job(process, max_events=-1)  # constructs modules: their parameters and outputs
    check_dask_outputs(process, job)
    # What the units write parts of: every declared output of the modules and services.
    outputs = sorted({Path(path) for _who, path in job.declared_outputs()})
    cluster = client = None
    tag = ""
    run: _Run | None = None
    closed = False
    try:
        with _signals_raise(), commit_outputs("the Dask run"):
            started = time.perf_counter()
            cluster, client = _open_cluster(options, console)
            tag, counters = _plan_triton(job, client, console)
            client.register_plugin(JobCache(), name=JobCache.name)
            t0 = time.perf_counter()
            bad_files: list[dict[str, str]] = []
            plan = plan_datasets(
                process,
                options.fileset,
                options.chunk_size,
                mapper=_cluster_mapper(client, bad_files if options.skip_bad_files else None),
            )
            for bad in bad_files:
                log.warning("skipped (--skip-bad-files): %s", bad["error"])
            plan = _limit_plan(process, plan, options.max_events)
            run = _Run(plan, outputs=outputs)
            _make_run_folders(run)
            folders = watched_folders(job)
            before = snapshot(folders)
            spec = JobSpec.make(options.config, options.args, options.streams, options.threads, tag)
            _run_units(client, spec, run, options, console)
            _end_worker_jobs(client, folders, before)
            merges = _merge(run, options)
            _remove_parts(run)
            wall = time.perf_counter() - t0
            summary = run_summary(
                process,
                spec,
                run.plan,
                run.outcomes,
                run.skipped,
                run.retried,
                merges,
                wall,
                _workers_of(client),
                job_wall_time=time.perf_counter() - started,
            )
            _server_statistics(client, tag, counters, summary)
            summary["units"]["skipped_files"] = bad_files
            if options.summary_json:
                with atomic_write(Path(options.summary_json), "--summary-json") as temp:
                    temp.write_text(json.dumps(summary, indent=2, default=str))
            _close(cluster, client, tag)
            closed = True
    except BaseException:
        if not closed:
            _close(cluster, client, tag)
        if run is not None:
            _remove_parts(run)
        raise
    if options.summary:
        print_run_summary(summary, console)
    return summary


def _limit_plan(
    process: Any, plan: list[tuple[Dataset, list[WorkUnit]]], max_events: int | None
) -> list[tuple[Dataset, list[WorkUnit]]]:
    """Each dataset's units cut at PoolSource's ``skipEvents`` and at ``maxEvents`` (``-n``
    if given), as ``cmsrun --dataset`` applies them to each dataset's job."""
    limit = process.maxEvents_() if max_events is None else max_events
    source = process.source
    skip = int(source.skipEvents.value()) if "skipEvents" in source.parameterNames_() else 0
    return [(dataset, limit_units(units, skip, limit)) for dataset, units in plan]


def check_dask_outputs(process: Any, job: Job) -> None:
    """Before any work: what would be lost under Dask, found from the config.

    Raises:
        ConfigurationError: a module's string parameter names a file it does not declare
            (``declared_outputs``): a value with a file suffix in an existing folder, that
            does not exist yet or whose parameter's name says "out"; or a service declares
            outputs it writes at the end of the job (``Service.outputs_per_unit`` False),
            which every worker would write in turn.
    """
    for service in job.services.services.values():
        outputs = service.declared_outputs()
        if outputs and not service.outputs_per_unit:
            name = next(iter(outputs))
            raise ConfigurationError(
                f"Service '{service.label}' (type {service.type_name}): parameter '{name}': with --executor dask "
                f"this service would write '{outputs[name]}' once per worker at the end of its job (each "
                f"replacing the last); not supported with --executor dask (the run's summary: --summary-json)"
            )
    for worker in job.workers.values():
        module = worker.module
        declared = {(Path.cwd() / str(p)).resolve() for p in module.declared_outputs().values()}
        for name, value in _string_parameters(process, worker.label):
            path = (Path.cwd() / value).resolve()
            if path in declared or not _looks_like_output(name, value, path):
                continue
            raise ConfigurationError(
                f"{worker.describe()}: parameter '{name}' names a file ('{value}') that the module does "
                f"not declare as an output (declared_outputs()): with --executor dask each worker would "
                f"write its own and all but one would be lost; declare it (a ROOT file, merged per "
                f"dataset) or book its contents with TFileService"
            )


_FILE_SUFFIX = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,9}$")


def _looks_like_output(name: str, value: str, path: Path) -> bool:
    if not value or any(c.isspace() for c in value) or "://" in value or not _FILE_SUFFIX.search(value):
        return False
    if not path.parent.is_dir():
        return False  # not writable as given: an input's typo more likely than an output
    return not path.exists() or "out" in name.lower()


def _string_parameters(process: Any, label: str) -> list[tuple[str, str]]:
    """The module's string parameters, defaults included, nested PSets as ``a.b``."""
    from framework.core import find_type

    obj = getattr(process, label)
    desc = cms.ParameterSetDescription()
    find_type(obj.type_()).fill_descriptions(desc)
    found: list[tuple[str, str]] = []

    def walk(params: Any, prefix: str) -> None:
        for key in params:
            value = params[key]
            if isinstance(value, str):
                found.append((prefix + key, value))
            elif isinstance(value, cms.ParameterSet):
                walk(value, f"{prefix}{key}.")
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, cms.ParameterSet):
                        walk(item, f"{prefix}{key}[{i}].")

    walk(desc.validate(obj, label), "")
    return found


def _open_cluster(options: DaskOptions, console: Console) -> tuple[LocalCluster | None, Client]:
    # Dask's own INFO lines (workers starting, closing) would bury cmsrun's output.
    for name in ("distributed", "bokeh", "tornado"):
        if logging.getLogger(name).getEffectiveLevel() < logging.WARNING:
            logging.getLogger(name).setLevel(logging.WARNING)
    if options.scheduler:
        check_scheduler(options.scheduler)  # Client() would wait 30 s, or for good (not a scheduler)
        client = Client(options.scheduler, timeout=SCHEDULER_TIMEOUT)
        cluster = None
    else:
        n = options.workers or os.cpu_count() or 1
        # The scheduler's and workers' scratch folders (Dask's default: $TMPDIR/dask-scratch-space,
        # left behind) in a folder of this run, removed by _close.
        scratch = tempfile.mkdtemp(prefix="pysonic-dask-")
        # The scheduler's too (LocalCluster gives local_directory to its workers only).
        config = dask.config.set({"temporary-directory": scratch})
        try:
            cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
                silence_logs=logging.ERROR,
                local_directory=scratch,
            )
        except BaseException:
            config.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # dask's set is untyped
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        setattr(cluster, _SCRATCH, (scratch, config))  # noqa: B010 - an attribute of ours on Dask's object
        client = Client(cluster)
    workers = len(client.scheduler_info(n_workers=-1)["workers"]) if options.scheduler else options.workers
    dashboard = f"; dashboard: {client.dashboard_link}" if _has_dashboard(client) else ""
    console.print(
        f"[bold]cmsrun: Dask scheduler {client.scheduler.address}, "
        f"{workers or os.cpu_count()} worker(s){dashboard}[/bold]",
        soft_wrap=True,
    )
    return cluster, client


def _has_dashboard(client: Client) -> bool:
    """Whether the scheduler serves Dask's dashboard (bokeh's ``/status`` pages).

    Its HTTP server runs in any case (health and metrics routes; ``scheduler_info``
    lists it as the "dashboard" service and ``Client.dashboard_link`` formats an address
    for it), also for a scheduler started without the dashboard (``--no-dashboard``,
    ``dashboard=False``, no bokeh), where ``/status`` does not exist.
    """

    def bokeh_served(dask_scheduler: Any) -> bool:  # by value: the scheduler need not import framework
        applications = getattr(getattr(dask_scheduler, "http_application", None), "applications", ())
        return any(type(app).__name__ == "DaskBokehTornado" for app in applications)

    try:
        return bool(client.run_on_scheduler(bokeh_served))
    except Exception:  # noqa: BLE001 - a scheduler that runs no code of ours: say nothing of a dashboard
        return False


def _cluster_mapper(client: Client, bad_files: list[dict[str, str]] | None) -> Any:
    """``preprocess``'s mapper: one task per file on the cluster (results in order).

    With ``bad_files`` (``--skip-bad-files``), a file whose metadata cannot be read becomes
    an empty :class:`~framework.io.FileInfo` (no unit runs; never valid in the cache, its
    size and mtime unknown) and is listed there with its error, as coffea's preprocessing
    skips it.
    """

    def mapper(function: Any, paths: list[str], trees: list[str]) -> list[Any]:
        # An unreadable file comes back as a value, not raised on the worker: it is not worth
        # a Dask retry, and Dask would log its traceback on the worker.
        futures = client.map(
            functools.partial(_preprocess_or_error, function), paths, trees, pure=False, retries=RETRIES
        )
        results = []
        for path, tree, outcome in zip(paths, trees, client.gather(futures), strict=True):
            if isinstance(outcome, str):
                if bad_files is None:
                    raise FileOpenError(outcome)
                bad_files.append({"file": path, "tree": tree, "error": outcome})
                outcome = FileInfo(path, tree, 0, (0,), "")  # no units; no size: never valid in the cache
            results.append(outcome)
        return results

    return mapper


def _preprocess_or_error(function: Any, path: str, tree: str) -> Any:
    """``function(path, tree)`` (a :class:`~framework.io.FileInfo`), or the first line of
    the FileOpenError's message if the file cannot be read."""
    try:
        return function(path, tree)
    except FileOpenError as exc:
        return str(exc.args[0] if exc.args else exc).partition("\n")[0]


def _plan_triton(job: Job, client: Client, console: Console) -> tuple[str, ServerCounters | None]:
    """If the job uses Triton: the run's server counters (configured servers: begin
    snapshot now), and, if its models need TritonService's fallback, one server per host
    started (a nanny plugin). Returns (its tag, "" if none; the counters, None if no Triton)."""
    service = job.services.services.get("TritonService")
    if service is None or not service.models:  # type: ignore[attr-defined]
        return "", None
    import trio

    routing = service.routing  # type: ignore[attr-defined]
    models = set(service.models)  # type: ignore[attr-defined]
    try:  # as the workers' begin_job will: discovery.wait for a pool scaling from zero, saturated ones skipped
        trio.run(routing.discover, models)
    finally:
        routing.close()
    served: set[str] = set().union(*routing.book.served.values())
    pairs = [(m, name) for name, found in routing.book.served.items() for m in sorted(found & models)]
    counters = ServerCounters(routing.book.servers, pairs)
    counters.take_begin()
    missing = sorted(m for m in service.models if m not in served)  # type: ignore[attr-defined]
    fallback = service.fallback_server  # type: ignore[attr-defined]
    if not missing or not fallback.enabled:
        return "", counters  # TritonService's own begin_job names what is missing if the fallback is off
    repository = str(fallback.repository(missing))
    params = fallback.params
    tag = host_tag(client.scheduler.address, repository, missing, params.device)
    plugin = HostTritonServer(
        tag,
        repository,
        missing,
        device=params.device,
        instances=params.instances,
        wait=float(params.wait),
        verbose=params.verbose,
    )
    console.print(f"cmsrun: one Triton server per host for {', '.join(missing)} (repository {repository})")
    try:
        client.register_plugin(plugin, name=HostTritonServer.name)
    except Exception as exc:  # noqa: BLE001 - the nanny's error, as one line
        raise ExternalFailure(
            f"cmsrun: the host Triton server for {', '.join(missing)} did not start: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from exc
    counters.models_on_host = missing
    return tag, counters


def _server_statistics(client: Client, tag: str, counters: ServerCounters | None, summary: dict[str, Any]) -> None:
    """Triton's server-side counters of the run, into ``summary["services"]["TritonService"]``;
    ``summary["host_servers"]``: worker -> the host server it found."""
    if counters is None:
        return
    if tag:
        from framework.sonic import ServerInfo

        summary["host_servers"] = dict(client.run(host_server, tag))
        for address in sorted({a for a in summary["host_servers"].values() if a}):
            counters.add_server(ServerInfo(f"{HOST_SERVER}@{address}", address), counters.models_on_host)
    try:
        stats = counters.statistics()
    except Exception as exc:  # noqa: BLE001 - statistics are a nicety
        log.warning("no Triton server statistics: %s", exc)
        return
    summary["services"].setdefault("TritonService", {})["models"] = stats


def _run_units(client: Client, spec: JobSpec, run: _Run, options: DaskOptions, console: Console) -> None:
    futures: dict[Future[Any], WorkUnit] = {}
    seen: set[str] = set()
    for dataset, units in run.plan:
        for unit in units:
            if unit.id in seen:  # its part (and Dask key) would be the other listing's
                raise ConfigurationError(
                    f"dataset '{dataset.name}' lists file '{unit.file}' (tree '{unit.tree}') "
                    f"twice: each file once per dataset"
                )
            seen.add(unit.id)
    folders = run.run_folders()
    for _dataset, units in run.plan:
        for unit in units:
            if unit.num_entries == 0:
                continue  # an empty file: nothing to run (it still counts as seen)
            future = client.submit(
                run_unit_task,
                spec,
                unit,
                units[0],
                folders,
                key=f"unit-{unit.part_name}-{run.name}",
                pure=False,
                retries=RETRIES,
            )
            futures[future] = unit
    total_events = sum(u.num_entries for u in futures.values())
    progress = progress_bar(console, options.progress and console.is_terminal)
    units_task = progress.add_task("units", total=len(futures), rate="")
    events_task = progress.add_task("events", total=total_events, rate="")
    t0 = time.perf_counter()
    events = 0
    with progress:
        for future in as_completed(list(futures)):
            unit = futures[future]
            try:
                outcome: UnitOutcome = future.result()
            except Exception as exc:  # noqa: BLE001 - retries exhausted or the worker died too often
                _cancel(client, futures)
                raise FrameworkError(
                    f"work unit {unit.describe()} failed on the cluster: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                    category="ExternalFailure",
                ) from exc
            if outcome.discarded:  # someone removed the run's parts folders: its part is lost
                _cancel(client, futures)
                raise FrameworkError(
                    f"work unit {unit.describe()}: the run's parts folders were removed while it ran "
                    f"({', '.join(folders.folders)})",
                    category="FileWriteError",
                )
            if outcome.undeclared:
                _cancel(client, futures)
                raise FrameworkError(_undeclared_message(outcome.undeclared[0], f"work unit {unit.describe()}"))
            if outcome.error:
                if not (options.skip_bad_files and outcome.bad_file):
                    _cancel(client, futures)
                    raise FrameworkError(outcome.error, category="FileReadError" if outcome.bad_file else "Module")
                log.warning("skipped (--skip-bad-files): %s", outcome.error)
                run.skipped.append(outcome)
            else:
                run.outcomes[unit.id] = outcome
                events += outcome.record["events"] if outcome.record else 0
            rate = events / max(time.perf_counter() - t0, 1e-9)
            progress.update(units_task, advance=1)
            progress.update(events_task, advance=unit.num_entries, rate=f"{rate:,.0f} events/s")
    run.retried = _retries(client, futures)


def _undeclared_message(path: str, when: str) -> str:
    return (
        f"'{path}' was written during {when}, and no module declares it as an output (declared_outputs()): "
        f"with --executor dask each worker would write its own and all but one would be lost; declare it "
        f"(a ROOT file, merged per dataset) or book its contents with TFileService"
    )


def _end_worker_jobs(client: Client, folders: list[Path], before: dict[Path, tuple[int, int, int]]) -> None:
    """End the workers' jobs now (their modules' and services' ``end_job``), before the merge:
    a failure there, or a file written then, fails the run before anything is committed.

    Raises:
        FrameworkError: the first problem a worker reported (``JobCache.end_jobs``), or a file
            new or changed in ``folders`` since ``before`` (``_unit_task.snapshot``).
    """
    reports = client.run(end_worker_jobs)
    for worker, problems in sorted(reports.items()):
        if problems:
            raise FrameworkError(f"{problems[0]} (worker {worker})", category="FileWriteError")
    changed = changed_files(before, snapshot(folders))
    if changed:
        raise FrameworkError(_undeclared_message(str(changed[0]), "the run"), category="FileWriteError")


def _retries(client: Client, futures: dict[Future[Any], WorkUnit]) -> dict[str, int]:
    """Unit id -> times Dask ran it again (its worker died: ``suspicious``; or it raised:
    ``retries`` used), read from the scheduler while the futures still hold the tasks."""
    units = {f.key: u.id for f, u in futures.items()}
    keys = list(units)

    def count(dask_scheduler: Any, keys: list[str], retries: int) -> dict[str, int]:
        found = {}
        for key in keys:
            ts = dask_scheduler.tasks.get(key)
            if ts is not None and (ts.suspicious or (ts.retries is not None and ts.retries < retries)):
                found[key] = int(ts.suspicious) + (retries - int(ts.retries or 0))
        return found

    try:
        found = client.run_on_scheduler(count, keys=keys, retries=RETRIES)
        return {units[key]: times for key, times in found.items()}
    except Exception as exc:  # noqa: BLE001 - a statistic; the outputs are complete
        log.warning("cannot read the retries from the Dask scheduler: %s", exc)
        return {}


def _cancel(client: Client, futures: dict[Future[Any], WorkUnit]) -> None:
    client.cancel(list(futures), force=True)


def _merge(run: _Run, options: DaskOptions) -> list[dict[str, Any]]:
    """Merge each dataset's parts in unit order; with ``keep_parts`` also move the parts
    out of the run's folders into ``<output>.parts/`` and write manifests there."""
    merges = []
    for dataset, units in run.plan:
        done = [run.outcomes[u.id] for u in units if u.id in run.outcomes]
        if not done:
            log.warning("dataset '%s': no unit succeeded, no output", dataset.name)
            continue
        t0 = time.perf_counter()
        reports = merge_unit_parts([o.parts for o in done], remove_parts=False)  # _remove_parts removes them
        seconds = time.perf_counter() - t0
        for report in reports:
            size = report.size
            merges.append(
                {
                    "dataset": dataset.name,
                    "output": str(report.target),
                    "parts": len(report.parts),
                    "entries": report.entries,
                    "bytes": size,
                    "seconds": seconds / len(reports),
                }
            )
        if options.keep_parts:
            kept = {}
            for part in (Path(p) for o in done for p in o.parts):
                kept[str(part)] = str(parts_folder(final_path(part)) / part.name)
                part.replace(kept[str(part)])
            for report in reports:
                _write_manifest(report.target, done, kept)
    return merges


def _write_manifest(target: Path, done: list[UnitOutcome], kept: dict[str, str]) -> None:
    """``<output>.parts/manifest.json``: the units merged into ``target``, in order, with
    their parts (``kept``: where each was moved)."""
    units = []
    for outcome in done:
        part = next((p for p in outcome.parts if final_path(p) == target), None)
        if part is None:
            continue
        u = outcome.unit
        units.append(
            {
                "id": u.id,
                "dataset": u.dataset,
                "file": u.file,
                "tree": u.tree,
                "entry_start": u.entry_start,
                "entry_stop": u.entry_stop,
                "events": outcome.record["events"] if outcome.record else 0,
                "part": kept[part],
            }
        )
    (parts_folder(target) / "manifest.json").write_text(json.dumps({"output": str(target), "units": units}, indent=1))


def _make_run_folders(run: _Run) -> None:
    """Create the run's parts folder of every configured output of every dataset whose
    folder exists (if it does not, the output module's error names it)."""
    for name in run.outputs:
        for dataset, _units in run.plan:
            final = dataset_output_path(name, dataset.name)
            if not final.parent.is_dir():
                continue
            parts_folder(final).mkdir(exist_ok=True)
            remove_stale_runs(final)  # a driver killed before it could remove its own
            folder = run_parts_folder(final, run.name)
            folder.mkdir()
            run.folders.append(folder)


def _remove_parts(run: _Run) -> None:
    """Remove the run's parts folders (complete parts and temporary files), and each
    ``<output>.parts/`` left empty.

    Each folder is renamed before it is deleted: a unit still writing (by path) then
    fails instead of adding a file while the folder is being deleted.
    """
    for folder in run.folders:
        doomed = folder.with_name(f"{folder.name}.removed")
        try:
            folder.rename(doomed)
        except FileNotFoundError:
            continue
        shutil.rmtree(doomed, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # only if empty: kept parts, other runs' folders stay
    run.folders.clear()


def _workers_of(client: Client) -> dict[str, dict[str, Any]]:
    try:
        info = client.scheduler_info(n_workers=-1)["workers"]
    except Exception:  # noqa: BLE001 - a statistic
        return {}
    return {address: {"host": w.get("host", ""), "nthreads": w.get("nthreads", 0)} for address, w in info.items()}


def _close(cluster: LocalCluster | None, client: Client | None, tag: str) -> None:
    """End the workers' jobs (services' end_job while the host server still runs), stop the
    host servers (the nannies' teardown), close the client and a cluster we started, then
    make sure no host server of this run is left."""
    try:
        if client is not None:
            plugins = [(JobCache.name, False)] + ([(HostTritonServer.name, True)] if tag else [])
            for name, nanny in plugins:
                with contextlib.suppress(Exception):  # best effort: closing the cluster ends them too
                    client.unregister_worker_plugin(name, nanny=nanny)
            client.close()
        if cluster is not None:
            cluster.close()
    finally:
        if tag:
            stop_host_server(tag)
        if cluster is not None and getattr(cluster, _SCRATCH, None):
            scratch, config = getattr(cluster, _SCRATCH)
            config.__exit__(None, None, None)  # Dask's temporary-directory as it was
            shutil.rmtree(scratch, ignore_errors=True)
