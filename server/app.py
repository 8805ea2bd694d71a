"""The app factory: wires memory, the Runner, the host catalog and the routers; nothing else.

`create_app()` with no arguments runs on the embedded defaults (~/.pivot); tests pass a config
with a temp home, their card directories and a known token.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles

from server.alert_intake import AlertDesk
from server.alertmanager import shipped_rules
from server.auth import BearerGate, TokenVerifier, ensure_token
from server.config import ServeConfig
from server.deps import require_token
from server.headers import SecurityHeaders
from server.hosts import HostCatalog
from server.inflight import Inflight
from server.limits import BodyLimit
from server.routers import (
    alerts,
    approvals,
    causes,
    evals,
    events,
    health,
    hosts,
    loop,
    memory,
    pages,
    sessions,
    watches,
)
from server.runs import RunHub
from server.watches import WatchBoard

STATIC = Path(__file__).resolve().parent / "static"


def swagger_ui_static() -> Path:
    """Swagger UI 5 (OpenAPI 3.1) as shipped in the pinned `swagger-ui-py` wheel; not imported."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("swagger-ui-py is not installed (requirements.lock pins it)")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def _open_memory(settings: Any) -> Any:
    from store.factory import open_memory

    return open_memory(settings.database_url, settings.memory_path)


def _make_runner(settings: Any, memory: Any) -> Any:
    from agent.runner import Runner

    return Runner(settings, memory=memory)


def _cluster(settings: Any, runner: Any) -> Any:
    """Replicas share work only through a team PostgreSQL; on SQLite the hub is alone."""
    if not getattr(settings, "database_url", None) or getattr(runner, "leases", None) is None:
        return None
    from server.cluster import Cluster

    return Cluster(settings.database_url, runner.leases)


def create_app(
    config: ServeConfig | None = None,
    *,
    settings: Any | None = None,
    token: str | None = None,
    verifier: TokenVerifier | None = None,
) -> FastAPI:
    if settings is None:
        from agent.settings import get_settings

        settings = get_settings()
    config = config or ServeConfig.from_settings()
    if verifier is None:
        verifier = TokenVerifier.for_token(token) if token else ensure_token(config.home)[0]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        mem = _open_memory(settings)
        runner = _make_runner(settings, mem)
        cluster = _cluster(settings, runner)
        # Alone, a file under the home names the runs a killed process lost. Replicas share the
        # home and the database instead: their run leases say which runs lost their replica, and
        # a live replica continues them (server/cluster.py), so they keep no such file.
        inflight = Inflight(config.home) if cluster is None else None
        hub = RunHub(
            mem,
            runner,
            app.state.catalog,
            workers=config.workers,
            cluster=cluster,
            inflight=inflight,
        )
        hub.bind(asyncio.get_running_loop())
        hub.restore()
        if cluster is not None:
            cluster.bind(on_event=hub.relay, on_orphan=hub.adopt)
            cluster.start()
        app.state.memory = mem
        app.state.hub = hub
        try:
            yield
        finally:
            hub.shutdown()  # running runs finish and release their leases first
            if cluster is not None:
                cluster.stop()
            runner.close()  # closes its checkpointer and the shared memory

    app = FastAPI(
        title="Pivot",
        summary="Hypothesis-driven debugging agent for GPU LLM inference servers",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served offline by routers/pages.py
        redoc_url=None,
    )
    app.state.config = config
    app.state.settings = settings
    app.state.verifier = verifier
    app.state.catalog = HostCatalog(config)
    app.state.alerts = AlertDesk(shipped_rules())
    app.state.watches = WatchBoard()
    app.state.evals = {}
    app.state.eval_reports = {}  # eval id -> (report key, the harness's run)

    app.include_router(health.router)
    app.include_router(pages.router)
    authed = [Depends(require_token)]
    for r in (sessions, events, approvals, causes, memory, hosts, evals, loop, alerts, watches):
        app.include_router(r.router, dependencies=authed)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    app.add_middleware(BearerGate, verifier=verifier, public=("/api/health",))
    app.add_middleware(SecurityHeaders)  # outermost: even a 401 carries the headers
    app.mount("/_docs", StaticFiles(directory=swagger_ui_static()), name="swagger-ui")
    app.mount("/", StaticFiles(directory=STATIC, html=True), name="page")
    return app
