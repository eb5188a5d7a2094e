"""Servers that speak the Open Inference Protocol but are not Triton (Seldon MLServer, KServe).

The Open Inference Protocol (KServe's "V2" gRPC API, which Triton's ``GRPCInferenceService``
extends) has server and model readiness, model metadata and inference. Triton adds its own
RPCs, which pysonic uses where they exist: the repository index (discovery),
``ModelConfig`` (``max_batch_size``, the ModelVersioning checksums) and ``ModelStatistics``.
Checked with MLServer 1.7.1: no ``ModelConfig``, no statistics, no shared-memory RPCs
(each answers UNIMPLEMENTED); its repository index spells a ready model's state
``"State.READY"``. KServe's server (0.21) has no repository index either.

So, a pysonic extension of CMSSW's client (which needs ``ModelConfig``):

* discovery: the repository index, either spelling of READY; without an index, each model
  the job needs is asked ``ModelReady`` (:func:`ready_by_model`);
* the model's shapes come from its metadata; without ``ModelConfig``, ``max_batch_size``
  comes from the local config (``Client.modelConfigPath``), else 0: the metadata's dims
  are then the full shapes (an OIP server's first dim of a batching model is -1, so any
  number of rows per request passes) (:func:`config_without_server_config`);
* statistics are optional: "n/a" where the server has none (``_service_stats``);
* shared memory: a local server that refuses to register a region gets gRPC payloads
  (``_transport``, as for a server in a container).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._model_config import LocalModelConfig, check_io
from ._waits import grpc_status

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = ["READY_STATES", "config_without_server_config", "ready_by_model", "served_model_config", "unimplemented"]

logger = logging.getLogger("pysonic.sonic")

READY_STATES = frozenset({"READY", "State.READY"})
"""A ready model's state in a repository index: Triton's spelling, and MLServer's (the
Python name of its enum member)."""


def unimplemented(exc: BaseException) -> bool:
    """Whether a failed call failed because the server has no such RPC (gRPC UNIMPLEMENTED)."""
    return grpc_status(exc) == "UNIMPLEMENTED"


def ready_by_model(client: grpcclient.InferenceServerClient, models: Iterable[str], timeout: float) -> set[str] | str:
    """Those of ``models`` the server says are ready (``ModelReady``, blocking), for a server
    without a repository index; or the reason it cannot be asked. A model the server does
    not know (NOT_FOUND: KServe's answer) is not ready."""
    from tritonclient.utils import InferenceServerException

    ready = set()
    for model in models:
        try:
            if client.is_model_ready(model, client_timeout=timeout):
                ready.add(model)
        except InferenceServerException as exc:
            if grpc_status(exc) != "NOT_FOUND":
                return f"{exc.status()}: {exc.message()}"
    return ready


def served_model_config(
    client: grpcclient.InferenceServerClient, model: str, version: str, timeout: float | None
) -> dict[str, Any] | None:
    """The served model's config (Triton's ``ModelConfig`` as JSON), None if the server has no
    such RPC (an Open Inference Protocol server other than Triton).

    Raises:
        InferenceServerException: any other failure.
    """
    from tritonclient.utils import InferenceServerException

    try:
        config: dict[str, Any] = client.get_model_config(model, version, as_json=True, client_timeout=timeout)["config"]
    except InferenceServerException as exc:
        if unimplemented(exc):
            return None
        raise
    return config


def config_without_server_config(
    local: LocalModelConfig | None, metadata: Mapping[str, Any], what: str, where: str
) -> dict[str, Any]:
    """The config the client uses for a server without ``ModelConfig``: ``max_batch_size``
    from the local config (None: 0, the metadata's dims are the full shapes); the local
    config's inputs and outputs are checked against the metadata as with Triton.

    Args:
        local: the local config (``Client.modelConfigPath``), None if there is none.
        what, where: the client and the server, for messages.

    Raises:
        ExternalFailure: the metadata's inputs or outputs differ from the local config's.
    """
    if local is None:
        logger.info(
            "%s: %s has no model config and there is no local one: shapes from the metadata, no batch dimension",
            what,
            where,
        )
        return {"max_batch_size": 0}
    check_io(local, metadata, local.max_batch_size, what)
    logger.info(
        "%s: %s has no model config: max_batch_size %d from %s%s",
        what,
        where,
        local.max_batch_size,
        local.path,
        " (its checksums cannot be compared: no ModelVersioning check)" if local.checksums else "",
    )
    return {"max_batch_size": local.max_batch_size}
