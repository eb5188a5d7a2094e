"""Triton system shared-memory regions of the SONIC clients: pools, cleanup, same host.

CMSSW counterpart: ``TritonCpuShmResource`` of HeterogeneousCore/SonicTriton (its
``TritonMemResource``). :class:`ShmPool` holds one client's regions registered with one
server; :mod:`framework.sonic._transport` decides per call whether they are used.

* Each gRPC call borrows one region for its inputs and outputs and gives it back once the
  outputs are copied out; regions are created on demand (as many as calls in flight),
  registered ONCE with the server and reused. A call that needs more bytes than any idle
  region has replaces one by a larger one (powers of two, at least :data:`MIN_REGION_BYTES`).
* A region whose call was cancelled or failed is never reused (the server might still
  write into it): it is unlinked at once and unregistered as soon as the server lets go
  of it (Triton refuses to unregister a region in use).
* Regions are named ``pysonic_shm_<pid>_<label>_<n>`` (``/dev/shm/<name>``). At the end of
  the job (TritonService's ``end_job``, which also runs after Ctrl-C), on a failover to
  another server (the old server's pool is retired) and at exit, they are unregistered and
  unlinked. The first client of a process removes the regions whose ``<pid>`` is dead
  (:func:`remove_stale_regions`: a job killed by SIGKILL).
* Shared ``/dev/shm`` (:func:`shares_dev_shm`): decided by what the server can map, not
  by its address: the fallback server (our child) does; any other is asked once per
  process, by registering a probe region of a random name (Triton opens it at
  registration). A loopback address is no proof (a server in another container of the
  pod, or another mount namespace of this host, has its own ``/dev/shm``), nor is a
  non-loopback one a disproof (this host's own address). CMSSW decides by the address;
  this is a pysonic extension.

The region I/O is tritonclient's (``tritonclient.utils.shared_memory``, built on
``multiprocessing.shared_memory``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pathlib
import re
import secrets
import threading
import time
from typing import Any

from ._server_info import FALLBACK_SERVER, ServerInfo
from ._waits import grpc_status

__all__ = [
    "ALIGN",
    "MIN_REGION_BYTES",
    "PREFIX",
    "SERVER_GONE",
    "ShmPool",
    "shm_region_name",
    "remove_stale_regions",
    "remove_stale_regions_once",
    "shares_dev_shm",
]

logger = logging.getLogger("pysonic.sonic")

PREFIX = "pysonic_shm_"  # /dev/shm/pysonic_shm_<pid>_<label>_<n>
SHM_DIR = pathlib.Path("/dev/shm")
ALIGN = 64  # bytes: each tensor starts at a multiple (cache line; numpy's SIMD loads)
MIN_REGION_BYTES = 1 << 16  # 64 KiB: smaller regions would be regrown for the first real event
UNREGISTER_TIMEOUT = 1.0  # seconds per unregister call at the end or on failover (server may be hung)
SERVER_GONE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})  # gRPC statuses of an unreachable or hung server
_counter = itertools.count()
_stale_checked = False
_shares: dict[str, bool] = {}  # server address -> it maps our /dev/shm (shares_dev_shm, this process)
_probe_lock = threading.Lock()  # one probe at a time: concurrent first calls ask once


def shares_dev_shm(server: ServerInfo, grpc_client: Any) -> bool:
    """Whether ``server`` can map regions of this process's ``/dev/shm`` (blocking).

    The fallback server can (it is our child). Any other is asked once per process and
    address: a region named ``pysonic_shm_<pid>_probe<random>_<n>`` of :data:`ALIGN`
    bytes is registered with it and at once unregistered and unlinked; Triton opens the
    region when it registers it, so a server with another ``/dev/shm`` refuses it. The
    random part keeps a server elsewhere from finding a region of the same name there.

    Returns:
        True if it registered the probe; False if it refused (remembered), or if it did
        not answer within :data:`UNREGISTER_TIMEOUT` s (not remembered: asked again at
        the next call).
    """
    from tritonclient.utils import InferenceServerException

    if server.name == FALLBACK_SERVER:
        return True
    with _probe_lock:
        known = _shares.get(server.address)
        if known is not None:
            return known
        try:
            region = _Region(f"probe{secrets.token_hex(4)}", ALIGN)
        except Exception as exc:  # noqa: BLE001 - /dev/shm full or absent: payloads, ask again later
            logger.debug("no probe region for %s: %s", server.describe(), exc)
            return False
        try:
            grpc_client.register_system_shared_memory(
                region.name, "/" + region.name, region.size, client_timeout=UNREGISTER_TIMEOUT
            )
        except InferenceServerException as exc:
            if grpc_status(exc) not in SERVER_GONE:  # it answered: it cannot open the region
                _shares[server.address] = False
                logger.info(
                    "%s cannot use our shared memory (%s): gRPC payloads",
                    server.describe(),
                    " ".join((exc.message() or str(exc)).split()),
                )
            return False
        else:
            with contextlib.suppress(InferenceServerException):
                grpc_client.unregister_system_shared_memory(region.name, client_timeout=UNREGISTER_TIMEOUT)
            _shares[server.address] = True
            logger.debug("%s maps our /dev/shm: shared memory for large calls", server.describe())
            return True
        finally:
            region.destroy()


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


def remove_stale_regions_once() -> None:
    """:func:`remove_stale_regions` at the first call in this process (the job's start)."""
    global _stale_checked
    if not _stale_checked:
        _stale_checked = True
        remove_stale_regions()


def shm_region_name(label: str) -> str:
    """A fresh name for a region of this process, ``pysonic_shm_<pid>_<label>_<n>``: once the
    process is gone, the next job's start (``remove_stale_regions``) unlinks it."""
    return f"{PREFIX}{os.getpid()}_{label}_{next(_counter)}"


class _Region:
    """One POSIX shared-memory region, created and mapped by this process."""

    def __init__(self, label: str, size: int) -> None:
        import tritonclient.utils.shared_memory as shm

        self.name = shm_region_name(label)
        self.size = size
        self.handle = shm.create_shared_memory_region(self.name, "/" + self.name, size, create_only=True)
        self.registered = False

    def buffer(self) -> memoryview:
        buf: memoryview = self.handle._mpsm_handle.buf  # noqa: SLF001 - tritonclient keeps the mapping there
        return buf

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
                self.grpc_client.register_system_shared_memory(
                    region.name, "/" + region.name, region.size, client_timeout=self.timeout
                )
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

    def lost(self, region: _Region) -> bool:
        """Whether the server no longer has ``region``, which we registered (it restarted on
        the same address). Asks it (``get_system_shared_memory_status``, blocking, at most
        :data:`UNREGISTER_TIMEOUT` s); False when it does not answer (nothing to tell)."""
        from tritonclient.utils import InferenceServerException

        if not region.registered:
            return False
        try:
            status = self.grpc_client.get_system_shared_memory_status(
                region.name, as_json=True, client_timeout=UNREGISTER_TIMEOUT
            )
        except InferenceServerException as exc:
            return grpc_status(exc) not in SERVER_GONE  # it answered: it does not know the region
        return region.name not in status.get("regions", {})

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
            logger.warning(
                "%s: %s still uses shared-memory region(s) %s; left registered there (already unlinked)",
                self.label,
                self.server.describe(),
                ", ".join(self._unregister_later),
            )

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
            if grpc_status(exc) in SERVER_GONE:  # gone or hung: it forgets the region with its process
                logger.debug("unregistering %s from %s failed: %s", name, self.server.describe(), exc)
            else:  # "in use" by a call still running there: later
                with self._lock:
                    self._unregister_later.append(name)
        except Exception as exc:  # noqa: BLE001 - a closed channel: nothing more to do
            logger.debug("unregistering %s from %s failed: %s", name, self.server.describe(), exc)
