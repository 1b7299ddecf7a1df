"""Number formatting for every figure a reader sees (reports, check tables, verdict reasons), tested.

The one rule that matters: a non-zero error is never shown as ``0``. Fixed-point rounding would print a k3
of 3.2e-05 as ``0.00`` and make a real divergence read as a clean pass, so small magnitudes switch to
significant-figure (``%g``) notation. Pure: no I/O.
"""

from __future__ import annotations

import math


def sig(value: float | None, digits: int = 2) -> str:
    """``value`` to ``digits`` significant figures: ``3.2e-05``, ``0.012``, ``1.5``, ``2.1e+03``; ``0`` only for 0.

    Magnitudes from ``10**digits`` up to a million print as rounded whole numbers (``1,200``).

    >>> sig(3.2e-05), sig(0.0123), sig(0.0), sig(None), sig(1234.5)
    ('3.2e-05', '0.012', '0', '–', '1,200')
    """
    if value is None:
        return "–"
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if value == 0.0:
        return "0"
    if 10**digits <= abs(value) < 1e6:
        # 210,000 reads better than 2.1e+05; still rounded to ``digits`` significant figures.
        return f"{round(value, digits - 1 - math.floor(math.log10(abs(value)))):,.0f}"
    text = f"{value:.{digits}g}"
    # %g of 1e-320 (subnormal) and friends stays non-zero by construction; assert the rule, cheaply.
    return text if float(text) != 0.0 else f"{value:.{digits}e}"


def plain(value: float) -> str:
    """A figure in a one-line reason or a terminal table: 3 significant figures in ``[1e-3, 1e4)``, else
    ``1.23e-05`` style; ``0`` only for 0 (the same never-round-to-zero rule as :func:`sig`).

    >>> plain(3.2e-05), plain(0.01234), plain(0.0), plain(12345.0)
    ('3.20e-05', '0.0123', '0', '1.23e+04')
    """
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"


def signed(value: float | None, digits: int = 2) -> str:
    """Like :func:`sig` with an explicit ``+`` on positive values (for Δ and changes)."""
    text = sig(value, digits)
    if value is not None and not math.isnan(value) and value > 0:
        return "+" + text
    return text


def logprob(value: float | None) -> str:
    """A logprob in nats: three significant figures (``-1.04``, ``-0.000123`` → ``-0.000123``)."""
    return sig(value, 3)


def percent(fraction: float | None) -> str:
    """A fraction as a percentage: ``0.0123`` → ``1.2%``; ``1.2e-06`` → ``0.00012%``; ``0`` → ``0%``."""
    if fraction is None:
        return "–"
    pct = 100.0 * float(fraction)
    return (f"{pct:.0f}" if 10.0 <= abs(pct) < 1e6 else sig(pct, 2)) + "%"


def count(value: int | float | None) -> str:
    """An integer count with thousands separators: ``12345`` → ``12,345``."""
    if value is None:
        return "–"
    if isinstance(value, float) and not value.is_integer():
        return sig(value, 2)
    return f"{int(value):,}"


def ratio(current: float | None, reference: float | None) -> str:
    """How ``current`` compares with ``reference`` (both ≥ 0, e.g. k3 statistics): ``×12 ↑``, ``≈``, ``new``.

    Ratios, not differences: k3 statistics span orders of magnitude, and "12× the baseline's p99" is what a
    reader can act on. Within a factor 1.25 either way reads as unchanged.
    """
    if current is None or reference is None or math.isnan(current) or math.isnan(reference):
        return "–"
    if reference == 0.0:
        return "= 0" if current == 0.0 else "new (was 0)"
    if current == 0.0:
        return "now 0"
    r = current / reference
    if 0.8 <= r <= 1.25:
        return "≈"
    return f"×{sig(r, 2)} {'↑' if r > 1 else '↓'}"


def times(value: float, digits: int = 3) -> str:
    """A factor: ``1.41×``, ``10,800×``, ``0.5×`` — the one spelling of "N times" in every output (a cell and a
    reason on the same row once read ``10775×`` and ``1.08e+04x``).

    >>> times(1.4132), times(10775.0), times(1.0)
    ('1.41×', '10,800×', '1×')
    """
    return f"{sig(value, digits)}×"


def times_range(low: float, high: float, digits: int = 3) -> str:
    """An interval of factors, ``1.27–1.35×``; one figure when both ends print alike (identical reruns give a
    degenerate interval, which ``1.27–1.27×`` only dresses up).

    >>> times_range(1.27, 1.35), times_range(1.2701, 1.2702)
    ('1.27–1.35×', '1.27×')
    """
    lo, hi = sig(low, digits), sig(high, digits)
    return f"{lo}×" if lo == hi else f"{lo}–{hi}×"


def short_sha(sha: str | None) -> str:
    """The first 7 characters of a commit id (``–`` when unknown)."""
    if not sha:
        return "–"
    return sha[:7]
