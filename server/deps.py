"""FastAPI dependencies: everything a router needs comes from app.state through these.

Tests override them (`app.dependency_overrides`) or build the app with a known token; no router
reaches for a global.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from server.alert_intake import AlertDesk
from server.config import ServeConfig
from server.hosts import HostCatalog
from server.runs import RunHub
from server.watches import WatchBoard

bearer = HTTPBearer(auto_error=False, description="the token `pivot serve` printed on first start")


def get_config(request: Request) -> ServeConfig:
    return request.app.state.config


def get_hub(request: Request) -> RunHub:
    return request.app.state.hub


def get_memory(request: Request) -> Any:
    return request.app.state.memory


def get_catalog(request: Request) -> HostCatalog:
    return request.app.state.catalog


def get_desk(request: Request) -> AlertDesk:
    return request.app.state.alerts


def get_watches(request: Request) -> WatchBoard:
    return request.app.state.watches


def require_token(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    token = creds.credentials if creds and creds.scheme.lower() == "bearer" else None
    if not request.app.state.verifier(token):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong bearer token (see the token `pivot serve` printed)",
            headers={"WWW-Authenticate": "Bearer"},
        )


Config = Annotated[ServeConfig, Depends(get_config)]
Hub = Annotated[RunHub, Depends(get_hub)]
Mem = Annotated[Any, Depends(get_memory)]
Catalog = Annotated[HostCatalog, Depends(get_catalog)]
Desk = Annotated[AlertDesk, Depends(get_desk)]
Watches = Annotated[WatchBoard, Depends(get_watches)]
