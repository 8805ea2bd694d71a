"""The statistics that decide a night, case by case (a pure function, its own table)."""

from __future__ import annotations

import pytest

from loop.stats import compare, summarize

BASE = [1027.0, 1031.0, 970.0, 1029.0, 1025.0]  # the night: one slow run among ~1028


def test_one_outlier_run_is_named_and_does_not_inflate_the_noise() -> None:
    s = summarize(BASE)
    assert s.outliers == [3] and s.outlier_values == [970.0]
    assert s.center == pytest.approx(1028.0)
    assert s.sigma < 10  # the mean/stdev way said ~26 (noise threshold 2 sigma = 52+)
    assert "outlier runs left out: #3 (970)" in s.describe()


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
