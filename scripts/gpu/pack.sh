#!/usr/bin/env bash
# Pack what the GPU machine lacks into one folder (default .gpu/, ~80 MB), to carry there
# with a checkout (docs/performance-gpu.md):
#   - tritonserver.tar.xz: the tritonserver of this environment's nvidia-pytriton wheel
#     (binary, bundled libraries, Python backend) with the Python 3.12 backend stub,
#     unpacked as ts/ (the layout $PYSONIC_TRITONSERVER_HOME expects);
#   - samples/: pfnano.root, the real CMS sample the benchmarks read;
#   - whl/: Python 3.12 wheels of what the framework needs and the machine's image lacks,
#     computed by wheels.py (beside this file): the closure of the installed pysonic's
#     requirements minus image.txt, at the versions installed in VENV;
#   - cms-data/: CMS's ParticleNet AK8 models (TorchScript, and the General ONNX model) and
#     preprocess files in CMSSW's data layout, from CMSSW_SEARCH_PATH (default
#     ../shared/models): those found there.
# Usage: scripts/gpu/pack.sh [VENV=.venv] [OUT=.gpu]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${1:-.venv}; OUT=${2:-.gpu}
SP=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
STUB="$SP/pytriton/tritonserver/python_backend_stubs/3.12/triton_python_backend_stub"
[ -f "$STUB" ] || { echo "pack.sh: no Python 3.12 backend stub in $VENV's nvidia-pytriton" >&2; exit 1; }
WHEELS=$("$VENV/bin/python" "$HERE/wheels.py")
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/ts/stubs" "$OUT"
cp -r "$SP/pytriton/tritonserver/bin" "$SP/pytriton/tritonserver/backends" "$T/ts/"
cp "$STUB" "$T/ts/stubs/"
cp -r "$SP/nvidia_pytriton.libs" "$T/ts/libs"
tar -C "$T" -cf - ts | xz -T0 -6 > "$T/tritonserver.tar.xz"
# Into a fresh folder, swapped in at the end: no wheel of an older list stays behind.
# shellcheck disable=SC2086  # one wheel per word
"$VENV/bin/python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$T/whl" $WHEELS
# The real sample the benchmarks read (the machine cannot fetch it): located as cmsrun does.
mkdir -p "$T/samples"
cp "$("$VENV/bin/python" -m framework.io.samples pfnano.root | tail -1)" "$T/samples/"
# CMS's ParticleNet AK8 (the AK8 job and the gpu-ak8 experiment), first found on the search path.
IFS=: read -ra SEARCH <<< "${CMSSW_SEARCH_PATH:-$(dirname "$PWD")/shared/models}"
D=RecoBTag/Combined/data
# The TorchScript models, and the General ONNX model for onnxruntime's side of gpu-ak8.
for item in $D/models/particlenet_PT $D/models/particlenet_AK8_MD-2prong_PT $D/models/particlenet \
        $D/ParticleNetAK8/General/V01 $D/ParticleNetAK8/MD-2prong/V01; do
    found=""
    for dir in "${SEARCH[@]}"; do
        if [ -e "$dir/$item" ]; then found="$dir/$item"; break; fi
    done
    if [ -z "$found" ]; then echo "pack.sh: $item not on CMSSW_SEARCH_PATH: not packed" >&2; continue; fi
    mkdir -p "$T/cms-data/$(dirname "$item")"
    cp -rL "$found" "$T/cms-data/$item"
done
rm -rf "$OUT/whl" "$OUT/samples" "$OUT/cms-data"
mv "$T/whl" "$T/samples" "$T/tritonserver.tar.xz" "$OUT/"
[ -d "$T/cms-data" ] && mv "$T/cms-data" "$OUT/"
du -sh "$OUT"
