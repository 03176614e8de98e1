"""Counter-based random numbers: the value for global index i depends only on (stream, i).

So every rank generates exactly the slice of data it owns, and the data is identical for any
decomposition. The mixer is SplitMix64 (Steele, Lea, Flood 2014) applied to stream_key + i * golden.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_SCALE = 1.0 / float(1 << 53)


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _stream_key(stream: int) -> np.uint64:
    return _mix64(np.array([stream], dtype=np.uint64) * _GOLDEN + _GOLDEN)[0]


def bits(stream: int, index: np.ndarray) -> np.ndarray:
    """64 random bits per global index (uint64 array of index's shape)."""
    z = np.asarray(index, dtype=np.uint64) * _GOLDEN + _stream_key(stream)
    return _mix64(z)


def uniform(stream: int, index: np.ndarray) -> np.ndarray:
    """Uniform doubles in [0, 1), 53 random bits each, one per global index."""
    return (bits(stream, index) >> np.uint64(11)).astype(np.float64) * _SCALE


def block_index(shape: tuple[int, ...], start: tuple[int, ...], stop: tuple[int, ...]) -> np.ndarray:
    """Row-major global flat indices of the box [start, stop) of an array of global `shape`."""
    flat = np.zeros((1,) * len(shape), dtype=np.uint64)
    for axis, (n, a, b) in enumerate(zip(shape, start, stop, strict=True)):
        ax = np.arange(a, b, dtype=np.uint64).reshape([-1 if k == axis else 1 for k in range(len(shape))])
        flat = flat * np.uint64(n) + ax
    return flat
