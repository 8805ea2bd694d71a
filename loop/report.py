"""The morning report: what ran, what it measured against baseline noise, why failures failed.

Markdown plus a hand-written SVG bar chart (no plotting dependency), both under the state dir;
then todos and one handoff note in the agent's memory, so the next session starts from the
night's conclusions instead of a todo line in a chat.
"""

from __future__ import annotations

import html
from pathlib import Path

from loop.knobs import describe
from loop.ledger import FAILED, ExperimentRow, Ledger, NightRow
from loop.plan import Plan

COLORS = {
    "ok": "#6b7280",
    "kept": "#16a34a",
    "discarded": "#9ca3af",
    "failed": "#dc2626",
    "hung": "#ea580c",
    "timeout": "#b45309",
    "skipped": "#d1d5db",
}


def report_dir(night: NightRow) -> Path:
    return Path(night.state_dir) / "reports" / night.id


def svg_chart(rows: list[ExperimentRow], noise: float | None, unit: str = "metric") -> str:
    """Bars of metric mean per experiment with spread whiskers; the baseline ± noise as a band."""
    shown = [r for r in rows if r.kind != "final"]
    w_bar, gap, left, top, h = 44, 14, 60, 30, 220
    width = left + len(shown) * (w_bar + gap) + 20
    vals = [r.metric_mean for r in shown if r.metric_mean is not None]
    vmax = max([*vals, 1.0]) * 1.15
    base = next((r.metric_mean for r in shown if r.kind == "baseline"), None)

    def y(v: float) -> float:
        return top + h - (v / vmax) * h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + h + 110}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="18" font-size="13">{html.escape(unit)} per experiment '
        "(bar = mean, whisker = spread, band = baseline ± noise)</text>",
        f'<line x1="{left}" y1="{top + h}" x2="{width - 10}" y2="{top + h}" stroke="#111"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#111"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        v = vmax * frac
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    if base is not None:
        n = noise or 0.0
        out.append(
            f'<rect x="{left}" y="{y(base + n):.1f}" width="{width - left - 10}" '
            f'height="{max(1.0, y(base - n) - y(base + n)):.1f}" fill="#3b82f6" opacity="0.15"/>'
        )
        out.append(
            f'<line x1="{left}" y1="{y(base):.1f}" x2="{width - 10}" y2="{y(base):.1f}" '
            'stroke="#3b82f6" stroke-dasharray="4 3"/>'
        )
    for i, r in enumerate(shown):
        x = left + gap + i * (w_bar + gap)
        color = COLORS.get(r.status, "#6b7280")
        if r.metric_mean is not None:
            out.append(
                f'<rect x="{x}" y="{y(r.metric_mean):.1f}" width="{w_bar}" '
                f'height="{top + h - y(r.metric_mean):.1f}" fill="{color}"><title>'
                f"{html.escape(r.name)}: {r.metric_mean:.1f} ± {r.metric_spread or 0:.1f}</title></rect>"
            )
            s = r.metric_spread or 0.0
            cx = x + w_bar / 2
            out.append(
                f'<line x1="{cx}" y1="{y(r.metric_mean + s):.1f}" x2="{cx}" '
                f'y2="{y(max(0.0, r.metric_mean - s)):.1f}" stroke="#111"/>'
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
    out.append("</svg>")
    return "\n".join(out)


def one_line(text: str | None, limit: int = 200) -> str:
    return " ".join((text or "").split())[:limit]


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def next_steps(rows: list[ExperimentRow], plan: Plan) -> list[str]:
    out: list[str] = []
    kept = [r for r in rows if r.status == "kept"]
    if len(kept) > 1:
        names = ", ".join(r.name for r in kept)
        out.append(
            f"Combine the kept changes ({names}) as one `combined: true` experiment and measure it."
        )
    for r in rows:
        if r.status in FAILED:
            why = f"{r.label or 'unclassified'}: {one_line(r.evidence or r.diagnosis)}"
            out.append(f"Decide on `{r.name}` ({describe(r.change)}) — failed with {why[:200]}")
        if r.status == "skipped":
            out.append(f"Run `{r.name}` next night: skipped ({r.diagnosis}).")
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


def write_report(ledger: Ledger, night: NightRow, plan: Plan) -> Path:
    rows = ledger.experiments(night.id)
    d = report_dir(night)
    d.mkdir(parents=True, exist_ok=True)
    (d / "chart.svg").write_text(svg_chart(rows, night.noise), encoding="utf-8")
    base = next((r for r in rows if r.kind == "baseline"), None)
    bm = base.metric_mean if base else None
    lines = [
        f"# Night report: {plan.name} ({night.id})",
        "",
        f"- status: **{night.status}**{' — ' + night.note if night.note else ''}",
        f"- hosts: {', '.join(h.name for h in plan.host_specs())}; metric: {'higher' if plan.baseline.higher_is_better else 'lower'} is better",
        f"- baseline: {_fmt(bm)} ± {_fmt(base.metric_spread if base else None)} over "
        f"{len(base.metric_values) if base else 0} runs; noise threshold (2σ): {_fmt(night.noise)}",
        f"- best: **{night.best or '-'}**; morning server: "
        + (f"pid {night.final_pid} on {night.final_host}" if night.final_pid else "not running"),
        "",
        "![metric per experiment](chart.svg)",
        "",
        "| # | experiment | change | status | mean | spread | vs baseline | duration s | diagnosis |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rel = (
            f"{100 * (r.metric_mean - bm) / bm:+.1f}%"
            if r.metric_mean is not None and bm and r.kind != "baseline"
            else "-"
        )
        diag = f"{r.label or ''} {('`' + one_line(r.evidence, 80) + '`') if r.evidence else ''}".strip()
        lines.append(
            f"| {r.seq} | {r.name} | {describe(r.change)} | {r.status} | {_fmt(r.metric_mean)} | "
            f"{_fmt(r.metric_spread)} | {rel} | {_fmt(r.duration_s)} | {diag.replace('|', '/')} |"
        )
    failures = [r for r in rows if r.status in FAILED]
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
    lines += left_in_place(night, rows)
    lines += ["## What to try next", ""] + [f"- {s}" for s in next_steps(rows, plan)]
    path = d / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (Path(night.state_dir) / "latest-report.txt").write_text(str(path), encoding="utf-8")
    return path


def handoff(ledger: Ledger, night: NightRow, plan: Plan, memory_path: str | Path | None) -> None:
    """Todos for what needs a decision, one handoff note; skipped when memory is unavailable."""
    try:
        from agent.memory import Memory, open_memory
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
        mem = open_memory(Settings())
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
