"""The numpy path of ``aecs_mongo.vectors``: the same numbers as its pure-Python loops, in bulk. Pure.

Imported only when numpy is installed (``aecs-mongo[vectors]``) and not switched off; numpy is
passed in, so this module never imports it by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

__all__ = ["block_upper_bounds", "quantize_rows", "upper_bounds"]


def quantize_rows(np: ModuleType, rows: Sequence[Sequence[float]]) -> list[tuple[bytes, float, float]]:
    """``vectors.quantize`` of each row (rows of one length, already float32 values)."""
    x = np.asarray(rows, dtype=np.float64)
    peak = np.abs(x).max(axis=1)
    norm = np.sqrt((x * x).sum(axis=1))
    safe = np.where(peak == 0.0, 1.0, peak)
    q = np.rint(x / safe[:, None] * 127.0)
    step = safe / 127.0
    residual = np.sqrt(((x - q * step[:, None]) ** 2).sum(axis=1))
    q8 = q.astype(np.int8)
    out = []
    for i in range(len(rows)):
        if peak[i] == 0.0 or norm[i] == 0.0:
            out.append((bytes(x.shape[1]), 0.0, 0.0))
        else:
            out.append((q8[i].tobytes(), float(step[i] / norm[i]), float(residual[i] / norm[i])))
    return out


def upper_bounds(
    np: ModuleType, unit: Sequence[float], chunk: Sequence[tuple[str, bytes, float, float]], slack: float
) -> list[float]:
    """``scale * (unit · q) + error + slack`` of each ``(_id, int8 bytes, scale, error)`` row."""
    matrix = np.frombuffer(b"".join(q for _, q, _, _ in chunk), dtype=np.int8).reshape(len(chunk), len(unit))
    dots = matrix.astype(np.float64) @ np.asarray(unit, dtype=np.float64)
    scales = np.fromiter((s for _, _, s, _ in chunk), dtype=np.float64, count=len(chunk))
    errors = np.fromiter((e for _, _, _, e in chunk), dtype=np.float64, count=len(chunk))
    bounds: list[float] = (scales * dots + errors + slack).tolist()
    return bounds


def block_upper_bounds(
    np: ModuleType,
    unit: Sequence[float],
    q: bytes,
    dims: int,
    rows: Sequence[int],
    scales: Sequence[float],
    errors: Sequence[float],
    slack: float,
) -> list[float]:
    """``scales[i] * (unit · row i) + errors[i] + slack`` of the ``rows`` of one block's int8 matrix."""
    matrix = np.frombuffer(q, dtype=np.int8).reshape(-1, dims)
    picked = np.asarray(rows, dtype=np.intp)
    if len(picked) < len(matrix):
        matrix = matrix[picked]
    dots = matrix.astype(np.float64) @ np.asarray(unit, dtype=np.float64)
    bounds: list[float] = (np.asarray(scales)[picked] * dots + np.asarray(errors)[picked] + slack).tolist()
    return bounds
