"""Event filters."""

from __future__ import annotations

import numpy as np

import framework.config as cms
from framework import EDFilter


class JetMultiplicityFilter(EDFilter):
    """Passes events with at least ``minNumber`` jets above ``minPt`` within ``maxAbsEta``.

    Reads the ``pt`` (GeV) and ``eta`` fields of the ``src`` collection (NanoAOD ``Jet``).
    """

    thread_safe = True

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("src", cms.InputTag("Jet"), "jet collection (fields pt, eta)")
        desc.add("minNumber", cms.uint32(1), "minimum number of selected jets")
        desc.add("minPt", cms.double(30.0), "jet pT threshold [GeV]")
        desc.add("maxAbsEta", cms.double(2.5), "jet |eta| limit")

    def __init__(self, params: cms.ParameterSet) -> None:
        self.jets = self.consumes(params.src, branches=["pt", "eta"])
        self.min_number = params.minNumber
        self.min_pt = params.minPt
        self.max_abs_eta = params.maxAbsEta

    def filter(self, event) -> bool:
        jets = event.get(self.jets)
        pt = np.asarray(jets.pt)
        eta = np.asarray(jets.eta)
        selected = np.count_nonzero((pt > self.min_pt) & (np.abs(eta) < self.max_abs_eta))
        return bool(selected >= self.min_number)
