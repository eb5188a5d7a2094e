"""CMSSW's ParticleNet for AK8 jets on PFNano, under CMSSW's module names.

The chain CMSSW runs (RecoBTag/ONNXRuntime/python/pfParticleNet_cff.py), one module each:

* :class:`DeepBoostedJetTagInfoProducer`: per fat jet, the raw constituent and SV
  variables (see :mod:`modules.particlenet_ak8_inputs`);
* :class:`ParticleNetSonicJetTagsProducer` (SONIC, Triton) and its direct twin
  :class:`BoostedJetONNXJetTagsProducer` (onnxruntime in the job): the model's inputs
  built from the tag infos as the model's ``preprocess_json`` says (read at
  construction, found as a FileInPath), one product per class name of ``flav_names``
  (instance = the name; float32 per jet; 0 for a jet without features);
* :class:`BTagProbabilityToDiscriminator`: ``sum(numerator) / sum(denominator)`` per
  jet for each item of ``discriminators`` (-1 where the denominator is 0; no
  denominator: the numerator's sum), one product per discriminator name;
* :class:`JetTagTableProducer`: a dict of the chosen products, for the output module
  (NanoAOD's table: label ``FatJet_particleNet`` writes ``FatJet_particleNet_<name>``);
* :class:`JetTagAgreementAnalyzer`: compares produced scores with those stored in the
  input (``FatJet_particleNet*``) and prints a table at the end of the job.

As in CMSSW, the direct producer runs one jet at a time at its own length, the SONIC one
all jets of the event in one request padded to the longest; ParticleNet masks the
padding, so the two agree within float rounding (the tests check 1e-5).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

import framework.config as cms
from framework import ConfigurationError, EDAnalyzer, EDProducer
from framework.inference import ModelConversion, OnnxDirectProducer, SonicConversionProducer

from .particlenet_ak8_inputs import PreprocessParams, build_tag_infos
from .particlenet_inputs import CONSTITUENT_BRANCHES, JET_BRANCHES, PFCAND_BRANCHES

__all__ = [
    "BTagProbabilityToDiscriminator",
    "BoostedJetONNXJetTagsProducer",
    "DeepBoostedJetTagInfoProducer",
    "JetTagAgreementAnalyzer",
    "JetTagTableProducer",
    "ParticleNetSonicJetTagsProducer",
]

log = logging.getLogger("pysonic.particlenet")

# PFCands: the AK4 builder's fields and the track quality (trkChi2 == -1: no track details).
_PFCAND_FIELDS = (*PFCAND_BRANCHES, "trkQuality", "trkChi2")
_SV_LINK_FIELDS = [
    "jetIdx",
    "sVIdx",
    "pt",
    "mass",
    "ntracks",
    "normchi2",
    "dxy",
    "dxysig",
    "d3d",
    "d3dsig",
    "costhetasvpv",
    "phirel",
    "deltaR",
    "enration",
]
# CMSSW's default flav_names (DeepBoostedJet V02) of both JetTags producers.
_DEFAULT_FLAV_NAMES = [
    *("probTbcq", "probTbqq", "probTbc", "probTbq", "probWcq", "probWqq", "probZbb", "probZcc", "probZqq"),
    *("probHbb", "probHcc", "probHqqqq", "probQCDbb", "probQCDcc", "probQCDb", "probQCDc", "probQCDothers"),
]


class DeepBoostedJetTagInfoProducer(EDProducer):
    """Per fat jet, CMSSW's ``pfcand_*`` and ``sv_*`` variables from PFNano.

    CMSSW's module (RecoBTag/FeatureTools) reads MiniAOD; this one the PFNano tables
    that store the same candidates (``jets``, ``fatJetPFCands``, ``pf_candidates``,
    ``fatJetSVs``, ``secondary_vertices``). The selection parameters are CMSSW's, with
    the values its NanoAOD step used for ``slimmedJetsAK8`` as defaults where
    they differ from CMSSW's own defaults (``use_puppiP4 = False``); ``min_jet_pt``,
    ``max_jet_eta``, ``min_puppi_wgt``, ``include_neutrals`` as in CMSSW.

    Product (instance ""): list, one dict per fat jet (input order), variable name ->
    float32 1-D array (see :func:`~modules.particlenet_ak8_inputs.build_tag_infos`).
    """

    thread_safe = True  # pure numpy

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("jets", cms.InputTag("FatJet"), "AK8 jets (PFNano FatJet)")
        desc.add("fatJetPFCands", cms.InputTag("FatJetPFCands"), "fat-jet constituent links with b-tag variables")
        desc.add("pf_candidates", cms.InputTag("PFCands"), "PF candidates")
        desc.add("fatJetSVs", cms.InputTag("FatJetSVs"), "fat-jet SVs in CMSSW's order, with their variables")
        desc.add("secondary_vertices", cms.InputTag("SV"), "NanoAOD's SV table (for the SV eta)")
        desc.add("jet_radius", cms.double(0.8), "jet radius (SVs within it: FatJetSVs already holds them)")
        desc.add("min_jet_pt", cms.double(150.0), "jets below [GeV] get no features (scores 0)")
        desc.add("max_jet_eta", cms.double(99.0), "jets beyond |eta| get no features")
        desc.add("min_puppi_wgt", cms.double(0.01), "constituents with a smaller PUPPI weight are dropped")
        desc.add("use_puppiP4", cms.bool(False), "PUPPI-weighted candidate momenta (NanoAOD's AK8 rerun: False)")
        desc.add("include_neutrals", cms.bool(True), "keep neutral candidates")
        desc.add("sort_by_sip2dsig", cms.bool(False), "CMSSW's option; only False (PFNano lacks sip2d)")

    def __init__(self, params: cms.ParameterSet) -> None:
        if params.sort_by_sip2dsig:
            raise ConfigurationError(f"module '{self.label}': sort_by_sip2dsig = True needs sip2d, which PFNano lacks")
        self.jets = self.consumes(params.jets, branches=JET_BRANCHES)
        self.links = self.consumes(params.fatJetPFCands, branches=CONSTITUENT_BRANCHES)
        self.pfcands = self.consumes(params.pf_candidates, branches=_PFCAND_FIELDS)
        self.sv_links = self.consumes(params.fatJetSVs, branches=_SV_LINK_FIELDS)
        self.svs = self.consumes(params.secondary_vertices, branches=["eta"])
        self.options = {
            "min_jet_pt": params.min_jet_pt,
            "max_jet_eta": params.max_jet_eta,
            "min_puppi_wgt": params.min_puppi_wgt,
            "use_puppiP4": params.use_puppiP4,
            "include_neutrals": params.include_neutrals,
        }
        self.produces(doc="per fat jet: CMSSW's tag-info variables")

    def produce(self, event: Any) -> None:
        event.put(
            build_tag_infos(
                event.get(self.jets),
                event.get(self.links),
                event.get(self.pfcands),
                event.get(self.sv_links),
                event.get(self.svs),
                **self.options,
            )
        )


class _ParticleNetJetTagsConversion(ModelConversion):
    """Tag infos in, one score product per ``flav_names`` entry out (both JetTags producers)."""

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)
        desc.add("src", cms.InputTag("pfDeepBoostedJetTagInfos"), "DeepBoostedJetTagInfoProducer label")
        desc.add(
            "preprocess_json",
            cms.string(""),
            "the model's preprocess.json, a path on CMSSW_SEARCH_PATH (read as a FileInPath, as CMSSW does)",
        )
        desc.add("flav_names", cms.vstring(*_DEFAULT_FLAV_NAMES), "output class names, in the model's order")
        desc.add_optional("debugMode", cms.untracked.bool, "CMSSW's; accepted, unused")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        if not params.preprocess_json:
            raise ConfigurationError(
                f"module '{self.label}': preprocess_json is required (the model's preprocess.json)"
            )
        try:
            path = cms.FileInPath(params.preprocess_json).fullPath()
        except ConfigurationError as err:
            raise ConfigurationError(f"module '{self.label}': preprocess_json: {err.args[0]}") from None
        self.preprocess = PreprocessParams(path)
        self.flav_names = list(params.flav_names)
        self.src = self.consumes(params.src)
        for name in self.flav_names:
            self.produces(name, doc="per-jet class probability (float32)")

    def fill_inputs(self, event: Any, input: Any) -> None:
        tag_infos = event.get(self.src)
        if not any(tag_infos):  # CMSSW skips the inference: no jet has features
            tag_infos = []
        arrays = self.preprocess.make_inputs(tag_infos, f"module '{self.label}'")
        for group in self.preprocess.groups:
            input[group.name].to_server(arrays[group.name])

    def read_outputs(self, event: Any, output: Any) -> None:
        tag_infos = event.get(self.src)
        name = next(iter(output))
        scores = output[name].from_server()  # float32 (n_jets, n_classes), or (0, n) when skipped
        if len(scores) != len(tag_infos):
            scores = np.zeros((len(tag_infos), len(self.flav_names)), np.float32)
        self.put_scores(event, tag_infos, scores)

    def put_scores(self, event: Any, tag_infos: list[dict[str, np.ndarray]], scores: np.ndarray) -> None:
        """One product per class: ``scores[:, i]`` (float32, n_jets), 0 for a jet without features."""
        if scores.shape[1] != len(self.flav_names):
            raise ConfigurationError(
                f"module '{self.label}': the model gives {scores.shape[1]} classes, "
                f"flav_names has {len(self.flav_names)}"
            )
        empty = np.array([not t for t in tag_infos], bool)
        scores = np.where(empty[:, None], np.float32(0), scores)
        for i, flav in enumerate(self.flav_names):
            event.put(np.ascontiguousarray(scores[:, i], dtype=np.float32), flav)


class ParticleNetSonicJetTagsProducer(_ParticleNetJetTagsConversion, SonicConversionProducer):
    """ParticleNet scores from Triton (CMSSW's RecoBTag/ONNXRuntime ParticleNetSonicJetTagsProducer).

    One request per event, batch = number of jets, each input padded to the event's
    longest jet clamped to the preprocess file's [min_length, max_length]; no request
    when no jet has features. Products: per ``flav_names`` entry, float32 (n_jets,).
    """


class BoostedJetONNXJetTagsProducer(_ParticleNetJetTagsConversion, OnnxDirectProducer):
    """Direct twin of :class:`ParticleNetSonicJetTagsProducer`: the model's ONNX file in the job.

    As CMSSW's module, one onnxruntime call per jet with features, each input at that
    jet's own length (its number of entries clamped to [min_length, max_length]); jets
    without features get 0 and no call. CMSSW's module takes ``model_path`` (the ONNX
    file); here the file is found as the SONIC twin finds its model
    (``Client.modelConfigPath``), so that one config switches between the two by type name.
    """

    def produce(self, event: Any) -> None:
        tag_infos = event.get(self.src)
        output = self.spec.outputs[0].name
        what = f"module '{self.label}'"
        scores = np.zeros((len(tag_infos), len(self.flav_names)), np.float32)
        for j, features in enumerate(tag_infos):
            if features:
                result = self.runner(self.preprocess.make_inputs([features], what))[output]
                if result.shape[-1] != scores.shape[1]:
                    scores = np.zeros((len(tag_infos), result.shape[-1]), np.float32)  # put_scores reports it
                scores[j] = result[0]
        self.put_scores(event, tag_infos, scores)


class BTagProbabilityToDiscriminator(EDProducer):
    """Discriminators from class probabilities (CMSSW's RecoBTag/Combined BTagProbabilityToDiscriminator).

    For each item of ``discriminators``: per jet ``sum(numerator) / sum(denominator)``
    (-1 where the denominator is 0); with no denominator, ``sum(numerator)``. Products:
    per item name, float32 (n_jets,).
    """

    thread_safe = True

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        item = cms.ParameterSetDescription()
        item.add("name", cms.string, "discriminator name (the product instance)")
        item.add("numerator", cms.VInputTag(), "probabilities summed above the line")
        item.add("denominator", cms.VInputTag(), "probabilities summed below the line; [] = 1")
        desc.add_vpset("discriminators", item, "one per discriminator")

    def __init__(self, params: cms.ParameterSet) -> None:
        self.items = []
        for item in params.discriminators:
            if not item.numerator:
                raise ConfigurationError(f"module '{self.label}': discriminator '{item.name}' has no numerator")
            num = [self.consumes(t) for t in item.numerator]
            den = [self.consumes(t) for t in item.denominator]
            self.items.append((item.name, num, den))
            self.produces(item.name, doc="per-jet discriminator (float32)")

    def produce(self, event: Any) -> None:
        for name, num, den in self.items:
            numerator = np.sum([event.get(t) for t in num], axis=0, dtype=np.float64)
            if den:
                denominator = np.sum([event.get(t) for t in den], axis=0, dtype=np.float64)
                value = np.divide(numerator, denominator, out=np.full_like(numerator, -1.0), where=denominator != 0)
            else:
                value = numerator
            event.put(value.astype(np.float32), name)


class JetTagTableProducer(EDProducer):
    """One dict of per-jet products, written by the output module as ``<label>_<name>`` branches.

    ``variables``: a PSet ``name = cms.InputTag("module:instance")``. With the label
    ``FatJet_particleNet``, ``TvsQCD`` is written as NanoAOD's ``FatJet_particleNet_TvsQCD``
    (plus a counter ``nFatJet_particleNet`` equal to ``nFatJet``).
    """

    thread_safe = True

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("variables", cms.PSet, "name = InputTag of a per-jet product")

    def __init__(self, params: cms.ParameterSet) -> None:
        self.variables = {}
        for name, tag in params.variables.items():
            if not isinstance(tag, (str, cms.InputTag)):
                raise ConfigurationError(f"module '{self.label}': variables.{name} is not an InputTag")
            self.variables[name] = self.consumes(tag)
        self.produces(doc="per-jet table")

    def produce(self, event: Any) -> None:
        event.put({name: event.get(tag) for name, tag in self.variables.items()})


class JetTagAgreementAnalyzer(EDAnalyzer):
    """Compares produced per-jet scores with the ones stored in the input; prints a table at the end.

    ``scores``: a PSet ``<branch field> = cms.InputTag("<produced product>")``, e.g.
    ``particleNet_TvsQCD = "pfParticleNetDiscriminatorsJetTags:TvsQCD"``; the stored
    values are read from the ``jets`` collection's field of that name. Per score the
    table gives the jets compared, max and median ``|difference|``, the fraction within
    ``tolerance`` and the correlation. ``results`` holds it after ``end_job``.
    An input without the stored field is a one-line error at the first event.
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("jets", cms.InputTag("FatJet"), "collection holding the stored scores")
        desc.add("scores", cms.PSet, "stored field = InputTag of the produced score")
        desc.add("tolerance", cms.double(0.01), "|difference| counted as agreement")

    def __init__(self, params: cms.ParameterSet) -> None:
        self.fields = list(params.scores)
        self.tags = {f: self.consumes(params.scores[f]) for f in self.fields}
        self.jets = self.consumes(params.jets, branches=self.fields)
        self.tolerance = params.tolerance
        self.pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {f: [] for f in self.fields}
        self.results: dict[str, dict[str, float]] = {}

    def analyze(self, event: Any) -> None:
        jets = event.get(self.jets)
        for field in self.fields:
            stored = np.asarray(jets[field], np.float64)
            self.pairs[field].append((np.asarray(event.get(self.tags[field]), np.float64), stored))

    def end_job(self) -> None:
        lines = [
            f"{'score':<28} {'jets':>5} {'max|d|':>9} {'median|d|':>10} {'<' + str(self.tolerance):>7} {'corr':>8}"
        ]
        for field in self.fields:
            if not self.pairs[field]:
                continue
            ours = np.concatenate([p[0] for p in self.pairs[field]])
            theirs = np.concatenate([p[1] for p in self.pairs[field]])
            diff = np.abs(ours - theirs)
            corr = float(np.corrcoef(ours, theirs)[0, 1]) if len(ours) > 1 else float("nan")
            row = {
                "jets": float(len(diff)),
                "max": float(diff.max(initial=0.0)),
                "median": float(np.median(diff)) if len(diff) else 0.0,
                "within": float(np.mean(diff < self.tolerance)) if len(diff) else 0.0,
                "corr": corr,
            }
            self.results[field] = row
            numbers = f"{row['max']:>9.2g} {row['median']:>10.2g} {row['within']:>7.1%} {corr:>8.5f}"
            lines.append(f"{field:<28} {len(diff):>5} {numbers}")
        print(f"Agreement with the input's stored scores ({self.label}):\n" + "\n".join(lines))
