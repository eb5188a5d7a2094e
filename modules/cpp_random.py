"""C++'s ``std::mt19937`` with libstdc++'s distributions, as CMSSW's test modules draw.

CMSSW's SONIC test modules (HeterogeneousCore/SonicTriton/test: ``TritonGraphModules.cc``,
``TritonImageProducer.cc``) seed a ``std::mt19937`` per event and draw from
``std::uniform_int_distribution<int>`` and ``std::normal_distribution<float>``. The engine
is specified by the C++ standard; the distributions are not, so this follows libstdc++'s
(GCC 11 and later, what CMSSW builds with), read in its ``bits/uniform_int_dist.h`` and
``bits/random.tcc``:

* the engine: numpy's ``RandomState`` seeded with a 32-bit integer runs the same
  Mersenne Twister with the same seeding (``init_genrand``), and ``randint`` over the full
  32-bit range returns its raw outputs in order (checked against the standard's value:
  the 10000th output of a default-seeded ``mt19937``, seed 5489, is 4123659995);
* ``uniform_int_distribution(a, b)``: Lemire's nearly divisionless method on 32-bit
  outputs (``_S_nd``): ``product = u * (b - a + 1)`` in 64 bits, resampled while its low 32
  bits are below ``2**32 mod (b - a + 1)``, result ``a + (product >> 32)``;
* ``normal_distribution<float>(mean, stddev)``: Marsaglia's polar method on
  ``generate_canonical<float, 24>`` (one output: ``float(u) / 2**32``, kept below 1), two
  values per accepted pair (``y * m`` first, then ``x * m`` kept for the next call), each
  ``value * stddev + mean``, in single precision.

Single-precision arithmetic is numpy's IEEE float32, ``log`` computed in double and rounded
to float (correctly rounded). glibc's ``logf`` is not always correctly rounded: against a
g++ 12 build (``tests/test_sonic_test_modules.py``), the integers drawn are identical and
about 0.02 % of the normal values differ, by an ulp or two after the scaling; a C++ build
that fuses multiply-adds could differ likewise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Mt19937"]

_CHUNK = 4096  # raw outputs fetched at a time
_TWO32 = 2**32


class Mt19937:
    """One ``std::mt19937`` engine and the state of one ``normal_distribution<float>``.

    Args:
        seed: the 32-bit seed (taken modulo 2**32, as ``std::uint32_t``).
    """

    def __init__(self, seed: int) -> None:
        self._engine = np.random.RandomState(seed % _TWO32)
        self._buffer = np.empty(0, np.uint32)
        self._saved: np.float32 | None = None  # the normal distribution's kept value

    def _peek(self, n: int) -> np.ndarray:
        """The next ``n`` raw outputs (uint32), not consumed yet."""
        if self._buffer.size < n:
            more = self._engine.randint(0, _TWO32, size=max(n - self._buffer.size, _CHUNK), dtype=np.uint32)
            self._buffer = np.concatenate([self._buffer, more])
        return self._buffer[:n]

    def _consume(self, n: int) -> None:
        self._buffer = self._buffer[n:]

    def raw(self, n: int) -> np.ndarray:
        """The next ``n`` outputs of the engine (uint32, shape (n,))."""
        values = self._peek(n).copy()
        self._consume(n)
        return values

    def uniform_int(self, a: int, b: int, n: int = 1) -> np.ndarray:
        """``n`` draws of ``std::uniform_int_distribution<int>(a, b)`` (int64, shape (n,)).

        Raises:
            ValueError: ``b < a``, or a range wider than 2**32 values.
        """
        span = b - a + 1
        if span < 1 or span > _TWO32:
            raise ValueError(f"uniform_int({a}, {b}): an empty range or one wider than 2**32 values")
        threshold = (_TWO32 - span) % span
        out = np.empty(n, np.int64)
        done = 0
        while done < n:
            raw = self._peek(n - done)
            product = raw.astype(np.uint64) * np.uint64(span)
            rejected = np.flatnonzero((product & np.uint64(0xFFFFFFFF)) < threshold)
            good = raw.size if rejected.size == 0 else int(rejected[0])
            out[done : done + good] = (product[:good] >> np.uint64(32)).astype(np.int64) + a
            self._consume(good + (0 if rejected.size == 0 else 1))  # a rejected output is used up
            done += good
        return out

    def normal_float(self, mean: float, stddev: float, n: int) -> np.ndarray:
        """``n`` draws of ``std::normal_distribution<float>(mean, stddev)`` (float32, shape (n,))."""
        values: list[np.ndarray] = []
        have = 0
        if n and self._saved is not None:
            values.append(np.array([self._saved], np.float32))
            self._saved = None
            have = 1
        pairs_needed = (n - have + 1) // 2
        while pairs_needed:
            raw = self._peek(2 * (pairs_needed + pairs_needed // 3 + 8))  # ~21 % of pairs are rejected
            u = raw.astype(np.float32) / np.float32(_TWO32)
            u[u >= 1] = np.nextafter(np.float32(1), np.float32(0))
            x = np.float32(2) * u[0::2] - np.float32(1)
            y = np.float32(2) * u[1::2] - np.float32(1)
            r2 = x * x + y * y
            accepted = np.flatnonzero((r2 <= 1) & (r2 != 0))[:pairs_needed]
            used = raw.size if accepted.size < pairs_needed else 2 * (int(accepted[-1]) + 1)
            self._consume(used)
            r2 = r2[accepted]
            log = np.log(r2.astype(np.float64)).astype(np.float32)
            mult = np.sqrt(np.float32(-2) * log / r2)
            pair = np.empty(2 * accepted.size, np.float32)
            pair[0::2] = y[accepted] * mult
            pair[1::2] = x[accepted] * mult
            values.append(pair)
            pairs_needed -= accepted.size
        drawn = np.concatenate(values) if values else np.empty(0, np.float32)
        if drawn.size > n:  # the odd one out is kept for the next call, as libstdc++ does
            self._saved = drawn[n]
            drawn = drawn[:n]
        return drawn * np.float32(stddev) + np.float32(mean)
