"""Shared fixtures: PostgreSQL discovery (testcontainers, else FABRICTWIN_TEST_POSTGRES_URL, else skip)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A PostgreSQL URL for tests; skips with the reason printed when none is available."""
    url = os.environ.get("FABRICTWIN_TEST_POSTGRES_URL")
    if url:
        return url
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16-alpine", driver="psycopg")
        container.start()
        import atexit

        atexit.register(container.stop)
        return container.get_connection_url()
    pytest.skip(
        "no PostgreSQL: no Docker engine for testcontainers and FABRICTWIN_TEST_POSTGRES_URL is unset "
        "(.ci/run starts the machine's PostgreSQL and sets it)"
    )
