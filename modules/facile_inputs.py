"""Inputs of the ``facile`` model: one row per HCAL channel, SYNTHESIZED per event.

FACILE is the small network (about 2,000 parameters) that CMS tested in place of the
HCAL local reconstruction (MAHI) of the HLT, as a service on GPUs and FPGAs (seed talk
004; J. Duarte et al., "FPGA-accelerated machine learning inference as a service for
particle physics computing", arXiv:1904.08986, and arXiv:2007.10359): one inference row
per HCAL channel, about 16,000 rows per event ("FACILE (batch 16000)").

NanoAOD holds no HCAL channel data, so every row here is synthesized, deterministically
from ``numpy.random.default_rng((SYNTH_SEED, run, lumi, event))``: the channel geometry
(ieta, iphi, depth on a 58 x 72 x 4 grid, in channel order), a pedestal of 3 +- 0.5 fC
per channel plus 0.3 fC of noise in each of the 8 time samples, a gain of 1 +- 0.05 and,
in 20 % of the channels, a pulse of exponential amplitude (mean 20 fC) with a fixed shape.
Only the event id comes from the input file, so these inputs work with an ``EmptySource``
as well.
"""

from __future__ import annotations

import functools

import numpy as np

FACILE_N_CHANNELS = 16000
"""Rows per event by default, from seed talk 004 ("FACILE (batch 16000)")."""
FACILE_FEATURES = [
    "ieta",
    "cos_iphi",
    "sin_iphi",
    "depth",
    "is_endcap",
    "gain",
    "pedestal",
    "ts0",
    "ts1",
    "ts2",
    "ts3",
    "ts4",
    "ts5",
    "ts6",
    "ts7",
]
"""Columns of ``rechit_inputs`` (15): geometry scaled to O(1), then log(1 + charge / fC) per time sample."""
SYNTH_SEED = 20201204
OCCUPANCY = 0.2  # fraction of channels with a pulse
PULSE_SHAPE = np.array([0.0, 0.02, 0.10, 0.55, 0.25, 0.06, 0.02, 0.0])  # charge fraction per time sample
_N_IETA, _N_IPHI = 58, 72  # |ieta| 1..29 on both sides, iphi 1..72


@functools.lru_cache(maxsize=4)
def _geometry(n_channels: int) -> np.ndarray:
    """Columns ieta, cos_iphi, sin_iphi, depth, is_endcap: float32 (n_channels, 5), read-only."""
    index = np.arange(n_channels)
    ieta_index = index % _N_IETA
    ieta = np.where(ieta_index < 29, ieta_index - 29, ieta_index - 28)  # -29..-1, 1..29
    iphi = (index // _N_IETA) % _N_IPHI + 1
    depth = index // (_N_IETA * _N_IPHI) % 4 + 1
    phi = 2 * np.pi * (iphi - 0.5) / _N_IPHI
    columns = np.stack([ieta / 29.0, np.cos(phi), np.sin(phi), depth / 4.0, np.abs(ieta) > 16], axis=1)
    columns = columns.astype(np.float32)
    columns.flags.writeable = False
    return columns


def build_facile_inputs(event_id: tuple[int, int, int], n_channels: int = FACILE_N_CHANNELS) -> np.ndarray:
    """The ``facile`` input of one event.

    Args:
        event_id: (run, lumi, event); seeds the synthesis.
        n_channels: rows (channels) to make.

    Returns:
        float32 (n_channels, 15), columns ``FACILE_FEATURES``.
    """
    rng = np.random.default_rng((SYNTH_SEED, *map(int, event_id)))
    f32 = np.float32
    pedestal = 3.0 + 0.5 * rng.standard_normal(n_channels, dtype=f32)
    charge = 0.3 * rng.standard_normal((n_channels, 8), dtype=f32)
    charge += pedestal[:, None]
    amplitude = 20.0 * rng.standard_exponential(n_channels, dtype=f32)
    amplitude *= rng.random(n_channels, dtype=f32) < OCCUPANCY
    charge += amplitude[:, None] * PULSE_SHAPE.astype(f32)[None, :]
    rows = np.empty((n_channels, len(FACILE_FEATURES)), dtype=f32)
    rows[:, :5] = _geometry(n_channels)
    rows[:, 5] = 1.0 + 0.05 * rng.standard_normal(n_channels, dtype=f32)  # gain
    rows[:, 6] = pedestal / 3.0
    np.log1p(np.maximum(charge, 0.0, out=charge), out=rows[:, 7:])
    return rows
