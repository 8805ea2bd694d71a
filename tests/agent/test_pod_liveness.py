"""A launch in a Kubernetes pod, read from a bastion with no process table of the node: the pod
the operator named is read with `kubectl logs`, its record says whether its container runs, and
its log is watched over a window. A loading pod whose log advances is still starting; one whose
log stands still is not called starting; a pod the operator did not name proves nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cards.model import IncidentCard
from cards.replay import ReplayHost

CARD = Path(__file__).resolve().parents[1] / "data" / "pod-loading.yaml"
LOG = "kubectl -n ai logs llm-serve-6d9c8f7b5d-x2k4q"


def _card(**change: Any) -> IncidentCard:
    data = yaml.safe_load(CARD.read_text())
    for key, value in change.items():
        if key == "symptom":
            data["symptom"] = value
        else:
            data["host"]["commands"][key] = value
    return IncidentCard.model_validate(data)


def _run(card: IncidentCard, tmp_path: Path) -> Any:
    from agent.runner import investigate
    from agent.settings import Settings

    return investigate(ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"))


def test_a_named_pod_whose_log_advances_is_still_starting(tmp_path: Path) -> None:
    report = _run(_card(), tmp_path)
    assert report.root_cause == "still_starting", report.summary
    assert any("2/30" in e.line for e in report.evidence), report.evidence


def test_a_named_pod_whose_log_stands_still_is_not_called_starting(tmp_path: Path) -> None:
    still = yaml.safe_load(CARD.read_text())["host"]["commands"][LOG][0]["text"]
    report = _run(_card(**{LOG: still}), tmp_path)
    assert report.root_cause != "still_starting", report.summary


def test_a_pod_the_operator_did_not_name_proves_nothing_of_the_launch(tmp_path: Path) -> None:
    report = _run(_card(symptom="the server is not Ready after 5 minutes, is it stuck?"), tmp_path)
    assert report.root_cause != "still_starting", report.summary
