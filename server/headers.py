"""Security headers on every response, as plain ASGI so SSE streams pass through untouched.

The page loads only its own files (no CDN, no inline script), so its policy is strict. The API
docs run Swagger UI from the pinned `swagger-ui-py` package; Swagger UI sets inline styles,
so /docs alone allows those.
"""

from __future__ import annotations

from typing import Any

PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
DOCS_CSP = PAGE_CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
#: Eval reports are self-contained HTML (inline styles, no script), framed by the eval page.
REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'; sandbox"
)


class SecurityHeaders:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        csp = DOCS_CSP if path == "/docs" or path.startswith("/_docs/") else PAGE_CSP
        frame = b"DENY"
        if path.startswith("/reports/"):
            csp, frame = REPORT_CSP, b"SAMEORIGIN"

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.lower()
                    not in (
                        b"content-security-policy",
                        b"x-frame-options",
                        b"x-content-type-options",
                    )
                ]
                headers += [
                    (b"content-security-policy", csp.encode()),
                    (b"x-frame-options", frame),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
