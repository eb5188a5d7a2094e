"""ParticleNet-style AK4 jet tagging: input builder, SONIC producer and direct producer.

Two steps, as in CMSSW (a TagInfo producer, then the tagger): the input producer turns
each event's PFNano ``Jet``/``JetPFCands``/``PFCands`` into the model's fixed-size
per-jet arrays (see :mod:`modules.particlenet_inputs`); the SONIC producer sends them to
the ``particlenet_ak4`` model on Triton, the direct producer runs the same ONNX file
in-process (one conversion, :class:`~framework.inference.ModelConversion`). Both put per-jet
class scores. The model in ``data/models`` has the ParticleNet architecture with UNTRAINED
(random, fixed-seed) weights: its scores exercise the data flow, they carry no physics meaning.
"""

from __future__ import annotations

from typing import Any

import framework.config as cms
from framework import EDProducer
from framework.inference import ModelConversion, OnnxDirectProducer, SonicConversionProducer

from .particlenet_inputs import (
    CONSTITUENT_BRANCHES,
    JET_BRANCHES,
    PARTICLENET_CLASSES,
    PARTICLENET_N_CONSTITUENTS,
    PFCAND_BRANCHES,
    build_particlenet_inputs,
)

INPUT_NAMES = ("pf_points", "pf_features", "pf_mask")


class ParticleNetInputProducer(EDProducer):
    """Builds ``particlenet_ak4`` inputs for every jet of the event.

    Product (instance ""): dict ``{"pf_points": float32 (n_jets, 2, P), "pf_features":
    float32 (n_jets, F, P), "pf_mask": float32 (n_jets, 1, P)}`` with P = ``nConstituents``,
    one row per entry of the jet collection (so scores line up with ``Jet_*`` branches).
    """

    thread_safe = True  # pure numpy

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("jets", cms.InputTag("Jet"), "AK4 jets")
        desc.add("jetPFCands", cms.InputTag("JetPFCands"), "jet-constituent links with b-tag features")
        desc.add("pfCands", cms.InputTag("PFCands"), "PF candidates")
        desc.add("nConstituents", cms.uint32(PARTICLENET_N_CONSTITUENTS), "constituent slots per jet (the model's P)")

    def __init__(self, params: cms.ParameterSet) -> None:
        self.jets = self.consumes(params.jets, branches=JET_BRANCHES)
        self.jet_pfcands = self.consumes(params.jetPFCands, branches=CONSTITUENT_BRANCHES)
        self.pfcands = self.consumes(params.pfCands, branches=PFCAND_BRANCHES)
        self.n_constituents = params.nConstituents
        self.produces(doc="particlenet_ak4 inputs per jet")

    def produce(self, event) -> None:
        event.put(
            build_particlenet_inputs(
                event.get(self.jets),
                event.get(self.jet_pfcands),
                event.get(self.pfcands),
                n_constituents=self.n_constituents,
            )
        )


class _ParticleNetConversion(ModelConversion):
    """``src``'s arrays in, per-jet class scores out (shared by the SONIC and the direct producer)."""

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)  # the Client PSet (and the direct producer's options)
        desc.add("src", cms.InputTag("particleNetInputs"), "ParticleNetInputProducer label")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.src = self.consumes(params.src)
        self.produces(doc="per-jet class scores, fields prob<class>")

    def fill_inputs(self, event: Any, input: Any) -> None:
        arrays = event.get(self.src)
        for name in INPUT_NAMES:
            input[name].to_server(arrays[name])

    def read_outputs(self, event: Any, output: Any) -> None:
        scores = output["softmax"].from_server()  # float32 (n_jets, n_classes)
        event.put({f"prob{c}": scores[:, i] for i, c in enumerate(PARTICLENET_CLASSES)})


class ParticleNetSonicProducer(_ParticleNetConversion, SonicConversionProducer):
    """Per-jet ParticleNet scores from Triton (ExternalWork: other events run meanwhile).

    Consumes the :class:`ParticleNetInputProducer` product (``src``). One request per
    event, batch = number of jets (none is sent for an event without jets). Product
    (instance ""): dict ``{"prob<class>": float32 (n_jets,)}`` for the classes
    ``b, c, uds, g, pileup``, written as ``<label>_prob<class>`` branches.
    """


class ParticleNetDirectProducer(_ParticleNetConversion, OnnxDirectProducer):
    """Direct twin of :class:`ParticleNetSonicProducer` (onnxruntime in-process, thread-safe)."""
