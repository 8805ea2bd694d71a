"""Honest comparisons of a change with the baseline: robust noise, intervals, "inconclusive".

Why not mean and standard deviation: one slow run (970 among ~1028) doubled the night's noise
estimate and threw away two real +5-6% changes. Here each sample is summarized by its median,
its noise by the MAD (scaled to a normal sigma), and runs more than OUTLIER_Z robust sigmas off
are named as outliers and left out of the center; a difference is called only when it clears
Z standard errors of the difference, else it is "inconclusive" and says so.
"""

from __future__ import annotations

import math
import statistics

from pydantic import BaseModel

#: Modified z-score above which a run is an outlier (Iglewicz & Hoaglin's 3.5).
OUTLIER_Z = 3.5
#: Standard errors a difference must clear (about a 95% two-sided interval).
Z = 2.0
#: Sigma never below this fraction of the median: identical runs still have timer noise.
SIGMA_FLOOR = 0.002


class Summary(BaseModel):
    n: int
    center: float
    sigma: float
    low: float
    high: float
    outliers: list[int] = []  # 1-based run numbers
    outlier_values: list[float] = []

    def describe(self, unit: str = "") -> str:
        u = f" {unit}" if unit else ""
        s = f"{self.center:.4g}{u} [{self.low:.4g}, {self.high:.4g}] over {self.n} runs"
        if self.outliers:
            runs = ", ".join(
                f"#{i} ({v:.4g})" for i, v in zip(self.outliers, self.outlier_values, strict=True)
            )
            s += f"; outlier runs left out: {runs}"
        return s


def summarize(values: list[float]) -> Summary:
    """Median center, MAD sigma, outliers named, and an interval for the center."""
    if not values:
        raise ValueError("no values to summarize")
    med = statistics.median(values)
    mad = statistics.median([abs(v - med) for v in values])
    sigma = 1.4826 * mad
    floor = max(SIGMA_FLOOR * abs(med), 1e-12)  # all-zero runs (errors == 0) have no spread
    out = (
        [i for i, v in enumerate(values) if abs(v - med) / max(sigma, floor) > OUTLIER_Z]
        if len(values) >= 3
        else []
    )
    kept = [v for i, v in enumerate(values) if i not in out]
    center = statistics.median(kept)
    if len(kept) > 2:  # inliers' own spread, robust to the outliers already set aside
        sigma = max(sigma, statistics.stdev(kept) * 0.5)
    sigma = max(sigma, floor)
    half = Z * sigma / math.sqrt(len(kept))
    return Summary(
        n=len(values),
        center=center,
        sigma=sigma,
        low=center - half,
        high=center + half,
        outliers=[i + 1 for i in out],
        outlier_values=[values[i] for i in out],
    )


class Comparison(BaseModel):
    verdict: str  # "better" | "worse" | "inconclusive"
    gain: float  # signed so that positive is better
    gain_low: float
    gain_high: float
    relative: float  # gain / baseline center

    def describe(self, unit: str = "") -> str:
        u = f" {unit}" if unit else ""
        return (
            f"{self.verdict}: {self.gain:+.4g}{u} ({self.relative:+.1%}), "
            f"interval [{self.gain_low:+.4g}, {self.gain_high:+.4g}]"
        )


def compare(base: Summary, change: Summary, higher_is_better: bool = True) -> Comparison:
    sign = 1.0 if higher_is_better else -1.0
    gain = sign * (change.center - base.center)
    se = math.sqrt(
        base.sigma**2 / max(1, base.n - len(base.outliers))
        + change.sigma**2 / max(1, change.n - len(change.outliers))
    )
    low, high = gain - Z * se, gain + Z * se
    verdict = "better" if low > 0 else "worse" if high < 0 else "inconclusive"
    rel = gain / abs(base.center) if base.center else 0.0
    return Comparison(verdict=verdict, gain=gain, gain_low=low, gain_high=high, relative=rel)
