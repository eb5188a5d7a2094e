"""Triton servers: starting, watching and stopping ``tritonserver``, and what runs inside it.

Layering: the server side of SONIC; what it may import is written once, in
:mod:`framework` (``tests/test_layering.py`` checks it). What a job needs of a server
goes through :class:`LocalTritonServer`; the client only ever sees an address.

Files, in the direction of their imports:

* ``model_spec``: a Triton model config's tensors and the dynamic batching done on them
  (numpy arrays or torch tensors), without a server;
* ``onnx_backend``, ``torch_ops``, ``torch_backend``, ``python_backend``: the ONNX
  (onnxruntime) and TorchScript (torch, GPU) runners, the compiled extensions' operators
  (``torch_scatter``, ``torch_sparse``) that the torch runner registers in pure torch
  before it loads a file, and the framework's Triton Python-backend model that picks a
  runner (lazily); they run inside the server's Python and import nothing else of the
  framework (the direct producers of ``framework.inference`` use the ONNX runner in-process);
* ``_installation``: the ``tritonserver`` binary of the ``nvidia-pytriton`` wheel, its
  Python-backend folder, the server's environment;
* ``_repository``: model-repository translation: any standard Triton model repository
  (ONNX, TorchScript, Python-backend models; ``checksum`` agents checked) turned into
  what this Python-backend-only server loads, generated beside its state, cached by content;
* ``_processes``: the server's process: spawning, its remains (``/dev/shm``, files),
  termination;
* ``_leftovers``: the temporary folders and logs of servers, named by their owner (pid
  and start time), and the removal of those a killed job left;
* ``_server``: :class:`LocalTritonServer`, a server on this host (ports, readiness, model
  loading, logs, TLS);
* ``_cmstriton``: the ``cmstriton`` command (CMSSW's ``cmsTriton``);
* ``testing`` (public, not imported here): tiny Python-backend models written into a
  repository and a server that is checked to leave nothing behind, for tests and benchmarks.

The names below are the server side's public API; the other packages (the service layer,
the executor's host servers, the benchmarks) import them from here, never from the files.
"""

from ._processes import pid_is_tritonserver as pid_is_tritonserver
from ._processes import process_start_time as process_start_time
from ._processes import terminate_server as terminate_server
from ._repository import ModelChecksumError as ModelChecksumError
from ._repository import ModelRepositoryError as ModelRepositoryError
from ._repository import read_model_config as read_model_config
from ._server import DEVICES as DEVICES
from ._server import LocalTritonServer as LocalTritonServer
from ._server import TritonServerError as TritonServerError
from ._server import default_model_repository as default_model_repository
from ._server import resolve_device as resolve_device
from ._server import stop_owned_servers as stop_owned_servers
