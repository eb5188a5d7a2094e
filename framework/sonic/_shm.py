"""How a request's tensors travel: Triton system shared memory, or gRPC payloads.

CMSSW counterpart: ``TritonMemResource`` (``TritonCpuShmResource``, ``TritonHeapResource``)
of HeterogeneousCore/SonicTriton, chosen by the Client PSet's untracked ``useSharedMemory``
(default true) when the server is on the same host. Here:

* A client (:class:`TensorTransport`, one per :class:`~framework.sonic.TritonClient`) keeps,
  per server, a pool of POSIX shared-memory regions (:class:`ShmPool`). Each gRPC call
  borrows one region for its inputs and outputs (inputs first, then the outputs, each at a
  64-byte aligned offset) and gives it back once the outputs are copied out; the regions
  are created on demand (as many as calls in flight), registered ONCE with the server and
  reused. A call that needs more bytes than any idle region has replaces one by a larger
  one (sizes are powers of two, at least :data:`MIN_REGION_BYTES`).
* A region whose call was cancelled or failed is never reused (the server might still
  write into it); it is unregistered and unlinked.
* Regions are named ``pysonic_shm_<pid>_<label>_<n>`` (``/dev/shm/<name>``). At the end of
  the job (TritonService's ``end_job``, which also runs after Ctrl-C), on a failover to
  another server (the old server's pool) and at exit, they are unregistered and unlinked.
  The first client of a process removes regions whose ``<pid>`` is dead
  (:func:`remove_stale_regions`: a job killed by SIGKILL).
* Same host: the server's host is a loopback address or ``localhost`` (the fallback server
  listens on 127.0.0.1). Remote servers, and tensors shared memory cannot carry (``BYTES``;
  outputs whose size the metadata leaves open, i.e. with a ``-1`` dim), use gRPC payloads.
* A server restarted on the same address has forgotten the regions: the call fails with
  "Unable to find system shared memory region"; the pool then registers its regions again
  and the failure is reported as UNAVAILABLE, so that the retry policy tries again.

The region I/O is tritonclient's (``tritonclient.utils.shared_memory``, built on
``multiprocessing.shared_memory``).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import ipaddress
import itertools
import logging
import math
import os
import pathlib
import re
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._data import TensorSpec
from ._server_info import FALLBACK_SERVER, ServerInfo

__all__ = [
    "ALIGN",
    "MIN_REGION_BYTES",
    "PREFIX",
    "PayloadCall",
    "ShmCall",
    "ShmPool",
    "TensorTransport",
    "is_same_host",
    "remove_stale_regions",
]

logger = logging.getLogger("pysonic.sonic")

PREFIX = "pysonic_shm_"  # /dev/shm/pysonic_shm_<pid>_<label>_<n>
SHM_DIR = pathlib.Path("/dev/shm")
ALIGN = 64  # bytes: each tensor starts at a multiple (cache line; numpy's SIMD loads)
MIN_REGION_BYTES = 1 << 16  # 64 KiB: smaller regions would be regrown for the first real event
UNREGISTER_TIMEOUT = 1.0  # seconds per unregister call at the end or on failover (server may be hung)
UNAVAILABLE = "StatusCode.UNAVAILABLE"
_SERVER_GONE = frozenset({UNAVAILABLE, "StatusCode.DEADLINE_EXCEEDED"})
_NOT_REGISTERED = re.compile(r"(unable to find|not found).*shared memory region|shared memory region.*not found",
                             re.IGNORECASE)
_counter = itertools.count()
_stale_checked = False


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def is_same_host(server: ServerInfo) -> bool:
    """Whether ``server`` runs on this host: the fallback server, or a loopback/``localhost`` address."""
    if server.name == FALLBACK_SERVER:
        return True
    host = server.address.rsplit(":", 1)[0].strip("[]") if ":" in server.address else server.address
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def remove_stale_regions(directory: pathlib.Path = SHM_DIR) -> list[str]:
    """Unlink ``pysonic_shm_<pid>_*`` regions whose process is dead; returns their names.

    A region of a live process (this one or another job) is never touched.
    """
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = re.match(rf"{PREFIX}(\d+)_", name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()
            removed.append(name)
    if removed:
        logger.info("removed %d shared-memory region(s) left by dead jobs: %s", len(removed), ", ".join(removed))
    return removed


class _Region:
    """One POSIX shared-memory region, created and mapped by this process."""

    def __init__(self, label: str, size: int) -> None:
        import tritonclient.utils.shared_memory as shm

        self.name = f"{PREFIX}{os.getpid()}_{label}_{next(_counter)}"
        self.size = size
        self.handle = shm.create_shared_memory_region(self.name, "/" + self.name, size, create_only=True)
        self.registered = False

    def buffer(self) -> memoryview:
        return self.handle._mpsm_handle.buf  # noqa: SLF001 - tritonclient keeps the mapping there

    def destroy(self) -> None:
        """Unmap and unlink. Never raises."""
        import tritonclient.utils.shared_memory as shm

        try:
            shm.destroy_shared_memory_region(self.handle)
        except Exception:  # noqa: BLE001 - an exported view keeps the mapping: unlink anyway
            with contextlib.suppress(Exception):
                self.handle._mpsm_handle.unlink()  # noqa: SLF001 - also tells multiprocessing's tracker


class ShmPool:
    """A client's shared-memory regions registered with one server (thread-safe).

    Args:
        label: the module label (sanitized into the region names).
        server: the server the regions are registered with.
        grpc_client: that server's ``InferenceServerClient``.
        timeout: seconds for each (un)register call; None = none.
    """

    def __init__(self, label: str, server: ServerInfo, grpc_client: Any, timeout: float | None) -> None:
        self.label = re.sub(r"[^A-Za-z0-9]", "", label)[:40] or "client"
        self.server = server
        self.grpc_client = grpc_client
        self.timeout = timeout
        self._idle: list[_Region] = []
        self._busy: set[_Region] = set()
        self._lock = threading.Lock()
        self._unregister_later: list[str] = []  # regions the server still used when we let them go
        self.retired = False  # after a failover: no reuse, regions go when their calls end
        self.created = 0  # regions created (and registered) so far
        self.registrations = 0  # register calls made (regrowth and re-registration included)

    def acquire(self, nbytes: int) -> _Region:
        """An idle region of at least ``nbytes`` bytes, registered with the server.

        Raises:
            InferenceServerException: registering failed (the server's status; the region
                is unlinked).
            SharedMemoryException: the region cannot be created (``/dev/shm`` full).
        """
        if self._unregister_later:
            self._unregister_pending()
        with self._lock:
            fitting = [r for r in self._idle if r.size >= nbytes]
            region = min(fitting, key=lambda r: r.size) if fitting else None
            if region is not None:
                self._idle.remove(region)
            elif self._idle:  # too small: grow the smallest idle one (replace it)
                smallest = min(self._idle, key=lambda r: r.size)
                self._idle.remove(smallest)
                self._discard(smallest)
            if region is None:
                region = _Region(self.label, max(MIN_REGION_BYTES, 1 << max(nbytes - 1, 1).bit_length()))
                self.created += 1
            self._busy.add(region)
        if not region.registered:
            try:
                self.grpc_client.register_system_shared_memory(region.name, "/" + region.name, region.size,
                                                               client_timeout=self.timeout)
            except BaseException:
                self.release(region, reusable=False)
                raise
            region.registered = True
            self.registrations += 1
        return region

    def release(self, region: _Region, reusable: bool) -> None:
        """Give a region back; not ``reusable`` (its call failed or was cancelled): discard it."""
        with self._lock:
            self._busy.discard(region)
            if reusable and not self.retired:
                self._idle.append(region)
                return
        self._discard(region)

    def retire(self) -> None:
        """Stop reusing regions (a failover left the server): unregister and unlink the idle
        ones now, the busy ones when their calls end (another event may still be waiting
        for an answer from that server). Never raises."""
        with self._lock:
            self.retired = True
            idle, self._idle = self._idle, []
        for region in idle:
            self._discard(region)

    def forget_registrations(self) -> None:
        """The server lost our registrations (restarted): register each region again on next use."""
        with self._lock:
            for region in [*self._idle, *self._busy]:
                region.registered = False

    def close(self) -> None:
        """Unregister (best effort, short timeout) and unlink every region. Never raises.

        A region the server still uses (the call of a cancelled event is still running
        there) cannot be unregistered yet: it is retried for up to
        :data:`UNREGISTER_TIMEOUT` seconds.
        """
        with self._lock:
            regions, self._idle, self._busy = [*self._idle, *self._busy], [], set()
        for region in regions:
            self._discard(region)
        deadline = time.monotonic() + UNREGISTER_TIMEOUT
        while self._unregister_later and time.monotonic() < deadline:
            time.sleep(0.02)
            self._unregister_pending()
        if self._unregister_later:
            logger.warning("%s: %s still uses shared-memory region(s) %s; left registered there (already unlinked)",
                           self.label, self.server.describe(), ", ".join(self._unregister_later))

    def _unregister_pending(self) -> None:
        with self._lock:
            names, self._unregister_later = self._unregister_later, []
        for name in names:
            self._unregister(name)

    def region_names(self) -> list[str]:
        with self._lock:
            return sorted(r.name for r in [*self._idle, *self._busy])

    def _discard(self, region: _Region) -> None:
        # Unlinked at once: the server keeps its own mapping while it still uses the region.
        if region.registered:
            region.registered = False
            self._unregister(region.name)
        region.destroy()

    def _unregister(self, name: str) -> None:
        from tritonclient.utils import InferenceServerException

        try:
            self.grpc_client.unregister_system_shared_memory(name, client_timeout=UNREGISTER_TIMEOUT)
        except InferenceServerException as exc:
            if exc.status() in _SERVER_GONE:  # gone or hung: it forgets the region with its process
                logger.debug("unregistering %s from %s failed: %s", name, self.server.describe(), exc)
            else:  # "in use" by a call still running there: later
                with self._lock:
                    self._unregister_later.append(name)
        except Exception as exc:  # noqa: BLE001 - a closed channel: nothing more to do
            logger.debug("unregistering %s from %s failed: %s", name, self.server.describe(), exc)


class PayloadCall:
    """One gRPC call whose tensors travel in the request and response messages."""

    def __init__(self, specs: Mapping[str, TensorSpec], arrays: Mapping[str, np.ndarray],
                 outputs: Sequence[str] | None) -> None:
        import tritonclient.grpc as grpcclient

        self.inputs = []
        for name, data in arrays.items():
            grpc_input = grpcclient.InferInput(name, list(data.shape), specs[name].datatype)
            grpc_input.set_data_from_numpy(data)
            self.inputs.append(grpc_input)
        self.outputs = None if outputs is None else [grpcclient.InferRequestedOutput(n) for n in outputs]

    def as_numpy(self, result: Any, name: str) -> np.ndarray | None:
        """The output array (a view of the response), None if missing; ValueError if malformed."""
        return result.as_numpy(name)

    def done(self, ok: bool) -> None:
        pass


class ShmCall:
    """One gRPC call whose inputs (and fixed-size outputs) are in a shared-memory region.

    Args:
        pool: where the region comes from.
        in_specs, out_specs: the model's inputs and the requested outputs.
        arrays: input name -> C-contiguous array of this call.
        rows: the call's batch size (None: the model does not batch).
        outputs_in_shm: whether the outputs go to the region too (all have fixed sizes).
    """

    def __init__(self, pool: ShmPool, in_specs: Mapping[str, TensorSpec], out_specs: Sequence[TensorSpec],
                 arrays: Mapping[str, np.ndarray], rows: int | None, outputs_in_shm: bool) -> None:
        import tritonclient.grpc as grpcclient
        import tritonclient.utils.shared_memory as shm

        offset, placed = 0, []
        for name, data in arrays.items():
            placed.append((name, data, offset))
            offset = _align(offset + data.nbytes)
        out_places: dict[str, tuple[int, int]] = {}
        if outputs_in_shm:
            for spec in out_specs:
                nbytes = math.prod(spec.dims) * spec.dtype.itemsize * (rows if rows is not None else 1)
                out_places[spec.name] = (offset, nbytes)
                offset = _align(offset + nbytes)
        self.pool = pool
        self.region = region = pool.acquire(max(offset, 1))
        self.inputs, self.outputs = [], []
        for name, data, at in placed:
            shm.set_shared_memory_region(region.handle, [data], offset=at)
            grpc_input = grpcclient.InferInput(name, list(data.shape), in_specs[name].datatype)
            grpc_input.set_shared_memory(region.name, data.nbytes, offset=at)
            self.inputs.append(grpc_input)
        for spec in out_specs:
            output = grpcclient.InferRequestedOutput(spec.name)
            if outputs_in_shm:
                at, nbytes = out_places[spec.name]
                output.set_shared_memory(region.name, nbytes, offset=at)
            self.outputs.append(output)
        self._out_places = out_places

    def as_numpy(self, result: Any, name: str) -> np.ndarray | None:
        """A COPY of the output (the region is reused), None if missing; ValueError if malformed."""
        place = self._out_places.get(name)
        if place is None:
            return result.as_numpy(name)
        output = result.get_output(name)
        if output is None:
            return None
        from tritonclient.utils import triton_to_np_dtype

        dtype = np.dtype(triton_to_np_dtype(output.datatype))
        shape = tuple(output.shape)
        at, nbytes = place
        if math.prod(shape) * dtype.itemsize > nbytes:
            raise ValueError(f"shape {shape} {dtype} exceeds the {nbytes} bytes reserved in the region")
        view: np.ndarray = np.ndarray(shape, dtype, buffer=self.region.buffer(), offset=at)
        array = view.copy()
        del view  # no exported pointer may outlive the call: the region is unmapped later
        return array

    def done(self, ok: bool) -> None:
        """Return the region (reused only if the call succeeded)."""
        self.pool.release(self.region, reusable=ok)


class TensorTransport:
    """A client's choice between shared memory and payloads, and its pools (one per server).

    Args:
        use_shared_memory: ``Client.useSharedMemory``.
        label: the module label, for region names.
        timeout: seconds for each register call (``Client.timeout``); None = none.
    """

    def __init__(self, use_shared_memory: bool, label: str, timeout: float | None) -> None:
        self.use_shared_memory = use_shared_memory
        self.label = label
        self.timeout = timeout
        self._pools: dict[str, ShmPool] = {}
        self._retired: list[ShmPool] = []  # left by a failover; closed at the end with the others
        self._refused: set[str] = set()  # servers that cannot map our regions: payloads
        self._lock = threading.Lock()
        self.shm_calls = 0  # calls whose inputs went through shared memory
        self.payload_calls = 0  # calls with gRPC payloads
        if use_shared_memory:
            global _stale_checked
            if not _stale_checked:
                _stale_checked = True
                remove_stale_regions()
            _live.add(self)

    def pool(self, server: ServerInfo, grpc_client: Any) -> ShmPool | None:
        """The shared-memory pool for ``server``; None: use payloads (remote server, or off)."""
        if not self.use_shared_memory or not is_same_host(server) or server.name in self._refused:
            return None
        with self._lock:
            pool = self._pools.get(server.name)
            if pool is None or pool.grpc_client is not grpc_client or pool.server != server:
                if pool is not None:  # the server moved (fallback restarted elsewhere): start afresh
                    pool.retire()
                    self._retired.append(pool)
                pool = self._pools[server.name] = ShmPool(self.label, server, grpc_client, self.timeout)
            return pool

    def pools(self) -> dict[str, ShmPool]:
        with self._lock:
            return dict(self._pools)

    def call(self, server: ServerInfo, grpc_client: Any, in_specs: Mapping[str, TensorSpec],
             out_specs: Sequence[TensorSpec], arrays: Mapping[str, np.ndarray], rows: int | None,
             all_outputs: bool) -> PayloadCall | ShmCall:
        """The inputs and requested outputs of one call to ``server``.

        Args:
            all_outputs: the client requests every output (``Client.outputs`` empty): a
                payload call then names none (the server returns all).
        """
        pool = self.pool(server, grpc_client)
        if pool is not None and all(a.dtype != np.object_ for a in arrays.values()):
            in_shm = all(not s.variable_dims and s.dtype != np.object_ for s in out_specs)
            try:
                call = ShmCall(pool, in_specs, out_specs, arrays, rows, in_shm)
            except Exception as exc:
                if not self._use_payloads_after(server, exc):
                    raise
            else:
                with self._lock:
                    self.shm_calls += 1
                return call
        with self._lock:
            self.payload_calls += 1
        return PayloadCall(in_specs, arrays, None if all_outputs else [s.name for s in out_specs])

    def _use_payloads_after(self, server: ServerInfo, exc: Exception) -> bool:
        """Whether a failure to set up shared memory leaves the call to gRPC payloads.

        A server that refuses to register a region (e.g. one in a container on a port of
        this host, which cannot open our ``/dev/shm``) gets payloads from now on; a full
        ``/dev/shm`` gives this call payloads. An unreachable server is the retry policy's.
        """
        from tritonclient.utils import InferenceServerException
        from tritonclient.utils.shared_memory import SharedMemoryException

        if isinstance(exc, InferenceServerException):
            if exc.status() in _SERVER_GONE:
                return False
            with self._lock:
                self._refused.add(server.name)
            logger.warning("%s: %s cannot use our shared memory (%s); gRPC payloads from now on", self.label,
                           server.describe(), " ".join((exc.message() or str(exc)).split()))
            return True
        if isinstance(exc, (SharedMemoryException, OSError)):
            logger.warning("%s: no shared-memory region for a call to %s (%s: %s); gRPC payloads for it",
                           self.label, server.describe(), type(exc).__name__, exc)
            return True
        return False

    def lost_registration(self, server: ServerInfo, exc: BaseException) -> BaseException | None:
        """If ``exc`` says the server does not know our region (it restarted): forget the
        registrations and return a recoverable (UNAVAILABLE) error to raise instead."""
        from tritonclient.utils import InferenceServerException

        if not isinstance(exc, InferenceServerException) or not _NOT_REGISTERED.search(exc.message() or ""):
            return None
        pool = self.pools().get(server.name)
        if pool is None:
            return None
        pool.forget_registrations()
        return InferenceServerException(f"the server lost the shared-memory registrations ({exc.message()}); "
                                        "registering again", status=UNAVAILABLE)

    def failed_over(self, server_name: str) -> None:
        """A request left ``server_name`` for another server: release that server's regions."""
        with self._lock:
            pool = self._pools.pop(server_name, None)
            if pool is not None:
                self._retired.append(pool)
        if pool is not None:
            logger.info("%s: releasing the shared-memory regions on %s after a failover", self.label,
                        pool.server.describe())
            pool.retire()

    def close(self) -> None:
        """Unregister and unlink every region (end of job, Ctrl-C, exit). Never raises."""
        with self._lock:
            pools, self._pools, self._retired = [*self._pools.values(), *self._retired], {}, []
        for pool in pools:
            pool.close()


_live: weakref.WeakSet[TensorTransport] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # A job that never reached end_job (an exception before it, an embedding script): no
    # region outlives the process. SIGKILL is left to remove_stale_regions.
    for transport in list(_live):
        transport.close()


def region_exists(name: str) -> bool:
    """Whether ``/dev/shm/<name>`` exists (tests, ``cmstriton check``)."""
    try:
        os.stat(SHM_DIR / name)
    except OSError as err:
        if err.errno == errno.ENOENT:
            return False
        raise
    return True
