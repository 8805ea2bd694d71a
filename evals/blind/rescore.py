"""Score a blind round's `pivot eval --json` results against the cards as written (with
`also_right`), the same way for every brain and every version of the code.

    python evals/blind/rescore.py evals/blind/round8 RESULTS.json

Columns: right label (root_cause), full pass (label + evidence + ruled_out, as the harness
scores it), unproven (an also_right label), wrong (any other label concluded), insufficient.
Used for the before/after figures in the README; the cards themselves never change.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def main(cards_dir: str, results: str) -> None:
    cards = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(Path(cards_dir).glob("*.yaml"))}
    rows = json.loads(Path(results).read_text())["results"]
    tally = {"right": 0, "pass": 0, "unproven": 0, "wrong": 0, "insufficient": 0}
    for r in rows:
        exp = cards[r["id"]]["expected"]
        got = r.get("got")
        also = set(exp.get("also_right") or [])
        if got is None:
            tally["insufficient"] += 1
            kind = "insufficient"
        elif got == exp["root_cause"]:
            tally["right"] += 1
            kind = "right"
            if r.get("passed"):
                tally["pass"] += 1
                kind = "pass"
        elif got in also:
            tally["unproven"] += 1
            kind = "unproven"
        else:
            tally["wrong"] += 1
            kind = "WRONG"
        print(f"{kind:12s} {r['id']:60s} expected={exp['root_cause']:22s} got={got}")
    n = len(rows)
    print(
        f"n={n} right label {tally['right']}/{n} ({100 * tally['right'] / n:.0f}%), "
        f"full pass {tally['pass']}/{n}, unproven {tally['unproven']}, "
        f"wrong {tally['wrong']}, insufficient {tally['insufficient']}, "
        f"cost {tally['right'] - 3 * tally['wrong']:+d} (right +1, insufficient 0, wrong -3)"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
