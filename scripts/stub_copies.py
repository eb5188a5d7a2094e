"""Measure how tensors cross the Python-backend stub boundary (copies or views).

    python scripts/stub_copies.py [--mb 1.0]

Starts a local tritonserver with a probe model that, inside ``execute``, times reading a
request's input (``Tensor.as_numpy()`` and ``numpy.from_dlpack(tensor)``) and building an
output (``pb_utils.Tensor(name, array)``), and checks whether repeated reads share memory
(a view of the stub's shared memory) or not (a copy). ``pb_utils.Tensor.from_dlpack`` with
a numpy array is NOT probed: with the 2.51 stub and numpy 1.26 it kills the stub
("PyCapsule_GetPointer called with incorrect name" on the ``used_dlpack`` capsule).
The result justifies the ONNX runner's choice (framework/serving/onnx_backend.py).
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
import textwrap

import numpy as np

MODEL = textwrap.dedent("""
    import time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    def timed(fn, n=50):
        t0 = time.perf_counter()
        for _ in range(n):
            value = fn()
        return (time.perf_counter() - t0) / n, value

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                t = pb_utils.get_input_tensor_by_name(request, "x")
                as_numpy_s, a = timed(t.as_numpy)
                dlpack_s, b = timed(lambda: np.from_dlpack(t))
                y = np.ascontiguousarray(a * 2)
                tensor_s, o = timed(lambda: pb_utils.Tensor("y", y))
                info = [as_numpy_s, dlpack_s, tensor_s, np.shares_memory(a, t.as_numpy()),
                        np.shares_memory(a, b)]
                out.append(pb_utils.InferenceResponse([o, pb_utils.Tensor("info", np.array([info], np.float64))]))
            return out
""")


def main() -> None:
    import tritonclient.grpc as grpcclient

    from framework.serving._server import LocalTritonServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0, help="input size, MB")
    n = round(parser.parse_args().mb * 1e6 / 4)
    with tempfile.TemporaryDirectory(prefix="pysonic-probe-") as folder:
        repo = pathlib.Path(folder)
        (repo / "probe" / "1").mkdir(parents=True)
        (repo / "probe" / "1" / "model.py").write_text(MODEL)
        (repo / "probe" / "config.pbtxt").write_text(
            f'name: "probe"\nbackend: "python"\nmax_batch_size: 1\n'
            f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {n} ] }} ]\n'
            f'output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {n} ] }}, '
            '{ name: "info" data_type: TYPE_FP64 dims: [ 5 ] } ]\n'
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        )
        with LocalTritonServer(repo) as server, grpcclient.InferenceServerClient(server.grpc_address) as client:
            x = np.random.default_rng(0).normal(size=(1, n)).astype(np.float32)
            for _ in range(3):
                grpc_input = grpcclient.InferInput("x", list(x.shape), "FP32")
                grpc_input.set_data_from_numpy(x)
                result = client.infer("probe", [grpc_input])
                assert np.array_equal(result.as_numpy("y"), 2 * x)
                as_numpy_s, dlpack_s, tensor_s, view, dlpack_view = result.as_numpy("info")[0]
                print(
                    f"{x.nbytes / 1e6:.2f} MB: as_numpy {as_numpy_s * 1e6:.1f} us (same memory each time: "
                    f"{bool(view)}), numpy.from_dlpack {dlpack_s * 1e6:.1f} us (same memory as as_numpy: "
                    f"{bool(dlpack_view)}), pb_utils.Tensor(name, array) {tensor_s * 1e6:.1f} us"
                )


if __name__ == "__main__":
    main()
