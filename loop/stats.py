"""Honest comparisons of a change with the baseline: robust noise, intervals, "inconclusive".

Why not mean and standard deviation: one slow run (970 among ~1028) doubled the night's noise
estimate and threw away two real +5-6% changes. Here each sample is summarized by its median,
its noise by the MAD (scaled to a normal sigma), and, from OUTLIER_MIN_RUNS runs on, runs more
than OUTLIER_Z robust sigmas off are named as outliers and left out of the center (with fewer
runs the MAD is too rough to tell an outlier from a real run: an A/A night dropped a real
baseline run that way). Intervals use Student's t, not a normal z: from 3 runs z = 2 covers far
less than 95%.

Why interleaved baselines (`interleaved_compare`): on a real H200 a relaunched server differs
from the last launch about as much as two runs of one launch differ
(bench/results/h200_spread.json), and a night drifts. Repeating runs inside one launch shrinks
neither; only more launches do. So the baseline is launched again between experiments, each
experiment launch is compared with the baseline launches on either side of it (a linear drift
cancels), and the launch-to-launch noise is read off the night's own chain of baseline launches
(half the mean squared successive difference: drift barely moves it).
"""

from __future__ import annotations

import math
import statistics

from pydantic import BaseModel

#: Modified z-score above which a run is an outlier (Iglewicz & Hoaglin's 3.5).
OUTLIER_Z = 3.5
#: Fewest runs from which outliers are set aside at all.
OUTLIER_MIN_RUNS = 6
#: Standard errors shown as "the noise" (2 sigma); decisions use t quantiles below.
Z = 2.0
#: Two-sided confidence of every interval a decision rests on.
CONFIDENCE = 0.95
#: Interleaved judging: the error allowed on each side (a false keep, a false discard), over
#: all the looks at one change. bench/aa_night.py holds both to 5%: at 0.05, two of its runs
#: (80 no-ops per noise level) came out at 3.75% a side, so one run's 40 no-ops crossed 5% by
#: chance; half of it leaves a margin and still detects +5% at the engine level.
ALPHA_SIDE = 0.025
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
        if len(values) >= OUTLIER_MIN_RUNS
        else []
    )
    kept = [v for i, v in enumerate(values) if i not in out]
    center = statistics.median(kept)
    if len(kept) > 2:  # inliers' own spread, robust to the outliers already set aside
        sigma = max(sigma, statistics.stdev(kept) * 0.5)
    sigma = max(sigma, floor)
    half = (
        t_quantile(1 - (1 - CONFIDENCE) / 2, max(1, len(kept) - 1)) * sigma / math.sqrt(len(kept))
    )
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
    n_base = max(1, base.n - len(base.outliers))
    n_change = max(1, change.n - len(change.outliers))
    se = math.sqrt(base.sigma**2 / n_base + change.sigma**2 / n_change)
    t = t_quantile(1 - (1 - CONFIDENCE) / 2, max(1, min(n_base, n_change) - 1))
    low, high = gain - t * se, gain + t * se
    verdict = "better" if low > 0 else "worse" if high < 0 else "inconclusive"
    rel = gain / abs(base.center) if base.center else 0.0
    return Comparison(verdict=verdict, gain=gain, gain_low=low, gain_high=high, relative=rel)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom, else the Cornish-Fisher
    expansion around the normal quantile (within 1% from df = 5 at p <= 0.995; at fewer
    degrees of freedom in the far tail it errs wide, the safe side); no scipy."""
    if df <= 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = statistics.NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


class Launch(BaseModel):
    """One server start's runs, by when it started: the unit of replication."""

    at: float
    center: float
    #: the spread of this launch's own runs (their variance over their count, on logs when
    #: every run is positive): a launch's center is never less noisy than that
    run_var: float = 0.0


def launch_noise(chain: list[Launch]) -> tuple[float, int]:
    """Launch-to-launch sigma of the baseline chain and its degrees of freedom: half the mean
    squared successive difference (von Neumann), which a slow drift hardly inflates. Its
    successive differences share launches, so it is worth about 2/3 of n - 1 independent
    degrees of freedom (von Neumann's efficiency): fewer are claimed, not more."""
    b = [x.center for x in sorted(chain, key=lambda x: x.at)]
    if len(b) < 2:
        return 0.0, 0
    mssd = sum((y - x) ** 2 for x, y in zip(b, b[1:], strict=False)) / (len(b) - 1)
    return math.sqrt(mssd / 2), max(1, (2 * (len(b) - 1)) // 3)


def interleaved_compare(
    chain: list[Launch],
    launches: list[Launch],
    higher_is_better: bool = True,
    looks: int = 1,
    others: list[list[Launch]] | None = None,
) -> Comparison:
    """Each launch of the change against the mean of the baseline launches just before and
    just after it; t interval on the mean difference. The launch noise comes from the baseline
    chain, pooled with the spread of every change's own repeated launches around that change's
    mean (`others`, this one included: their effects cancel out, their noise is the same), so a
    short night still has degrees of freedom. `looks` is how many times this change may be
    judged as repeats are added: each look spends 1/looks of each side's error rate
    (Bonferroni), so adding repeats until the interval decides does not raise the false keeps
    or discards."""
    sign = 1.0 if higher_is_better else -1.0
    base = sorted(chain, key=lambda x: x.at)
    # Throughput and latency noise is multiplicative (a night that drifts 20% faster also
    # spreads 20% wider): judged on logs, every launch weighs the same; a metric that can be 0
    # (errors) is judged as it is.
    everything = [*base, *launches, *(x for o in others or [] for x in o)]
    logs = all(x.center > 0 for x in everything)

    def scale(v: float) -> float:
        return math.log(v) if logs else v

    def diffs_of(row: list[Launch]) -> tuple[list[float], list[float], list[float]]:
        d, w, r = [], [], []
        for e in row:
            near = [b for b in base if b.at < e.at][-1:] + [b for b in base if b.at > e.at][:1]
            if near:
                r.append(statistics.fmean(b.center for b in near))
                d.append(sign * (scale(e.center) - statistics.fmean(scale(b.center) for b in near)))
                w.append(1.0 + 1.0 / len(near))
        return d, w, r

    sigma, df = launch_noise([Launch(at=x.at, center=scale(x.center)) for x in base])
    ss, extra = sigma**2 * df, 0
    for row in others if others is not None else [launches]:
        d, w, _ = diffs_of(row)
        if len(d) > 1:
            m = statistics.fmean(d)
            ss += sum((x - m) ** 2 / wx for x, wx in zip(d, w, strict=True))
            extra += len(d) - 1
    if df + extra > 0:
        sigma, df = math.sqrt(ss / (df + extra)), df + extra
    # floor: the launch-to-launch noise includes the noise of each launch's own runs; a chain
    # that happens to run smooth must not claim less (an A/A night kept +73% no-ops that way)
    own = [x.run_var for x in everything if x.run_var > 0]
    if own:
        sigma = max(sigma, math.sqrt(statistics.fmean(own)))
    diffs, weights, refs = diffs_of(launches)
    ref = statistics.fmean(refs) if refs else 0.0

    def gain_of(d: float) -> float:  # back to the metric's units, at the neighbours' level
        return sign * ref * (math.exp(sign * d) - 1.0) if logs else d

    if not diffs or df < 1 or sigma <= 0:
        gain = gain_of(statistics.fmean(diffs)) if diffs else 0.0
        return Comparison(
            verdict="inconclusive",
            gain=gain,
            gain_low=-math.inf,
            gain_high=math.inf,
            relative=gain / abs(ref) if ref else 0.0,
        )
    k = len(diffs)
    mean = statistics.fmean(diffs)
    half = t_quantile(1 - ALPHA_SIDE / max(1, looks), df) * sigma * math.sqrt(sum(weights)) / k
    low, high = mean - half, mean + half
    verdict = "better" if low > 0 else "worse" if high < 0 else "inconclusive"
    gain = gain_of(mean)
    return Comparison(
        verdict=verdict,
        gain=gain,
        gain_low=gain_of(low),
        gain_high=gain_of(high),
        relative=gain / abs(ref) if ref else 0.0,
    )


def axis_range(lo: float, hi: float) -> tuple[float, float]:
    """A chart axis for values lo..hi: from 0 when nothing is negative (latency, throughput and
    error counts are never below 0, and a bar that starts above 0 overstates every
    difference), padded above; around the data, padded, when values go negative."""
    if lo >= 0:  # below 1e-9 is a zero's rounding (an all-zero error count): a unit axis
        return 0.0, (hi * 1.1 if hi > 1e-9 else 1.0)
    if hi <= lo:
        pad = abs(hi) * 0.05 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.15
    return lo - pad, hi + pad
