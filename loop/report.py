"""The morning report: what ran, what it measured against baseline noise, why failures failed.

Markdown plus a hand-written SVG bar chart (no plotting dependency), both under the state dir;
then todos and one handoff note in the agent's memory, so the next session starts from the
night's conclusions instead of a todo line in a chat.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from loop.capacity import bracket, separate
from loop.capacity import report_lines as capacity_lines
from loop.combine import COMBINED, candidates, compatible
from loop.combine import report_lines as combination_lines
from loop.experiment import reproduce
from loop.fleet import fleet_lines
from loop.knobs import describe
from loop.pareto import report_lines as pareto_lines
from loop.plan import Plan
from loop.samples import too_few
from loop.slo import missed_by_baseline
from loop.stats import Summary, axis_range, compare, summarize
from loop.sweep import point_slos, prompt_notes
from loop.sweep import report_lines as sweep_lines
from store.ledger.base import FAILED, NO_EFFECT, ExperimentRow, NightRow
from store.ledger.sqlite import Ledger
from tools.bench_results import unit as unit_of

COLORS = {
    "ok": "#6b7280",
    "kept": "#16a34a",
    "discarded": "#9ca3af",
    "inconclusive": "#a16207",
    "failed": "#dc2626",
    "hung": "#ea580c",
    "timeout": "#b45309",
    "skipped": "#d1d5db",
    "no_effect": "#e5e7eb",
}


def report_dir(night: NightRow) -> Path:
    return Path(night.state_dir) / "reports" / night.id


def svg_chart(
    rows: list[ExperimentRow],
    noise: float | None,
    unit: str = "",
    metric: str = "metric",
    values: dict[str, list[float]] | None = None,
    slo: tuple[str, float] | None = None,
    winner: str | None = None,
) -> str:
    """One bar (median) per experiment with its interval as a whisker, the baseline and its
    noise as a band, an SLO bound as a red line, the winner outlined and starred.

    `values` gives each experiment's runs of `metric` (default: the objective's runs)."""
    shown = [r for r in rows if r.kind != "final"]
    runs = {r.name: (values or {}).get(r.name, r.metric_values) for r in shown}
    stats = {n: summarize(v) for n, v in runs.items() if v}
    w_bar, gap, left, top, h = 44, 14, 78, 34, 220
    width = left + len(shown) * (w_bar + gap) + 150
    pts = [x for s in stats.values() for x in (s.low, s.high, s.center)]
    pooled = [v for r in shown if r.kind == "baseline" and r.status == "ok" for v in runs[r.name]]
    base = summarize(pooled) if pooled else None  # every baseline launch: the one reference
    if base and noise:
        pts += [base.center - noise, base.center + noise]
    if slo:
        pts.append(slo[1])
    lo = min(pts, default=0.0)
    if all(v >= 0 for vs in runs.values() for v in vs):  # the noise band may dip below 0
        lo = max(lo, 0.0)
    lo, hi = axis_range(lo, max(pts, default=1.0))

    def y(v: float) -> float:
        return top + h - (min(max(v, lo), hi) - lo) / (hi - lo) * h

    label = f"{metric} ({unit})" if unit else metric
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + h + 110}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="18" font-size="13">{html.escape(label)} per experiment: bar = '
        "median of runs, whisker = interval, band = baseline ± noise</text>",
        f'<line x1="{left}" y1="{top + h}" x2="{width - 140}" y2="{top + h}" stroke="#111"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#111"/>',
        f'<text transform="translate(16,{top + h / 2}) rotate(-90)" text-anchor="middle">'
        f"{html.escape(label)}</text>",
    ]
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        v = lo + (hi - lo) * frac
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.4g}</text>')
    if base is not None:
        n = noise or 0.0
        out.append(
            f'<rect x="{left}" y="{y(base.center + n):.1f}" width="{width - left - 140}" '
            f'height="{max(1.0, y(base.center - n) - y(base.center + n)):.1f}" '
            'fill="#3b82f6" opacity="0.15"/>'
        )
        out.append(
            f'<line x1="{left}" y1="{y(base.center):.1f}" x2="{width - 140}" '
            f'y2="{y(base.center):.1f}" stroke="#3b82f6" stroke-dasharray="4 3"/>'
        )
    if slo:
        out.append(
            f'<line x1="{left}" y1="{y(slo[1]):.1f}" x2="{width - 140}" y2="{y(slo[1]):.1f}" '
            'stroke="#dc2626" stroke-width="2"/>'
        )
        out.append(
            f'<text x="{width - 136}" y="{y(slo[1]) + 4:.1f}" fill="#dc2626">SLO {html.escape(slo[0])}</text>'
        )
    for i, r in enumerate(shown):
        x = left + gap + i * (w_bar + gap)
        color = COLORS.get(r.status, "#6b7280")
        st = stats.get(r.name)
        if st is not None:
            star = r.name == winner
            out.append(
                f'<rect x="{x}" y="{y(st.center):.1f}" width="{w_bar}" '
                f'height="{max(1.0, top + h - y(st.center)):.1f}" fill="{color}"'
                + (' stroke="#111" stroke-width="3"' if star else "")
                + f"><title>{html.escape(r.name)}: {st.center:.4g} [{st.low:.4g}, "
                f"{st.high:.4g}] {html.escape(unit)}</title></rect>"
            )
            cx = x + w_bar / 2
            out.append(
                f'<line x1="{cx}" y1="{y(st.high):.1f}" x2="{cx}" y2="{y(st.low):.1f}" '
                'stroke="#111" stroke-width="1.5"/>'
            )
            if star:
                out.append(
                    f'<text x="{cx}" y="{y(st.high) - 6:.1f}" text-anchor="middle" '
                    'font-size="14" fill="#16a34a">★ winner</text>'
                )
        else:
            out.append(
                f'<text x="{x + w_bar / 2}" y="{top + h - 6}" text-anchor="middle" '
                f'fill="{color}" font-weight="bold">✗ {html.escape(r.status)}</text>'
            )
        out.append(
            f'<text transform="translate({x + w_bar / 2},{top + h + 10}) rotate(40)" '
            f'font-size="10">{html.escape(r.name[:22])}</text>'
        )
    legend_y = top + 4
    for status in ("kept", "discarded", "inconclusive", "failed"):
        out.append(
            f'<rect x="{width - 130}" y="{legend_y}" width="10" height="10" '
            f'fill="{COLORS[status]}"/><text x="{width - 115}" y="{legend_y + 9}">{status}</text>'
        )
        legend_y += 16
    out.append("</svg>")
    return "\n".join(out)


def pooled_baseline(rows: list[ExperimentRow]) -> Summary | None:
    """Every baseline run of the night, pooled: the one baseline the report speaks of (the
    night judges each change by it, or, interleaved, by its neighbouring launches of it)."""
    values = [v for r in rows if r.kind == "baseline" and r.status == "ok" for v in r.metric_values]
    return summarize(values) if values else None


def vs_baseline(r: ExperimentRow, base: float | None, higher_is_better: bool) -> str:
    """The change against the pooled baseline, from the verdict's own gain (so its sign is the
    verdict's: a row never reads +0.3% "discarded"), in the metric's direction."""
    if r.kind == "baseline" or not r.metric_values or not base:
        return "-"
    if r.gain is not None:
        diff = r.gain if higher_is_better else -r.gain
    else:
        diff = summarize(r.metric_values).center - base
    return f"{100 * diff / abs(base):+.1f}%"


def one_line(text: str | None, limit: int = 200) -> str:
    return " ".join((text or "").split())[:limit]


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def next_steps(rows: list[ExperimentRow], plan: Plan) -> list[str]:
    out: list[str] = []
    chosen, left_out = compatible(candidates(rows))
    if len(chosen) > 1 and not any(r.name == COMBINED for r in rows):  # the night ran out
        names = ", ".join(r.name for r in chosen)
        merged = describe({k: v for r in chosen for k, v in r.change.items()})
        step = (
            f"Combine the compatible kept changes ({names}: {merged}) as one "
            "`combined: true` experiment and measure it."
        )
        if left_out:
            step += f" Not with: {'; '.join(left_out)}."
        out.append(step)
    for r in rows:
        if r.status in FAILED:
            why = f"{r.label or 'unclassified'}: {one_line(r.evidence or r.diagnosis)}"
            out.append(f"Decide on `{r.name}` ({describe(r.change)}) — failed with {why[:200]}")
        if r.status == "skipped":
            out.append(f"Run `{r.name}` next night: skipped ({r.diagnosis}).")
        if r.status == NO_EFFECT:
            out.append(f"Fix `{r.name}` so it reaches the server: {r.diagnosis}.")
    if not plan.search:
        out.append("Add a `search:` space around the best knob so TPE explores it after the plan.")
    return out


def left_in_place(night: NightRow, rows: list[ExperimentRow]) -> list[str]:
    """What the morning server runs that is not the baseline, file by file, and the exact
    command that puts each file back: the one change the loop leaves on purpose."""
    final = next((r for r in reversed(rows) if r.kind == "final" and r.status == "ok"), None)
    if not night.left_in_place and not (final and final.change):
        return []
    server = f"pid {night.final_pid} on {night.final_host}" if night.final_pid else "not running"
    out = [
        "## Config left in place",
        "",
        f"The morning server ({server}) runs the best change "
        f"({describe(final.change) if final else '-'}); every other experiment was reverted "
        "and verified byte for byte.",
        "",
    ]
    if night.left_in_place:
        out += ["Files that differ from the night's baseline:", ""]
        for c in night.left_in_place:
            out += [
                f"- `{c.path}` on {c.host} (baseline sha256 `{c.baseline_sha256[:16]}`, "
                f"snapshot `{c.snapshot_id or 'none'}`)",
                "",
                "  ```diff",
                *[f"  {ln}" for ln in c.diff.splitlines()[:40]],
                "  ```",
                "",
                f"  To put the baseline back: `{c.revert}`, then restart the server.",
                "",
            ]
    else:
        launch = next(
            (ln[2:] for ln in (final.diff if final else "").splitlines() if ln.startswith("+ ")),
            "",
        )
        out += [
            "No config file differs from the baseline: the change is in the launch command "
            f"only (`{one_line(launch, 300)}`). To go back, stop the server and start the "
            "baseline launch command.",
            "",
        ]
    return out


def _interrupted(r: ExperimentRow) -> bool:
    return (r.diagnosis or "").startswith("interrupted during")


def _median(vals: list[float]) -> str:
    return _fmt(summarize(vals).center, 2) if vals else "-"


def winner_statement(rows: list[ExperimentRow], plan: Plan, best: str | None) -> str:
    """The winner against the runner-up (or the baseline), as a statistical statement."""
    measured = {r.name: r for r in rows if r.metric_values and r.kind != "final"}
    win = measured.get(best or "")
    if win is None:
        return "No change beat the baseline beyond the noise (and its SLOs); the baseline stays."
    others = [
        r
        for r in measured.values()
        if r.name != win.name and r.kind != "baseline" and r.status in ("kept", "inconclusive")
    ]
    runner = max(others, key=lambda r: r.gain or 0.0) if others else measured.get("baseline")
    if runner is None:
        return f"{win.name} won."
    if plan.ranks_by_capacity:
        a, b = bracket(win.metrics, plan.objective), bracket(runner.metrics, plan.objective)
        if a is not None and b is not None:
            said = {
                "better": "beats",
                "inconclusive": "is NOT distinguishable from",
                "worse": "is below",
            }[separate(a, b)]
            return (
                f"**{win.name}** {said} runner-up **{runner.name}** on `{plan.objective}`: "
                f"{a.describe()} vs {b.describe()} (apart only when the brackets do not touch)."
            )
    c = compare(
        summarize(runner.metric_values), summarize(win.metric_values), plan.higher_is_better
    )
    u = unit_of(plan.objective)
    verdict = {
        "better": "beats",
        "inconclusive": "is NOT distinguishable from",
        "worse": "is worse than",
    }[c.verdict]
    return f"**{win.name}** {verdict} runner-up **{runner.name}**: {c.describe(u)}."


def write_report(ledger: Ledger, night: NightRow, plan: Plan) -> Path:
    rows = ledger.experiments(night.id)
    events = ledger.events(night.id)
    d = report_dir(night)
    d.mkdir(parents=True, exist_ok=True)
    u = unit_of(plan.objective)
    kept = [r for r in rows if r.status == "kept" and r.kind != "final"]
    best = night.best if night.best and night.best != "baseline" else None
    if best is None and kept:
        best = max(kept, key=lambda r: r.gain or 0.0).name
    (d / "chart.svg").write_text(
        svg_chart(rows, night.noise, u, plan.objective, winner=best), encoding="utf-8"
    )
    charts = ["![objective per experiment](chart.svg)"]
    for c in point_slos(plan):  # a sweep: one chart per load point, where the SLO is judged
        if c.metric == plan.objective:
            continue
        name = "chart-" + c.metric.replace("@", "-at-").replace("=", "-") + ".svg"
        vals = {r.name: r.metrics.get(c.metric, []) for r in rows}
        u_c = unit_of(c.metric.split("@")[0])
        (d / name).write_text(
            svg_chart(rows, None, u_c, c.metric, vals, (str(c), c.bound), best),
            encoding="utf-8",
        )
        charts.append(f"![{c.metric} per experiment, SLO line]({name})")
    pooled = pooled_baseline(rows)
    bm = pooled.center if pooled else None
    direction = "maximize" if plan.higher_is_better else "minimize"
    lines = [
        f"# Night report: {plan.name} ({night.id})",
        "",
        f"- status: **{night.status}**{' — ' + night.note if night.note else ''}",
        f"- hosts: {', '.join(h.name for h in plan.host_specs())}; objective: {direction} "
        f"`{plan.objective}`{f' ({u})' if u else ''}"
        + (
            f" and minimize `{plan.minimize}` (Pareto front below)"
            if plan.maximize and plan.minimize
            else ""
        )
        + "; SLOs: "
        + (", ".join(f"`{c}`" for c in plan.constraints) or "none"),
        f"- baseline, every launch pooled (the reference of the verdicts and of 'vs "
        f"baseline'): {pooled.describe(u) if pooled else '-'}; noise (2 robust σ): "
        f"{_fmt(night.noise)}",
        f"- best: **{best or 'baseline'}**; morning server: "
        + (f"pid {night.final_pid} on {night.final_host}" if night.final_pid else "not running"),
        f"- {winner_statement(rows, plan, best)}",
    ]
    base_metrics: dict[str, list[float]] = {}
    for r in rows:
        if r.kind == "baseline" and r.status == "ok":
            for k, v in r.metrics.items():
                base_metrics.setdefault(k, []).extend(v)
    lines += [f"- SLO {said}" for said in missed_by_baseline(point_slos(plan), base_metrics)]
    lines += [f"- load: {note}" for note in prompt_notes(plan)]
    judged = [plan.objective, *(c.metric for c in point_slos(plan))]
    lines += [
        f"- `{m}` of the baseline rests on {few}: lengthen the benchmark (more prompts)"
        for m in dict.fromkeys(judged)
        if (few := too_few(m, base_metrics))
    ]
    stops = [e for e in events if e.kind in ("signal", "killed", "resumed")]
    if stops:
        lines.append(
            f"- the night was interrupted and resumed {sum(e.kind == 'resumed' for e in stops)} "
            "time(s): see Interruptions"
        )
    lines += [
        "",
        *charts,
        "",
        f"| # | experiment | change | status | {plan.objective} median [interval] | vs baseline "
        "| SLO | duration s | diagnosis |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cap = bracket(r.metrics, plan.objective) if plan.ranks_by_capacity else None
        if cap is not None:
            val = cap.describe()
        elif r.metric_values:
            st = summarize(r.metric_values)
            val = f"{st.center:.4g} [{st.low:.4g}, {st.high:.4g}]"
        else:
            val = "-"
        rel = vs_baseline(r, bm, plan.higher_is_better)
        mark = " ★" if r.name == best else ""
        diag = f"{r.label or ''} {('`' + one_line(r.evidence, 80) + '`') if r.evidence else ''}"
        diag = (diag.strip() or one_line(r.diagnosis, 80)).replace("|", "/")
        lines.append(
            f"| {r.seq} | {r.name}{mark} | {describe(r.change)} | {r.status} | {val} | {rel} | "
            f"{(r.slo or '-').replace('|', '/')} | {_fmt(r.duration_s)} | {diag} |"
        )
    lines += _all_metrics(rows)
    lines += ["", *sweep_lines(rows, plan)]
    lines += ["", *capacity_lines(rows, plan)]
    lines += ["", *pareto_lines(rows, plan, night, d)]
    lines += ["", *combination_lines(rows, plan)]
    void = [r for r in rows if r.status == NO_EFFECT]
    if void:
        lines += ["", "## No effective change", "", "Not launched: the server would not see them."]
        lines += [""] + [f"- `{r.name}` ({describe(r.change)}): {r.diagnosis}" for r in void]
    lines += ["", "## Interruptions", ""]
    interrupted = [r for r in rows if _interrupted(r)]
    if not stops and not interrupted:
        lines += ["None: the night ran through.", ""]
    for e in stops:
        when = time.strftime("%H:%M:%S", time.localtime(e.at))
        what = {"signal": "stopped by a signal", "resumed": "resumed after a stop or kill"}
        lines.append(f"- {when} {what.get(e.kind, e.kind)}: {one_line(e.detail, 400)}")
    for r in interrupted:
        lines.append(f"- {r.name} ({describe(r.change)}): {one_line(r.diagnosis, 200)}")
    failures = [r for r in rows if r.status in FAILED and not _interrupted(r)]
    lines += ["", "## Failures", ""]
    if not failures:
        lines += ["None.", ""]
    for r in failures:
        lines += [
            f"### {r.name} ({describe(r.change)}) — {r.status}",
            "",
            f"- root cause: **{r.label or 'not determined'}**",
            f"- evidence: `{one_line(r.evidence, 400) or '-'}`",
            f"- what happened: {one_line(r.diagnosis, 400) or '-'}",
            f"- log: `{r.log_path}`",
            "",
        ]
    win = next((r for r in rows if r.name == best), None)
    if win is not None:
        lines += [
            "## Reproduce the winner",
            "",
            "```sh",
            reproduce(plan, win.change),
            "```",
            "",
        ]
        if any(k.startswith("env:") for k in win.change):
            lines += [f"with `{plan.baseline.config_file}` edited as in its diff:", ""]
            lines += ["```diff", *win.diff.splitlines()[:40], "```", ""]
        lines += [
            f"then measure: `cd {plan.baseline.workdir} && {plan.baseline.benchmark.command}`",
            "",
        ]
    lines += left_in_place(night, rows)
    lines += fleet_lines(ledger, night.id)  # several workers: who ran what, who was lost
    lines += ["## What to try next", ""] + [f"- {s}" for s in next_steps(rows, plan)]
    path = d / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (Path(night.state_dir) / "latest-report.txt").write_text(str(path), encoding="utf-8")
    return path


def _all_metrics(rows: list[ExperimentRow]) -> list[str]:
    """Every metric any benchmark reported: one line per metric, the median over runs."""
    shown = [r for r in rows if r.metrics]
    names = sorted({k for r in shown for k in r.metrics})
    if not names:
        return []
    out = [
        "",
        "## Every metric (median over runs)",
        "",
        "| metric | unit | " + " | ".join(r.name for r in shown) + " |",
        "|---|---|" + "---|" * len(shown),
    ]
    for k in names:  # a percentile of too few requests is no number (loop/samples.py)
        cells = " | ".join(too_few(k, r.metrics) or _median(r.metrics.get(k, [])) for r in shown)
        out.append(f"| {k} | {unit_of(k) or '-'} | {cells} |")
    return out


def handoff(ledger: Ledger, night: NightRow, plan: Plan, memory_path: str | Path | None) -> None:
    """Todos for what needs a decision, one handoff note; skipped when memory is unavailable."""
    try:
        from store.factory import open_memory
        from store.memory.sqlite import Memory
    except ImportError:
        return
    from agent.settings import Settings

    team = Settings().database_url  # the team database holds the loop's notes too
    if memory_path is None and not team:
        from agent.settings import get_settings

        memory_path = get_settings().memory_path
    rows = ledger.experiments(night.id)
    host = plan.host_specs()[0].name
    if team:
        mem = open_memory(team, Settings().memory_path)
    else:
        Path(str(memory_path)).parent.mkdir(parents=True, exist_ok=True)
        mem = Memory(str(memory_path))
    try:
        open_texts = {t.text for t in mem.todos(host)}
        for step in next_steps(rows, plan):
            text = f"[loop {plan.name}] {step}"
            if text not in open_texts:
                mem.add_todo(host, text)
        kept = [r.name for r in rows if r.status == "kept"]
        failed = [f"{r.name} ({r.label or r.status})" for r in rows if r.status in FAILED]
        note = (
            f"Night {night.id} of plan {plan.name}: {night.status}. "
            f"Kept: {', '.join(kept) or 'none'}. Failed: {', '.join(failed) or 'none'}. "
            f"Best: {night.best or 'baseline'}; server "
            + (f"pid {night.final_pid} is up" if night.final_pid else "not running")
            + f". Report: {report_dir(night) / 'report.md'}"
        )
        mem.add_handoff(host, note)
    finally:
        mem.close()
