"""CMS's TorchScript ParticleNet AK8 on a device vs its ONNX twin on the CPU, jet by jet.

    CMSSW_SEARCH_PATH=... python scripts/gpu/agreement.py [--device cuda] [--tf32] [--jets 1 64 160]

For each batch size: the largest |score difference| per jet between ``particlenet_PT`` run
by torch on ``--device`` (TF32 as the torch runner sets it: off unless ``--tf32``) and
``particlenet`` (ONNX) run by onnxruntime with one CPU thread, on seeded random inputs
(the same for every run); how many jets differ by more than 1e-4; and, for those jets,
how far the ONNX score itself moves when every input is changed by a relative 1.2e-7 (the
size of fp32 rounding): a jet whose score jumps there sits where ParticleNet's
k-nearest-neighbour choice flips, so any change of rounding (another kernel, another batch
size) may move it. Measured on a CPU, 2026-11-27: torch vs onnxruntime within 1.6e-6 at 160
jets; 1 jet in 160 jumps by 2.3e-4 to 3.5e-4 under such a perturbation (docs/performance-gpu.md).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import framework.config as cms
from framework.serving.torch_backend import set_tf32

MODELS = "RecoBTag/Combined/data/models"


def random_inputs(rng: np.random.Generator, jets: int, pf: int = 100, sv: int = 10) -> list[np.ndarray]:
    """ParticleNet AK8's six inputs (points, features, mask; particles then SVs), all entries real."""
    return [
        rng.normal(0, 0.3, (jets, 2, pf)).astype(np.float32),
        rng.normal(0, 1, (jets, 25, pf)).astype(np.float32),
        np.ones((jets, 1, pf), np.float32),
        rng.normal(0, 0.3, (jets, 2, sv)).astype(np.float32),
        rng.normal(0, 1, (jets, 11, sv)).astype(np.float32),
        np.ones((jets, 1, sv), np.float32),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 (the runner's allow_tf32: true)")
    parser.add_argument("--jets", type=int, nargs="+", default=[1, 64, 160])
    ns = parser.parse_args(argv)
    import onnxruntime as ort
    import torch

    set_tf32(torch, ns.tf32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    onnx_file = cms.FileInPath(f"{MODELS}/particlenet/1/model.onnx").fullPath()
    session = ort.InferenceSession(onnx_file, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    pt_file = cms.FileInPath(f"{MODELS}/particlenet_PT/1/model.pt").fullPath()
    module = torch.jit.load(pt_file, map_location=ns.device).eval()

    def on_cpu(x: list[np.ndarray]) -> np.ndarray:
        return np.asarray(session.run(None, dict(zip(names, x, strict=True)))[0])

    def on_device(x: list[np.ndarray]) -> np.ndarray:
        with torch.no_grad(), torch.jit.optimized_execution(False):
            return module(*[torch.from_numpy(a).to(ns.device) for a in x]).cpu().numpy()

    print(f"torch {torch.__version__} on {ns.device}, TF32 {'allowed' if ns.tf32 else 'off'}; onnxruntime CPU 1 thread")
    for jets in ns.jets:
        x = random_inputs(np.random.default_rng(12345), jets)
        reference = on_cpu(x)
        diff = np.abs(on_device(x) - reference).max(axis=1)
        far = np.flatnonzero(diff > 1e-4)
        print(f"{jets:4d} jets: max {diff.max():.2e}, median {np.median(diff):.2e}, jets over 1e-4: {far.tolist()}")
        flips = np.zeros(jets)
        for trial in range(6):
            rng = np.random.default_rng(100 + trial)
            moved = [a * (1 + rng.choice([-1, 1], a.shape) * 1.2e-7) if i not in (2, 5) else a for i, a in enumerate(x)]
            flips = np.maximum(flips, np.abs(on_cpu([m.astype(np.float32) for m in moved]) - reference).max(axis=1))
        print(f"      on the CPU, 1.2e-7 input changes move jets {np.flatnonzero(flips > 1e-4).tolist()} "
              f"by over 1e-4 (max {flips.max():.2e})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
