"""One self-contained HTML file for an eval run: summary, results, confusion matrix, trails.

No JavaScript and no external assets, so the file can be attached to a CI run or mailed and
still open anywhere. Each card's hypothesis trail sits in a <details> element: the reader sees
why the agent believed what it did, line by cited line, without a viewer app.
"""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment

from evals.harness import EvalRun
from evals.scoring import INSUFFICIENT, confusion

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Pivot eval: {{ s.passed }}/{{ s.cards }} passed</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem; color: #1d1d1f; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border: 1px solid #d0d0d7; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.passed td.outcome { background: #dff5e1; } tr.wrong td.outcome { background: #fbdada; }
tr.insufficient td.outcome { background: #fdf1cf; } tr.unproven td.outcome { background: #fde6cf; }
tr.error td.outcome { background: #e6e6e6; }
td.diag { background: #dff5e1; font-weight: 600; } td.off { background: #fbdada; }
td.ins { background: #fdf1cf; }
code, pre { font: 12px/1.4 ui-monospace, monospace; }
pre { background: #f7f7f9; padding: .4rem; white-space: pre-wrap; word-break: break-all; margin: 0; }
.supported, .confirmed { color: #0a6b1d; font-weight: 600; } .refuted { color: #9b1c1c; }
details { margin: .3rem 0; } summary { cursor: pointer; }
.err { color: #9b1c1c; }
</style></head><body>
<h1>Pivot eval &mdash; brain <code>{{ run.brain }}</code></h1>
<p class="counts"><b>{{ s.passed }}</b> pass / <b>{{ s.unproven }}</b> unproven{% if s.also_right %}
 ({{ s.also_right }} also-right label{{ "s" if s.also_right != 1 }}){% endif %} / <b>{{ s.wrong }}</b> wrong /
<b>{{ s.insufficient }}</b> insufficient{% if s.errors %} / <b>{{ s.errors }}</b> errors{% endif %}</p>
<table>
<tr><th>cards</th><th>passed</th><th>accuracy</th><th>wrong</th><th>insufficient</th>
<th>unproven</th><th>errors</th><th>median rounds</th><th>median tool calls</th>
<th>cards/s</th>{% if s.repeat > 1 %}<th>pass@{{ s.repeat }}</th><th>passes all {{ s.repeat }}</th>{% endif %}</tr>
<tr><td class="num">{{ s.cards }}</td><td class="num">{{ s.passed }}</td>
<td class="num">{{ "%.1f"|format(100 * s.accuracy) }}%</td><td class="num">{{ s.wrong }}</td>
<td class="num">{{ s.insufficient }}</td><td class="num">{{ s.unproven }}</td>
<td class="num">{{ s.errors }}</td><td class="num">{{ s.median_rounds }}</td>
<td class="num">{{ s.median_tool_calls }}</td><td class="num">{{ s.cards_per_second }}</td>
{% if s.repeat > 1 %}<td class="num">{{ "%.1f"|format(100 * s.pass_at_k) }}%</td>
<td class="num">{{ "%.1f"|format(100 * s.pass_all_k) }}%</td>{% endif %}</tr>
</table>

<h2>Results</h2>
<table>
<tr><th>card</th><th>expected</th><th>got</th><th>outcome</th><th>status</th><th>evidence</th>
<th>ruled out</th><th>rounds</th><th>tool calls</th><th>original steps</th><th>s</th></tr>
{% for r in firsts %}
<tr class="{{ r.outcome }}"><td><a href="#card-{{ r.id }}">{{ r.id }}</a></td>
<td>{{ r.expected or "-" }}</td><td>{{ r.got or "-" }}</td><td class="outcome">{{ r.outcome }}{% if r.also_right %} (also right){% endif %}</td>
<td>{{ r.status }}</td><td>{{ "yes" if r.evidence_ok else "no" }}</td>
<td>{{ "yes" if r.ruled_out_ok else "no: " ~ r.missing_ruled_out|join(", ") }}</td>
<td class="num">{{ r.rounds }}</td><td class="num">{{ r.tool_calls }}</td>
<td class="num">{{ r.transcript_steps or "-" }}</td><td class="num">{{ "%.3f"|format(r.seconds) }}</td></tr>
{% endfor %}
</table>
{% if per_card %}
<h2>pass@{{ s.repeat }} per card</h2>
<table><tr><th>card</th><th>passes</th><th>pass@1</th><th>pass@{{ s.repeat }}</th><th>all</th></tr>
{% for p in per_card %}<tr><td>{{ p.id }}</td><td class="num">{{ p.passes }}/{{ p.attempts }}</td>
<td class="num">{{ "%.2f"|format(p.pass_at_1) }}</td><td>{{ "yes" if p.pass_at_k else "no" }}</td>
<td>{{ "yes" if p.pass_all else "no" }}</td></tr>{% endfor %}
</table>
{% endif %}

<h2>Confusion matrix (expected &times; got)</h2>
<table>
<tr><th>expected \\ got</th>{% for g in cols %}<th>{{ g }}</th>{% endfor %}</tr>
{% for e in rows %}<tr><th>{{ e }}</th>{% for g in cols %}{% set n = matrix.get(e, {}).get(g, 0) %}
<td class="num {% if n %}{{ 'diag' if g == e else ('ins' if g == insufficient else 'off') }}{% endif %}">{{ n or "" }}</td>{% endfor %}</tr>
{% endfor %}
</table>

<h2>Hypothesis trails</h2>
{% for r in firsts %}
<details id="card-{{ r.id }}"{% if r.outcome != "passed" %} open{% endif %}>
<summary><b>{{ r.id }}</b> &mdash; {{ r.outcome }}{% if r.also_right %} (an also-right label){% endif %}: expected {{ r.expected or "-" }}, got {{ r.got or r.status }}</summary>
{% if r.error %}<p class="err">{{ r.error }}</p>{% endif %}
{% if r.summary %}<p>{{ r.summary }}</p>{% endif %}
{% if r.evidence %}<p>Cited evidence:</p>
<table><tr><th>obs</th><th>line</th></tr>
{% for e in r.evidence %}<tr><td>{{ e.observation }}</td><td><pre>{{ e.line }}</pre></td></tr>{% endfor %}
</table>{% endif %}
{% if r.ruled_out %}<p>Ruled out: {{ r.ruled_out|join(", ") }}</p>{% endif %}
{% if r.hypotheses %}
<table><tr><th>hypothesis</th><th>status</th><th>score</th><th>for</th><th>against</th></tr>
{% for h in r.hypotheses %}<tr><td>{{ h.label }}</td><td class="{{ h.status }}">{{ h.status }}</td>
<td class="num">{{ "%.1f"|format(h.score) }}</td>
<td>{% for e in h.evidence[:4] %}<pre>{{ e.observation }}: {{ e.line }}</pre>{% endfor %}</td>
<td>{% for e in h.against[:3] %}<pre>{{ e.observation }}: {{ e.line }}</pre>{% endfor %}</td></tr>
{% endfor %}</table>
{% endif %}
</details>
{% endfor %}
</body></html>
"""

_env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)


def render(run: EvalRun) -> str:
    firsts = [r for r in run.results if r.attempt == 0]
    matrix = confusion(run.results)
    got = {g for row in matrix.values() for g in row}
    rows = sorted(matrix)
    cols = sorted(set(rows) | (got - {INSUFFICIENT})) + (
        [INSUFFICIENT] if INSUFFICIENT in got else []
    )
    return _env.from_string(_TEMPLATE).render(
        run=run,
        s=run.summary,
        firsts=firsts,
        per_card=run.pass_at_k,
        matrix=matrix,
        rows=rows,
        cols=cols,
        insufficient=INSUFFICIENT,
    )


def write(run: EvalRun, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render(run), encoding="utf-8")
    return p
