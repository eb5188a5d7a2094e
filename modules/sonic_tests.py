"""CMSSW's SONIC test producers (HeterogeneousCore/SonicTriton/test), so that CMSSW's
``tritonTest_cfg.py`` runs here.

* :class:`TritonIdentityProducer`: ragged entries sent to the ``ragged_io`` identity
  model (Triton's ragged-batching QA test) and read back.

CMSSW's ``TritonGraphProducer`` / ``Filter`` / ``Analyzer`` are not here: their model,
``gat_test``, is a TorchScript graph-attention network whose operators come from
``torch_sparse`` / ``torch_scatter`` (PyTorch Geometric's compiled extensions), which
pysonic's server (the Python backend's torch runner) does not load, and CMSSW ships no
other format of it. ``TritonImageProducer`` needs image models (``inception_graphdef``,
``densenet_onnx``) that are not among the project's models.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

import framework.config as cms
from framework.sonic import SonicEDProducer

logger = logging.getLogger("pysonic.modules")

# Triton's QA test for ragged input (CMSSW's value_lists): entry i is a float32 vector.
RAGGED_ENTRIES = ([2.0, 2.0], [4.0, 4.0, 4.0, 4.0], [1.0], [3.0, 3.0, 3.0])
# Entries per event, in turn (CMSSW's batchSizes_ of the release that serves ragged_io with
# INPUT0/OUTPUT0): an event of one entry, one of two, one of none (an empty request).
BATCH_SIZES = (1, 2, 0)


class TritonIdentityProducer(SonicEDProducer):
    """CMSSW's ``TritonIdentityProducer``: ragged entries to ``ragged_io`` and back.

    Each event sends the first ``n`` of ``RAGGED_ENTRIES`` (float32, shapes (2,), (4,),
    (1,), (3,)) as ``n`` ragged entries of input ``INPUT0``, ``n`` cycling through
    ``BATCH_SIZES`` from the first event this module sees, and logs each entry of
    ``OUTPUT0`` ("output i (shape): values", as CMSSW's LogInfo).

    Product (instance ""): ``list[np.ndarray]``, the output entries (float32, the shape of
    the matching input entry); empty for an event of no entry.

    The Ragged batch mode is set here, as CMSSW's client switches to it when a module adds
    entries; the model's ``config.pbtxt`` needs ``allow_ragged_batch`` on ``INPUT0``.
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)  # CMSSW: TritonClient::fillPSetDescription only

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.client.batch_mode = "Ragged"  # CMSSW: setBatchSize(n) with entries = Ragged
        self._counter = 0  # acquire runs on the trio thread only (SONIC modules are not thread_safe)
        self.produces(doc="the OUTPUT0 entries, float32")

    def acquire(self, event: Any, input: Any) -> None:
        size = BATCH_SIZES[self._counter]
        self._counter = (self._counter + 1) % len(BATCH_SIZES)
        input["INPUT0"].to_server([np.asarray(values, np.float32) for values in RAGGED_ENTRIES[:size]])

    def produce(self, event: Any, output: Any) -> None:  # type: ignore[override]  # SONIC: (event, Triton map)
        entries = output["OUTPUT0"].from_server()
        lines = [
            f"output {i} ({', '.join(map(str, entry.shape))}): {' '.join(f'{v:g}' for v in entry.ravel())}"
            for i, entry in enumerate(entries)
        ]
        logger.info("%s: event %s\n%s", self.label, event.id, "\n".join(lines) or "no entries")
        event.put([np.asarray(entry) for entry in entries])
