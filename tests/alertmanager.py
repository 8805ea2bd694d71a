"""A real Prometheus Alertmanager (Debian's `prometheus-alertmanager`) on 127.0.0.1, for tests.

It routes every alert to one webhook receiver through its own config, so a test exercises
Alertmanager's grouping, timing, payload and bearer auth rather than a hand-made POST. Clustering
is off (no gossip port) and its state lives in a temp dir. scripts/system-deps.sh installs it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.server.conftest import free_port

BINARIES = ("prometheus-alertmanager", "alertmanager")


class AlertmanagerUnavailable(Exception):
    pass


def binary() -> str:
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    raise AlertmanagerUnavailable(
        "prometheus-alertmanager is not installed (scripts/system-deps.sh installs it)"
    )


def config(webhook: str, token: str, timing: dict[str, str]) -> str:
    """One route to one webhook receiver with bearer auth, grouped by alert name and host."""
    import yaml

    return yaml.safe_dump(
        {
            "route": {"receiver": "pivot", "group_by": ["alertname", "host"], **timing},
            "receivers": [
                {
                    "name": "pivot",
                    "webhook_configs": [
                        {
                            "url": webhook,
                            "send_resolved": True,
                            "max_alerts": 20,
                            "http_config": {
                                "authorization": {"type": "Bearer", "credentials": token}
                            },
                        }
                    ],
                }
            ],
        }
    )


@dataclass
class Alertmanager:
    proc: subprocess.Popen[str]
    url: str
    log: Path

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        """Alertmanager's own API, as Prometheus sends alerts to it."""
        r = httpx.post(f"{self.url}/api/v2/alerts", json=alerts, timeout=10)
        assert r.status_code == 200, r.text

    def notifications(self) -> float:
        """Webhook notifications it has sent successfully, from its own /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        sent = failed = 0.0
        for line in text.splitlines():
            if 'integration="webhook"' not in line or line.startswith("#"):
                continue
            if line.startswith("alertmanager_notifications_total"):
                sent += float(line.rsplit(" ", 1)[1])
            elif line.startswith("alertmanager_notifications_failed_total"):
                failed += float(line.rsplit(" ", 1)[1])
        return sent - failed

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


def start_alertmanager(
    workdir: Path, webhook: str, token: str, timing: dict[str, str]
) -> Alertmanager:
    exe = binary()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "alertmanager.yml"
    cfg.write_text(config(webhook, token, timing), encoding="utf-8")
    port = free_port()
    log = workdir / "alertmanager.log"
    proc = subprocess.Popen(
        [
            exe,
            f"--config.file={cfg}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip: one instance, no port 9094
            "--log.level=debug",  # each notification attempt is logged, for a failing test
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    am = Alertmanager(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AlertmanagerUnavailable(f"it exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{am.url}/-/ready", timeout=2).status_code == 200:
                return am
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            am.stop()
            raise AlertmanagerUnavailable(f"not ready in 30 s: {log.read_text()[-2000:]}")
        time.sleep(0.1)
