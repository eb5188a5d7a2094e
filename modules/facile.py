"""FACILE-style HCAL reconstruction: input builder, SONIC producer and direct producer.

The input producer SYNTHESIZES one row per HCAL channel from the event id (NanoAOD has no
HCAL channels; see :mod:`modules.facile_inputs`), so it runs on any source, even an
``EmptySource``; the SONIC producer sends the rows to the ``facile`` model on Triton, the
direct producer runs the same ONNX file in-process. UNTRAINED weights: the energies
exercise the data flow and the load, they are no physics result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import framework.config as cms
from framework import EDProducer
from framework.inference import ModelConversion, OnnxDirectProducer, SonicConversionProducer

from .facile_inputs import FACILE_N_CHANNELS, build_facile_inputs


class FacileInputProducer(EDProducer):
    """Synthesized ``facile`` inputs. Product (instance ""): float32 (nChannels, 15)."""

    thread_safe = True  # pure numpy

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("nChannels", cms.uint32(FACILE_N_CHANNELS), "HCAL channels (rows) per event")

    def __init__(self, params: cms.ParameterSet) -> None:
        self.n_channels = params.nChannels
        self.produces(doc="facile inputs, one row per HCAL channel (synthesized)")

    def produce(self, event: Any) -> None:
        event.put(build_facile_inputs(tuple(event.id), self.n_channels))


class _FacileConversion(ModelConversion):
    """``src``'s rows in, per-channel energies out (shared by the SONIC and the direct producer)."""

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)  # the Client PSet (and the direct producer's options)
        desc.add("src", cms.InputTag("facileInputs"), "FacileInputProducer label")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.src = self.consumes(params.src)
        self.produces(doc="per-channel energy and its sum")

    def fill_inputs(self, event: Any, input: Any) -> None:
        input["rechit_inputs"].to_server(event.get(self.src))

    def read_outputs(self, event: Any, output: Any) -> None:
        energy = output["energy"].from_server()[:, 0]  # float32 (n,)
        event.put({"energy": energy, "sumEnergy": float(np.sum(energy, dtype=np.float64))})


class FacileSonicProducer(_FacileConversion, SonicConversionProducer):
    """Per-channel FACILE energies from Triton (ExternalWork); one request per event (split
    by the client if larger than the model's ``max_batch_size``).

    Product (instance ""): dict ``{"energy": float32 (n,), "sumEnergy": float}`` (arbitrary units).
    """


class FacileDirectProducer(_FacileConversion, OnnxDirectProducer):
    """Direct twin of :class:`FacileSonicProducer` (onnxruntime in-process, thread-safe)."""
