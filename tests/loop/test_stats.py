"""The statistics that decide a night, case by case (a pure function, its own table)."""

from __future__ import annotations

import pytest

from loop.stats import Launch, compare, interleaved_compare, summarize, t_quantile

BASE = [1027.0, 1031.0, 970.0, 1029.0, 1025.0]  # the night: one slow run among ~1028


def test_one_outlier_run_is_named_and_does_not_inflate_the_noise() -> None:
    s = summarize([*BASE, 1030.0])  # from 6 runs on
    assert s.outliers == [3] and s.outlier_values == [970.0]
    assert s.center == pytest.approx(1029.0)
    assert s.sigma < 10  # the mean/stdev way said ~26 (noise threshold 2 sigma = 52+)
    assert "outlier runs left out: #3 (970)" in s.describe()


def test_under_six_runs_no_run_is_set_aside() -> None:
    """Issue 23: an A/A night dropped a real baseline run as an outlier; with 5 runs the MAD is
    too rough to call one."""
    s = summarize(BASE)
    assert s.outliers == [] and s.n == 5
    assert s.center == pytest.approx(1027.0)


@pytest.mark.parametrize(
    "p,df,exact",
    [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182), (0.975, 5, 2.571),
     (0.975, 10, 2.228), (0.99, 20, 2.528), (0.995, 30, 2.750), (0.975, 1000, 1.962)],
)  # fmt: skip
def test_t_quantiles(p: float, df: int, exact: float) -> None:
    assert t_quantile(p, df) == pytest.approx(exact, rel=0.01)


def _chain(values: list[float], start: int = 0, step: int = 2) -> list[Launch]:
    return [Launch(at=start + step * i, center=v) for i, v in enumerate(values)]


def test_a_drift_between_neighbours_is_not_an_effect() -> None:
    """The baseline climbs 1% a launch; a no-op launched between two baselines sits at their
    mean, and is no gain, although it is 11% above the night's first baseline."""
    chain = _chain([1000 * (1 + 0.02 * j) + (3 if j % 2 else -3) for j in range(8)])
    noop = [Launch(at=11.0, center=1110.0)]  # between 1103 (at 10) and 1117 (at 12)
    c = interleaved_compare(chain, noop)
    assert c.verdict == "inconclusive" and abs(c.relative) < 0.001, c
    # against the night's first baseline alone the same drift reads as a gain
    first = compare(summarize([997.0, 1000.0, 1003.0]), summarize([1109.0, 1110.0, 1111.0]))
    assert first.verdict == "better"


def test_verdicts_by_neighbours() -> None:
    chain = _chain([1000, 1010, 995, 1005, 1000, 990, 1008, 1002])
    up = [Launch(at=1.0, center=1060.0), Launch(at=3.0, center=1050.0)]
    down = [Launch(at=5.0, center=940.0), Launch(at=7.0, center=950.0)]
    assert interleaved_compare(chain, up).verdict == "better"
    assert interleaved_compare(chain, down).verdict == "worse"
    assert interleaved_compare(chain, down, higher_is_better=False).verdict == "better"
    c = interleaved_compare(chain, up)
    assert c.gain_low < c.gain < c.gain_high and c.relative == pytest.approx(0.055, abs=0.005)


def test_more_looks_ask_for_more_evidence() -> None:
    chain = _chain([1000, 1010, 995, 1005, 1000, 990, 1008, 1002])
    one = [Launch(at=5.0, center=1030.0)]
    assert interleaved_compare(chain, one, looks=1).verdict == "better"
    assert interleaved_compare(chain, one, looks=5).verdict == "inconclusive"


def test_one_baseline_launch_decides_nothing() -> None:
    c = interleaved_compare([Launch(at=0, center=1000.0)], [Launch(at=1, center=2000.0)])
    assert c.verdict == "inconclusive"


@pytest.mark.parametrize(
    "change,verdict",
    [
        ([1081.0, 1085.0, 1079.0], "better"),  # +5.2%: the change the old rule threw away
        ([1090.0, 1094.0, 1089.0], "better"),  # +6.0%
        ([1030.0, 1026.0, 1031.0], "inconclusive"),  # within the noise
        ([1029.0, 1036.0, 1022.0], "inconclusive"),
        ([960.0, 958.0, 963.0], "worse"),
    ],
)
def test_verdicts(change: list[float], verdict: str) -> None:
    c = compare(summarize(BASE), summarize(change))
    assert c.verdict == verdict, c
    assert c.gain_low <= c.gain <= c.gain_high


def test_lower_is_better_flips_the_sign() -> None:
    c = compare(summarize([100.0, 101.0, 99.0]), summarize([80.0, 81.0, 79.0]), False)
    assert c.verdict == "better" and c.gain == pytest.approx(20.0)


def test_identical_runs_still_have_an_interval() -> None:
    s = summarize([1000.0, 1000.0, 1000.0])
    assert s.low < 1000.0 < s.high and s.outliers == []


def test_all_zero_runs_summarize() -> None:
    s = summarize([0.0, 0.0, 0.0])
    assert s.center == 0.0 and s.outliers == []
