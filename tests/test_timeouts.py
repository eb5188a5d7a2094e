"""The test suite's guards against a hang: a test stuck in C fails within its timeout with
every thread's stack (pyproject's pytest-timeout settings), and ``.ci/run`` bounds the
whole suite the same way (a fork blocked in gRPC's at-fork handler once held CI)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# The main thread blocks in C: SIGALRM (pytest-timeout's "signal" method) is blocked in it,
# and os.read() on a pipe nobody writes to never returns to Python, as a fork() stuck in
# an at-fork handler. A second thread waits too: its stack must be shown as well.
STUCK = """\
import os, signal, threading

def test_stuck_in_c():
    threading.Thread(target=threading.Event().wait, name="bystander", daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    reader, writer = os.pipe()
    os.read(reader, 1)
"""


def test_a_test_stuck_in_c_fails_with_every_threads_stack(tmp_path):
    (tmp_path / "test_stuck.py").write_text(STUCK)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(REPO_ROOT / "pyproject.toml"),  # the project's settings but for the bound
        "--rootdir",
        str(tmp_path),
        "-p",
        "no:cacheprovider",
        "--timeout=2",
        str(tmp_path / "test_stuck.py"),
    ]
    t0 = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    elapsed = time.monotonic() - t0
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert elapsed < 60, output
    assert "Timeout" in output
    assert "test_stuck.py" in output and "os.read(reader, 1)" in output  # the main thread, where it is stuck
    assert "bystander" in output  # and the other threads


STUCK_PROGRAM = """\
import os, signal, threading
threading.Thread(target=threading.Event().wait, name="bystander", daemon=True).start()
reader, writer = os.pipe()
os.read(reader, 1)
"""


def test_ci_bounds_the_whole_suite(tmp_path):
    """``.ci/run``'s pytest line, with a program stuck in C for pytest and a 2 s bound: it
    ends at once with every thread's stack (faulthandler on SIGABRT)."""
    script = (REPO_ROOT / ".ci" / "run").read_text()
    default = next(x for x in script.splitlines() if x.startswith("SUITE_TIMEOUT="))
    assert default == "SUITE_TIMEOUT=${SUITE_TIMEOUT:-40m}"  # well under CI's 90 minutes
    line = next(x for x in script.splitlines() if x.endswith(".venv/bin/python -m pytest"))
    (tmp_path / "stuck.py").write_text(STUCK_PROGRAM)
    line = line.replace(".venv/bin/python -m pytest", f"{sys.executable} {tmp_path / 'stuck.py'}")
    t0 = time.monotonic()
    result = subprocess.run(
        ["bash", "-c", line], env={**os.environ, "SUITE_TIMEOUT": "2s"}, capture_output=True, text=True, timeout=120
    )
    elapsed = time.monotonic() - t0
    assert result.returncode == 124, result.stderr  # timeout(1): the command timed out
    assert elapsed < 30, result.stderr
    assert "Fatal Python error: Aborted" in result.stderr
    assert "Current thread 0x" in result.stderr and "\nThread 0x" in result.stderr  # both threads' stacks
    assert 'File "' + str(tmp_path / "stuck.py") + '", line 4' in result.stderr  # where the main thread is stuck
