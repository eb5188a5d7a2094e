"""Module types of the benchmarks' jobs (``framework/bench/configs``): CPU work, no-ops, the tiny model.

The configs name them ``framework.bench._modules:Class`` (no entry points: they are not
for users' configs). The direct (in-process onnxruntime) twins of the model producers sit
next to their SONIC producers in ``modules/<model>.py``.

* :class:`BenchCPUProducer`: a fixed amount of CPU work per event (or a sleep standing
  for CPU work done elsewhere).
* :class:`BenchNoOpProducer`, :class:`BenchBranchReader`, :class:`TinySonicProducer`,
  :class:`BenchStartBarrier`: no-ops, source readers, the smallest SONIC request, and a
  start barrier shared by several ``cmsrun`` processes.
* :class:`BenchInputDumper`: saves the model inputs of every event for the GPU
  benchmarks' bare load generator.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import threading
import time
from typing import Any

import numpy as np

import framework.config as cms
from framework import ConfigurationError, EDAnalyzer, EDProducer, ExternalFailure
from framework.sonic import SonicEDProducer

# ----------------------------------------------------------------------------------------
# CPU work and no-ops

_CHUNK = 1 << 16  # bytes hashed per call: large enough that hashlib releases the GIL
_calibration: dict[str, float] = {}


def hash_rate() -> float:
    """Bytes per second that ``hashlib.sha256`` digests here (measured once per process)."""
    if "rate" not in _calibration:
        buffer = bytes(_CHUNK)
        best = float("inf")
        for _ in range(5):  # best of 5: the machine may be shared
            t0 = time.perf_counter()
            for _ in range(32):
                hashlib.sha256(buffer).digest()
            best = min(best, time.perf_counter() - t0)
        _calibration["rate"] = 32 * _CHUNK / best
    return _calibration["rate"]


def chunks_for(cpu_time: float) -> int:
    """64 KiB chunks whose SHA-256 takes ``cpu_time`` seconds here (at least 1)."""
    return max(1, round(cpu_time * hash_rate() / _CHUNK))


class BenchCPUProducer(EDProducer):
    """A fixed CPU cost per event: ``cpuTime`` milliseconds of SHA-256 hashing.

    The amount of work (bytes hashed) is calibrated once per process at ``begin_job``, so
    every event costs the same CPU; a busy machine stretches it in wall time, as it would
    real reconstruction code. ``chunks`` > 0 fixes the work instead (64 KiB chunks per
    event): jobs compared by their CPU (``cmsbench cpu``) then do exactly the same work,
    which a calibration per process (a few per cent apart) would not give. hashlib
    releases the GIL, so with ``numberOfThreads`` > 1 two events burn in parallel on two
    cores. ``mode = "sleep"`` sleeps ``cpuTime`` instead: CPU work that happens elsewhere
    (many client jobs on a 2-core machine).
    Product: int, the number of 64 KiB chunks hashed (0 when sleeping).
    """

    thread_safe = True

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("cpuTime", cms.double(5.0), "CPU time per event, milliseconds")
        desc.add("mode", cms.untracked.string("burn"), "burn | sleep")
        desc.add("chunks", cms.untracked.uint32(0), "64 KiB chunks hashed per event (0: calibrated from cpuTime)")

    def __init__(self, params: Any) -> None:
        if params.mode not in ("burn", "sleep"):
            raise ConfigurationError(f"{self.label}: mode '{params.mode}' is not one of burn, sleep")
        self.cpu_time = params.cpuTime * 1e-3
        self.sleep = params.mode == "sleep"
        self.chunks = 0
        self._fixed_chunks = params.chunks
        self._buffer = bytes(_CHUNK)
        self.produces(doc="chunks hashed")

    def begin_job(self) -> None:
        self.chunks = 0 if self.sleep else (self._fixed_chunks or chunks_for(self.cpu_time))

    def produce(self, event: Any) -> None:
        if self.sleep:
            time.sleep(self.cpu_time)
        for _ in range(self.chunks):
            hashlib.sha256(self._buffer).digest()
        event.put(self.chunks)


class BenchNoOpProducer(EDProducer):
    """Does nothing and puts nothing: the framework's own cost per module call.

    Not thread-safe on purpose: it runs on the scheduler's thread, so the measured cost is
    the scheduler's, not a thread hand-off's.
    """

    def produce(self, event: Any) -> None:
        pass


class BenchBranchReader(EDAnalyzer):
    """Consumes whole collections so that the source reads them; touches nothing else.

    Parameter ``collections``: names (``Jet``, ``PFCands``...), every field read.
    """

    thread_safe = True

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("collections", cms.vstring(), "source collections to read (all fields)")

    def __init__(self, params: Any) -> None:
        self.tokens = [self.consumes(name) for name in params.collections]

    def analyze(self, event: Any) -> None:
        for token in self.tokens:
            event.get(token)


class TinySonicProducer(SonicEDProducer):
    """The smallest SONIC request: ``width`` float32 values (the event number) to model ``x -> y``.

    For the latency and overhead benchmarks with the ``tiny`` identity model that
    ``framework.bench`` writes. Product: float, the first returned value (checked to equal
    what was sent, so a broken server cannot pass unnoticed).
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)
        desc.add("width", cms.uint32(4), "float32 values per request")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.width = params.width
        self.produces(doc="the value echoed back")

    def acquire(self, event: Any, input: Any) -> None:
        input["x"].to_server(np.full((1, self.width), event.id.event, np.float32))

    def produce(self, event: Any, output: Any) -> None:  # type: ignore[override]  # SONIC: (event, Triton map), as in CMSSW
        y = output["y"].from_server()
        if y.shape != (1, self.width) or y[0, 0] != np.float32(event.id.event):
            raise ExternalFailure(f"{self.label}: the tiny model returned {y.ravel()[:4]} for event {event.id}")
        event.put(float(y[0, 0]))


class BenchStartBarrier(EDAnalyzer):
    """Holds ``begin_job`` until a file exists, so several jobs start their events together.

    Touches ``<directory>/ready.<pid>`` first (the controller counts them), then waits for
    ``<directory>/go`` (polled every 10 ms, up to ``timeout`` seconds).

    Raises (begin_job):
        ExternalFailure: ``go`` did not appear in time.
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("directory", cms.untracked.string(""), "barrier folder; '' = no barrier")
        desc.add("timeout", cms.untracked.double(300.0), "seconds to wait for the go file")

    def __init__(self, params: Any) -> None:
        self.directory = pathlib.Path(params.directory) if params.directory else None
        self.timeout = params.timeout

    def begin_job(self) -> None:
        if self.directory is None:
            return
        (self.directory / f"ready.{os.getpid()}").touch()
        deadline = time.monotonic() + self.timeout
        while not (self.directory / "go").exists():
            if time.monotonic() > deadline:
                raise ExternalFailure(f"{self.label}: no {self.directory / 'go'} after {self.timeout:g} s")
            time.sleep(0.01)

    def analyze(self, event: Any) -> None:
        pass


class BenchInputDumper(EDAnalyzer):
    """Saves every event's model inputs (a dict of arrays, or one array) to one ``.npz`` at ``end_job``.

    The file holds arrays named ``<i>/<input name>``, ``i`` counting the analyzed events
    from 0: the request format of the GPU benchmarks' load generator
    (``framework/bench/_load.py``), so that bare clients send real events' inputs.
    Entries of the product that are not arrays (counts) are left out; a product that is
    one array is saved as ``<i>/array``.
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("src", cms.InputTag("particlenetInputs"), "the input producer's product (dict of arrays)")
        desc.add("fileName", cms.untracked.string("inputs.npz"), "output .npz")

    def __init__(self, params: Any) -> None:
        self.src = self.consumes(params.src)
        self.path = pathlib.Path(params.fileName)
        self.arrays: dict[str, np.ndarray] = {}
        self.count = 0

    def declared_outputs(self) -> dict[str, Any]:
        return {"fileName": self.path}

    def analyze(self, event: Any) -> None:
        product = event.get(self.src)
        if isinstance(product, np.ndarray):  # one array (FACILE's rows): named "array"
            product = {"array": product}
        for name, value in product.items():
            if isinstance(value, np.ndarray):
                self.arrays[f"{self.count}/{name}"] = np.array(value)
        self.count += 1

    def end_job(self) -> None:
        np.savez(self.path, **self.arrays)


def gil_busy(stop: threading.Event) -> None:
    """Pure-Python work that wants the GIL all the time, until ``stop`` is set (what a job's
    source thread does while it reads and decompresses; ``../shared/perf/transport``)."""
    while not stop.is_set():
        total = 0
        for i in range(200):
            total += i


class BusyThread:
    """A :func:`gil_busy` thread: started by :meth:`start`, stopped by :meth:`stop`, which
    returns its own CPU seconds (its thread's CPU clock)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._clock: int | None = None
        self._ready = threading.Event()
        self._cpu = 0.0
        self._thread = threading.Thread(target=self._run, name="gil-busy", daemon=True)

    def _run(self) -> None:
        self._clock = time.pthread_getcpuclockid(threading.get_ident())
        self._ready.set()
        gil_busy(self._stop)
        self._cpu = time.clock_gettime(self._clock)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self._cpu


class BenchBusyThread(EDAnalyzer):
    """A GIL-busy Python thread beside the job (``cmsbench cpu``'s busy sides), from
    ``begin_job`` to ``end_job``; writes its CPU seconds to ``report`` (a text file)."""

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("report", cms.untracked.string, "file that receives the thread's CPU seconds")

    def __init__(self, params: Any) -> None:
        self.report = pathlib.Path(params.report)
        self.thread = BusyThread()

    def begin_job(self) -> None:
        self.thread.start()

    def end_job(self) -> None:
        self.report.write_text(f"{self.thread.stop():.6f}\n")

    def analyze(self, event: Any) -> None:
        pass
