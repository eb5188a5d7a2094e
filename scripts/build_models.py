"""Build the four ML model stand-ins and their Triton model repository entries.

Run from the repository root (torch is needed here and nowhere else)::

    /work/venv/bin/python scripts/build_models.py [--output data/models] [--check-only]

For each model this writes ``<output>/<name>/config.pbtxt``, ``<output>/<name>/1/model.onnx``,
and ``<output>/<name>/1/model.pt`` (the same weights as TorchScript, traced with a dynamic
batch axis: the torch runner's file, for GPU instances): an ordinary Triton model
(``platform: "onnxruntime_onnx"``, a ``checksum`` repository agent with the ONNX file's
MD5), which the project's servers translate like any other
(``framework/serving/_repository.py``), then runs the ONNX file in onnxruntime and the
TorchScript file in torch and prints the largest absolute differences from the torch model on random inputs.

The models stand in for the ML steps of CMS MiniAOD production and of the HLT studied
in the seed talks, with their architectures and real input sizes:

* ``particlenet_ak4``: a ParticleNet-style EdgeConv graph network (H. Qu, L. Gouskos,
  "ParticleNet: Jet Tagging via Particle Clouds", arXiv:1902.08570), one AK4 jet per batch
  row, P = 50 constituents, classes b, c, uds, g, pileup.
* ``deepmet``: a DeepMET-style per-candidate network (CMS DeepMET, Y. Feng et al.,
  arXiv:2105.12773 style): embeddings of categorical features, dense per-candidate layers,
  one weight in [0, 1] per PF candidate (up to 4,500), one event per batch row; the MET is
  the weighted vector sum (``modules/deepmet_inputs.met_from_weights``).
* ``deeptau``: a DeepTau-v2-style CNN (CMS, arXiv:2201.08458): per tau, an inner 11 x 11
  and an outer 21 x 21 grid of cells with 188 features (e/gamma 86, muon 64, hadrons 38),
  1x1 convolutions per feature block, then 3x3 convolutions that shrink each grid to one
  cell, merged with 16 tau features; softmax over e, mu, tau, jet. One tau per batch row.
* ``facile``: a FACILE-style dense network (about 2,000 parameters, seed talk 004 and
  arXiv:2007.10359): one HCAL channel per batch row (16,000 rows per event), 15 inputs,
  one energy out.

THE WEIGHTS ARE UNTRAINED: random initialisation with a fixed seed. The outputs have the
right shapes, ranges and cost, but carry no physics meaning. (There is no labelled sample
big enough to train them here: pfnano.root has 10 events.)

Determinism: same torch version + same seed gives identical ONNX bytes (checked by
``--check-only``, which rebuilds in memory and compares with the files on disk). The
TorchScript zip is compared by content (same tensors, same outputs): its bytes may change
with the torch version.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

REPO = Path(__file__).resolve().parent.parent
SEED = 20240501
OPSET = 17

# Kept in sync with modules/particlenet_inputs.py and modules/deepmet_inputs.py; the
# builder imports those lists so the ONNX shapes follow the input builders.
sys.path.insert(0, str(REPO))
from modules.deepmet_inputs import (  # noqa: E402
    DEEPMET_CATEGORICAL,
    DEEPMET_CATEGORY_SIZES,
    DEEPMET_CONTINUOUS,
    DEEPMET_MAX_CANDIDATES,
)
from modules.deeptau_inputs import (  # noqa: E402
    BLOCKS,
    DEEPTAU_CLASSES,
    INNER_CELLS,
    N_CELL_FEATURES,
    OUTER_CELLS,
    TAU_FEATURES,
)
from modules.facile_inputs import FACILE_FEATURES  # noqa: E402
from modules.particlenet_inputs import (  # noqa: E402
    PARTICLENET_CLASSES,
    PARTICLENET_FEATURES,
    PARTICLENET_N_CONSTITUENTS,
)

# --------------------------------------------------------------------------- ParticleNet

K_NEIGHBOURS = 16  # ParticleNet (arXiv:1902.08570, Table 1): k = 16
EDGECONV_CHANNELS = ((64, 64, 64), (128, 128, 128))  # first two ParticleNet blocks
FC_UNITS = 128
COORD_SHIFT = 1e9  # masked points are moved this far away before kNN (as in ParticleNet)


def knn(points: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (B, P, k) of the k nearest other points; points is (B, C, P)."""
    inner = -2 * torch.matmul(points.transpose(2, 1), points)
    sq = torch.sum(points**2, dim=1, keepdim=True)
    neg_dist = -sq - inner - sq.transpose(2, 1)
    return neg_dist.topk(k=k + 1, dim=-1)[1][:, :, 1:]  # drop the point itself


def gather_neighbours(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x (B, C, P), idx (B, P, k) -> (B, C, P, k) with x[b, c, idx[b, p, j]]."""
    batch, channels, n_points = x.shape
    k = idx.shape[-1]
    flat = idx.reshape(batch, 1, n_points * k).expand(-1, channels, -1)
    return torch.gather(x, 2, flat).reshape(batch, channels, n_points, k)


class EdgeConvBlock(nn.Module):
    """EdgeConv: h(x_i, x_j - x_i) through 1x1 convs, masked mean over the k neighbours.

    ParticleNet averages over all k neighbours, so padding points that land among the
    neighbours of a real point (jets with fewer than k + 1 constituents) would change the
    result; here the mean runs over real neighbours only, so padding never matters.
    """

    def __init__(self, k: int, in_ch: int, channels: tuple[int, ...]) -> None:
        super().__init__()
        self.k = k
        layers: list[nn.Module] = []
        prev = 2 * in_ch
        for ch in channels:
            layers += [nn.Conv2d(prev, ch, 1, bias=False), nn.BatchNorm2d(ch), nn.ReLU()]
            prev = ch
        self.mlp = nn.Sequential(*layers)
        self.shortcut = nn.Sequential(nn.Conv1d(in_ch, channels[-1], 1, bias=False), nn.BatchNorm1d(channels[-1]))
        self.act = nn.ReLU()

    def forward(self, points: torch.Tensor, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        idx = knn(points, self.k)
        neighbours = gather_neighbours(features, idx)  # (B, C, P, k)
        centre = features.unsqueeze(-1).expand_as(neighbours)
        messages = self.mlp(torch.cat([centre, neighbours - centre], dim=1))
        real = gather_neighbours(mask, idx)  # (B, 1, P, k)
        aggregated = (messages * real).sum(-1) / real.sum(-1).clamp(min=1.0)
        return self.act(aggregated + self.shortcut(features)) * mask


class ParticleNetAK4(nn.Module):
    """Inputs pf_points (B, 2, P), pf_features (B, F, P), pf_mask (B, 1, P); output softmax (B, n_classes)."""

    def __init__(self, n_features: int, n_classes: int) -> None:
        super().__init__()
        blocks = []
        in_ch = n_features
        for channels in EDGECONV_CHANNELS:
            blocks.append(EdgeConvBlock(K_NEIGHBOURS, in_ch, channels))
            in_ch = channels[-1]
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Sequential(nn.Linear(in_ch, FC_UNITS), nn.ReLU(), nn.Linear(FC_UNITS, n_classes))

    def forward(self, pf_points: torch.Tensor, pf_features: torch.Tensor, pf_mask: torch.Tensor) -> torch.Tensor:
        mask = (pf_mask != 0).float()
        shift = (1.0 - mask) * COORD_SHIFT
        features = pf_features * mask
        for i, block in enumerate(self.blocks):
            # kNN in (deta, dphi) for the first block, in feature space afterwards.
            points = pf_points * mask + shift if i == 0 else features + shift
            features = block(points, features, mask)
        pooled = features.sum(-1) / mask.sum(-1).clamp(min=1.0)  # masked global average
        return torch.softmax(self.fc(pooled), dim=-1)


# --------------------------------------------------------------------------- DeepMET

DEEPMET_EMBEDDING_DIM = 8
DEEPMET_HIDDEN = (64, 64)


class DeepMET(nn.Module):
    """Inputs pf_cont (B, N, C) float32, pf_cat (B, N, 3) int32; output weights (B, N) in [0, 1].

    Category 0 marks padding rows (see modules/deepmet_inputs.py); their weight is forced to 0.
    """

    def __init__(self, n_cont: int, category_sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, DEEPMET_EMBEDDING_DIM) for n in category_sizes)
        layers: list[nn.Module] = []
        prev = n_cont + DEEPMET_EMBEDDING_DIM * len(category_sizes)
        for units in DEEPMET_HIDDEN:
            layers += [nn.Linear(prev, units), nn.ReLU()]
            prev = units
        layers.append(nn.Linear(prev, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, pf_cont: torch.Tensor, pf_cat: torch.Tensor) -> torch.Tensor:
        cat = pf_cat.long()
        embedded = [emb(cat[..., i]) for i, emb in enumerate(self.embeddings)]
        x = torch.cat([pf_cont, *embedded], dim=-1)
        real = (cat[..., 1] != 0).float()  # the particle-type class is never 0 for a real candidate
        return torch.sigmoid(self.mlp(x).squeeze(-1)) * real


# --------------------------------------------------------------------------- DeepTau

DEEPTAU_BLOCK_EMBEDDING = {"egamma": 32, "muon": 16, "hadron": 32}  # 1x1-conv outputs per block
DEEPTAU_CELL_CHANNELS = 48  # channels of the merged cell embedding and of the 3x3 convolutions
DEEPTAU_TAU_UNITS = 32
DEEPTAU_HEAD_UNITS = 64


class CellGrid(nn.Module):
    """One grid (B, 188, n, n) -> (B, C): per-block 1x1 convs, merge, (n - 1) / 2 valid 3x3 convs.

    As DeepTau v2: each feature block is embedded separately, the blocks are merged per
    cell, and 3x3 convolutions without padding shrink the n x n grid to one cell.
    """

    def __init__(self, n_cells: int) -> None:
        super().__init__()
        self.splits = list(BLOCKS.values())
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(width, DEEPTAU_BLOCK_EMBEDDING[name], 1), nn.ReLU())
            for name, width in BLOCKS.items()
        )
        merged = sum(DEEPTAU_BLOCK_EMBEDDING.values())
        layers: list[nn.Module] = [nn.Conv2d(merged, DEEPTAU_CELL_CHANNELS, 1), nn.ReLU()]
        for _ in range((n_cells - 1) // 2):
            layers += [nn.Conv2d(DEEPTAU_CELL_CHANNELS, DEEPTAU_CELL_CHANNELS, 3), nn.ReLU()]
        self.cells = nn.Sequential(*layers)

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        parts = torch.split(grid, self.splits, dim=1)
        merged = torch.cat([block(part) for block, part in zip(self.blocks, parts, strict=True)], dim=1)
        return self.cells(merged).flatten(1)


class DeepTau(nn.Module):
    """Inputs inner (B, 188, 11, 11), outer (B, 188, 21, 21), tau_features (B, 16); output softmax (B, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = CellGrid(INNER_CELLS)
        self.outer = CellGrid(OUTER_CELLS)
        self.tau = nn.Sequential(nn.Linear(len(TAU_FEATURES), DEEPTAU_TAU_UNITS), nn.ReLU())
        self.head = nn.Sequential(
            nn.Linear(2 * DEEPTAU_CELL_CHANNELS + DEEPTAU_TAU_UNITS, DEEPTAU_HEAD_UNITS),
            nn.ReLU(),
            nn.Linear(DEEPTAU_HEAD_UNITS, len(DEEPTAU_CLASSES)),
        )

    def forward(self, inner: torch.Tensor, outer: torch.Tensor, tau_features: torch.Tensor) -> torch.Tensor:
        # pT, mass and isolations span orders of magnitude: log-compress the tau features.
        tau = torch.sign(tau_features) * torch.log1p(torch.abs(tau_features))
        x = torch.cat([self.inner(inner), self.outer(outer), self.tau(tau)], dim=1)
        return torch.softmax(self.head(x), dim=-1)


# --------------------------------------------------------------------------- FACILE

FACILE_HIDDEN = (40, 20, 10)  # 1,801 parameters with the batch-norm scales (about 2,000 as in seed 004)


class Facile(nn.Module):
    """Input rechit_inputs (B, 15), one HCAL channel per row; output energy (B, 1)."""

    def __init__(self, n_inputs: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = n_inputs
        for i, units in enumerate(FACILE_HIDDEN):
            layers.append(nn.Linear(prev, units))
            if i < len(FACILE_HIDDEN) - 1:
                layers.append(nn.BatchNorm1d(units))
            layers.append(nn.ReLU())
            prev = units
        layers.append(nn.Linear(prev, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, rechit_inputs: torch.Tensor) -> torch.Tensor:
        return self.mlp(rechit_inputs)


# --------------------------------------------------------------------------- export


def model_specs() -> dict[str, dict]:
    """name -> model, example inputs, I/O description and Triton settings."""
    n_pf = PARTICLENET_N_CONSTITUENTS
    n_feat = len(PARTICLENET_FEATURES)
    n_cand = DEEPMET_MAX_CANDIDATES
    return {
        "particlenet_ak4": dict(
            build=lambda: ParticleNetAK4(n_feat, len(PARTICLENET_CLASSES)),
            inputs=[
                ("pf_points", "FP32", (2, n_pf)),
                ("pf_features", "FP32", (n_feat, n_pf)),
                ("pf_mask", "FP32", (1, n_pf)),
            ],
            outputs=[("softmax", "FP32", (len(PARTICLENET_CLASSES),))],
            max_batch_size=256,
            comment=(
                "ParticleNet-style AK4 jet tagger stand-in (EdgeConv, arXiv:1902.08570), UNTRAINED random weights.\n"
                f"# One jet per batch row. classes (softmax order): {', '.join(PARTICLENET_CLASSES)}\n"
                f"# pf_features rows: {', '.join(PARTICLENET_FEATURES)}"
            ),
        ),
        "deepmet": dict(
            build=lambda: DeepMET(len(DEEPMET_CONTINUOUS), DEEPMET_CATEGORY_SIZES),
            inputs=[
                ("pf_cont", "FP32", (n_cand, len(DEEPMET_CONTINUOUS))),
                ("pf_cat", "INT32", (n_cand, len(DEEPMET_CATEGORICAL))),
            ],
            outputs=[("weights", "FP32", (n_cand,))],
            max_batch_size=16,
            comment=(
                "DeepMET-style per-PF-candidate weight network stand-in, UNTRAINED random weights.\n"
                "# One event per batch row; MET = -sum_i w_i pT_i (cos phi_i, sin phi_i).\n"
                f"# pf_cont columns: {', '.join(DEEPMET_CONTINUOUS)}\n"
                f"# pf_cat columns: {', '.join(DEEPMET_CATEGORICAL)} (0 = padding row)"
            ),
        ),
        "deeptau": dict(
            build=DeepTau,
            inputs=[
                ("inner", "FP32", (N_CELL_FEATURES, INNER_CELLS, INNER_CELLS)),
                ("outer", "FP32", (N_CELL_FEATURES, OUTER_CELLS, OUTER_CELLS)),
                ("tau_features", "FP32", (len(TAU_FEATURES),)),
            ],
            outputs=[("softmax", "FP32", (len(DEEPTAU_CLASSES),))],
            max_batch_size=16,
            comment=(
                "DeepTau-v2-style tau identification CNN stand-in (arXiv:2201.08458), UNTRAINED random weights.\n"
                f"# One tau per batch row. classes (softmax order): {', '.join(DEEPTAU_CLASSES)}\n"
                f"# cell feature blocks: {', '.join(f'{k} {v}' for k, v in BLOCKS.items())}\n"
                f"# tau_features: {', '.join(TAU_FEATURES)}"
            ),
        ),
        "facile": dict(
            build=lambda: Facile(len(FACILE_FEATURES)),
            inputs=[("rechit_inputs", "FP32", (len(FACILE_FEATURES),))],
            outputs=[("energy", "FP32", (1,))],
            max_batch_size=65536,
            comment=(
                "FACILE-style HCAL channel energy regression stand-in (seed talk 004), UNTRAINED random weights.\n"
                "# One HCAL channel per batch row (16,000 per event); inputs SYNTHESIZED (modules/facile_inputs.py).\n"
                f"# rechit_inputs columns: {', '.join(FACILE_FEATURES)}"
            ),
        ),
    }


def random_inputs(spec: dict, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs with a batch dimension; categorical inputs drawn inside their ranges."""
    out = {}
    for name, dtype, dims in spec["inputs"]:
        if dtype == "INT32":
            sizes = np.array(DEEPMET_CATEGORY_SIZES)
            out[name] = (rng.integers(0, 1 << 30, size=(batch, *dims)) % sizes).astype(np.int32)
        elif name == "pf_mask":
            n_real = rng.integers(0, dims[-1] + 1, size=batch)
            out[name] = (np.arange(dims[-1]) < n_real[:, None]).astype(np.float32)[:, None, :]
        else:
            out[name] = rng.normal(size=(batch, *dims)).astype(np.float32)
    return out


def export_onnx(model: nn.Module, spec: dict) -> bytes:
    """Export with the legacy (TorchScript) exporter: deterministic, no extra packages."""
    rng = np.random.default_rng(0)
    example = tuple(torch.from_numpy(a) for a in random_inputs(spec, 2, rng).values())
    names_in = [n for n, _, _ in spec["inputs"]]
    names_out = [n for n, _, _ in spec["outputs"]]
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # torch >= 2.9 warns that the legacy exporter is deprecated; it is still the one
        # that needs no extra packages and gives byte-identical files run after run.
        warnings.simplefilter("ignore", DeprecationWarning)
        _export(model, example, buffer, names_in, names_out)
    return buffer.getvalue()


def _export(model: nn.Module, example: tuple, buffer: io.BytesIO, names_in: list[str], names_out: list[str]) -> None:
    torch.onnx.export(
        model,
        example,
        buffer,  # type: ignore[arg-type]  # the legacy exporter (dynamo=False) writes to a file object too
        input_names=names_in,
        output_names=names_out,
        dynamic_axes={n: {0: "batch"} for n in names_in + names_out},
        opset_version=OPSET,
        do_constant_folding=True,
        dynamo=False,
    )


def export_torchscript(model: nn.Module, spec: dict) -> bytes:
    """Trace with batch-2 example inputs; the traced graph keeps the batch axis dynamic
    (checked by :func:`check_torchscript` at batch sizes 1 and 7)."""
    rng = np.random.default_rng(0)
    example = tuple(torch.from_numpy(a) for a in random_inputs(spec, 2, rng).values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings on Python ints in shapes; the batch-size check guards them
        traced = torch.jit.trace(model, example, check_trace=False)
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer)
    return _without_debug_info(buffer.getvalue())


def _without_debug_info(script_bytes: bytes) -> bytes:
    """The TorchScript zip without its ``*.debug_pkl`` records: they hold the tracing
    machine's file paths (torch's own sources) and are not needed to load or run it."""
    source = zipfile.ZipFile(io.BytesIO(script_bytes))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            if not info.filename.endswith(".debug_pkl"):
                target.writestr(info, source.read(info.filename))
    return out.getvalue()


def check_torchscript(model: nn.Module, script_bytes: bytes, spec: dict) -> float:
    """Largest |TorchScript - torch| over random inputs with batch sizes 1 and 7."""
    loaded = torch.jit.load(io.BytesIO(script_bytes))
    rng = np.random.default_rng(2)
    worst = 0.0
    for batch in (1, 7):
        inputs = [torch.from_numpy(a) for a in random_inputs(spec, batch, rng).values()]
        with torch.no_grad():
            ref, got = model(*inputs), loaded(*inputs)
        if got.shape != ref.shape:
            raise RuntimeError(f"TorchScript output shape {tuple(got.shape)} differs from torch {tuple(ref.shape)}")
        worst = max(worst, float((got - ref).abs().max()))
    return worst


def same_torchscript(path: Path, model: nn.Module) -> bool:
    """The TorchScript file on disk holds exactly ``model``'s tensors (by name and value)."""
    if not path.exists():
        return False
    on_disk = torch.jit.load(str(path)).state_dict()
    fresh = model.state_dict()
    return on_disk.keys() == fresh.keys() and all(torch.equal(on_disk[k], fresh[k]) for k in fresh)


def check_onnx(model: nn.Module, onnx_bytes: bytes, spec: dict) -> float:
    """Largest |onnxruntime - torch| over random inputs with batch sizes 1 and 7."""
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    worst = 0.0
    for batch in (1, 7):
        inputs = random_inputs(spec, batch, rng)
        with torch.no_grad():
            ref = model(*(torch.from_numpy(a) for a in inputs.values()))
        got = session.run(None, inputs)[0]
        if got.shape != tuple(ref.shape) or not np.all(np.isfinite(got)):
            raise RuntimeError(
                f"onnxruntime output shape {got.shape} / finiteness differs from torch {tuple(ref.shape)}"
            )
        worst = max(worst, float(np.max(np.abs(got - ref.numpy()))))
    return worst


def config_pbtxt(name: str, spec: dict, onnx_md5: str) -> str:
    """Triton model configuration; dims exclude the batch dimension.

    The parameters are the framework's (a real Triton's ONNX Runtime backend ignores them):
    ``runner: auto`` runs ``torchscript_file`` with torch on a GPU instance, the ONNX file
    on a CPU one; ``intra_op_threads`` is onnxruntime's thread count per instance.
    """

    def tensor(entry: tuple) -> str:
        tname, dtype, dims = entry
        return (
            f'  {{\n    name: "{tname}"\n    data_type: TYPE_{dtype}\n    dims: [ {", ".join(map(str, dims))} ]\n  }}'
        )

    return (
        f"# {spec['comment']}\n"
        "# Generated by scripts/build_models.py; do not edit by hand.\n"
        f'name: "{name}"\n'
        'platform: "onnxruntime_onnx"\n'
        f"max_batch_size: {spec['max_batch_size']}\n"
        "input [\n" + ",\n".join(tensor(e) for e in spec["inputs"]) + "\n]\n"
        "output [\n" + ",\n".join(tensor(e) for e in spec["outputs"]) + "\n]\n"
        "dynamic_batching {\n  max_queue_delay_microseconds: 100\n}\n"
        "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n"
        'parameters {\n  key: "runner"\n  value: { string_value: "auto" }\n}\n'
        'parameters {\n  key: "torchscript_file"\n  value: { string_value: "model.pt" }\n}\n'
        'parameters {\n  key: "intra_op_threads"\n  value: { string_value: "1" }\n}\n'
        'model_repository_agents {\n  agents [\n    {\n      name: "checksum"\n'
        f'      parameters {{\n        key: "MD5:1/model.onnx"\n        value: "{onnx_md5}"\n      }}\n'
        "    }\n  ]\n}\n"
    )


def build(name: str, spec: dict) -> tuple[nn.Module, bytes, bytes]:
    """The model with its seeded weights, its ONNX bytes and its TorchScript bytes."""
    torch.manual_seed(SEED)
    model = spec["build"]().eval()
    return model, export_onnx(model, spec), export_torchscript(model, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=REPO / "data" / "models", help="model repository folder")
    parser.add_argument(
        "--check-only", action="store_true", help="rebuild in memory and compare with the files on disk"
    )
    args = parser.parse_args(argv)
    status = 0
    for name, spec in model_specs().items():
        model, onnx_bytes, script_bytes = build(name, spec)
        diff = check_onnx(model, onnx_bytes, spec)
        script_diff = check_torchscript(model, script_bytes, spec)
        digest = hashlib.sha256(onnx_bytes).hexdigest()[:16]
        files = {
            Path(name) / "config.pbtxt": config_pbtxt(name, spec, hashlib.md5(onnx_bytes).hexdigest()).encode(),
            Path(name) / "1" / "model.onnx": onnx_bytes,
        }
        for rel, content in files.items():
            path = args.output / rel
            if args.check_only:
                same = path.exists() and path.read_bytes() == content
                status |= not same
                print(f"{path}: {'identical' if same else 'DIFFERS'}")
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
        script_path = args.output / name / "1" / "model.pt"
        if args.check_only:
            same = same_torchscript(script_path, model)
            status |= not same
            print(f"{script_path}: {'same weights' if same else 'DIFFERS'}")
        else:
            script_path.write_bytes(script_bytes)
        print(
            f"{name}: {len(onnx_bytes) / 1024:.0f} KiB, sha256 {digest}..., max |onnxruntime - torch| = {diff:.2e}, "
            f"max |TorchScript - torch| = {script_diff:.2e}"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
