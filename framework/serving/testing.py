"""Helpers for tests and benchmarks: tiny Python-backend models and a server that leaves nothing.

Public, like ``trio.testing``: for this project's tests and benchmarks and for packages
that write their own SONIC modules.

* :func:`write_python_model` writes a Python-backend model (``<name>/config.pbtxt`` and
  ``<name>/1/model.py``) into a model repository; :func:`python_model_config` is its
  ``config.pbtxt`` text, :class:`TensorConfig` one input or output of it;
  :func:`write_tiny_repository` writes the ``tiny`` identity model.
* :func:`write_edited_repository` copies models of a repository with their
  ``config.pbtxt`` edited (dynamic batching, instance kinds, ...).
* :func:`serving` starts a :class:`~framework.serving._server.LocalTritonServer` on a
  repository, stops it at the end, and checks that it left no Python-backend stub
  process and no /dev/shm region behind.

Example::

    write_python_model(repo, "double", DOUBLE_PY, max_batch_size=8)  # x -> y, FP32 [-1]
    with serving(repo, models=["double"]) as server:
        client = tritonclient.grpc.InferenceServerClient(server.grpc_address)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from framework.utilities import ConfigurationError

from ._processes import server_remains
from ._server import LocalTritonServer, TritonServerError, default_model_repository
from .model_spec import TRITON_DTYPES

__all__ = [
    "TensorConfig",
    "python_model_config",
    "serving",
    "write_edited_repository",
    "write_python_model",
    "write_tiny_repository",
]

SETTLE = 10.0  # seconds a stopped server's stubs get to exit before they count as left behind


@dataclasses.dataclass(frozen=True)
class TensorConfig:
    """One input or output of a model's ``config.pbtxt``.

    Attributes:
        name: the tensor's name (``"x"``).
        data_type: Triton's type name, ``TYPE_FP32``, ``TYPE_INT64``, ... (the keys of
            ``framework.serving.model_spec.TRITON_DTYPES``).
        dims: the shape without the batch dimension; -1 for a variable one.
    """

    name: str
    data_type: str = "TYPE_FP32"
    dims: tuple[int, ...] = (-1,)

    def pbtxt(self) -> str:
        """``{ name: "x" data_type: TYPE_FP32 dims: [ -1 ] }``."""
        dims = ", ".join(map(str, self.dims))
        return f"{{ name: {_quoted(self.name)} data_type: {self.data_type} dims: [ {dims} ] }}"


def _quoted(text: str) -> str:
    # A text-format protobuf string: JSON's escapes of '"', '\\' and controls are its escapes too.
    return json.dumps(text, ensure_ascii=False)


def python_model_config(
    name: str,
    *,
    inputs: Sequence[TensorConfig] = (TensorConfig("x"),),
    outputs: Sequence[TensorConfig] = (TensorConfig("y"),),
    max_batch_size: int = 8,
    instances: int | None = 1,
    parameters: Mapping[str, str] | None = None,
    extra: str = "",
) -> str:
    """The ``config.pbtxt`` text of a Python-backend model (Triton's model configuration).

    Args:
        name: the model's name (its folder's name too).
        inputs, outputs: its tensors (default: ``x`` -> ``y``, FP32, shape (batch, -1)).
        max_batch_size: 0 = the model takes no batch dimension.
        instances: CPU instances (``instance_group``); None leaves Triton's default.
        parameters: ``parameters`` entries, ``key -> string_value`` (what the model's
            ``initialize`` reads from ``args["model_config"]``).
        extra: more configuration text, appended as given (``"dynamic_batching { }"``).

    Raises:
        ConfigurationError: an empty or path-like name, no outputs, a negative batch size
            or instance count, an unknown data type (names the tensor and the known types).
    """
    if not name or "/" in name or name in (".", ".."):
        raise ConfigurationError(f"Python-backend model: name {name!r} is not a folder name")
    if not outputs:
        raise ConfigurationError(f"Python-backend model '{name}': no outputs")
    if max_batch_size < 0 or (instances is not None and instances < 1):
        raise ConfigurationError(
            f"Python-backend model '{name}': max_batch_size={max_batch_size} must be >= 0 "
            f"and instances={instances} >= 1 (or None)"
        )
    for tensor in (*inputs, *outputs):
        if tensor.data_type not in TRITON_DTYPES:
            raise ConfigurationError(
                f"Python-backend model '{name}': tensor '{tensor.name}' has data_type "
                f"{tensor.data_type!r}, not one of {', '.join(TRITON_DTYPES)}"
            )
    lines = [
        f"name: {_quoted(name)}",
        'backend: "python"',
        f"max_batch_size: {max_batch_size}",
        f"input [ {', '.join(t.pbtxt() for t in inputs)} ]",
        f"output [ {', '.join(t.pbtxt() for t in outputs)} ]",
    ]
    if instances is not None:
        lines.append(f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]")
    lines += [
        f"parameters {{ key: {_quoted(k)} value: {{ string_value: {_quoted(v)} }} }}"
        for k, v in (parameters or {}).items()
    ]
    if extra:
        lines.append(extra.strip())
    return "\n".join(lines) + "\n"


def write_python_model(repository: str | os.PathLike[str], name: str, code: str, **config: Any) -> pathlib.Path:
    """Write a Python-backend model into ``repository``: ``<name>/config.pbtxt`` and
    ``<name>/1/model.py``. An existing model of that name is overwritten.

    Args:
        repository: the model repository folder (created if missing).
        name: the model's name.
        code: the text of ``model.py`` (a ``TritonPythonModel`` class; dedented here).
        **config: :func:`python_model_config`'s keyword arguments (``inputs``,
            ``outputs``, ``max_batch_size``, ``instances``, ``parameters``, ``extra``).

    Returns:
        the model's folder, ``<repository>/<name>``.

    Raises:
        ConfigurationError: see :func:`python_model_config`.
    """
    text = python_model_config(name, **config)  # checks before anything is written
    folder = pathlib.Path(repository) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(textwrap.dedent(code))
    (folder / "config.pbtxt").write_text(text)
    return folder


@contextlib.contextmanager
def serving(
    repository: str | os.PathLike[str] | Mapping[str, str | os.PathLike[str]],
    models: Sequence[str] | None = None,
    *,
    timeout: float = 60.0,
    **options: Any,
) -> Iterator[LocalTritonServer]:
    """A started :class:`~framework.serving._server.LocalTritonServer` on ``repository``,
    stopped at the end of the block, even when the start fails.

    Args:
        repository: the model repository (or model name -> model folder, see ``LocalTritonServer``).
        models: the models to load (None: all of the repository).
        timeout: seconds for the server and its models to be ready.
        **options: more ``LocalTritonServer`` arguments (``instances``, ``grpc_ssl``, ...).

    Raises:
        TritonServerError: the server did not start; or, after the block, its stopped
            server left Python-backend stub processes or /dev/shm regions behind for
            ``SETTLE`` seconds (names them). An error of the block itself wins.
    """
    server = LocalTritonServer(repository, models=list(models) if models is not None else None, **options)
    try:
        server.start(timeout)
        yield server
    finally:
        server.stop()
    deadline = time.monotonic() + SETTLE
    while (remains := server_remains(server.region_prefix)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if remains:
        raise TritonServerError(f"LocalTritonServer({server.repository}) left {remains} after stop()")


TINY_MODEL_PY = """\
# The "tiny" model: returns its input (no compute), so that the server is never the bottleneck.
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
                for r in requests]
"""


def write_tiny_repository(folder: pathlib.Path, max_batch_size: int = 64) -> pathlib.Path:
    """A repository with the ``tiny`` identity model: ``x`` float32 (batch, -1) -> ``y`` = ``x``.

    Returns ``folder``.
    """
    write_python_model(folder, "tiny", TINY_MODEL_PY, max_batch_size=max_batch_size)
    return folder


def write_edited_repository(
    folder: pathlib.Path,
    models: Sequence[str] | Mapping[str, str],
    edit: Callable[[Any], None] | None = None,
    source: pathlib.Path | None = None,
) -> pathlib.Path:
    """A copy of ``models`` of ``source`` (default ``data/models``) with ``edit(config)`` applied.

    ``models`` lists model names, or maps new names to source models (``{"pn_nobatching":
    "particlenet_ak4"}``: the copy's ``config.name`` is the new name). Version folders are
    symlinks; only ``config.pbtxt`` is rewritten. ``edit`` receives the parsed
    ``ModelConfig`` protobuf (Triton's own, from tritonclient) and changes it in place.
    Returns ``folder``.

    Raises:
        FileNotFoundError: a source model or its ``config.pbtxt`` does not exist.
        google.protobuf.text_format.ParseError: a ``config.pbtxt`` that is not a ModelConfig.
    """
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    source = source or default_model_repository()
    names = models if isinstance(models, Mapping) else {name: name for name in models}
    for name, model in names.items():
        target = folder / name
        target.mkdir(parents=True, exist_ok=True)
        for entry in (source / model).iterdir():
            if entry.name != "config.pbtxt" and not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry.absolute())
        config = text_format.Parse((source / model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        config.name = name
        if edit is not None:
            edit(config)
        (target / "config.pbtxt").write_text(text_format.MessageToString(config))
    return folder
