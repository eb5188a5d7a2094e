"""What both SONIC sides read of a Triton model's ``config.pbtxt``, written once.

The client (``framework.sonic._model_config``: CMSSW's ModelVersioning check), the
server side (``framework.serving._repository``: the repository translation) and the
direct producers (:mod:`framework.inference`) each read a model's ``config.pbtxt``; the
servers keep the ``checksum`` agent's sums in the served config's ``parameters``, where
the client reads them back. Both sides import this module and never each other
(``tests/test_layering.py``); it knows tritonclient's ``model_config_pb2`` schema and
protobuf's text format only, and talks to no server.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

__all__ = ["CHECKSUM_PREFIX", "ModelConfigSyntaxError", "checksum_sums", "parse_config_file", "served_checksums"]

CHECKSUM_PREFIX = "checksum:"
"""Prefix of the served config's ``parameters`` keys that hold the ``checksum`` agent's sums
(``checksum:MD5:1/model.onnx``): the project's tritonserver has no agent library, so the
servers drop the agent block and keep its sums there."""


class ModelConfigSyntaxError(ValueError):
    """A ``config.pbtxt`` is not a valid ``ModelConfig`` text; the message is the parser's
    (line and column). Each side raises its own error type naming the file."""


def parse_config_file(path: pathlib.Path) -> Any:
    """The ``ModelConfig`` (tritonclient's ``model_config_pb2``) of a ``config.pbtxt`` file.

    Raises:
        OSError: the file cannot be read.
        ModelConfigSyntaxError: it is not a valid model configuration.
    """
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = model_config_pb2.ModelConfig()
    text = path.read_text()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as err:
        raise ModelConfigSyntaxError(str(err)) from None
    return config


def checksum_sums(config: Any) -> dict[str, str]:
    """The ``checksum`` repository agent's parameters of a ``ModelConfig``:
    ``"MD5:1/model.onnx"`` -> MD5 (hex); {} without a ``checksum`` agent."""
    for agent in config.model_repository_agents.agents:
        if agent.name == "checksum":
            return dict(agent.parameters)
    return {}


def served_checksums(config: Mapping[str, Any]) -> dict[str, str]:
    """The checksum sums of a served model config (Triton's JSON, ``get_model_config(as_json=True)``):
    its ``checksum`` agent block (a real Triton), else its ``checksum:<key>`` parameters
    (the project's servers)."""
    for agent in (config.get("model_repository_agents") or {}).get("agents", ()):
        if agent.get("name") == "checksum":
            return dict(agent.get("parameters") or {})
    return {
        key.removeprefix(CHECKSUM_PREFIX): value.get("string_value", "")
        for key, value in (config.get("parameters") or {}).items()
        if key.startswith(CHECKSUM_PREFIX)
    }
