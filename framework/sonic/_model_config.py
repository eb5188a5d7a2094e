"""The client's model checks, as CMSSW's ``TritonClient`` makes them when it is built.

CMSSW (HeterogeneousCore/SonicTriton, ``TritonClient``'s constructor) reads the model's
local ``config.pbtxt`` (``Client.modelConfigPath``, a ``FileInPath``): it gives
``max_batch_size``; the inputs and outputs come from the server's metadata; and the
``checksum`` repository agent's sums of the local config must equal those of the config
the server serves (the **ModelVersioning** check), else the job stops with an exception
of category ``ModelVersioning``.

Here the local config is parsed with tritonclient's ``model_config_pb2`` by
:mod:`framework.utilities.triton_config`, which the server side reads it with too (the client never
imports the server side), and the checks run once per client at begin_job
(:meth:`TritonClient.connect`). Differences from CMSSW:

* a local config that does not exist (a model known only to a remote server, and no
  ``Client.modelConfigPath``) skips the local checks, where CMSSW's ``FileInPath`` fails;
* the served sums are read from the served config's ``checksum`` agent block (a real
  Triton keeps it) or, on the project's own servers, whose tritonserver has no agent
  library, from its ``parameters`` under ``checksum:<key>`` (``checksum:MD5:1/model.onnx``);
* inputs and outputs named in the local config are also compared with the server's
  metadata (names, data types, dims): a disagreement is a one-line error.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping
from typing import Any

from framework.utilities import ConfigurationError, ExternalFailure
from framework.utilities.triton_config import ModelConfigSyntaxError, checksum_sums, parse_config_file, served_checksums

__all__ = ["LocalModelConfig", "check_io", "check_versioning", "read_local_config"]


@dataclasses.dataclass(frozen=True)
class LocalModelConfig:
    """What the client uses of a model's local ``config.pbtxt``.

    Attributes:
        path: the file.
        max_batch_size: 0 = the model has no batch dimension.
        inputs, outputs: name -> (Triton datatype without ``TYPE_``, e.g. ``"FP32"``; dims
            without the batch dimension, -1 = variable), in config order.
        checksums: the ``checksum`` agent's parameters, ``"MD5:1/model.onnx"`` -> MD5 (hex).
    """

    path: pathlib.Path
    max_batch_size: int
    inputs: dict[str, tuple[str, tuple[int, ...]]]
    outputs: dict[str, tuple[str, tuple[int, ...]]]
    checksums: dict[str, str]


def read_local_config(path: pathlib.Path, what: str) -> LocalModelConfig | None:
    """The local config at ``path``; None if there is no such file.

    Raises:
        ConfigurationError: the file is not a valid model configuration (one line naming
            ``what``, the file and the parser's message).
    """
    from tritonclient.grpc import model_config_pb2

    if not path.is_file():
        return None
    try:
        config = parse_config_file(path)
    except ModelConfigSyntaxError as err:
        raise ConfigurationError(f"{what}: Client.modelConfigPath {path} is not a valid model config: {err}") from None

    def tensors(entries: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
        # metadata spells the config's TYPE_STRING as BYTES
        names = {e.name: model_config_pb2.DataType.Name(e.data_type).removeprefix("TYPE_") for e in entries}
        return {e.name: (names[e.name].replace("STRING", "BYTES"), tuple(e.dims)) for e in entries}

    checksums = checksum_sums(config)
    return LocalModelConfig(path, config.max_batch_size, tensors(config.input), tensors(config.output), checksums)


def check_io(local: LocalModelConfig, metadata: Mapping[str, Any], max_batch_size: int, what: str) -> None:
    """The server's inputs and outputs (its metadata) must be those of the local config.

    Raises:
        ExternalFailure: a name, data type or dims differ, or ``max_batch_size`` differs
            from the served one (one line naming the model, the tensor and both values).
    """
    if (local.max_batch_size > 0) != (max_batch_size > 0):
        raise ExternalFailure(
            f"{what}: the local config {local.path} has max_batch_size {local.max_batch_size}, "
            f"the server's {max_batch_size}"
        )
    batched = local.max_batch_size > 0
    for kind, expected in (("input", local.inputs), ("output", local.outputs)):
        served = {
            e["name"]: (e["datatype"], tuple(int(d) for d in e["shape"])[1 if batched else 0 :])
            for e in metadata.get(kind + "s", ())
        }
        if set(served) != set(expected):
            raise ExternalFailure(
                f"{what}: the server's {kind}s {sorted(served)} differ from those of the local config "
                f"{local.path} {sorted(expected)}"
            )
        for name, (datatype, dims) in expected.items():
            if served[name] != (datatype, dims):
                raise ExternalFailure(
                    f"{what}: {kind} {name!r} is {served[name][0]} {list(served[name][1])} on the server, "
                    f"{datatype} {list(dims)} in the local config {local.path}"
                )


def _in_version(key: str, version: str) -> bool:
    """Whether a checksum key (``"MD5:<path>"``) names a file of ``version`` or one outside
    every version folder (labels, say)."""
    first = key.partition(":")[2].split("/", 1)[0]
    return first == version or not first.isdigit()


def check_versioning(
    local: LocalModelConfig, served_config: Mapping[str, Any], version: str, what: str, server: str
) -> None:
    """CMSSW's ModelVersioning check: the local config's checksum sums for ``version`` must
    equal those of the config the server serves.

    Args:
        version: the model version the client uses (``Client.modelVersion``, else the
            server's latest).
        server: names the server in the message ("server 'remote' (host:port)").

    Raises:
        ExternalFailure: category ``ModelVersioning``; one line naming the model, the server,
            each file and both sums (``none`` where one side has no sum).
    """
    served = served_checksums(served_config)
    keys = sorted(k for k in set(local.checksums) | set(served) if _in_version(k, version))
    wrong = [
        f"{key.partition(':')[2]} (local {local.checksums.get(key, 'none')}, server {served.get(key, 'none')})"
        for key in keys
        if local.checksums.get(key) != served.get(key)
    ]
    if wrong:
        raise ExternalFailure(
            f"{what}: {server} serves files whose checksums differ from the local config "
            f"{local.path}: {'; '.join(wrong)}",
            category="ModelVersioning",
        )
