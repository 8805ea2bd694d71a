"""The night's last experiment: the compatible kept changes together, between two baselines.

Why: "combine the kept changes" as a todo line listed experiments that set one knob to
different values, and nobody knew whether two +5% changes add up, cancel, or break the server
together. At the end of a night the kept changes that can go together (no two setting one knob
to different values) are run as one experiment between two fresh baseline measurements (A/B/A,
so drift through the night is not taken for the combination's effect); the report says whether
the combination kept the gain of the best single change, and why the others were left out.
"""

from __future__ import annotations

from typing import Any, Protocol

from loop.knobs import describe
from loop.plan import Plan
from loop.stats import compare, summarize
from store.ledger.base import MEASURED, ExperimentRow
from tools.bench_results import unit


class Night(Protocol):
    """What a combination asks of the night that runs it (loop/night.py's `Night`); named here so
    this module never imports the night, which imports it."""

    ledger: Any
    night: Any
    hosts: list[Any]

    def _row(self, name: str, kind: str, seq: int, change: dict[str, Any], **kw: Any) -> Any: ...
    def _ranked_worker(self, host: Any) -> None: ...
    def _judge_baseline(self) -> None: ...
    def _classify(self, row: ExperimentRow, again: bool = False) -> None: ...


COMBINED = "combined"
#: The baselines measured right before and right after the combination.
BEFORE, AFTER = "combined-baseline-a", "combined-baseline-b"
#: Ledger order: after the ranked plan and the search trials, before the final relaunch.
SEQ = 9_000


def compatible(kept: list[ExperimentRow]) -> tuple[list[ExperimentRow], list[str]]:
    """The kept changes that can go together, best first, and why the others cannot: two
    changes that set one knob to different values are alternatives, not a combination."""
    chosen: list[ExperimentRow] = []
    knobs: dict[str, object] = {}
    left_out: list[str] = []
    for r in sorted(kept, key=lambda r: -(r.gain or 0.0)):
        clash = [k for k, v in r.change.items() if k in knobs and knobs[k] != v]
        if clash:
            left_out.append(f"{r.name} (sets {', '.join(clash)} otherwise)")
            continue
        chosen.append(r)
        knobs.update(r.change)
    return chosen, left_out


def candidates(rows: list[ExperimentRow]) -> list[ExperimentRow]:
    """The night's kept single changes (ranked or searched), the combination itself aside."""
    return [
        r
        for r in rows
        if r.status == "kept" and r.kind in ("ranked", "search") and r.name != COMBINED
    ]


def merged(chosen: list[ExperimentRow]) -> dict[str, object]:
    return {k: v for r in chosen for k, v in r.change.items()}


def seed(night: Night) -> bool:
    """Add the A/B/A rows once (a resumed night finds them); True when there is a combination
    to run, False when fewer than two compatible changes were kept."""
    rows = night.ledger.experiments(night.night.id)
    if any(r.name == COMBINED for r in rows):
        return True
    chosen, _ = compatible(candidates(rows))
    if len(chosen) < 2:
        return False
    names = " + ".join(r.name for r in chosen)
    night._row(BEFORE, "baseline", SEQ, {}, expect="baseline right before the combination")
    night._row(COMBINED, "ranked", SEQ + 1, merged(chosen), expect=f"together: {names}")
    night._row(AFTER, "baseline", SEQ + 2, {}, expect="baseline right after the combination")
    return True


def report_lines(rows: list[ExperimentRow], plan: Plan) -> list[str]:
    """The report's section: what was combined, against which baseline, and whether the
    combination kept the best single change's gain."""
    by_name = {r.name: r for r in rows}
    combo = by_name.get(COMBINED)
    singles = candidates(rows)
    chosen, left_out = compatible(singles)
    out = ["## Combination of the kept changes", ""]
    if combo is None:
        if len(chosen) < 2:
            out.append(
                f"Not run: {len(singles)} change(s) kept, fewer than two that can go together."
            )
        else:
            out.append("Not run (the night ended first): see What to try next.")
        if left_out:
            out.append(f"Left out: {'; '.join(left_out)}.")
        return [*out, ""]
    members = [r for r in singles if r.change.items() <= combo.change.items()]
    out.append(
        f"`{COMBINED}` = {' + '.join(f'`{r.name}`' for r in members) or '-'} "
        f"({describe(combo.change)}), measured between two baselines (A/B/A): **{combo.status}**."
    )
    left = [s for s in left_out if s.split(" ")[0] not in {m.name for m in members}]
    if left:
        out.append(f"Left out as incompatible: {'; '.join(left)}.")
    if combo.status not in MEASURED or not combo.metric_values:
        out.append(f"It did not measure: {combo.diagnosis or combo.status}.")
        return [*out, ""]
    out.append(f"- {verdict(rows, plan)}")
    return [*out, ""]


def verdict(rows: list[ExperimentRow], plan: Plan) -> str:
    """Against the interleaved baselines, then against the best single change."""
    by_name = {r.name: r for r in rows}
    combo = by_name[COMBINED]
    u = unit(plan.objective)
    mine = summarize(combo.metric_values)
    near = [v for n in (BEFORE, AFTER) for v in (by_name[n].metric_values if n in by_name else [])]
    parts = []
    vs_base = None
    if near:
        vs_base = compare(summarize(near), mine, plan.higher_is_better)
        parts.append(f"vs the baselines around it: {vs_base.describe(u)}")
    singles = [r for r in candidates(rows) if r.metric_values]
    sign = 1.0 if plan.higher_is_better else -1.0
    best = max(singles, key=lambda r: sign * summarize(r.metric_values).center, default=None)
    if best is None:
        return "; ".join(parts) or "no single change to compare with"
    vs_best = compare(summarize(best.metric_values), mine, plan.higher_is_better)
    parts.append(f"vs the best single change `{best.name}`: {vs_best.describe(u)}")
    if vs_base is not None and vs_base.verdict != "better":
        said = "the combination LOST the gain: it does not beat the baseline"
    elif vs_best.verdict == "worse":
        said = f"the combination LOST part of the gain: worse than `{best.name}` alone"
    elif vs_best.verdict == "better":
        said = f"the combination kept the gain and adds to it: beats `{best.name}` alone"
    else:
        said = f"the combination kept the gain (not distinguishable from `{best.name}` alone)"
    return f"**{said}**; " + "; ".join(parts) + "."


def run(night: Night) -> None:
    """Seed and run the A/B/A rows on the first slot, then judge the combination against
    every baseline run of the night, the two around it included."""
    if not seed(night):
        return
    night._ranked_worker(night.hosts[0])
    night._judge_baseline()
    row = night.ledger.get(f"{night.night.id}:{COMBINED}")
    if row is not None and row.status in MEASURED:
        night._classify(row, again=True)
