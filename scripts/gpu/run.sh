#!/usr/bin/env bash
# On the GPU machine, from the root of a checkout carrying the folder made by pack.sh:
# unpack the tritonserver, install the wheels into python3's site-packages (a bare, lent
# machine: nothing of it outlives the lease), and run cmsbench
# with the models on the GPU. Arguments go to cmsbench (default: gpu --out results/gpu).
#   scripts/gpu/run.sh gpu --out "$OUT"
# Environment: PYSONIC_GPU_PACK (default .gpu), PYSONIC_BENCH_DEVICE (default gpu).
set -euo pipefail
PACK=${PYSONIC_GPU_PACK:-.gpu}
WORK=$(mktemp -d)
tar -xJf "$PACK/tritonserver.tar.xz" -C "$WORK"
# Into python3's own site-packages, with a .pth naming this checkout: the Python backend
# stub ignores PYTHONPATH, it sees only the site-packages of the python3 on PATH.
python3 -m pip install --quiet --no-index --no-deps --no-compile "$PACK"/whl/*.whl
SITE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$PWD" > "$SITE/pysonic-checkout.pth"
export PYSONIC_TRITONSERVER_HOME="$WORK/ts" PYSONIC_BENCH_DEVICE=${PYSONIC_BENCH_DEVICE:-gpu}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'numpy', numpy.__version__)"
if [ $# -eq 0 ]; then set -- gpu --out results/gpu; fi
python3 -m framework.bench "$@"
