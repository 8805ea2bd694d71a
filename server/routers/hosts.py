"""Hosts: what can be investigated, whether it answers, and bounded reads of its logs/configs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query
from starlette.concurrency import run_in_threadpool

from server.deps import Catalog, Config
from server.hosts import HostInfo, UnknownHost
from server.paths import PathRefused, check_lexical, check_on_host
from server.schemas import FileTailOut
from tools.host import decode

router = APIRouter(prefix="/api/hosts", tags=["hosts"])


@router.get("", response_model=list[HostInfo])
async def list_hosts(catalog: Catalog, check: bool = True) -> list[HostInfo]:
    """Configured SSH hosts (with a bounded TCP reachability check), `local`, and replay cards."""
    return await run_in_threadpool(catalog.list, check)


@router.get("/{host}/file", response_model=FileTailOut)
def read_file(
    host: Annotated[str, Path(min_length=1, max_length=200)],
    catalog: Catalog,
    config: Config,
    path: Annotated[str, Query(min_length=1, max_length=4096)],
    max_bytes: Annotated[int, Query(ge=1, le=1_000_000)] = 64_000,
) -> FileTailOut:
    """The tail of a host log or config: read roots only, never credentials or Pivot's own state.

    Checked before the host is asked anything, so a refused path never reaches an `open()`.
    """
    if not catalog.known(host):
        raise HTTPException(404, f"unknown host {host!r}")
    roots, deny, protected = config.read_roots_for(host), config.deny(), config.protected_now()
    try:
        check_lexical(path, roots, deny, protected)
    except PathRefused as exc:
        raise HTTPException(exc.status, exc.message) from exc
    try:
        h = catalog.open(host)
    except UnknownHost as exc:
        raise HTTPException(404, str(exc)) from exc
    try:
        checked = check_on_host(h, path, roots, deny, protected)
        tail = h.read_tail(checked, max_bytes=max_bytes)
    except PathRefused as exc:
        raise HTTPException(exc.status, exc.message) from exc
    finally:
        h.close()
    return FileTailOut(
        host=host,
        path=checked,
        exists=tail.exists,
        size=tail.size,
        text=decode(tail.data),
        error=tail.error,
    )
