"""The page's own routes besides its static files: deep links, offline API docs, the favicon.

`/s/<session>` serves the same page; the page reads the id from its URL, so a link or a reload
opens that session. /docs uses Swagger UI from the pinned `swagger-ui-py` package (mounted
at /_docs by the app factory), so it works with no network.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, HTMLResponse

STATIC = Path(__file__).resolve().parent.parent / "static"
router = APIRouter(include_in_schema=False)

DOCS_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Pivot API</title>
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/_docs/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/_docs/swagger-ui-bundle.js"></script>
<script src="/docs-init.js"></script></body></html>
"""


@router.get("/s/{session_id}")
def session_page(
    session_id: Annotated[str, PathParam(max_length=100, pattern=r"^[A-Za-z0-9_-]+$")],
) -> FileResponse:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


@router.get("/docs")
def docs() -> HTMLResponse:
    return HTMLResponse(DOCS_HTML)


@router.get("/reports/{eval_id}.html")
def eval_report(
    eval_id: Annotated[str, PathParam(max_length=100, pattern=r"^[A-Za-z0-9_-]+$")],
    key: str,
    request: Request,
) -> HTMLResponse:
    """An eval run's HTML report. The key in its URL is the capability (an iframe cannot send
    the bearer header); only an authenticated GET /api/evals/{id} hands it out."""
    got = request.app.state.eval_reports.get(eval_id)
    if got is None or not hmac.compare_digest(got[0], key):
        raise HTTPException(404, "no such report")
    from evals.report_html import render

    return HTMLResponse(render(got[1]), headers={"Cache-Control": "no-store"})


@router.get("/favicon.ico")
def favicon() -> FileResponse:
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")
