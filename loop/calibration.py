"""The keep/discard rule on simulated nights: its false keeps, false discards and power.

Why: a real A/A night (bench/aa_night.py) takes a minute of real processes per 8 changes, so
it sees a few dozen no-ops, and a rule at 2.5% a side lands above 5% in such a sample more
often than one would think: adjacent changes share a baseline launch and a night shares one
noise estimate, so its errors come in clusters. This replays the night's order of launches
(baseline, change, baseline, ..., then repeats of the undecided ones, each followed by a
baseline, up to `max_launches`) through the very judge the night uses
(`interleaved_compare`), thousands of times, so the rule itself is measured apart from the
luck of one bench run. The noise is the emulator's: per-run log-normal spread inside a launch,
a per-launch factor and a linear drift per launch, fitted to a real H200 night by `fitted`.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

from pydantic import BaseModel

from loop.stats import Launch, interleaved_compare


class Noise(BaseModel):
    """Relative spreads of one benchmark run's result."""

    within: float  # run-to-run inside a launch
    between: float  # launch-to-launch
    drift: float  # steady change per launch through the night

    def scaled(self, run_cv: float) -> Noise:
        """The same shape at another run-to-run spread."""
        k = run_cv / self.within
        return Noise(within=run_cv, between=self.between * k, drift=self.drift * k)


def fitted(spread_json: Path) -> Noise:
    """Within-launch CV, between-launch CV (less the runs' share) and drift per launch of a
    measured night (bench/h200_spread.py's JSON: launches of runs with `tokens_per_s`)."""
    data = json.loads(spread_json.read_text())
    runs = [[r["tokens_per_s"] for r in launch] for launch in data["launches"]]
    grand = statistics.fmean(v for launch in runs for v in launch)
    within = math.sqrt(statistics.fmean(statistics.variance(x) for x in runs))
    means = [statistics.fmean(x) for x in runs]
    between2 = statistics.variance(means) - within**2 / len(runs[0])
    xs = range(len(means))
    mx = statistics.fmean(xs)
    slope = sum((x - mx) * (m - grand) for x, m in zip(xs, means, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return Noise(
        within=within / grand, between=math.sqrt(max(0.0, between2)) / grand, drift=slope / grand
    )


class Rates(BaseModel):
    changes: int
    kept: float
    discarded: float
    inconclusive: float


def _launch(rng: random.Random, noise: Noise, n: int, at: int, effect: float, runs: int) -> Launch:
    from loop.night_judge import _run_var

    level = math.exp(rng.gauss(0.0, noise.between)) * (1.0 + noise.drift * n) * effect
    vals = [level * math.exp(rng.gauss(0.0, noise.within)) for _ in range(runs)]
    return Launch(at=float(at), center=statistics.fmean(vals), run_var=_run_var(vals))


def night_verdicts(
    rng: random.Random,
    noise: Noise,
    changes: int = 8,
    effect: float = 1.0,
    runs: int = 3,
    max_launches: int = 3,
) -> list[str]:
    """One interleaved night of `changes` changes of true size `effect`: each one's verdict
    ("better" / "worse" / "inconclusive"), judged as `Night` judges them."""
    t = 0

    def launch(eff: float) -> Launch:
        nonlocal t
        t += 1
        return _launch(rng, noise, t - 1, t, eff, runs)

    chain = [launch(1.0)]
    mine: list[list[Launch]] = [[] for _ in range(changes)]
    for i in range(changes):
        mine[i].append(launch(effect))
        chain.append(launch(1.0))

    def judge(i: int) -> str:
        return interleaved_compare(chain, mine[i], True, looks=max_launches, others=mine).verdict

    verdict = [judge(i) for i in range(changes)]
    while todo := [
        i for i, v in enumerate(verdict) if v == "inconclusive" and len(mine[i]) < max_launches
    ]:
        for i in todo:
            mine[i].append(launch(effect))
            chain.append(launch(1.0))
            verdict[i] = judge(i)
    return verdict


def rates(
    noise: Noise, effect: float = 1.0, nights: int = 200, changes: int = 8, seed: int = 0
) -> Rates:
    """Shares of kept / discarded / inconclusive over `nights` simulated nights."""
    rng = random.Random(seed)
    v = [x for _ in range(nights) for x in night_verdicts(rng, noise, changes, effect)]
    return Rates(
        changes=len(v),
        kept=v.count("better") / len(v),
        discarded=v.count("worse") / len(v),
        inconclusive=v.count("inconclusive") / len(v),
    )
