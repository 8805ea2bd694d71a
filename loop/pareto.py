"""Two objectives: a multi-objective Optuna study and the Pareto front in the report.

Why: "maximize throughput" and "minimize p99 TTFT" pull apart (bigger prefill chunks buy
throughput with latency); folding them into one number hides the trade a person has to make.
A plan with both `maximize:` and `minimize:` ranks its one-change experiments by the first,
searches with a two-direction study (Optuna's multi-objective TPE, in RDB storage that
`optuna-dashboard` opens), and the report draws every measured config in the plane of the two
objectives with the non-dominated ones (the front) joined and listed.
"""

from __future__ import annotations

import html
import re
import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from loop.plan import Plan
from loop.stats import axis_range, summarize
from store.factory import study_storage
from store.ledger.base import MEASURED, ExperimentRow, NightRow
from tools.bench_results import unit


def directions(plan: Plan) -> dict[str, Any]:
    """`create_study` keyword for the plan: one direction, or one per objective."""
    dirs = ["maximize" if up else "minimize" for _, up in plan.objectives]
    return {"directions": dirs} if len(dirs) > 1 else {"direction": dirs[0]}


def trial_values(plan: Plan, row: ExperimentRow) -> float | list[float] | None:
    """What the study is told: the objective's mean, or one median per objective (None when a
    metric is missing: the trial is failed, not guessed)."""
    if row.metric_mean is None:
        return None
    if len(plan.objectives) == 1:
        return row.metric_mean
    out = []
    for metric, _ in plan.objectives:
        vals = row.metrics.get(metric)
        if not vals:
            return None
        out.append(statistics.median(vals))
    return out


class Point(BaseModel):
    name: str
    x: float  # first objective (median over runs)
    y: float  # second objective
    feasible: bool  # met every SLO the baseline met
    change: dict[str, Any] = {}
    #: each objective's interval (loop.stats.summarize); a point's own value where unknown
    x_low: float | None = None
    x_high: float | None = None
    y_low: float | None = None
    y_high: float | None = None


def points(rows: list[ExperimentRow], plan: Plan) -> list[Point]:
    (mx, _), (my, _) = plan.objectives
    out = []
    for r in rows:
        if r.kind == "final" or r.status not in MEASURED:
            continue
        xs, ys = r.metrics.get(mx), r.metrics.get(my)
        if xs and ys:
            sx, sy = summarize(xs), summarize(ys)
            out.append(
                Point(
                    name=r.name,
                    x=statistics.median(xs),
                    y=statistics.median(ys),
                    feasible=r.slo in (None, "met"),
                    change=r.change,
                    x_low=sx.low,
                    x_high=sx.high,
                    y_low=sy.low,
                    y_high=sy.high,
                )
            )
    return out


def _separated_better(
    a: tuple[float, float | None, float | None],
    b: tuple[float, float | None, float | None],
    up: bool,
) -> bool:
    """a beats b on one objective beyond both intervals (a's worst end past b's best end)."""
    a_lo, a_hi = (a[1] if a[1] is not None else a[0]), (a[2] if a[2] is not None else a[0])
    b_lo, b_hi = (b[1] if b[1] is not None else b[0]), (b[2] if b[2] is not None else b[0])
    return a_lo > b_hi if up else a_hi < b_lo


def dominates(a: Point, b: Point, plan: Plan) -> bool:
    """a dominates b only where it shows: better beyond the intervals on one objective and
    not beaten beyond them on the other. Points within each other's noise stay side by side
    on the front (a front drawn on 0.1 ms of noise ranked noise)."""
    (_, up_x), (_, up_y) = plan.objectives
    ax, bx = (a.x, a.x_low, a.x_high), (b.x, b.x_low, b.x_high)
    ay, by = (a.y, a.y_low, a.y_high), (b.y, b.y_low, b.y_high)
    better = _separated_better(ax, bx, up_x) or _separated_better(ay, by, up_y)
    worse = _separated_better(bx, ax, up_x) or _separated_better(by, ay, up_y)
    return better and not worse


def front(pts: list[Point], plan: Plan) -> list[Point]:
    """The feasible points no other feasible point dominates beyond the noise, by the first
    objective."""
    (_, up_x), _ = plan.objectives
    sx = 1 if up_x else -1

    ok = [p for p in pts if p.feasible]
    nd = [p for p in ok if not any(dominates(q, p, plan) for q in ok if q is not p)]
    return sorted(nd, key=lambda p: sx * p.x)


def svg(pts: list[Point], nd: list[Point], plan: Plan) -> str:
    """Every measured config as a dot, the front joined and labelled, infeasible ones hollow
    red, axes scaled to the data with units and an arrow saying which way is better."""
    (mx, up_x), (my, up_y) = plan.objectives
    left, top, w, h = 80, 40, 460, 300
    width, height = left + w + 190, top + h + 60

    def span(vals: list[float]) -> tuple[float, float]:
        return axis_range(min(vals), max(vals))

    x0, x1 = span([p.x for p in pts])
    y0, y1 = span([p.y for p in pts])

    def X(v: float) -> float:
        return left + (v - x0) / (x1 - x0) * w

    def Y(v: float) -> float:
        return top + h - (v - y0) / (y1 - y0) * h

    def label(metric: str, up: bool) -> str:
        u = unit(metric)
        return f"{metric}{f' ({u})' if u else ''} — {'higher' if up else 'lower'} is better"

    on_front = {p.name for p in nd}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="20" font-size="13">Pareto front: {html.escape(mx)} vs '
        f"{html.escape(my)} (median of runs; green = non-dominated)</text>",
        f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#111"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#111"/>',
        f'<text x="{left + w / 2}" y="{top + h + 40}" text-anchor="middle">'
        f"{html.escape(label(mx, up_x))}</text>",
        f'<text transform="translate(18,{top + h / 2}) rotate(-90)" text-anchor="middle">'
        f"{html.escape(label(my, up_y))}</text>",
    ]
    for frac in (0.0, 0.5, 1.0):
        xv, yv = x0 + (x1 - x0) * frac, y0 + (y1 - y0) * frac
        out.append(f'<text x="{X(xv):.1f}" y="{top + h + 16}" text-anchor="middle">{xv:.4g}</text>')
        out.append(f'<text x="{left - 6}" y="{Y(yv) + 4:.1f}" text-anchor="end">{yv:.4g}</text>')
    if len(nd) > 1:
        path = " ".join(f"{X(p.x):.1f},{Y(p.y):.1f}" for p in nd)
        out.append(f'<polyline points="{path}" fill="none" stroke="#16a34a" stroke-width="2"/>')
    for p in pts:
        tip = f"<title>{html.escape(p.name)}: {p.x:.4g}, {p.y:.4g}</title>"
        if not p.feasible:
            style = 'fill="none" stroke="#dc2626" stroke-width="2"'
        elif p.name in on_front:
            style = 'fill="#16a34a" stroke="#111"'
        else:
            style = 'fill="#9ca3af"'
        out.append(f'<circle cx="{X(p.x):.1f}" cy="{Y(p.y):.1f}" r="5" {style}>{tip}</circle>')
        if p.name in on_front or p.name == "baseline":
            out.append(
                f'<text x="{X(p.x) + 8:.1f}" y="{Y(p.y) - 6:.1f}">{html.escape(p.name[:24])}</text>'
            )
    lx = left + w + 20
    for i, (text, style) in enumerate(
        (
            ("non-dominated", 'fill="#16a34a" stroke="#111"'),
            ("dominated", 'fill="#9ca3af"'),
            ("breaks an SLO", 'fill="none" stroke="#dc2626" stroke-width="2"'),
        )
    ):
        y = top + 10 + 18 * i
        out.append(f'<circle cx="{lx}" cy="{y}" r="5" {style}/>')
        out.append(f'<text x="{lx + 10}" y="{y + 4}">{text}</text>')
    out.append("</svg>")
    return "\n".join(out)


def study_front(night: NightRow, plan: Plan) -> list[Any]:
    """Optuna's own non-dominated trials of the night's study (empty without a search)."""
    if plan.search is None:
        return []
    import optuna

    from agent.settings import Settings

    try:
        study = optuna.load_study(
            study_name=plan.search.study,
            storage=study_storage(night.state_dir, Settings().database_url),
        )
    except KeyError:  # the search never started
        return []
    return list(study.best_trials) if len(study.directions) > 1 else []


def report_lines(rows: list[ExperimentRow], plan: Plan, night: NightRow, d: Path) -> list[str]:
    """Draw pareto.svg into `d` and list the front (and the study's), for two objectives."""
    if len(plan.objectives) < 2:
        return []
    (mx, _), (my, _) = plan.objectives
    pts = points(rows, plan)
    out = ["## Pareto front", ""]
    if not pts:
        return [*out, f"No config measured both `{mx}` and `{my}`.", ""]
    nd = front(pts, plan)
    (d / "pareto.svg").write_text(svg(pts, nd, plan), encoding="utf-8")
    ux, uy = unit(mx), unit(my)
    out += [
        "![Pareto front](pareto.svg)",
        "",
        f"Non-dominated configs ({len(nd)} of {len(pts)} measured; SLO breakers left out):",
        "",
        f"| experiment | change | {mx}{f' ({ux})' if ux else ''} | {my}{f' ({uy})' if uy else ''} |",
        "|---|---|---|---|",
    ]
    from loop.knobs import describe

    for p in nd:
        out.append(f"| {p.name} | {describe(p.change)} | {p.x:.4g} | {p.y:.4g} |")
    trials = study_front(night, plan)
    if plan.search is not None:
        from agent.settings import Settings

        url = study_storage(night.state_dir, Settings().database_url)
        storage = re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
        out += [
            "",
            f"Optuna study `{plan.search.study}` (two directions), its non-dominated trials: "
            + (
                ", ".join(
                    f"trial {t.number} ({', '.join(f'{v:.4g}' for v in t.values)})" for t in trials
                )
                or "none"
            )
            + f". Open it: `optuna-dashboard {storage}`.",
        ]
    return [*out, ""]
