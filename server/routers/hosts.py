"""Hosts: what can be investigated, whether it answers, and bounded reads of its logs/configs."""

from __future__ import annotations

import posixpath
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query
from starlette.concurrency import run_in_threadpool

from server.deps import Catalog, Config
from server.file_policy import Protected
from server.hosts import LOCAL, HostInfo, UnknownHost
from server.local_read import looks_binary
from server.local_read import read_tail as read_local_tail
from server.paths import PathRefused, check_lexical, check_on_host
from server.schemas import FileTailOut
from tools.host import decode, missing_file

router = APIRouter(prefix="/api/hosts", tags=["hosts"])


@router.get("", response_model=list[HostInfo])
async def list_hosts(catalog: Catalog, check: bool = True) -> list[HostInfo]:
    """Configured SSH hosts (with a bounded TCP reachability check), `local`, and replay cards."""
    return await run_in_threadpool(catalog.list, check)


@router.get(
    "/{host}/file",
    response_model=FileTailOut,
    responses={
        403: {"description": "outside the read roots, a credential, or Pivot's own state"},
        409: {"description": "the file changed (a symlink flipped) while it was opened"},
        415: {"description": "not a regular text file (a FIFO, a device, binary content)"},
    },
)
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
    if host == LOCAL:
        return _read_local(path, roots, deny, protected, max_bytes)
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
    if looks_binary(tail.data):
        raise HTTPException(415, f"{path} is not text (binary content); the file API reads logs")
    return FileTailOut(
        host=host,
        path=posixpath.normpath(path),
        exists=tail.exists,
        size=tail.size,
        text=decode(tail.data),
        error=tail.error,
    )


def _read_local(
    path: str, roots: list[str], deny: list[str], protected: Protected, max_bytes: int
) -> FileTailOut:
    """This machine: checked on the open descriptor, so no symlink flip or FIFO gets through."""
    norm = posixpath.normpath(path)
    try:
        got = read_local_tail(norm, roots, deny, protected, max_bytes)
    except PathRefused as exc:
        raise HTTPException(exc.status, exc.message) from exc
    if got is None:
        missing = missing_file(LOCAL, norm)
        return FileTailOut(
            host=LOCAL, path=norm, exists=False, size=0, text="", error=missing.error
        )
    size, data = got
    return FileTailOut(host=LOCAL, path=norm, exists=True, size=size, text=decode(data))
