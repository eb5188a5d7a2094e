"""``cmsrun``: run a config file over its events (CMSSW's ``cmsRun``).

    cmsrun CONFIG [name=value ...] [-n MAX_EVENTS] [-j STREAMS] [-t THREADS] [-v] [--dump]
           [--dataset FILESET [--chunk-size N]
            [--executor dask [--scheduler ADDRESS] [--workers N] [--skip-bad-files] [--keep-parts]]]

With ``--dataset``, the config runs over each dataset of a coffea fileset (JSON or YAML)
in turn, with outputs and summaries per dataset (see ``framework/cmsrun/_datasets.py``); with
``--executor dask`` the datasets' work units run on a Dask cluster instead, with one
output per dataset and one summary of the run (``framework/cmsrun/executor``).

As with ``cmsRun``, the arguments after the config's name are the config's ``sys.argv[1:]``
(``name=value`` for its ``VarParsing``, or ``--option value`` for its ``argparse``), except
cmsrun's own options (``-n``, ``--dataset``, ...), which may follow the config too; after
``--`` everything is the config's. Exit codes: 0 success,
1 the job failed (the error names module, path, event, file, output or model), 2 usage
errors (cmsrun's options, or a config's ``name=value``), 130 interrupted (Ctrl-C,
SIGINT), 143 terminated (SIGTERM), 129 its terminal closed (SIGHUP);
docs/troubleshooting.md lists what each mistake prints.
Every output path is checked before the first event (``framework.io.check_outputs``). Progress goes to stderr while
the job runs; the summary (TrigReport, TimeReport, server statistics) follows when
``wantSummary`` is set or ``--summary`` is given.

A failed job prints ONE line between ``----- Begin Fatal Exception -----`` and
``----- End Fatal Exception -------`` naming the culprit; further lines of the error (the
end of a server log) follow the end marker.

Every output of a job (and ``--summary-json``) is committed only when the whole job
succeeded (``framework.utilities._commit``): written under a temporary name, renamed into place
after every module's ``end_job``; a failed or stopped job removes its temporary files and
leaves earlier files of the same names untouched.

Ctrl-C (SIGINT) and SIGTERM stop the job cleanly: the first one cancels the job, so events
in flight are abandoned (their inference requests cancelled), no output is committed (a
signal during a module's ``end_job`` too), and the fallback Triton server is stopped; then
cmsrun exits with 128 + the signal number. CMSSW instead closes its output files cleanly
on SIGINT; here a file holding an arbitrary part of the input would be too easily taken
for a complete one, and removing it is simpler and honest. A second signal (during that
cleanup, or while a module is stuck and the first could not take effect) ends the process
at once, as CMSSW's does, naming the module and event it was stuck in; unfinished outputs
are removed and the servers it started stopped all the same (``framework/cmsrun/_signals.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.logging import RichHandler

from framework import config as cms
from framework.core import JobReport, available_cores, build_job, find_type, type_catalog
from framework.io import (
    DEFAULT_CHUNK_SIZE,
    atomic_write,
    check_outputs,
    dataset_output_path,
    load_fileset,
    output_folders,
    output_naming,
    output_path,
    remove_stale_temporaries,
)
from framework.utilities import ConfigurationError, FrameworkError, UsageError, commit_outputs

from ._progress import progress_bar
from ._signals import JobStopped as JobStopped
from ._signals import run_stoppable, signals_stop_the_job
from ._summary import print_summary

log = logging.getLogger("pysonic")

HELP_FLAGS = ("-h", "--help")  # after the config's name: the config's own help


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cmsrun",
        description="Run a pysonic (CMSSW-style) configuration file.",
        epilog="Arguments after CONFIG that are not cmsrun's options are the config's sys.argv[1:] (its VarParsing "
        "or argparse); after '--' all are the config's. 'cmsrun CONFIG --help' (or 'help') lists the config's own "
        "options.",
    )
    p.add_argument("config", nargs="?", help="configuration file (*_cfg.py) defining 'process'")
    p.add_argument("args", nargs="*", metavar="ARG", help="the config's arguments (name=value, --option ...)")
    p.add_argument("-n", "--max-events", type=int, help="override process.maxEvents.input (-1 = all)")
    p.add_argument("-j", "--streams", type=int, help="override options.numberOfStreams")
    p.add_argument("-t", "--threads", type=int, help="override options.numberOfThreads")
    p.add_argument("-v", "--verbose", action="count", default=0, help="debug logging")
    p.add_argument("--summary", action="store_true", help="print the summary even if wantSummary is False")
    p.add_argument("--summary-json", metavar="FILE", help="write the summary as JSON to FILE")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--dataset",
        metavar="FILESET",
        help="run over each dataset of a coffea fileset (JSON/YAML); outputs get the dataset's name",
    )
    p.add_argument(
        "--chunk-size",
        type=int,
        metavar="N",
        help=f"events per work unit with --dataset (default {DEFAULT_CHUNK_SIZE:,})",
    )
    p.add_argument(
        "--executor",
        choices=("sequential", "dask"),
        default="sequential",
        help="with --dataset: 'dask' runs the work units on a Dask cluster",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --executor dask: an existing Dask scheduler (tcp://host:8786); default: a LocalCluster",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="with --executor dask and no --scheduler: worker processes (default: cores)",
    )
    p.add_argument(
        "--skip-bad-files",
        action="store_true",
        help="with --executor dask: skip units whose file cannot be read (listed in the summary)",
    )
    p.add_argument(
        "--keep-parts",
        action="store_true",
        help="with --executor dask: keep the units' parts and a manifest.json beside the merged outputs",
    )
    only = p.add_mutually_exclusive_group()  # each prints something and exits: one at a time
    only.add_argument(
        "--dump",
        action="store_true",
        help="print the loaded config as Python in CMSSW's layout (CMSSW's edmConfigDump) and exit",
    )
    only.add_argument(
        "--list-types",
        action="store_true",
        help="list the registered types (module, source, service) with their kind and package, and exit",
    )
    only.add_argument("--describe", metavar="TYPE", help="print the parameters of a module type and exit")
    return p


def _list_types() -> None:
    """``--list-types``: one line per type: name, kind, the package providing it (stdout)."""
    catalog = type_catalog()
    width = max(len(t.name) for t in catalog)
    kinds = max(len(t.kind) for t in catalog)
    for t in catalog:
        line = f"{t.name:<{width}}  {t.kind:<{kinds}}  {t.provider}"
        print(f"{line}  ! {t.problem}" if t.problem else line)


def _describe(type_name: str, console: Console) -> None:
    from rich.table import Table

    cls = find_type(type_name)
    desc = cms.ParameterSetDescription()
    cls.fill_descriptions(desc)
    summary_line = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
    rows = desc.describe()
    extensions = any(row.extension for row in rows)
    caption = "* = pysonic extension (CMSSW's module has no such parameter)" if extensions else None
    table = Table(title=f"{type_name} ({getattr(cls, 'kind', '?')}): {summary_line}", caption=caption)
    for col in ("parameter", "type", "default", "description"):
        table.add_column(col)
    for row in rows:
        name = f"{row.name} *" if row.extension else row.name
        table.add_row(name, row.type_name, row.default, row.doc)
    console.print(table)


def _run(ns: argparse.Namespace, console: Console) -> int:
    # As for a script: module types given as "file:Class" next to the config are importable.
    sys.path.insert(0, os.path.dirname(os.path.abspath(ns.config)))
    process = cms.load_config(ns.config, ns.args)
    if ns.dump:
        print(process.dumpPython(), end="")
        return 0
    if not ns.dataset:
        job = build_job(process, max_events=ns.max_events, streams=ns.streams, threads=ns.threads)
        _check_outputs(job, ns, ns.summary_json, getattr(job.source, "file_names", ()))
        _run_job(job, ns, console, process.name_(), None, ns.summary_json)
        return 0
    from ._datasets import preprocess_cache_path

    cache = preprocess_cache_path(process, ns.dataset)
    cached_before = cache.exists()
    try:
        return _run_datasets(ns, console, process)
    except BaseException:
        if not cached_before:  # a failed run leaves the folder as it found it
            cache.unlink(missing_ok=True)
        raise


def _run_datasets(ns: argparse.Namespace, console: Console, process: Any) -> int:
    """``--dataset``: each dataset of the fileset, in turn or on Dask."""
    # The outputs of every dataset, checked before any file is preprocessed or unit run (a
    # job built only for that: its modules' constructors open nothing, its source no file).
    job = build_job(process, max_events=ns.max_events, streams=ns.streams, threads=ns.threads)
    for dataset in load_fileset(ns.dataset):
        summary_json = ns.summary_json
        if summary_json and ns.executor != "dask":  # one summary per dataset; Dask: one of the run
            summary_json = str(dataset_output_path(summary_json, dataset.name))
        with output_naming(dataset=dataset.name):
            _check_outputs(job, ns, summary_json, [f.path for f in dataset.files])
    if ns.executor == "dask":
        from .executor import DaskOptions, run_on_dask

        options = DaskOptions(
            config=ns.config,
            args=list(ns.args),
            fileset=ns.dataset,
            chunk_size=ns.chunk_size or DEFAULT_CHUNK_SIZE,
            scheduler=ns.scheduler,
            workers=ns.workers,
            streams=ns.streams,
            threads=ns.threads,
            skip_bad_files=ns.skip_bad_files,
            keep_parts=ns.keep_parts,
            progress=not ns.no_progress,
            summary=bool(process.options_()["wantSummary"]) or ns.summary,
            summary_json=ns.summary_json,
            max_events=ns.max_events,
        )
        summary = run_on_dask(process, options, console)
        console.print(
            f"[green]cmsrun: {process.name_()}: {summary['events']} events processed in "
            f"{summary['wall_time']:.2f} s on Dask ({len(summary['workers'])} worker(s); preprocessing, units and "
            f"merge; the whole run: {summary['job_wall_time']:.2f} s)[/green]"
        )
        return 0
    from ._datasets import plan_datasets

    for dataset, units in plan_datasets(process, ns.dataset, ns.chunk_size or DEFAULT_CHUNK_SIZE):
        job = build_job(process, max_events=ns.max_events, streams=ns.streams, threads=ns.threads)
        job.source.set_units(units)  # type: ignore[attr-defined]  # a PoolSource: datasets need one
        entries = sum(u.num_entries for u in units)
        console.print(
            f"[bold]cmsrun: dataset '{dataset.name}': {len(dataset.files)} file(s), {entries:,} events "
            f"in {len(units)} unit(s)[/bold]"
        )
        summary_json = dataset_output_path(ns.summary_json, dataset.name) if ns.summary_json else None
        with output_naming(dataset=dataset.name):  # trio.run below runs in a copy of this context
            _run_job(job, ns, console, f"{process.name_()} {dataset.name}", entries, summary_json)
    return 0


def _check_outputs(job: Any, ns: argparse.Namespace, summary_json: str | os.PathLike[str] | None, inputs: Any) -> None:
    """Before the first event: remove what killed jobs left in the output folders, then
    check every output path (``framework.io.check_outputs``: raises ConfigurationError),
    the config file and the fileset counting as inputs."""
    outputs = [(who, output_path(path)) for who, path in job.declared_outputs()]
    if summary_json:
        outputs.append(("--summary-json", Path(summary_json)))
    remove_stale_temporaries(output_folders(outputs))
    job_files = [("config file", Path(ns.config))] + ([("fileset", Path(ns.dataset))] if ns.dataset else [])
    check_outputs(outputs, inputs, job_files)


def _run_job(
    job: Any,
    ns: argparse.Namespace,
    console: Console,
    title: str,
    entries: int | None,
    summary_json: str | os.PathLike[str] | None,
) -> JobReport:
    """Run one job with progress, then its summary (printed and/or ``summary_json``)."""
    show_progress = not ns.no_progress and console.is_terminal
    progress = progress_bar(console, show_progress)
    limits = [x for x in (job.max_events if job.max_events >= 0 else None, entries) if x is not None]
    task = progress.add_task(title, total=min(limits) if limits else None, rate="")
    done = 0

    def on_event(principal: Any, latency: float) -> None:
        nonlocal done
        done += 1
        progress.update(task, advance=1, rate=f"{principal.id}")
        if not show_progress and (done & (done - 1)) == 0:  # 1, 2, 4, 8, ... events: a log line
            log.info(
                "Processed the %s record: event %s on stream %d (%.1f ms)",
                _ordinal(done),
                principal.id,
                principal.stream,
                latency * 1e3,
            )

    outputs = [output_path(path) for _, path in job.declared_outputs()]
    folders = output_folders([("", p) for p in outputs] + ([("", Path(summary_json))] if summary_json else []))
    # Every output of the job (and --summary-json) is renamed into place at the end of this
    # block, once all of it succeeded; an error or a signal before removes them instead.
    with contextlib.ExitStack() as signals, commit_outputs(f"cmsrun: {title}"):
        try:
            with progress:
                report = run_stoppable(job, on_event, folders)
        except KeyboardInterrupt:
            log.warning("cmsrun: stopped after %d events", done)
            raise
        signals.enter_context(signals_stop_the_job())  # until the commit is done
        if job.want_summary or ns.summary:
            print_summary(job, report, console)
        if summary_json:
            from ._summary import summary_dict  # computed once per job: FastTimerService may have

            with atomic_write(Path(summary_json), "--summary-json") as temp:
                temp.write_text(json.dumps(summary_dict(job, report), indent=2))
    console.print(
        f"[green]cmsrun: {title}: {report.events} events processed in {report.wall_time:.2f} s (event loop; "
        f"the whole job: {report.job_wall_time:.2f} s)[/green]"
    )
    return report


def _split_arguments(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str]]:
    """cmsrun's own arguments (with the config's name) and the config's arguments, in order.

    Before the config's name every argument is cmsrun's; after it, cmsrun's options (and
    their values) are picked out and everything else is the config's; after ``--`` all is.
    """
    actions = parser._option_string_actions  # option string -> argparse action
    own: list[str] = []
    config_args: list[str] = []
    config_seen = False
    i = 0
    while i < len(argv):
        token = argv[i]
        name = token.split("=", 1)[0]
        if config_seen and token == "--":
            config_args += argv[i + 1 :]
            break
        if config_seen and token in HELP_FLAGS:
            config_args.append(token)  # cmsRun's habit: the config's help (VarParsing's, argparse's)
        elif name in actions and token.startswith("-"):
            own.append(token)
            if actions[name].nargs != 0 and "=" not in token and i + 1 < len(argv):
                own.append(argv[i + 1])
                i += 1
        elif config_seen:
            config_args.append(token)
        else:
            own.append(token)
            config_seen = not token.startswith("-")
        i += 1
    return own, config_args


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cmsrun`` console script; returns the exit code."""
    parser = _parser()
    own, config_args = _split_arguments(parser, sys.argv[1:] if argv is None else list(argv))
    try:
        ns = parser.parse_args(own)
    except SystemExit as exc:  # argparse's usage error (2) or --help (0): returned, not raised
        return exc.code if isinstance(exc.code, int) else 2
    ns.args = config_args
    console = Console(stderr=True)
    if not console.is_terminal:
        # Logs of batch jobs: wide enough that the summary tables do not wrap.
        console = Console(stderr=True, width=140)
    level = logging.DEBUG if ns.verbose else logging.INFO
    logging.basicConfig(
        level=level,
        format="%(message)s",
        datefmt="[%X]",
        handlers=[RichHandler(console=console, show_path=False)],
        force=True,
    )
    if ns.list_types:
        _list_types()
        return 0
    try:
        if ns.describe:
            _describe(ns.describe, console)
            return 0
        usage = _usage_problem(ns)
        if usage:
            _parser().print_usage(sys.stderr)
            print(f"cmsrun: error: {usage}", file=sys.stderr)
            return 2
        return _run(ns, console)
    except SystemExit as exc:  # the config's own sys.exit (its argparse's --help, a usage error, ...)
        return _config_exited(exc, ns.config, console)
    except FrameworkError as exc:
        _print_fatal(exc, console)
        if os.environ.get("PYSONIC_TRACEBACK"):
            console.print_exception()
        return 2 if isinstance(exc, UsageError) else 1
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)  # JobStopped, or the executor's
        console.print(
            f"[bold red]cmsrun: interrupted ({signal.Signals(signum).name}); the job stopped "
            f"and its unfinished outputs were removed[/bold red]"
        )
        return 128 + signum


def _usage_problem(ns: argparse.Namespace) -> str | None:
    """What is wrong with cmsrun's own options (exit 2), naming the option as typed; None if
    nothing. Ranges as CMSSW defines them: maxEvents -1 = all (CMSSW takes any negative
    number for all; here another negative is refused, as a likely typo), numberOfThreads 0 =
    one per core, numberOfStreams 0 = as many as threads."""
    dask_only = [
        o
        for o, v in (
            ("--scheduler", ns.scheduler),
            ("--workers", ns.workers is not None),
            ("--skip-bad-files", ns.skip_bad_files),
            ("--keep-parts", ns.keep_parts),
        )
        if v
    ]
    problems = [
        (not ns.config, "a configuration file is required"),
        (
            ns.max_events is not None and ns.max_events < -1,
            f"argument -n/--max-events: {ns.max_events} is not -1 (all events) or >= 0",
        ),
        (
            ns.threads is not None and ns.threads < 0,
            f"argument -t/--threads: {ns.threads} is not >= 0 (0: one thread per core)",
        ),
        (
            ns.streams is not None and ns.streams < 0,
            f"argument -j/--streams: {ns.streams} is not >= 0 (0: as many streams as threads)",
        ),
        (ns.workers is not None and ns.workers < 1, f"argument --workers: {ns.workers} is not >= 1"),
        (
            ns.workers is not None and ns.workers > max_workers(),
            f"argument --workers: {ns.workers} is more worker processes than this machine can run: at most "
            f"{max_workers()} ({WORKERS_PER_CORE} per available core, {available_cores()} core(s), and "
            f"{WORKER_MEMORY >> 20} MiB of available memory each)",
        ),
        (
            ns.workers is not None and bool(ns.scheduler),
            "--workers starts a local cluster's workers: not with --scheduler (that cluster has its own)",
        ),
        (ns.chunk_size is not None and ns.chunk_size < 1, f"argument --chunk-size: {ns.chunk_size} is not >= 1"),
        (ns.chunk_size is not None and not ns.dataset, "--chunk-size needs --dataset"),
        (ns.executor == "dask" and not ns.dataset, "--executor dask needs --dataset"),
        (bool(dask_only) and ns.executor != "dask", f"{', '.join(dask_only)} need(s) --executor dask"),
    ]
    return next((message for bad, message in problems if bad), None)


def _config_exited(exc: SystemExit, config: str, console: Console) -> int:
    """The exit code of a config that called ``sys.exit`` while it was loaded; one line
    naming the config and where, unless argparse already said why (its ``--help``, its usage
    error) or the config asked for success."""
    code = exc.code
    frames = traceback.extract_tb(exc.__traceback__)
    if code in (None, 0) or any(f.filename.endswith(f"{os.sep}argparse.py") for f in frames):
        return code if isinstance(code, int) else 0
    mine = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(config)]
    where = f"{config}:{mine[-1].lineno}" if mine else config
    if isinstance(code, int):
        _print_fatal(ConfigurationError(f"{where}: the config called sys.exit({code}): the job did not run"), console)
        return code
    _print_fatal(ConfigurationError(f"{where}: the config exited: {code}"), console)
    return 1


WORKERS_PER_CORE = 4  # worker processes per core --workers accepts (units waiting on I/O or a server)
WORKER_MEMORY = 256 << 20  # bytes of available memory a worker process needs at least (its imports, a job)


def max_workers() -> int:
    """The most local Dask worker processes ``--workers`` accepts here: WORKERS_PER_CORE per
    available core, and no more than the available memory holds at WORKER_MEMORY each."""
    memory = psutil.virtual_memory().available // WORKER_MEMORY
    return max(1, min(WORKERS_PER_CORE * available_cores(), memory))


def _print_fatal(exc: FrameworkError, console: Console) -> None:
    """The error's first line between CMSSW's markers, further lines (a server log) after.

    The message is one line however long (``soft_wrap``: rich inserts no line breaks), so
    that ``grep -A1 'Begin Fatal'`` finds all of it; printed without markup, since error
    messages hold brackets (``[Configuration]``, ``Jet_pt[0]``).
    """
    message, _, details = str(exc).partition("\n")
    console.print("[bold red]----- Begin Fatal Exception -----[/bold red]")
    console.print(message, markup=False, highlight=False, soft_wrap=True)
    console.print("[bold red]----- End Fatal Exception -------[/bold red]")
    if details.strip():
        console.print(details, markup=False, highlight=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())


def edm_config_dump(argv: list[str] | None = None) -> int:
    """Entry point of ``edmConfigDump CONFIG [ARGS]`` (CMSSW's command): ``cmsrun --dump``."""
    return main(["--dump", *(sys.argv[1:] if argv is None else argv)])
