"""DeepMET-style missing transverse momentum: input builder, SONIC producer and direct producer.

The input producer turns each event's PF candidates into the ``deepmet`` model's
fixed-size arrays (up to 4,500 candidates, see :mod:`modules.deepmet_inputs`); the SONIC
producer gets one weight per candidate from Triton, the direct producer from the same ONNX
file in-process (one conversion, :class:`~framework.inference.ModelConversion`), and both put
MET as the weighted vector sum (CMS DeepMET, arXiv:2105.12773). The model in
``data/models`` has UNTRAINED (random, fixed-seed) weights: the MET it gives is not a
physics measurement.
"""

from __future__ import annotations

from typing import Any

import framework.config as cms
from framework import EDProducer
from framework.inference import ModelConversion, OnnxDirectProducer, SonicConversionProducer

from .deepmet_inputs import DEEPMET_MAX_CANDIDATES, build_deepmet_inputs, met_from_weights

_PFCAND_FIELDS = ["pt", "eta", "phi", "mass", "d0", "dz", "puppiWeight", "charge", "pdgId", "pvAssocQuality"]


class DeepMETInputProducer(EDProducer):
    """Builds ``deepmet`` inputs for the event.

    Product (instance ""): dict ``{"pf_cont": float32 (1, N, 8), "pf_cat": int32 (1, N, 3),
    "n": int}`` with N = ``maxCandidates``; rows [0, n) hold the highest-pT candidates.
    """

    thread_safe = True  # pure numpy

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("pfCands", cms.InputTag("PFCands"), "PF candidates")
        desc.add("maxCandidates", cms.uint32(DEEPMET_MAX_CANDIDATES), "model input rows (N)")

    def __init__(self, params: cms.ParameterSet) -> None:
        self.pfcands = self.consumes(params.pfCands, branches=_PFCAND_FIELDS)
        self.max_candidates = params.maxCandidates
        self.produces(doc="deepmet inputs")

    def produce(self, event) -> None:
        inputs, n = build_deepmet_inputs(event.get(self.pfcands), max_candidates=self.max_candidates)
        event.put({**inputs, "n": n})


class _DeepMETConversion(ModelConversion):
    """``src``'s arrays in, per-candidate weights out, MET put (shared by the SONIC and the direct producer)."""

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)  # the Client PSet (and the direct producer's options)
        # CMSSW's DeepMETSonicProducer (RecoMET/METPUSubtraction) reads its PF candidates from
        # pf_src (default packedPFCandidates, MiniAOD's); the NanoAOD files here call them PFCands.
        desc.add("pf_src", cms.InputTag("PFCands"), "the PF candidates the inputs came from (CMSSW's name)")
        desc.add("src", cms.InputTag("deepMETInputs"), "DeepMETInputProducer label", extension=True)

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.src = self.consumes(params.src)
        self.pfcands = self.consumes(params.pf_src, branches=["pt", "phi"])
        self.produces(doc="MET pt [GeV], phi [rad]")

    def fill_inputs(self, event: Any, input: Any) -> None:
        inputs = event.get(self.src)
        input["pf_cont"].to_server(inputs["pf_cont"])
        input["pf_cat"].to_server(inputs["pf_cat"])

    def read_outputs(self, event: Any, output: Any) -> None:
        weights = output["weights"].from_server()  # float32 (1, N)
        n = event.get(self.src)["n"]
        pt, phi = met_from_weights(weights[0], event.get(self.pfcands), n)
        event.put({"pt": pt, "phi": phi})


class DeepMETSonicProducer(_DeepMETConversion, SonicConversionProducer):
    """MET from per-candidate DeepMET weights served by Triton (ExternalWork).

    Product (instance ""): dict ``{"pt": float (GeV), "phi": float (rad)}``, written as
    ``<label>_pt`` and ``<label>_phi``. One request per event (batch 1).
    """


class DeepMETDirectProducer(_DeepMETConversion, OnnxDirectProducer):
    """Direct twin of :class:`DeepMETSonicProducer` (onnxruntime in-process, thread-safe)."""
