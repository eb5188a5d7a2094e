"""Small jet quantities computed on the CPU (no inference): examples and dataset tests."""

from __future__ import annotations

import numpy as np

import framework.config as cms
from framework import EDProducer


class JetHTProducer(EDProducer):
    """Scalar sum of jet pT above a threshold (GeV): HT, as in the README's example.

    Product (instance ""): float64 HT [GeV] per event; 0 without jets above ``minPt``.
    """

    thread_safe = True  # numpy only: may run on a worker thread

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("src", cms.InputTag("Jet"), "jet collection (field pt)")
        desc.add("minPt", cms.double(30.0), "jet pT threshold [GeV]")

    def __init__(self, params: cms.ParameterSet) -> None:
        self.jets = self.consumes(params.src, branches=["pt"])
        self.min_pt = params.minPt
        self.produces(doc="HT: scalar sum of jet pT above minPt [GeV]")

    def produce(self, event) -> None:
        pt = np.asarray(event.get(self.jets).pt, dtype=np.float64)
        event.put(float(pt[pt > self.min_pt].sum()))
