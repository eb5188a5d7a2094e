"""Inputs of the ``deepmet`` model from one event's PF candidates, and the MET from its output.

Pure numpy: ``pfcands`` is one event's ``PFCands`` collection as an awkward record array
(``events.PFCands[i]``) or a mapping of 1-D numpy arrays.

The model (``data/models/deepmet``, built by ``scripts/build_models.py``) follows the
DeepMET idea (CMS, arXiv:2105.12773 style): a per-candidate network gives each PF
candidate a weight w_i in [0, 1] and the MET is -sum_i w_i pT_i (cos phi_i, sin phi_i).
Its weights are untrained, so only the all-ones closure (raw PF MET) has physics meaning.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modules.particlenet_inputs import column

DEEPMET_MAX_CANDIDATES = 4500
"""Rows per event (candidates beyond it are dropped, lowest pT first)."""

DEEPMET_CONTINUOUS = [
    "log_pt",  # log(pT / GeV)
    "eta",
    "cos_phi",
    "sin_phi",
    "d0",  # tanh(d0 / cm), 0 for neutrals
    "dz",  # tanh(dz / cm), 0 for neutrals
    "mass",  # GeV
    "puppiWeight",
]
"""Columns of ``pf_cont`` (C = 8), in order."""

DEEPMET_CATEGORICAL = ["charge", "pdgIdClass", "pvAssocQuality"]
"""Columns of ``pf_cat``; every column uses 0 for padding rows only."""

DEEPMET_CATEGORY_SIZES = (4, 9, 9)
"""Embedding table sizes of the ``pf_cat`` columns (padding 0 included)."""

# |pdgId| -> class; 8 is "any other id". PFNano uses 1 and 2 for HF hadrons and HF e.m.
_PDG_CLASSES = {11: 1, 13: 2, 211: 3, 22: 4, 130: 5, 1: 6, 2: 7}
_PDG_OTHER = 8


def _col(pfcands: Any, name: str, dtype: type = np.float64) -> np.ndarray:
    try:
        return column(pfcands, name, dtype)
    except KeyError as err:
        raise KeyError(f"deepmet inputs: PFCands {err.args[0]}") from None


def kept_candidates(pt: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n candidates fed to the model, in row order.

    All of them in file order when n == len(pt); else the n highest-pT ones (ties: file
    order), still in file order. ``met_from_weights`` uses the same rule.
    """
    if n >= len(pt):
        return np.arange(len(pt))
    return np.sort(np.argsort(-pt, kind="stable")[:n])


def _pdg_class(pdg_id: np.ndarray) -> np.ndarray:
    absid = np.abs(pdg_id)
    out = np.full(absid.shape, _PDG_OTHER, dtype=np.int32)
    for pid, cls in _PDG_CLASSES.items():
        out[absid == pid] = cls
    return out


def build_deepmet_inputs(
    pfcands: Any, *, max_candidates: int = DEEPMET_MAX_CANDIDATES
) -> tuple[dict[str, np.ndarray], int]:
    """The ``deepmet`` inputs of one event.

    Args:
        pfcands: the event's ``PFCands``; fields ``pt`` (GeV), ``eta``, ``phi`` (rad),
            ``mass`` (GeV), ``d0``, ``dz`` (cm), ``puppiWeight``, ``charge``, ``pdgId``,
            ``pvAssocQuality``.
        max_candidates: rows of the model input (N).

    Returns:
        The pair (inputs, n), ``inputs = {"pf_cont": float32 (1, N, 8)`` (columns
        ``DEEPMET_CONTINUOUS``), ``"pf_cat": int32 (1, N, 3)}`` (columns
        ``DEEPMET_CATEGORICAL``: charge + 2, pdgId class 1..8, pvAssocQuality + 1);
        rows [0, n) hold the kept candidates (see ``kept_candidates``), rows [n, N) are
        zeros. n = min(number of candidates, N).

    Raises:
        KeyError: a needed field is missing.
    """
    pt_all = _col(pfcands, "pt")
    n = min(len(pt_all), max_candidates)
    keep = kept_candidates(pt_all, n)

    def pf(name: str, dtype: type = np.float64) -> np.ndarray:
        return _col(pfcands, name, dtype)[keep]

    pt, phi, charge = pt_all[keep], pf("phi"), pf("charge", np.int32)
    charged = charge != 0
    cont = np.zeros((1, max_candidates, len(DEEPMET_CONTINUOUS)), dtype=np.float32)
    cont[0, :n] = np.stack(
        [
            np.log(np.maximum(pt, 1e-3)),
            pf("eta"),
            np.cos(phi),
            np.sin(phi),
            np.where(charged, np.tanh(pf("d0")), 0.0),
            np.where(charged, np.tanh(pf("dz")), 0.0),
            pf("mass"),
            pf("puppiWeight"),
        ],
        axis=1,
    )
    cat = np.zeros((1, max_candidates, len(DEEPMET_CATEGORICAL)), dtype=np.int32)
    cat[0, :n, 0] = np.clip(charge, -1, 1) + 2
    cat[0, :n, 1] = _pdg_class(pf("pdgId", np.int64))
    cat[0, :n, 2] = np.clip(pf("pvAssocQuality", np.int32), 0, DEEPMET_CATEGORY_SIZES[2] - 2) + 1
    np.nan_to_num(cont, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return {"pf_cont": cont, "pf_cat": cat}, n


def met_from_weights(weights: np.ndarray, pfcands: Any, n: int) -> tuple[float, float]:
    """MET (pT in GeV, phi in rad in [-pi, pi]) = -sum_i w_i pT_i (cos phi_i, sin phi_i).

    Args:
        weights: the model output for this event, float (N,) or (1, N); rows [0, n) are used.
        pfcands: the same ``PFCands`` given to ``build_deepmet_inputs``.
        n: the candidate count it returned.

    With all weights 1 this is the raw PF MET (in pfnano.root within 1 % of ``RawMET_pt``).

    Raises:
        ValueError: fewer than n weights.
    """
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.size < n:
        raise ValueError(f"met_from_weights: {w.size} weights for {n} candidates")
    pt_all = _col(pfcands, "pt")
    keep = kept_candidates(pt_all, n)
    wpt = w[:n] * pt_all[keep]
    phi = _col(pfcands, "phi")[keep]
    px, py = -np.sum(wpt * np.cos(phi)), -np.sum(wpt * np.sin(phi))
    return float(np.hypot(px, py)), float(np.arctan2(py, px))
