"""CMSSW's ParticleNet AK8 inputs from PFNano: the tag-info features and their preprocessing.

Two steps, as in CMSSW:

* :func:`build_tag_infos` is ``DeepBoostedJetTagInfoProducer``
  (RecoBTag/FeatureTools/plugins/DeepBoostedJetTagInfoProducer.cc): per fat jet, the raw
  per-constituent and per-SV variables (``pfcand_*``, ``sv_*``) under CMSSW's names;
* :class:`PreprocessParams` is ``preprocess.json`` as CMSSW's ``ParticleNetConstructor``
  reads it (RecoBTag/FeatureTools/src/deep_helpers.cc), and :meth:`PreprocessParams.make_inputs`
  the ``center_norm_pad_halfRagged`` filling of ParticleNetSonicJetTagsProducer: per group,
  each variable ``clip((x - median) * norm_factor, lower_bound, upper_bound)`` (non-finite
  or beyond 1e32: ``replace_inf_value``), padded with ``pad`` to the event's length, the
  largest number of entries of a jet clamped to [min_length, max_length].

What PFNano does not store is rebuilt as ``/work/shared/models/README.md`` records (facts
learnt reproducing CMSSW's stored scores): candidates without track details
(``PFCands_trkChi2 == -1``; PFNano's ``dz = d0 = -1``) get impact parameters 0, no
track variables (``normchi2`` 999, btag variables 0), as CMSSW gives neutrals; the
charged ones among them (pt < 0.5 GeV) had real impact parameters that PFNano lost:
the main limit on agreement. SVs missing from NanoAOD's ``SV`` table (it keeps
dlenSig > 3) get their eta back from the jet-relative columns of ``FatJetSVs`` (whose
``deltaR`` is DeepJet's ``|deltaR| - 0.5`` and ``enration`` the SV's energy over the
corrected jet's, both checked against the SVs that ``SV`` does hold).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from framework import ConfigurationError

from .particlenet_inputs import column, wrap_phi

__all__ = ["PFCAND_VARIABLES", "SV_VARIABLES", "PreprocessParams", "VarInfo", "build_tag_infos"]

PFCAND_VARIABLES = (
    "pfcand_puppiw",
    "pfcand_VTX_ass",
    "pfcand_lostInnerHits",
    "pfcand_quality",
    "pfcand_charge",
    "pfcand_isEl",
    "pfcand_isMu",
    "pfcand_isChargedHad",
    "pfcand_isGamma",
    "pfcand_isNeutralHad",
    "pfcand_phirel",
    "pfcand_etarel",
    "pfcand_deltaR",
    "pfcand_abseta",
    "pfcand_ptrel_log",
    "pfcand_erel_log",
    "pfcand_pt_log",
    "pfcand_normchi2",
    "pfcand_dz",
    "pfcand_dzsig",
    "pfcand_dxy",
    "pfcand_dxysig",
    "pfcand_btagEtaRel",
    "pfcand_btagPtRatio",
    "pfcand_btagPParRatio",
    "pfcand_btagSip3dVal",
    "pfcand_btagSip3dSig",
    "pfcand_btagJetDistVal",
    "pfcand_mask",
    "pfcand_pt_log_nopuppi",
    "pfcand_e_log_nopuppi",
    "pfcand_ptrel",
    "pfcand_erel",
)
"""The per-constituent variables built here, CMSSW's offline ones that PFNano allows
(not ``hcalFrac``, ``drminsv``, ``drsubjet*``, the track covariances, ``btagSip2d*``)."""

SV_VARIABLES = (
    "sv_mask",
    "sv_ptrel",
    "sv_erel",
    "sv_phirel",
    "sv_etarel",
    "sv_deltaR",
    "sv_abseta",
    "sv_mass",
    "sv_ptrel_log",
    "sv_erel_log",
    "sv_pt_log",
    "sv_pt",
    "sv_ntracks",
    "sv_normchi2",
    "sv_dxy",
    "sv_dxysig",
    "sv_d3d",
    "sv_d3dsig",
    "sv_costhetasvpv",
)
"""The per-SV variables (all of CMSSW's offline ones)."""


def _col(collection: Any, name: str, dtype: type = np.float64) -> np.ndarray:
    try:
        return column(collection, name, dtype)
    except KeyError as err:
        raise KeyError(f"ParticleNet AK8 inputs: {err.args[0]}") from None


def _energy(pt: np.ndarray, eta: np.ndarray, mass: np.ndarray) -> np.ndarray:
    return np.sqrt((pt * np.cosh(eta)) ** 2 + mass**2)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num), where=den != 0)


def build_tag_infos(
    fatjets: Any,
    fatjet_pfcands: Any,
    pfcands: Any,
    fatjet_svs: Any,
    svs: Any,
    *,
    min_jet_pt: float = 150.0,
    max_jet_eta: float = 99.0,
    min_puppi_wgt: float = 0.01,
    use_puppiP4: bool = False,  # noqa: N803 - CMSSW's parameter name
    include_neutrals: bool = True,
) -> list[dict[str, np.ndarray]]:
    """One event's tag infos: per fat jet, variable name -> float32 array (CMSSW's features).

    Args:
        fatjets: ``FatJet`` (pt, eta, phi, mass; GeV).
        fatjet_pfcands: ``FatJetPFCands`` (jetIdx, pFCandsIdx, btag* variables).
        pfcands: ``PFCands`` (pt, eta, phi, mass, charge, pdgId, pvAssocQuality,
            lostInnerHits, trkQuality, trkChi2, d0, d0Err, dz, dzErr, puppiWeight).
        fatjet_svs: ``FatJetSVs`` (jetIdx, sVIdx, pt, mass, ntracks, normchi2, dxy, dxysig,
            d3d, d3dsig, costhetasvpv, phirel, deltaR, enration), listed per jet in CMSSW's
            order (dxy significance).
        svs: ``SV`` (eta), for the SVs ``FatJetSVs_sVIdx`` points to.
        min_jet_pt, max_jet_eta, min_puppi_wgt, use_puppiP4, include_neutrals: as
            DeepBoostedJetTagInfoProducer's parameters.

    Returns:
        A list with one dict per entry of ``fatjets`` (same order): the variables of
        :data:`PFCAND_VARIABLES` (constituents sorted by decreasing pt, PUPPI-weighted with
        ``use_puppiP4``) and :data:`SV_VARIABLES`, float32 1-D arrays; an empty dict for a
        jet below ``min_jet_pt``, beyond ``max_jet_eta`` or without constituents (CMSSW
        leaves its features empty: its scores are 0).
    """
    jet_pt, jet_eta = _col(fatjets, "pt"), _col(fatjets, "eta")
    jet_phi, jet_mass = _col(fatjets, "phi"), _col(fatjets, "mass")
    jet_e = _energy(jet_pt, jet_eta, jet_mass)
    link_jet = _col(fatjet_pfcands, "jetIdx", np.int64)
    link_cand = _col(fatjet_pfcands, "pFCandsIdx", np.int64)
    sv_jet = _col(fatjet_svs, "jetIdx", np.int64)
    out: list[dict[str, np.ndarray]] = []
    for j in range(len(jet_pt)):
        rows = np.flatnonzero(link_jet == j)
        if jet_pt[j] < min_jet_pt or abs(jet_eta[j]) > max_jet_eta or len(rows) == 0:
            out.append({})
            continue
        jet = (jet_pt[j], jet_eta[j], jet_phi[j], jet_e[j])
        features = _particle_features(jet, fatjet_pfcands, pfcands, rows, link_cand[rows], min_puppi_wgt, use_puppiP4)
        if not include_neutrals:
            charged = features["pfcand_charge"] != 0
            features = {k: v[charged] for k, v in features.items()}
        features.update(_sv_features(jet, jet_mass[j], fatjet_svs, svs, np.flatnonzero(sv_jet == j)))
        out.append({k: v.astype(np.float32) for k, v in features.items()})
    return out


def _particle_features(
    jet: tuple[float, float, float, float],
    links: Any,
    pfcands: Any,
    rows: np.ndarray,
    cands: np.ndarray,
    min_puppi_wgt: float,
    use_puppi_p4: bool,
) -> dict[str, np.ndarray]:
    jet_pt, jet_eta, jet_phi, jet_e = jet
    puppi = _col(pfcands, "puppiWeight")[cands]
    keep = puppi >= min_puppi_wgt  # CMSSW drops constituents with a tiny PUPPI weight
    rows, cands, puppi = rows[keep], cands[keep], puppi[keep]

    order = np.argsort(-(_col(pfcands, "pt")[cands] * (puppi if use_puppi_p4 else 1.0)), kind="stable")
    rows, cands, puppi = rows[order], cands[order], puppi[order]  # CMSSW: by decreasing pt

    def pf(name: str) -> np.ndarray:
        return _col(pfcands, name)[cands]

    pt, eta, phi = pf("pt"), pf("eta"), pf("phi")
    energy = _energy(pt, eta, pf("mass"))
    scale = puppi if use_puppi_p4 else np.ones_like(puppi)
    p4_pt, p4_e = pt * scale, energy * scale  # the candidate p4 (PUPPI-weighted with use_puppiP4)
    etasign = 1.0 if jet_eta > 0 else -1.0
    pdg = np.abs(pf("pdgId"))
    track = pf("trkChi2") >= 0  # PFNano: -1 without track details
    dz = np.where(track, pf("dz"), 0.0)
    dxy = np.where(track, pf("d0"), 0.0)
    phirel = wrap_phi(phi - jet_phi)
    etarel = etasign * (eta - jet_eta)

    def btag(name: str) -> np.ndarray:
        return np.where(track, _col(links, name)[rows], 0.0)

    return {
        "pfcand_puppiw": puppi,
        "pfcand_VTX_ass": pf("pvAssocQuality"),
        "pfcand_lostInnerHits": pf("lostInnerHits"),
        "pfcand_quality": np.where(track, pf("trkQuality"), 0.0),
        "pfcand_charge": pf("charge"),
        "pfcand_isEl": (pdg == 11).astype(float),
        "pfcand_isMu": (pdg == 13).astype(float),
        "pfcand_isChargedHad": (pdg == 211).astype(float),
        "pfcand_isGamma": (pdg == 22).astype(float),
        "pfcand_isNeutralHad": (pdg == 130).astype(float),
        "pfcand_phirel": phirel,
        "pfcand_etarel": etarel,
        "pfcand_deltaR": np.hypot(eta - jet_eta, phirel),
        "pfcand_abseta": np.abs(eta),
        "pfcand_ptrel_log": np.log(p4_pt / jet_pt),
        "pfcand_erel_log": np.log(p4_e / jet_e),
        "pfcand_pt_log": np.log(p4_pt),
        "pfcand_normchi2": np.where(track, np.floor(pf("trkChi2")), 999.0),
        "pfcand_dz": dz,
        "pfcand_dzsig": np.where(track, _ratio(dz, pf("dzErr")), 0.0),
        "pfcand_dxy": dxy,
        "pfcand_dxysig": np.where(track, _ratio(dxy, pf("d0Err")), 0.0),
        "pfcand_btagEtaRel": btag("btagEtaRel"),
        "pfcand_btagPtRatio": btag("btagPtRatio"),
        "pfcand_btagPParRatio": btag("btagPParRatio"),
        "pfcand_btagSip3dVal": btag("btagSip3dVal"),
        "pfcand_btagSip3dSig": btag("btagSip3dSig"),
        "pfcand_btagJetDistVal": btag("btagJetDistVal"),
        "pfcand_mask": np.ones_like(pt),
        "pfcand_pt_log_nopuppi": np.log(pt),
        "pfcand_e_log_nopuppi": np.log(energy),
        "pfcand_ptrel": p4_pt / jet_pt,
        "pfcand_erel": p4_e / jet_e,
    }


_DELTA_R_OFFSET = 0.5


def _sv_features(
    jet: tuple[float, float, float, float], jet_mass: float, fatjet_svs: Any, svs: Any, rows: np.ndarray
) -> dict[str, np.ndarray]:
    jet_pt, jet_eta, _jet_phi, jet_e = jet

    def sv(name: str) -> np.ndarray:
        return _col(fatjet_svs, name)[rows]

    # PFNano stores DeepJet's sv_deltaR convention, |deltaR(sv, jet)| - 0.5 (checked against SV_eta/phi)
    pt, mass, phirel, delta_r = sv("pt"), sv("mass"), sv("phirel"), sv("deltaR") + _DELTA_R_OFFSET
    eta = _sv_eta(jet_eta, jet_e, pt, mass, phirel, delta_r, sv("enration"), sv("sVIdx").astype(np.int64), svs)
    energy = _energy(pt, eta, mass)
    etasign = 1.0 if jet_eta > 0 else -1.0
    return {
        "sv_mask": np.ones_like(pt),
        "sv_ptrel": pt / jet_pt,
        "sv_erel": energy / jet_e,
        "sv_phirel": phirel,
        "sv_etarel": etasign * (eta - jet_eta),
        "sv_deltaR": delta_r,
        "sv_abseta": np.abs(eta),
        "sv_mass": mass,
        "sv_ptrel_log": np.log(pt / jet_pt),
        "sv_erel_log": np.log(energy / jet_e),
        "sv_pt_log": np.log(pt),
        "sv_pt": pt,
        "sv_ntracks": sv("ntracks"),
        "sv_normchi2": sv("normchi2"),
        "sv_dxy": sv("dxy"),
        "sv_dxysig": sv("dxysig"),
        "sv_d3d": sv("d3d"),
        "sv_d3dsig": sv("d3dsig"),
        "sv_costhetasvpv": sv("costhetasvpv"),
    }


def _sv_eta(
    jet_eta: float,
    jet_e: float,
    pt: np.ndarray,
    mass: np.ndarray,
    phirel: np.ndarray,
    delta_r: np.ndarray,
    energy_ratio: np.ndarray,
    sv_index: np.ndarray,
    svs: Any,
) -> np.ndarray:
    """SV eta: ``SV_eta`` where ``FatJetSVs_sVIdx`` points into ``SV``; else from the jet-relative columns.

    |eta - jet eta| = sqrt(deltaR^2 - phirel^2); its sign is the one whose energy
    (pt cosh(eta), mass) is nearer ``enration`` x the jet's energy.
    """
    eta = np.empty_like(pt)
    sv_eta = _col(svs, "eta") if len(sv_index) else np.empty(0)
    deta = np.sqrt(np.maximum(delta_r**2 - phirel**2, 0.0))
    for i, k in enumerate(sv_index):
        if 0 <= k < len(sv_eta):
            eta[i] = sv_eta[k]
            continue
        target = energy_ratio[i] * jet_e
        candidates = (jet_eta + deta[i], jet_eta - deta[i])
        eta[i] = min(candidates, key=lambda e: abs(math.hypot(pt[i] * math.cosh(e), mass[i]) - target))
    return eta


# ---------------------------------------------------------------- preprocess.json


@dataclass(frozen=True)
class VarInfo:
    """One variable's preprocessing (``preprocess.json``'s ``var_infos`` entry)."""

    center: float  # "median"
    norm_factor: float
    replace_inf_value: float
    lower_bound: float
    upper_bound: float
    pad: float


@dataclass(frozen=True)
class InputGroup:
    """One model input (``pf_points``, ...): its variables in row order and its length range."""

    name: str
    var_names: tuple[str, ...]
    var_infos: Mapping[str, VarInfo]
    min_length: int
    max_length: int


class PreprocessParams:
    """A model's ``preprocess.json`` (CMSSW's ``ParticleNetConstructor`` reading of it).

    Attributes:
        groups: the inputs in ``input_names`` order.
        output_names: the model's class names (``output_names``), when the file has them.

    Raises:
        ConfigurationError: the file cannot be read or lacks a key (one line naming file and key).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            with open(path) as f:
                js = json.load(f)
            self.output_names: tuple[str, ...] = tuple(js.get("output_names", ()))
            self.groups = tuple(self._group(js, name) for name in js["input_names"])
        except OSError as err:
            raise ConfigurationError(f"preprocess_json {path}: cannot read it: {err.strerror}") from None
        except json.JSONDecodeError as err:
            raise ConfigurationError(f"preprocess_json {path}: not JSON: {err}") from None
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigurationError(f"preprocess_json {path}: missing or invalid key {err}") from None

    @staticmethod
    def _group(js: Mapping[str, Any], name: str) -> InputGroup:
        group = js[name]
        infos = {}
        for var in group["var_names"]:
            info = group["var_infos"][var]
            infos[var] = VarInfo(
                float(info["median"]),
                float(info["norm_factor"]),
                float(info["replace_inf_value"]),
                float(info["lower_bound"]),
                float(info["upper_bound"]),
                float(info["pad"]),
            )
        return InputGroup(name, tuple(group["var_names"]), infos, int(group["min_length"]), int(group["max_length"]))

    def variables(self) -> set[str]:
        """Every variable some input needs."""
        return {v for g in self.groups for v in g.var_names}

    def make_inputs(self, tag_infos: Sequence[Mapping[str, np.ndarray]], what: str) -> dict[str, np.ndarray]:
        """The model inputs of one event's jets: name -> float32 (n_jets, n_vars, length).

        ``length`` per input: the largest number of entries of a jet (the size of the
        group's first variable) clamped to [min_length, max_length]; longer jets are
        truncated (CMSSW's ``center_norm_pad_halfRagged``). A jet with empty features gets
        pad values (its scores are set to 0 afterwards, as CMSSW does).

        Raises:
            ConfigurationError: a variable of the file is not among the tag infos' (``what``
                names the module).
        """
        filled = [t for t in tag_infos if t]
        if filled:
            missing = sorted(self.variables() - set(filled[0]))
            if missing:
                raise ConfigurationError(
                    f"{what}: preprocess_json {self.path} asks for {', '.join(missing)}, which the tag infos lack "
                    f"(they have {', '.join(sorted(filled[0]))})"
                )
        out = {}
        for group in self.groups:
            first = group.var_names[0]
            longest = max((len(t[first]) for t in filled), default=0)
            length = min(max(longest, group.min_length), group.max_length)
            data = np.empty((len(tag_infos), len(group.var_names), length), np.float32)
            for v, var in enumerate(group.var_names):
                info = group.var_infos[var]
                data[:, v, :] = info.pad
                for j, features in enumerate(tag_infos):
                    if features:
                        x = features[var][:length].astype(np.float64)
                        bad = ~np.isfinite(x) | (np.abs(x) > 1e32)
                        x = np.where(bad, info.replace_inf_value, x)
                        data[j, v, : len(x)] = np.clip(
                            (x - info.center) * info.norm_factor, info.lower_bound, info.upper_bound
                        )
            out[group.name] = data
        return out
