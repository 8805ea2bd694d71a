"""Liveness without auth, for load balancers and the page's first probe."""

from __future__ import annotations

from fastapi import APIRouter

from server.schemas import Health

router = APIRouter(prefix="/api", tags=["health"])


@router.get("/health", response_model=Health)
def health() -> Health:
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("pivot")
    except PackageNotFoundError:
        v = "dev"
    return Health(version=v)
