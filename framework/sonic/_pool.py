"""The configured servers as a pool that changes during the job: what each answers, and its load.

CMSSW counterpart: the server loop of ``TritonService``'s ``preBeginJob`` (HeterogeneousCore/
SonicTriton), which asks each server for its repository index once and skips one whose
query fails as "nonresponsive or saturated". pysonic extends that (``TritonService``'s
untracked ``discovery`` PSet; see :class:`DiscoveryParameters`) for a pool that scales
(SuperSONIC: servers behind Envoy, autoscaled by KEDA on Triton's queue time, from zero):

* a **survey** asks every configured server for its READY models and, when a saturation
  threshold is set, Triton's cumulative queue time and execution count over all its
  models (``get_inference_statistics``); :func:`survey` is blocking (a worker thread);
* **saturation** is the queue time per execution between two surveys of one server,
  :func:`queue_per_execution` (SuperSONIC's proxy refuses a server above 100 us of queue
  per execution; here the threshold is ``discovery.saturatedAbove``, 0 = off). A server
  that did not execute anything between the two reads is not saturated by this measure
  (a hung one is the health probes' business).

The routing (:mod:`framework.sonic._routing`) decides what an answer changes; this file
only asks and computes. It imports nothing of the package but the server descriptions.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any

from ._server_info import ServerInfo

__all__ = ["Answer", "DiscoveryParameters", "queue_per_execution", "survey"]

logger = logging.getLogger("pysonic.sonic")

STATS_TIMEOUT = 5.0  # seconds per get_inference_statistics call of a survey
SATURATION_WINDOW = 1.0  # seconds between the two reads of the load at begin_job (saturation needs a delta)


@dataclasses.dataclass(frozen=True)
class DiscoveryParameters:
    """TritonService's ``discovery`` PSet (a pysonic extension; all untracked).

    Attributes:
        wait: seconds begin_job waits for a server of every model (a pool scaling from
            zero), asking again every ``interval`` s (at most every 2 s at begin_job);
            0 = no wait (CMSSW).
        interval: seconds between two surveys during the job (servers that appear join,
            models that leave a server leave it, saturation is measured again); made by
            a request when due, never in the background; 0 = never (CMSSW).
        saturated_above: microseconds of Triton queue time per execution above which a
            server is saturated: skipped at begin_job, last choice while routing; 0 = off.
    """

    wait: float = 0.0
    interval: float = 0.0
    saturated_above: float = 0.0

    @classmethod
    def from_pset(cls, pset: Any) -> DiscoveryParameters:
        return cls(float(pset.wait), float(pset.interval), float(pset.saturatedAbove))


@dataclasses.dataclass(frozen=True)
class Answer:
    """What one server answered a survey.

    Attributes:
        models: its READY models; None if it could not be asked (``error`` says why).
        error: why it could not be asked ("" if it answered).
        load: Triton's cumulative (queue ns, executions) over all its models; None if
            not asked or not available (a server without Triton's statistics).
    """

    models: frozenset[str] | None
    error: str = ""
    load: tuple[int, int] | None = None

    def describe(self) -> str:
        """``"serves a, b"``, ``"serves nothing"`` or ``"unreachable (reason)"``."""
        if self.models is None:
            return f"unreachable ({self.error})"
        return f"serves {', '.join(sorted(self.models)) or 'nothing'}"


def survey(
    servers: Iterable[ServerInfo],
    ready: Callable[[ServerInfo], set[str] | str],
    grpc_client: Callable[[str], Any] | None,
) -> dict[str, Answer]:
    """Ask each server what it serves and, with ``grpc_client`` (name -> the shared
    ``InferenceServerClient``), its load. Blocking (a worker thread); never raises.

    Args:
        ready: the repository query (``_routing.ready_models``): READY models, or why not.
    """
    answers = {}
    for server in servers:
        found = ready(server)
        if isinstance(found, str):
            answers[server.name] = Answer(None, found)
            continue
        load = _load(grpc_client(server.name)) if grpc_client is not None else None
        answers[server.name] = Answer(frozenset(found), load=load)
    return answers


def _load(client: Any) -> tuple[int, int] | None:
    """Triton's cumulative queue ns and execution count summed over every model and version
    (``get_inference_statistics("")``; int64 counters come as strings in JSON)."""
    try:
        stats = client.get_inference_statistics("", as_json=True, client_timeout=STATS_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - statistics are optional (another server kind, a hiccup)
        logger.debug("no statistics for the saturation check: %s", exc)
        return None
    queue = executions = 0
    for model in stats.get("model_stats", []):
        queue += int(model.get("inference_stats", {}).get("queue", {}).get("ns", 0))
        executions += int(model.get("execution_count", 0))
    return queue, executions


def queue_per_execution(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Microseconds of queue time per execution between two reads of a server's load.

    Returns:
        None if either read is missing, nothing was executed in between, or the counters
        went down (the server restarted in between).
    """
    if before is None or after is None:
        return None
    queue, executions = after[0] - before[0], after[1] - before[1]
    if executions <= 0 or queue < 0:
        return None
    return queue / executions / 1e3
