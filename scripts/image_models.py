"""The image models of CMSSW's SONIC image test, where ``tritonTest_cfg.py`` finds them.

CMSSW's ``HeterogeneousCore/SonicTriton/test/fetch_model.sh`` downloads Triton's example
models ``inception_graphdef`` and ``densenet_onnx`` (with their ``config.pbtxt`` and label
files) into ``HeterogeneousCore/SonicTriton/data/models/``, for ``TritonImageProducer``.
Nothing is downloaded here: this writes, in that layout under ``--output``, a
**stand-in** for ``densenet_onnx`` with Triton's names (model ``densenet_onnx``, input
``data_0`` float32 ``[3, 224, 224]``, output ``fc6_1`` float32 ``[1000]``,
``max_batch_size: 1``, labels ``densenet_labels.txt``)::

    python scripts/image_models.py --output DIR densenet_onnx
    CMSSW_SEARCH_PATH=DIR cmsrun tritonTest_cfg.py modules=TritonImageProducer models=densenet_onnx

The network is a DenseNet-121 (G. Huang et al., "Densely Connected Convolutional
Networks", arXiv:1608.06993: DenseNet-BC, growth rate 32, dense blocks of 6, 12, 24 and 16
layers with 1x1 bottlenecks of 4 x 32 channels, transitions halving the channels), written
here in torch and exported to ONNX, so the computing load is that of the real model.
**Its weights are untrained** (random, fixed seed) and its labels are placeholders
(``stand-in class 0`` ... ``stand-in class 999``): the scores mean nothing. It differs
from Triton's file in two ways that no client sees: the graph returns ``fc6_1`` as
``[batch, 1000]`` (Triton's example reshapes the original ``[1000, 1, 1]`` in its config)
and the config carries a ``checksum`` agent (ModelVersioning, as the project's other
stand-ins).

``inception_graphdef`` is refused in one line: it is a TensorFlow GraphDef, and the
``tritonserver`` here has no TensorFlow backend (the Python backend, running ONNX or
TorchScript).

Needs torch and onnx (``pip install -e '.[build-models]'``); nothing at run time does.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
from pathlib import Path

MODELS_FOLDER = Path("HeterogeneousCore") / "SonicTriton" / "data" / "models"
SEED = 20260101
OPSET = 17
CLASSES = 1000
IMAGE = (3, 224, 224)
REFUSED = {
    "inception_graphdef": (
        "inception_graphdef: Triton's example is a TensorFlow GraphDef (platform tensorflow_graphdef); "
        "the tritonserver here has no TensorFlow backend (Python backend: ONNX and TorchScript only): not written"
    ),
}

CONFIG = """\
name: "densenet_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 1
input [
  {{
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
  }}
]
output [
  {{
    name: "fc6_1"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    label_filename: "densenet_labels.txt"
  }}
]
model_repository_agents {{
  agents [
    {{
      name: "checksum"
      parameters {{ key: "MD5:1/model.onnx" value: "{md5}" }}
    }}
  ]
}}
"""


DENSENET121 = (6, 12, 24, 16)  # layers per dense block (arXiv:1608.06993, table 1)


def densenet(depths: tuple[int, ...] = DENSENET121) -> object:
    """A DenseNet-BC (DenseNet-121 with the default ``depths``), untrained, in eval mode:
    float32 ``(batch, 3, 224, 224)`` -> ``(batch, 1000)`` logits."""
    import torch
    from torch import nn

    class DenseLayer(nn.Module):
        def __init__(self, channels: int, growth: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.BatchNorm2d(channels),
                nn.ReLU(),
                nn.Conv2d(channels, 4 * growth, 1, bias=False),  # bottleneck
                nn.BatchNorm2d(4 * growth),
                nn.ReLU(),
                nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, self.body(x)], dim=1)

    growth, channels = 32, 64
    layers: list[nn.Module] = [
        nn.Conv2d(3, channels, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(channels),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
    ]
    for block, depth in enumerate(depths):
        for _ in range(depth):
            layers.append(DenseLayer(channels, growth))
            channels += growth
        if block < len(depths) - 1:  # transition: compression 0.5, then 2x2 average pooling
            layers += [
                nn.BatchNorm2d(channels),
                nn.ReLU(),
                nn.Conv2d(channels, channels // 2, 1, bias=False),
                nn.AvgPool2d(2, stride=2),
            ]
            channels //= 2
    layers += [
        nn.BatchNorm2d(channels),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels, CLASSES),
    ]
    torch.manual_seed(SEED)
    return nn.Sequential(*layers).eval()


def onnx_bytes(depths: tuple[int, ...] = DENSENET121) -> bytes:
    """The stand-in as ONNX (opset 17, batch axis dynamic), bytes."""
    import torch

    model = densenet(depths)
    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(
            model,  # type: ignore[arg-type]
            (torch.zeros(1, *IMAGE),),
            buffer,  # type: ignore[arg-type]  # the legacy exporter (dynamo=False) writes to a file object too
            input_names=["data_0"],
            output_names=["fc6_1"],
            dynamic_axes={"data_0": {0: "batch"}, "fc6_1": {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
    return buffer.getvalue()


def write_densenet(output: Path, depths: tuple[int, ...] = DENSENET121) -> Path:
    """Write the ``densenet_onnx`` stand-in under ``output`` in CMSSW's layout; returns its
    folder. ``depths``: layers per dense block (the tests use fewer than DenseNet-121's).
    Files are written under temporary names and renamed, so a stopped run leaves no
    half-written model."""
    folder = output / MODELS_FOLDER / "densenet_onnx"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    model = onnx_bytes(depths)
    files = {
        folder / "1" / "model.onnx": model,
        folder / "densenet_labels.txt": "".join(f"stand-in class {i}\n" for i in range(CLASSES)).encode(),
        folder / "config.pbtxt": CONFIG.format(md5=hashlib.md5(model).hexdigest()).encode(),
    }
    for path, content in files.items():
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(content)
        partial.replace(path)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="densenet_onnx (inception_graphdef is refused)")
    parser.add_argument("--output", type=Path, default=Path("."), help="the folder to put on CMSSW_SEARCH_PATH")
    args = parser.parse_args(argv)
    for name in args.models:
        if name in REFUSED:
            print(REFUSED[name], file=sys.stderr)
            return 2
        if name != "densenet_onnx":
            print(f"{name}: not one of CMSSW's image test models (densenet_onnx, inception_graphdef)", file=sys.stderr)
            return 2
    for name in args.models:
        print(f"{name}: untrained stand-in written to {write_densenet(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
