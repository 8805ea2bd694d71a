"""Send a watch's reports to `pivot serve` without ever slowing the watch.

A tick is 0.15 s and a death must be seen within one, so nothing here runs on the watch's thread
but a hand-over: a background thread PUTs the newest report (older unsent ones are dropped: the
page wants now, not history). A server that is down or refuses the token is said once, at the
end, never raised; the watch's verdict and exit code do not depend on it.
"""

from __future__ import annotations

import threading

import httpx

from watch.live import LaunchReport


class ServeReporter:
    def __init__(self, url: str, token: str | None, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s
        self.problem: str | None = None
        self.sent = 0
        self._next: LaunchReport | None = None
        self._cv = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="pivot-watch-serve", daemon=True)
        self._thread.start()

    def update(self, report: LaunchReport) -> None:
        with self._cv:
            self._next = report
            self._cv.notify()

    def close(self, wait_s: float = 10.0) -> str | None:
        """Send what is pending, stop; returns what went wrong, if anything did."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join(timeout=wait_s)
        return self.problem

    def _run(self) -> None:
        with httpx.Client(headers=self.headers, timeout=self.timeout_s) as client:
            while True:
                with self._cv:
                    while self._next is None and not self._closing:
                        self._cv.wait()
                    report, self._next = self._next, None
                    if report is None:
                        return
                self._send(client, report)

    def _send(self, client: httpx.Client, report: LaunchReport) -> None:
        where = f"{self.url}/api/watches/{report.watch_id}"
        try:
            r = client.put(
                where,
                content=report.model_dump_json(),
                headers={"Content-Type": "application/json"},
            )
        except httpx.HTTPError as exc:
            self.problem = f"--serve {self.url}: {type(exc).__name__}: {exc}"
            return
        if r.is_success:
            self.sent += 1
        else:
            self.problem = f"--serve {self.url}: HTTP {r.status_code} {r.text[:200]}"
