"""One fallback Triton server per HOST, shared by that host's Dask workers.

Each worker process building its own job would start its own fallback server
(``TritonService``'s fallback: one per job); with 16 workers on a node that is 16 servers
competing for the same cores and GPU, and no dynamic batching across workers. Instead the
executor registers :class:`HostTritonServer`, a Dask ``NannyPlugin``: on every host, the
first nanny to take the host lock (``filelock`` on a file in the host's temp folder, named
with the host name too, so that hosts sharing a temp folder still get one server each)
starts ONE :class:`~framework.serving._server.LocalTritonServer` for the models that no
configured server serves, listening on the nanny's own address (the host's address in the
cluster, reachable from other hosts), and writes its address to a small JSON file next to the lock
(``{"address", "http_address", "pid", "start_time", "owner", "users"}``); the other nannies of the host
find it there and register as users. Workers read that file (:func:`host_server`) when
they build their job and add the server to their ``TritonService`` as one more configured
server (named :data:`HOST_SERVER`), so TritonService's own fallback never starts per
worker: TritonService itself is unchanged.

The owning nanny stops the server in its ``teardown`` (when the cluster closes); the
server also dies with the nanny's process (LocalTritonServer's ``die_with_parent``
default), so a killed ``cmsrun`` with its LocalCluster leaves no server behind. A worker
killed and restarted by its nanny keeps the server (the nanny owns it, not the worker).

The files are named by a tag unique to the cluster and the models (``host_tag``), so
that two runs on one host never share a server whose lifetime the other controls.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import NannyPlugin
from filelock import FileLock

__all__ = ["HOST_SERVER", "HostTritonServer", "host_server", "host_server_http", "host_tag", "state_path"]

log = logging.getLogger("pysonic.executor")

HOST_SERVER = "hostFallback"  # its name among TritonService's servers
LOCK_TIMEOUT = 300.0  # seconds a nanny waits for the host lock (another one may be starting the server)


def host_tag(scheduler: str, repository: str | os.PathLike[str], models: Sequence[str], device: str) -> str:
    """12 hex digits naming one run's host server: scheduler address, repository, models, device."""
    key = "\0".join([scheduler, str(repository), *sorted(models), device])
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def state_path(tag: str) -> Path:
    """The host's JSON file for ``tag`` (in ``tempfile.gettempdir()``, named with the host
    name); the lock is ``<it>.lock``."""
    return Path(tempfile.gettempdir()) / f"pysonic-triton-{tag}-{os.uname().nodename}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def _alive(state: dict[str, Any] | None) -> bool:
    from framework.serving import pid_is_tritonserver

    return state is not None and pid_is_tritonserver(int(state["pid"]), state.get("start_time"))


def host_server(tag: str) -> str | None:
    """The gRPC address (``host:port``) of this host's server for ``tag``, if it runs."""
    state = _read(state_path(tag))
    return str(state["address"]) if state is not None and _alive(state) else None


def host_server_http(tag: str) -> str | None:
    """The HTTP address (``host:port``) of this host's server for ``tag``, if it runs and
    the state has one (the HTTP transport, ``Client.transport``)."""
    state = _read(state_path(tag))
    return str(state["http_address"]) if state is not None and "http_address" in state and _alive(state) else None


class HostTritonServer(NannyPlugin):
    """The Dask nanny plugin that starts and stops the host's shared server (module docstring).

    Args:
        tag: ``host_tag`` of the run.
        repository: the model repository (TritonService's fallback would serve the same).
        models: the models no configured server serves.
        device, instances, wait, verbose: as TritonService's ``fallback`` PSet
            (``wait``: startup timeout, seconds).
    """

    name = "pysonic-host-triton"

    def __init__(
        self,
        tag: str,
        repository: str,
        models: Sequence[str],
        device: str = "auto",
        instances: int = 0,
        wait: float = 120.0,
        verbose: bool = False,
    ) -> None:
        self.tag = tag
        self.repository = repository
        self.models = list(models)
        self.device = device
        self.instances = instances
        self.wait = wait
        self.verbose = verbose
        self.owner = ""
        self.host = ""  # the nanny's host address: the server listens there
        self.server: Any = None  # the LocalTritonServer, in the owning nanny only

    async def setup(self, nanny: Any) -> None:
        from distributed.comm import get_address_host

        self.owner = f"{os.getpid()}:{nanny.address}"
        self.host = _listen_host(get_address_host(nanny.address))
        await asyncio.to_thread(self._join)  # a start takes seconds: not on the nanny's event loop

    async def teardown(self, nanny: Any) -> None:
        await asyncio.to_thread(self._leave)

    def _join(self) -> None:
        from framework.serving import LocalTritonServer, process_start_time

        path = state_path(self.tag)
        with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT):
            state = _read(path)
            if state is not None and _alive(state):
                state["users"] = sorted({*state["users"], self.owner})
                _write(path, state)
                return
            server = LocalTritonServer(
                self.repository,
                models=self.models,
                device=self.device,
                instances=self.instances,
                verbose=self.verbose,
                host=self.host,
            )
            log.info(
                "starting this host's Triton server for %s (repository %s)", ", ".join(self.models), self.repository
            )
            server.start(self.wait)
            self.server = server
            assert server.pid is not None  # started
            _write(
                path,
                {
                    "address": server.grpc_address,
                    "http_address": server.http_address,
                    "pid": server.pid,
                    "start_time": process_start_time(server.pid),
                    "owner": self.owner,
                    "region_prefix": server.region_prefix,
                    "users": [self.owner],
                    "models": self.models,
                },
            )

    def _leave(self) -> None:
        # The owner (it stops the server) or the last user removes the state file and the
        # lock file, while holding the lock: this host keeps nothing of the run. A nanny
        # that comes later finds no state file and takes no lock (that would create it again).
        path = state_path(self.tag)
        if path.exists():
            with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT):
                state = _read(path)
                if state is not None:
                    state["users"] = [u for u in state["users"] if u != self.owner]
                    if state.get("owner") == self.owner or not state["users"]:
                        path.unlink(missing_ok=True)
                        Path(f"{path}.lock").unlink(missing_ok=True)
                    else:
                        _write(path, state)
        if self.server is not None:
            server, self.server = self.server, None
            server.stop()


def _listen_host(host: str) -> str:
    """The IPv4 address the host server listens on: the nanny's, if it is one (a nanny
    bound to a name or to all addresses: 127.0.0.1, reached by this host's workers only)."""
    import ipaddress

    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "127.0.0.1"
    return host if address.version == 4 and not address.is_unspecified else "127.0.0.1"


def _write(path: Path, state: dict[str, Any]) -> None:
    temp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    temp.write_text(json.dumps(state))
    temp.replace(path)


def stop_host_server(tag: str) -> None:
    """Stop this host's server for ``tag`` and remove its files, whoever started it: the
    driver's last resort after the cluster closed (a nanny that could not tear down)."""
    from framework.serving import terminate_server

    path = state_path(tag)
    state = _read(path)
    if state is not None and _alive(state):
        log.warning("stopping the host Triton server (pid %s) left by the cluster", state["pid"])
        terminate_server(int(state["pid"]), region_prefix=state.get("region_prefix"))
    path.unlink(missing_ok=True)
    Path(f"{path}.lock").unlink(missing_ok=True)
