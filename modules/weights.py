"""Event weights from the dataset's fileset metadata (``EDModule.metadata``): the example of
``docs/writing-modules.md`` and what ``configs/dataset_cfg.py`` writes beside its outputs."""

from __future__ import annotations

import numpy as np

import framework.config as cms
from framework import ConfigurationError, EDProducer


class XsecWeightProducer(EDProducer):
    """The weight that normalises simulation to a luminosity: ``xsec * lumi / sumw``.

    Read once per work unit (``begin_unit``) from the dataset's fileset ``metadata``
    (coffea's keys): ``isMC`` (true for simulation), ``xsec`` (the process's cross-section
    [pb]) and ``sumw`` (what the dataset's events add up to: its number of generated events
    for an unweighted sample, or the sum of its generator weights, NanoAOD's
    ``Runs/genEventSumw``, for a weighted one). With ``genWeight`` set, each event's
    generator weight is multiplied in (``genWeight * xsec * lumi / sumw``, the usual NanoAOD
    normalisation). Data (``isMC`` false or absent, or a job without a fileset) get 1.0.

    Product (instance ""): float64 weight per event (dimensionless).

    Raises:
        ConfigurationError: at ``begin_unit``, an ``isMC`` that is not a boolean (the
            string ``"false"`` would count as true), a simulated dataset (``isMC: true``) whose
            metadata lacks a numeric ``xsec`` or ``sumw``, or has ``sumw <= 0`` (the message
            names the module, the dataset and the key).
    """

    thread_safe = True  # arithmetic only

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("lumi", cms.double(1.0), "integrated luminosity the weights normalise to [pb^-1]")
        desc.add(
            "genWeight",
            cms.InputTag(""),
            "generator weight multiplied in (NanoAOD's 'genWeight'; '' for none); every file must have it",
        )

    def __init__(self, params: cms.ParameterSet) -> None:
        self.lumi = float(params.lumi)
        tag = params.genWeight
        self.gen_weight = self.consumes(tag) if tag.label else None
        self.scale = 1.0
        self.simulated = False
        self.produces(doc="event weight (genWeight *) xsec * lumi / sumw; 1 for data")

    def begin_unit(self) -> None:
        meta = self.metadata  # {"dataset": "DYJets", "isMC": True, "xsec": 6077.22, "sumw": ...}
        is_mc = meta.get("isMC", False)
        if not isinstance(is_mc, (bool, np.bool_)):  # "false" (a string) would be true
            raise ConfigurationError(
                f"module '{self.label}' ({self.type_name}): dataset '{meta.get('dataset', '?')}' has "
                f"isMC: {is_mc!r} in its fileset metadata: expected true or false"
            )
        self.simulated = bool(is_mc)
        if not self.simulated:
            self.scale = 1.0
            return
        where = f"module '{self.label}' ({self.type_name}): dataset '{meta.get('dataset', '?')}' has isMC: true but"
        for key in ("xsec", "sumw"):
            value = meta.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigurationError(f"{where} no numeric '{key}' in its fileset metadata (got {value!r})")
        if meta["sumw"] <= 0:
            raise ConfigurationError(f"{where} sumw = {meta['sumw']} (it must be > 0)")
        self.scale = float(meta["xsec"]) * self.lumi / float(meta["sumw"])

    def produce(self, event) -> None:
        if self.gen_weight is not None and self.simulated:
            event.put(float(np.float64(event.get(self.gen_weight)) * self.scale))
        else:
            event.put(self.scale)
