"""Inputs of the ``deeptau`` model: per-tau grids of cells around each tau, from NanoAOD.

Pure numpy: collections are one event's awkward record arrays or mappings of 1-D arrays.

Geometry and sizes follow CMS DeepTau v2 (CMS, "Identification of hadronic tau lepton
decays using a deep neural network", JINST 17 (2022) P07023, arXiv:2201.08458): an
*inner* grid of 11 x 11 cells of 0.02 x 0.02 in (eta, phi) and an *outer* grid of
21 x 21 cells of 0.05 x 0.05, both centred on the tau; each cell holds three blocks of
features, e/gamma (86), muon (64) and hadrons (38): 188 features per cell. One tau is
(121 + 441) x 188 float32 = 422,624 bytes; the seeds' 1.18 MB per event is 2.8 taus.

What is real and what is synthesized (NanoAOD stores far less than MiniAOD):

* real: the tau directions and the 16 ``TAU_FEATURES`` (``Tau_*`` branches); in each
  cell and block, the highest-pT PF candidate of that block's type (``pdgId`` 11 and 22
  -> e/gamma; 13 -> muon; everything else -> hadrons) gives the first
  ``len(CELL_REAL_FEATURES)`` = 7 features (occupancy, pT fraction, deta, dphi, log pT,
  mass, candidate count). PF candidates are those of the file: all of them in PFNano
  (``PFCands``), fat-jet constituents only in plain NanoAOD v15 (``PFCand``).
* synthesized: the other 79 / 57 / 31 features of each occupied block (track quality,
  calorimeter energies, lepton identification in CMS) are standard-normal numbers drawn
  from ``numpy.random.default_rng((SYNTH_SEED, run, lumi, event, tau index))``:
  deterministic per event, zero in empty cells, so the model computes on dense data of
  the real size.
* tau candidates: CMS runs DeepTau on every MiniAOD tau (HPS candidates seeded by jets);
  NanoAOD keeps fewer (0.88 per event in nano_tt_v15.root, none in pfnano.root). With
  ``min_taus`` > 0, events with fewer taus get candidates along the leading jets not
  already matched to a tau (dR < 0.4), their tau features taken from the jet (pt, eta,
  phi, mass; the rest 0). ``min_taus = 3`` gives 1.27 MB per event, near the seeds'.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modules.particlenet_inputs import column, wrap_phi

INNER_CELLS, INNER_SIZE = 11, 0.02  # cells per side, cell size in eta and phi
OUTER_CELLS, OUTER_SIZE = 21, 0.05
BLOCKS = {"egamma": 86, "muon": 64, "hadron": 38}
"""Feature blocks of a cell and their sizes (DeepTau v2)."""
N_CELL_FEATURES = sum(BLOCKS.values())  # 188
CELL_REAL_FEATURES = ["valid", "pt_frac", "deta", "dphi", "log_pt", "mass", "n_cands"]
"""The first features of each block, computed from the block's highest-pT candidate in the cell."""
TAU_FEATURES = [
    "pt",
    "eta",
    "phi",
    "mass",
    "charge",
    "decayMode",
    "dxy",
    "dz",
    "chargedIso",
    "neutralIso",
    "leadTkPtOverTauPt",
    "leadTkDeltaEta",
    "leadTkDeltaPhi",
    "photonsOutsideSignalCone",
    "puCorr",
    "rawIso",
]
"""Columns of ``tau_features`` (the ``Tau_*`` branches; CMS DeepTau v2 has 43 such features)."""
DEEPTAU_CLASSES = ["e", "mu", "tau", "jet"]
"""Output classes of ``deeptau``, in softmax order."""
SYNTH_SEED = 20201204  # the date of seed talk 004, as a fixed seed
SEEDS_TAUS_PER_EVENT = 1.18e6 / ((INNER_CELLS**2 + OUTER_CELLS**2) * N_CELL_FEATURES * 4)
"""Tau multiplicity at which the grids make the seeds' 1.18 MB per event (2.79)."""
JET_MATCH_DR = 0.4

_PDG_BLOCK = {11: 0, 22: 0, 13: 1}  # -> block index; anything else: hadrons (2)


def input_bytes_per_tau() -> int:
    """Bytes of one tau's three inputs (float32): 422,624 + 64."""
    return 4 * ((INNER_CELLS**2 + OUTER_CELLS**2) * N_CELL_FEATURES + len(TAU_FEATURES))


def _col(collection: Any, name: str, dtype: type = np.float64) -> np.ndarray:
    try:
        return column(collection, name, dtype)
    except KeyError as err:
        raise KeyError(f"deeptau inputs: {err.args[0]}") from None


def tau_candidates(taus: Any, jets: Any | None, min_taus: int) -> np.ndarray:
    """Tau features float32 (n, 16) in ``TAU_FEATURES`` order: the taus, then jet seeds.

    Jet seeds (see the module docstring) are added only while n < ``min_taus``.
    """
    n_tau = len(_col(taus, "pt")) if taus is not None else 0
    rows = np.zeros((n_tau, len(TAU_FEATURES)), dtype=np.float32)
    for i, name in enumerate(TAU_FEATURES):
        if n_tau:
            rows[:, i] = _col(taus, name)
    missing = min_taus - n_tau
    if missing <= 0 or jets is None:
        return rows
    jet_pt, jet_eta, jet_phi = _col(jets, "pt"), _col(jets, "eta"), _col(jets, "phi")
    free = np.ones(len(jet_pt), dtype=bool)
    for eta, phi in rows[:, 1:3]:
        free &= np.hypot(jet_eta - eta, wrap_phi(jet_phi - phi)) > JET_MATCH_DR
    order = [j for j in np.argsort(-jet_pt, kind="stable") if free[j]][:missing]
    seeds = np.zeros((len(order), len(TAU_FEATURES)), dtype=np.float32)
    if order:
        seeds[:, :4] = np.stack([jet_pt[order], jet_eta[order], jet_phi[order], _col(jets, "mass")[order]], axis=1)
    return np.concatenate([rows, seeds])


def _fill_grid(
    grid: np.ndarray, cands: dict[str, np.ndarray], tau: np.ndarray, n_cells: int, size: float, rng: np.random.Generator
) -> None:
    """Fill ``grid`` float32 (188, n, n) for one tau from candidate arrays (see module doc)."""
    half = n_cells * size / 2
    deta = cands["eta"] - tau[1]
    dphi = wrap_phi(cands["phi"] - tau[2])
    inside = (np.abs(deta) < half) & (np.abs(dphi) < half)
    if not inside.any():
        return
    ieta = np.minimum(((deta[inside] + half) / size).astype(np.int64), n_cells - 1)
    iphi = np.minimum(((dphi[inside] + half) / size).astype(np.int64), n_cells - 1)
    pt, block = cands["pt"][inside], cands["block"][inside]
    cell = (block * n_cells + ieta) * n_cells + iphi  # one key per (block, cell)
    order = np.lexsort((-pt, cell))  # by key, highest pT first
    keys, first, counts = np.unique(cell[order], return_index=True, return_counts=True)
    best = order[first]
    offsets = np.cumsum([0, *BLOCKS.values()])[:-1]
    b, e, p = keys // (n_cells * n_cells), (keys // n_cells) % n_cells, keys % n_cells
    real = np.stack(
        [
            np.ones(len(keys)),
            pt[best] / max(float(tau[0]), 1e-3),
            deta[inside][best],
            dphi[inside][best],
            np.log(np.maximum(pt[best], 1e-3)),
            cands["mass"][inside][best],
            counts.astype(np.float64),
        ],
        axis=1,
    ).astype(np.float32)
    n_real = len(CELL_REAL_FEATURES)
    for k, width in enumerate(BLOCKS.values()):
        sel = b == k
        if not sel.any():
            continue
        start = offsets[k]
        grid[start : start + n_real, e[sel], p[sel]] = real[sel].T
        synth = rng.standard_normal((width - n_real, int(sel.sum())), dtype=np.float32)
        grid[start + n_real : start + width, e[sel], p[sel]] = synth


def build_deeptau_inputs(
    taus: Any, pfcands: Any, jets: Any | None = None, *, min_taus: int = 0, event_id: tuple[int, int, int] = (0, 0, 0)
) -> dict[str, np.ndarray]:
    """The three ``deeptau`` inputs for every tau candidate of one event.

    Args:
        taus: the event's ``Tau`` collection (fields ``TAU_FEATURES``), or None.
        pfcands: the event's PF candidates; fields ``pt`` (GeV), ``eta``, ``phi``,
            ``mass`` (GeV), ``pdgId``.
        jets: the event's AK4 ``Jet`` (``pt``, ``eta``, ``phi``, ``mass``); needed only
            when ``min_taus`` > 0.
        min_taus: add jet-seeded candidates up to this many (module docstring).
        event_id: (run, lumi, event): seeds the synthesized features.

    Returns:
        A dict of ``inner`` float32 (n, 188, 11, 11), ``outer`` float32 (n, 188, 21, 21)
        and ``tau_features`` float32 (n, 16); cell axes (eta, phi) ascending, feature blocks
        e/gamma [0, 86), muon [86, 150), hadrons [150, 188). ``n`` may be 0.

    Raises:
        KeyError: a needed field is missing (the message names it).
    """
    tau_rows = tau_candidates(taus, jets, min_taus)
    n = len(tau_rows)
    inner = np.zeros((n, N_CELL_FEATURES, INNER_CELLS, INNER_CELLS), dtype=np.float32)
    outer = np.zeros((n, N_CELL_FEATURES, OUTER_CELLS, OUTER_CELLS), dtype=np.float32)
    if n:
        cands = {name: _col(pfcands, name) for name in ("pt", "eta", "phi", "mass")}
        pdg = np.abs(_col(pfcands, "pdgId", np.int64))
        block = np.full(len(pdg), 2, dtype=np.int64)
        for pid, index in _PDG_BLOCK.items():
            block[pdg == pid] = index
        cands["block"] = block
        for i, tau in enumerate(tau_rows):
            rng = np.random.default_rng((SYNTH_SEED, *map(int, event_id), i))
            _fill_grid(inner[i], cands, tau, INNER_CELLS, INNER_SIZE, rng)
            _fill_grid(outer[i], cands, tau, OUTER_CELLS, OUTER_SIZE, rng)
    np.nan_to_num(tau_rows, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return {"inner": inner, "outer": outer, "tau_features": tau_rows}
