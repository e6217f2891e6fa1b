"""A real PostgreSQL server for the tests (engine/store/pgcluster.py, docs/adr/0016-postgresql.md).

One throwaway cluster per test session (initdb in a temp dir, a unix socket, as ``nobody`` when
root); each test gets its own schema in it (``search_path`` in the URL), so tests never see each
other's rows. ``make test`` installs Debian's server (``make postgres``) and sets
ENGINE_REQUIRE_POSTGRES=1: there a missing server fails; elsewhere these tests are skipped.

Import the fixtures into a test module: ``from tests.pg_support import pg_cluster, pg_url``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from engine.errors import StoreError

REQUIRE = "ENGINE_REQUIRE_POSTGRES"


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE):
        pytest.fail(f"{REQUIRE} is set but {reason}", pytrace=False)
    pytest.skip(f"{reason}: run `make postgres` (or `make test`, which does)")


def start(vector: bool = False, tcp: bool = False):  # type: ignore[no-untyped-def]  # -> PgCluster
    try:
        import psycopg  # noqa: F401 - the `postgres` extra
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    from engine.store.pgcluster import start_cluster

    try:
        return start_cluster(vector=vector, tcp=tcp)
    except StoreError as exc:
        _unavailable(f"no PostgreSQL server could be started: {exc.message}")
        raise


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[object]:
    cluster = start()
    try:
        yield cluster
    finally:
        cluster.close()


def schema_url(base: str, schema: str) -> str:
    """``base`` with every connection's search_path set to ``schema``."""
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema},public')}"  # public: extensions


def fresh_schema(base: str) -> str:
    """A new, empty schema in the cluster; the URL whose connections use it."""
    import psycopg

    name = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(base, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA {name}")  # type: ignore[arg-type]  # a generated identifier
    return schema_url(base, name)


@pytest.fixture
def pg_url(pg_cluster: object) -> str:
    return fresh_schema(pg_cluster.url)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def pgvector_cluster() -> Iterator[object]:
    """A cluster whose server has pgvector (the pgserver wheel's: Debian 12 packages none)."""
    import psycopg

    cluster = start(vector=True)
    try:
        with psycopg.connect(cluster.url, autocommit=True) as con:  # once, where every test schema sees it
            con.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def pgvector_url(pgvector_cluster: object) -> str:
    return fresh_schema(pgvector_cluster.url)  # type: ignore[attr-defined]
