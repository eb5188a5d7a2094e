"""CMSSW's SONIC test modules (HeterogeneousCore/SonicTriton/test), so that CMSSW's own
``tritonTest_cfg.py`` and its unit test run here, with CMSSW's names and parameters:

* :class:`TritonGraphProducer`, :class:`TritonGraphFilter`, :class:`TritonGraphAnalyzer`
  (``TritonGraphModules.cc``): a random graph per event to CMS's ``gat_test`` (a graph
  attention network), its logits logged; the filter always passes, the analyzer is a
  :class:`~framework.sonic.SonicOneEDAnalyzer` (``Sync``);
* :class:`TritonImageProducer` (``TritonImageProducer.cc``): images of constant colour to
  an image classifier (Triton's example ``densenet_onnx``; here a stand-in with untrained
  weights, ``scripts/image_models.py``), the ``topN`` best labels logged;
* :class:`TritonIdentityProducer` (``TritonIdentityProducer.cc``): ragged entries to the
  ``ragged_io`` identity model (Triton's ragged-batching QA test) and read back.

Random inputs are drawn as CMSSW draws them (:mod:`modules.cpp_random`: a ``std::mt19937``
seeded per event with ``(lumi << 10) + (run << 20) + event``), so an event's graph is the
one CMSSW's module builds for it. Messages go to the ``pysonic.modules`` logger, prefixed
with the module label (CMSSW's LogInfo category), at INFO level.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import numpy as np

import framework.config as cms
from framework import ConfigurationError
from framework.sonic import SonicEDFilter, SonicEDProducer, SonicOneEDAnalyzer, TritonInputMap, TritonOutputMap

from .cpp_random import Mt19937

logger = logging.getLogger("pysonic.modules")

# Triton's QA test for ragged input (CMSSW's value_lists): entry i is a float32 vector.
RAGGED_ENTRIES = ([2.0, 2.0], [4.0, 4.0, 4.0, 4.0], [1.0], [3.0, 3.0, 3.0])
# Entries per event, in turn (CMSSW's batchSizes_ of the release that serves ragged_io with
# INPUT0/OUTPUT0): an event of one entry, one of two, one of none (an empty request).
BATCH_SIZES = (1, 2, 0)


def event_seed(event_id: Any) -> int:
    """CMSSW's per-event seed of its test modules: ``(lumi << 10) + (run << 20) + event``
    in 32-bit unsigned arithmetic."""
    return ((event_id.luminosityBlock << 10) + (event_id.run << 20) + event_id.event) % 2**32


# -- the graph modules ------------------------------------------------------------------


def random_graph(
    event_id: Any, node_min: int, node_max: int, edge_min: int, edge_max: int, features: int
) -> tuple[np.ndarray, np.ndarray]:
    """CMSSW's ``TritonGraphHelper::makeInput``: the event's random graph.

    ``n`` nodes uniform in ``[node_min, node_max]``, then ``e`` edges uniform in
    ``[edge_min, edge_max]`` (both inclusive), then the node features, normal with mean -10
    and standard deviation 4, then each end of each edge uniform in ``[0, n - 1]``, all
    from one ``std::mt19937`` seeded with :func:`event_seed`.

    Returns:
        ``x`` (float32, shape (n, features)) and ``edge_index`` (int64, shape (2, e): row 0
        the sources, row 1 the targets), in CMSSW's order of drawing.
    """
    rng = Mt19937(event_seed(event_id))
    nodes = int(rng.uniform_int(node_min, node_max)[0])
    edges = int(rng.uniform_int(edge_min, edge_max)[0])
    x = rng.normal_float(-10.0, 4.0, nodes * features).reshape(nodes, features)
    edge_index = rng.uniform_int(0, nodes - 1, 2 * edges).reshape(2, edges)
    return x, edge_index


class _TritonGraph:
    """CMSSW's ``TritonGraphHelper``: the graph's parameters, input and logged output.

    A mixin before the SONIC base class (``class TritonGraphProducer(_TritonGraph,
    SonicEDProducer)``): its ``fill_descriptions``, ``__init__`` and ``acquire`` are the three
    modules' own, each calling on to the base class's; they differ only in what they do
    with the output (``produce``, ``filter``, ``analyze``).
    """

    label: str
    type_name: str
    kind: str

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)  # type: ignore[misc]  # the SONIC base class's (the client's PSet)
        cls.fill_graph_descriptions(desc)

    def __init__(self, params: Any) -> None:
        super().__init__(params)  # type: ignore[call-arg]  # the SONIC base class's
        self._read_graph_parameters(params)

    def acquire(self, event: Any, input: Any) -> None:
        self.make_input(event, input)

    @staticmethod
    def fill_graph_descriptions(desc: cms.ParameterSetDescription) -> None:
        desc.add("nodeMin", cms.uint32(100), "fewest nodes of an event's graph")
        desc.add("nodeMax", cms.uint32(4000), "most nodes of an event's graph")
        desc.add("edgeMin", cms.uint32(8000), "fewest edges of an event's graph")
        desc.add("edgeMax", cms.uint32(15000), "most edges of an event's graph")
        desc.add("brief", cms.bool(False), "log only the output's shape, not its values")

    def _read_graph_parameters(self, params: Any) -> None:
        self.node_min, self.node_max = int(params.nodeMin), int(params.nodeMax)
        self.edge_min, self.edge_max = int(params.edgeMin), int(params.edgeMax)
        self.brief = bool(params.brief)
        where = f"{self.kind} '{self.label}' (type {self.type_name})"
        for low, high in (("nodeMin", "nodeMax"), ("edgeMin", "edgeMax")):
            if getattr(params, low) > getattr(params, high):
                raise ConfigurationError(
                    f"{where}: parameter '{low}' = {getattr(params, low)} is above '{high}' = {getattr(params, high)}"
                )
        if self.node_min < 1:
            raise ConfigurationError(f"{where}: parameter 'nodeMin' = 0: an edge needs a node to end on")

    def make_input(self, event: Any, input: TritonInputMap) -> None:
        """Fill ``x__0`` (float32, (n, 1433) for gat_test) and ``edgeindex__1`` (int64, (2, e))."""
        x_input = input["x__0"]
        # The features per node: the product of the model's fixed dims after the first.
        features = math.prod(d for d in x_input.spec.dims[1:])
        x, edge_index = random_graph(event.id, self.node_min, self.node_max, self.edge_min, self.edge_max, features)
        x_input.to_server(x.reshape((x.shape[0], *x_input.spec.dims[1:])))
        input["edgeindex__1"].to_server(edge_index)

    def log_output(self, event: Any, output: TritonOutputMap) -> None:
        """CMSSW's ``makeOutput``: the first output's shape (``brief``), else every row."""
        values = np.asarray(next(iter(output.values())).from_server())
        rows, columns = values.shape[0], values.shape[1]
        if self.brief:
            text = f"output shape: {rows}, {columns}"
        else:  # C++'s default stream format of a float is %g
            text = "".join(f"output {i}: {''.join(f'{v:g} ' for v in row)}\n" for i, row in enumerate(values))
        logger.info("%s: event %s\n%s", self.label, event.id, text)


class TritonGraphProducer(_TritonGraph, SonicEDProducer):
    """CMSSW's ``TritonGraphProducer``: a random graph per event to ``gat_test``.

    Inputs: ``x__0`` (float32, (n, 1433): node features) and ``edgeindex__1`` (int64,
    (2, e): edges), the event's graph (:func:`random_graph`: ``nodeMin``..``nodeMax`` nodes,
    ``edgeMin``..``edgeMax`` edges). Output: logged (``brief``: its shape; else every row of
    ``logits__0``, float32 (n, 7)). Puts no product, as CMSSW's.
    """

    def produce(self, event: Any, output: TritonOutputMap) -> None:  # type: ignore[override]  # SONIC: (event, Triton map)
        self.log_output(event, output)


class TritonGraphFilter(_TritonGraph, SonicEDFilter):
    """CMSSW's ``TritonGraphFilter``: as :class:`TritonGraphProducer`; every event passes."""

    def filter(self, event: Any, output: TritonOutputMap) -> bool:  # type: ignore[override]  # SONIC: (event, Triton map)
        self.log_output(event, output)
        return True  # CMSSW's test filter keeps every event


class TritonGraphAnalyzer(_TritonGraph, SonicOneEDAnalyzer):
    """CMSSW's ``TritonGraphAnalyzer`` (a ``TritonOneEDAnalyzer``): as
    :class:`TritonGraphProducer`, its client always ``Sync`` (another mode is reset, with a
    warning, as CMSSW does)."""

    def analyze(self, event: Any, output: TritonOutputMap) -> None:  # type: ignore[override]  # SONIC: (event, Triton map)
        self.log_output(event, output)


# -- the image producer -----------------------------------------------------------------


class TritonImageProducer(SonicEDProducer):
    """CMSSW's ``TritonImageProducer``: images of one colour to an image classifier.

    Each event sends ``batchSize`` images (a negative value: a number drawn uniformly in
    ``1..|batchSize|`` per event, from the event's ``std::mt19937``), every value of the
    model's one input 0.5 (float32, ``(batch, 3, 224, 224)`` for ``densenet_onnx``), and
    logs for each image the ``topN`` highest scores of the model's first output with their
    labels (line i of ``imageList`` is the label of score i): "Scores for image i:" then
    "label : score" per line, as CMSSW's LogInfo; equal scores are listed once (CMSSW keeps
    them in a ``std::map`` keyed by score). Puts no product.

    The model must batch (``max_batch_size`` >= the batch size): CMSSW's
    ``setBatchSize``. Raises :class:`~framework.ConfigurationError` when ``imageList``
    cannot be read (CMSSW's ``MissingFile``).
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)
        desc.add("batchSize", cms.int32(1), "images per event; negative: a random number in 1..|batchSize|")
        desc.add("topN", cms.uint32(5), "best scores logged per image")
        desc.add("imageList", cms.FileInPath, "the labels, one per line, in the order of the model's scores")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.batch_size = int(params.batchSize)
        self.top_n = int(params.topN)
        path = os.fspath(params.imageList)
        try:
            with open(path, encoding="utf-8") as labels:
                self.labels = labels.read().splitlines()
        except OSError as exc:
            raise ConfigurationError(
                f"{self.kind} '{self.label}' (type {self.type_name}): parameter 'imageList': "
                f"could not open image list file {path}: {exc.strerror}"
            ) from None
        if self.batch_size == 0:
            raise ConfigurationError(
                f"{self.kind} '{self.label}' (type {self.type_name}): parameter 'batchSize' = 0: "
                "an event needs at least one image"
            )

    def acquire(self, event: Any, input: Any) -> None:
        batch = self.batch_size
        if batch < 0:
            batch = int(Mt19937(event_seed(event.id)).uniform_int(1, -batch)[0])
        image = next(iter(input.values()))  # the model has one input
        dims = tuple(d if d > 0 else 1 for d in image.spec.dims)
        shape = (batch, *dims) if image.spec.batched else dims
        image.to_server(np.full(shape, 0.5, np.float32))

    def produce(self, event: Any, output: TritonOutputMap) -> None:  # type: ignore[override]  # SONIC: (event, Triton map)
        scores = np.asarray(next(iter(output.values())).from_server())
        scores = scores.reshape(scores.shape[0], -1) if scores.ndim > 1 else scores.reshape(1, -1)
        for i, row in enumerate(scores):
            best: dict[float, str] = {}  # CMSSW's std::map<float, string, greater>: first label per score
            for score, label in zip(row.tolist(), self.labels, strict=False):
                best.setdefault(score, label)
            top = sorted(best.items(), key=lambda item: -item[0])[: self.top_n]
            lines = "".join(f"{label} : {score:g}\n" for score, label in top)
            logger.info("%s: event %s\nScores for image %d:\n%s", self.label, event.id, i, lines)


# -- the identity producer (ragged batching) --------------------------------------------


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
