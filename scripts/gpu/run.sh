#!/usr/bin/env bash
# On the GPU machine, from the root of a checkout carrying the folder made by pack.sh:
# unpack the tritonserver, install the wheels into python3's site-packages (a bare, lent
# machine: nothing of it outlives the lease), check that every module the framework imports
# is there (wheels.py --check: all missing ones in one go, before any job), run the main job
# and CMS's ParticleNet AK8 job (TorchScript, server on the GPU, scores against CMSSW's)
# once each, then cmsbench with the models on the GPU. Arguments go to cmsbench (default:
# gpu --out results/gpu).
#   scripts/gpu/run.sh gpu --out "$OUT"
# Environment: PYSONIC_GPU_PACK (default .gpu), PYSONIC_BENCH_DEVICE (default gpu),
# PYSONIC_GPU_JOBS (default 1; 0 skips the two jobs, e.g. to rerun one experiment).
set -euo pipefail
PACK=${PYSONIC_GPU_PACK:-.gpu}
WORK=$(mktemp -d)
tar -xJf "$PACK/tritonserver.tar.xz" -C "$WORK"
# Into python3's own site-packages, with a .pth naming this checkout: the Python backend
# stub ignores PYTHONPATH, it sees only the site-packages of the python3 on PATH.
python3 -m pip install --quiet --no-index --no-deps --no-compile "$PACK"/whl/*.whl
python3 scripts/gpu/wheels.py --check
SITE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$PWD" > "$SITE/pysonic-checkout.pth"
# The module types are found through pyproject's entry points: register them as an
# install would (a dist-info holding entry_points.txt), without building anything.
python3 - "$SITE" <<'PY'
import pathlib, sys, tomllib
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = pathlib.Path(sys.argv[1]) / f"pysonic-{project['version']}.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pysonic\nVersion: {project['version']}\n")
lines = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items())
         for group, points in project.get("entry-points", {}).items()]
lines.append("[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in project["scripts"].items()))
(info / "entry_points.txt").write_text("\n".join(lines))
PY
export PYSONIC_TRITONSERVER_HOME="$WORK/ts" PYSONIC_BENCH_DEVICE=${PYSONIC_BENCH_DEVICE:-gpu}
export PYTHONUNBUFFERED=1
# The machine reaches no package index: the samples travel in the pack (pack.sh copies them).
if [ -d "$PACK/samples" ]; then export PYSONIC_SAMPLES="$PWD/$PACK/samples"; fi
if [ -d "$PACK/cms-data" ]; then
    export CMSSW_SEARCH_PATH="$PWD/$PACK/cms-data${CMSSW_SEARCH_PATH:+:$CMSSW_SEARCH_PATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'numpy', numpy.__version__)"
if [ "${PYSONIC_GPU_JOBS:-1}" != 0 ]; then
    # The main job (its fallback server on the CPU, as configured), outputs in the scratch folder.
    python3 -m framework.cmsrun configs/sonic_pfnano_cfg.py outputFile="$WORK/sonic_pfnano.root" \
        histFile="$WORK/sonic_pfnano_histograms.root" --no-progress
    # CMS's ParticleNet AK8 as TorchScript (CMSSW's particleNetPTSonicTriton), fallback server on
    # the GPU (TritonService_cff: nvidia-smi lists one); prints the agreement with CMSSW's scores.
    if [ -f "$PACK/cms-data/RecoBTag/Combined/data/models/particlenet_AK8_MD-2prong_PT/config.pbtxt" ]; then
        python3 -m framework.cmsrun configs/particlenet_ak8_cfg.py sonic=1 pt=1 \
            outputFile="$WORK/particlenet_ak8.root" --no-progress
    else
        echo "run.sh: no TorchScript ParticleNet AK8 models in $PACK/cms-data: AK8 job skipped" >&2
    fi
fi
if [ $# -eq 0 ]; then set -- gpu --out results/gpu; fi
python3 -m framework.bench "$@"
