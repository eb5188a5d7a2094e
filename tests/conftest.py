"""Shared fixtures; and for the whole suite: no Triton server, Python-backend stub or
/dev/shm region is left behind.

Fixtures: ``left_behind`` (below), ``start_server`` (a module's Triton servers, through
:func:`framework.serving.testing.serving`). Tiny Python-backend models are written with
:func:`framework.serving.testing.write_python_model`.

Every server the suite starts, in this process or in a subprocess (cmsrun, cmstriton),
names its /dev/shm regions with this session's tag: ``$PYSONIC_SHM_TAG``, set here and
inherited. Its stubs carry the region name on their command line, the server carries the
prefix, so the session's leftovers are exactly the processes and regions that show the
tag: never those of another run on a shared machine, which a plain before/after listing
of /dev/shm would blame on this one. The check lists ``/proc`` and ``/dev/shm`` itself,
not through the code under test.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import time
from collections.abc import Generator

import pytest

from framework.serving._processes import TAG_VARIABLE
from framework.serving.testing import serving

SESSION_TAG = f"pytest{os.getpid()}"
SETTLE = 10.0  # seconds for processes of the last test to exit before they count as left behind


@pytest.fixture(autouse=True)
def _each_test_is_a_new_cmsrun():
    """CMSSW refuses a second ``cms.Process`` that chooses new Modifiers once one exists (one
    cmsRun = one interpreter, ``Process._firstProcess``); each test starts as a new cmsRun."""
    from framework.config import Process

    Process._firstProcess = True
    yield


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Each phase's report as ``item.report_setup``, ``report_call``, ``report_teardown``: a
    fixture's teardown can then tell a failed test (pytest's documented recipe)."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def left_behind(text: str) -> tuple[list[str], list[str]]:
    """Live processes whose command line contains ``text`` (``"PID ARGS"``), and the
    names of the /dev/shm files that contain it."""
    processes = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile; a zombie's command line is empty
        if text in args:
            processes.append(f"{proc.name} {args.strip()}")
    regions = sorted(name for name in os.listdir("/dev/shm") if text in name)
    return sorted(processes), regions


@pytest.fixture(scope="session", name="left_behind")
def left_behind_fixture():
    """:func:`left_behind`: ``left_behind(server.region_prefix) == ([], [])`` once it is stopped."""
    return left_behind


@pytest.fixture(scope="module")
def start_server():
    """``start_server(repository, models=None, **options)``: a started LocalTritonServer
    (:func:`~framework.serving.testing.serving`'s arguments), stopped after the test module
    and checked, here too (not only through the code under test), to leave no stub process
    or /dev/shm region behind."""
    servers = []

    def start(repository, models=None, **options):
        servers.append(stack.enter_context(serving(repository, models, **options)))
        return servers[-1]

    with contextlib.ExitStack() as stack:
        yield start
    for server in servers:
        assert left_behind(server.region_prefix) == ([], []), f"{server!r} left something behind"


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind():
    """Tag the session's servers; at its end, fail naming any of their processes or regions."""
    patch = pytest.MonkeyPatch()
    patch.setenv(TAG_VARIABLE, SESSION_TAG)
    yield
    patch.undo()
    tagged = f"pysonic-{SESSION_TAG}-"
    deadline = time.monotonic() + SETTLE
    while (leftovers := left_behind(tagged)) != ([], []) and time.monotonic() < deadline:
        time.sleep(0.1)
    processes, regions = leftovers
    # The SONIC clients' own regions (framework/sonic/_shm.py) of this process
    regions += sorted(name for name in os.listdir("/dev/shm") if name.startswith(f"pysonic_shm_{os.getpid()}_"))
    if processes or regions:
        pytest.fail(
            f"the test session left {len(processes)} process(es) and {len(regions)} /dev/shm "
            f"region(s) of its Triton servers: {'; '.join(processes + regions)}",
            pytrace=False,
        )
