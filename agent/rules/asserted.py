"""An assertion on a setting's value is the setting's fault: the launch's own value broke it.

An engine checks its settings deep in its start-up and says so in code, not words:
`Assertion failed: maxNumTokens.value() % tokensPerBlock == 0`. The names in the expression are
its variables (camelCase in C++, snake_case in Python); when one of them is a setting the
launch's own config, command or log sets (`max_num_tokens: 96`), that value is what failed the
check: a bad launch argument, proven by the assertion and the line that set it. Not when no name
of the expression is a setting the launch set (an engine's internal invariant, a bug).
"""

from __future__ import annotations

import re

from agent.evidence import LOG_READS, text_lines
from agent.rules import proof
from agent.rules.common import F
from agent.state import Observation

#: "Assertion failed: EXPR (file:line)" / "AssertionError: EXPR" / "assert EXPR"
_ASSERT = re.compile(r"(?:Assertion failed|AssertionError):?\s*(.+?)(?:\s+\([^()]*:\d+\))?\s*$")
_IDENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]{3,})\b")
#: a setting line: `max_num_tokens: 96`, `max_num_tokens=96`, `--max_num_tokens 96`
_SETTING = r"(?:^|[\s,{{(\-])-{{0,2}}{name}(?:\s*[:=]\s*|\s+)['\"]?(\d[\w.]*)"


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def asserted_setting(
    observations: list[Observation],
) -> tuple[str, str, str, str, str] | None:
    """(assertion observation, assertion line, setting observation, setting line, setting) for
    the first assertion whose expression names a setting the launch set."""
    logs = [o for o in observations if o["ok"] and o["tool"] in LOG_READS]
    sources = [o for o in observations if o["ok"] and o["tool"] in ("config_read", *LOG_READS)]
    for o in logs:
        for line in text_lines(o):
            m = _ASSERT.search(line)
            if m is None or not proof.fatal_kind(line):
                continue
            names = {_snake(n) for n in _IDENT.findall(m.group(1))}
            for name in sorted(names, key=len, reverse=True):
                if "_" not in name:
                    continue  # one word (value, size) names no setting
                rx = re.compile(_SETTING.format(name=re.escape(name)))
                for src in sources:
                    hit = next((ln for ln in text_lines(src) if rx.search(ln)), None)
                    if hit is not None:
                        return o["id"], line, src["id"], hit, name
    return None


def asserted_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    found = asserted_setting(observations)
    if found is None:
        return
    oid, line, sid, setting_line, name = found
    why = f"the engine's check on {name} failed, and the launch set {name} itself"
    add("bad_launch_argument", "cause", F.proves, sid, setting_line, why)
    add("bad_launch_argument", "cause", F.supports, oid, line, why)
