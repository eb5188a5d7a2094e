#!/usr/bin/env bash
# Pack what the GPU machine lacks into one folder (default .gpu/, ~44 MB), to carry there
# with a checkout (docs/performance-gpu.md):
#   - tritonserver.tar.xz: the tritonserver of this environment's nvidia-pytriton wheel
#     (binary, bundled libraries, Python backend) with the Python 3.12 backend stub,
#     unpacked as ts/ (the layout $PYSONIC_TRITONSERVER_HOME expects);
#   - samples/: pfnano.root, the real CMS sample the benchmarks read;
#   - whl/: Python 3.12 wheels of the framework's dependencies that the machine's image
#     does not have (it has torch, numpy, grpcio, protobuf, onnxruntime, matplotlib, rich...).
# Usage: scripts/gpu/pack.sh [VENV=.venv] [OUT=.gpu]
set -euo pipefail
VENV=${1:-.venv}; OUT=${2:-.gpu}
SP=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
STUB="$SP/pytriton/tritonserver/python_backend_stubs/3.12/triton_python_backend_stub"
[ -f "$STUB" ] || { echo "pack.sh: no Python 3.12 backend stub in $VENV's nvidia-pytriton" >&2; exit 1; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/ts/stubs" "$OUT/whl"
cp -r "$SP/pytriton/tritonserver/bin" "$SP/pytriton/tritonserver/backends" "$T/ts/"
cp "$STUB" "$T/ts/stubs/"
cp -r "$SP/nvidia_pytriton.libs" "$T/ts/libs"
tar -C "$T" -cf - ts | xz -T0 -6 > "$OUT/tritonserver.tar.xz"
"$VENV/bin/python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$OUT/whl" \
    trio outcome sniffio awkward awkward-cpp uproot cramjam hist boost-histogram histoprint uhi \
    tritonclient python-rapidjson
# The real sample the benchmarks read (the machine cannot fetch it): located as cmsrun does.
mkdir -p "$OUT/samples"
cp "$("$VENV/bin/python" -m framework.samples pfnano.root | tail -1)" "$OUT/samples/"
du -sh "$OUT"
