"""The test PostgreSQL is real: a server process of Debian's package, not root, with the features
the PostgreSQL backend relies on (tsvector search, LISTEN/NOTIFY, SKIP LOCKED)."""

from __future__ import annotations

import os

import psycopg

from tests.postgres import Postgres


def test_server_runs_unprivileged_and_has_what_the_backend_needs(postgres: Postgres) -> None:
    url = postgres.new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("show server_version_num").fetchone()
        assert version is not None and int(version[0]) >= 120000
        pid_row = conn.execute("select pg_backend_pid()").fetchone()
        assert pid_row is not None
        stat = os.stat(f"/proc/{pid_row[0]}")
        assert stat.st_uid != 0, "PostgreSQL must not run as root"
        hit = conn.execute(
            "select to_tsvector('english', 'stale GPU process holds memory') "
            "@@ websearch_to_tsquery('english', 'gpu memory')"
        ).fetchone()
        assert hit == (True,)
        conn.execute("LISTEN pivot_test")
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("select pg_notify('pivot_test', 'hello')")
        got = next(conn.notifies(timeout=5, stop_after=1))
        assert (got.channel, got.payload) == ("pivot_test", "hello")


def test_each_new_database_is_empty_and_separate(postgres: Postgres) -> None:
    a, b = postgres.new_database(), postgres.new_database()
    assert a != b
    with psycopg.connect(a, autocommit=True) as conn:
        conn.execute("create table t (x int)")
    with psycopg.connect(b, autocommit=True) as conn:
        tables = conn.execute(
            "select count(*) from information_schema.tables where table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)
