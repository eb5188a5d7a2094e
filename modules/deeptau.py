"""DeepTau-style tau identification: input builder, SONIC producer and direct producer.

The input producer builds the per-tau cell grids of :mod:`modules.deeptau_inputs` (what
is real and what is synthesized is listed there); the SONIC producer sends them to the
``deeptau`` model on Triton, the direct producer runs the same ONNX file in-process. Both
put per-tau class scores. The model has UNTRAINED (random, fixed-seed) weights: its scores
exercise the data flow and the computing load, they carry no physics meaning.
"""

from __future__ import annotations

from typing import Any

import framework.config as cms
from framework import EDProducer
from framework.inference import ModelConversion, OnnxDirectProducer, SonicConversionProducer

from .deeptau_inputs import DEEPTAU_CLASSES, TAU_FEATURES, build_deeptau_inputs

_PFCAND_FIELDS = ["pt", "eta", "phi", "mass", "pdgId"]
_JET_FIELDS = ["pt", "eta", "phi", "mass"]
INPUT_NAMES = ("inner", "outer", "tau_features")


class DeepTauInputProducer(EDProducer):
    """Builds ``deeptau`` inputs for every tau candidate of the event.

    Product (instance ""): dict ``{"inner": float32 (n, 188, 11, 11), "outer": float32
    (n, 188, 21, 21), "tau_features": float32 (n, 16), "n": int}``; rows are the event's
    taus in collection order, then jet-seeded candidates up to ``minTaus``.
    """

    thread_safe = True  # pure numpy

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("taus", cms.InputTag("Tau"), "tau collection (NanoAOD Tau)")
        desc.add("pfCands", cms.InputTag("PFCands"), "PF candidates: PFCands in PFNano, PFCand in NanoAOD v15")
        desc.add("jets", cms.InputTag("Jet"), "AK4 jets seeding extra candidates (read only if minTaus > 0)")
        desc.add("minTaus", cms.uint32(0), "fill up to this many candidates with jet seeds (3: the seeds' 1.18 MB)")

    def __init__(self, params: cms.ParameterSet) -> None:
        self.taus = self.consumes(params.taus, branches=TAU_FEATURES)
        self.pfcands = self.consumes(params.pfCands, branches=_PFCAND_FIELDS)
        self.min_taus = params.minTaus
        self.jets = self.consumes(params.jets, branches=_JET_FIELDS) if self.min_taus else None
        self.produces(doc="deeptau inputs per tau candidate")

    def produce(self, event: Any) -> None:
        inputs = build_deeptau_inputs(
            event.get(self.taus),
            event.get(self.pfcands),
            event.get(self.jets) if self.jets is not None else None,
            min_taus=self.min_taus,
            event_id=tuple(event.id),
        )
        event.put({**inputs, "n": len(inputs["tau_features"])})


class _DeepTauConversion(ModelConversion):
    """``src``'s arrays in, per-tau class scores out (shared by the SONIC and the direct producer)."""

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)  # the Client PSet (and the direct producer's options)
        desc.add("src", cms.InputTag("deepTauInputs"), "DeepTauInputProducer label")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.src = self.consumes(params.src)
        self.produces(doc="per-tau class scores, fields prob<class>")

    def fill_inputs(self, event: Any, input: Any) -> None:
        arrays = event.get(self.src)
        for name in INPUT_NAMES:
            input[name].to_server(arrays[name])

    def read_outputs(self, event: Any, output: Any) -> None:
        scores = output["softmax"].from_server()  # float32 (n, 4)
        event.put({f"prob{c}": scores[:, i] for i, c in enumerate(DEEPTAU_CLASSES)})


class DeepTauSonicProducer(_DeepTauConversion, SonicConversionProducer):
    """Per-tau DeepTau scores from Triton (ExternalWork). One request per event, batch = taus.

    Product (instance ""): dict ``{"prob<class>": float32 (n,)}`` for classes e, mu, tau, jet.
    """


class DeepTauDirectProducer(_DeepTauConversion, OnnxDirectProducer):
    """Direct twin of :class:`DeepTauSonicProducer` (onnxruntime in-process, thread-safe)."""
