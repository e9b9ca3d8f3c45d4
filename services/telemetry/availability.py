"""Whether the telemetry database can be reached: the errors that say it cannot, and the health probe.

A database that is away (PostgreSQL stopped or restarting, the network to it down, SQLite's file
unreadable or locked past the busy timeout) is not a bug in the service: every call that needs it
fails with UNAVAILABLE (`Unavailable`, which a client may retry), not INTERNAL. `database_errors()`
turns the driver errors that mean "the database cannot be reached" into that; every other error goes
through unchanged, so INTERNAL still marks our bugs.

`DatabaseProbe` reads the database every `interval_s` in a thread and reports the service
NOT_SERVING after a failed read (or one slower than `timeout_s`) and SERVING after the next good
one, through the health setter the server bootstrap hands to the servicer (`watch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterator

import psycopg
import sqlalchemy as sa

from services.common.errors import Unavailable
from services.common.server import HealthSetter

__all__ = ["DatabaseProbe", "HealthSetter", "database_errors", "is_unreachable"]

log = logging.getLogger("fabrictwin.telemetry")


# SQLSTATE classes of a server that is going or gone: 08 connection exception, 53 insufficient
# resources (too many connections, disk full), 57 operator intervention (shutdown, crash recovery).
_AWAY_SQLSTATE_CLASSES = ("08", "53", "57")
_SQLITE_AWAY = ("unable to open database file", "disk i/o error", "database is locked")
_MESSAGE_CHARACTERS = 200


def is_unreachable(error: BaseException | None) -> bool:
    """True when `error` says the database cannot be reached (rather than that a statement is wrong)."""
    if isinstance(error, sa.exc.TimeoutError):  # no pooled connection came free in time
        return True
    if isinstance(error, sa.exc.DBAPIError):
        if error.connection_invalidated:  # SQLAlchemy saw the connection drop
            return True
        error = error.orig
    if isinstance(error, psycopg.InterfaceError):  # "the connection is closed"
        return True
    if isinstance(error, psycopg.OperationalError):
        sqlstate = error.sqlstate or ""  # none: the client could not connect or lost the server
        return not sqlstate or sqlstate[:2] in _AWAY_SQLSTATE_CLASSES
    if isinstance(error, sqlite3.OperationalError):
        return str(error).lower().startswith(_SQLITE_AWAY)
    return False


def _reason(error: BaseException) -> str:
    cause = error.orig if isinstance(error, sa.exc.DBAPIError) else error
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return text[:_MESSAGE_CHARACTERS]


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """Raise `Unavailable` (UNAVAILABLE) for an error inside that means the database cannot be reached."""
    try:
        yield
    except (sa.exc.SQLAlchemyError, psycopg.Error, sqlite3.Error) as exc:
        if is_unreachable(exc):
            raise Unavailable(
                f"the telemetry database cannot be reached ({_reason(exc)}); retry later"
            ) from exc
        raise


class DatabaseProbe:
    """Checks the database every `interval_s` and reports SERVING or NOT_SERVING on each change."""

    def __init__(self, check: Callable[[], None], interval_s: float = 2.0, timeout_s: float = 5.0) -> None:
        self._check = check
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.reachable = True
        self._setter: HealthSetter | None = None
        self._reported: bool | None = None
        self._checking: asyncio.Future[str] | None = None

    def watch(self, set_serving: HealthSetter) -> None:
        """Report through `set_serving` from now on (the server's health status of this service)."""
        self._setter = set_serving
        self._reported = True  # the server starts SERVING; the next check reports any change

    def _read(self) -> str:
        """ "" when the database answered, else why not."""
        try:
            self._check()
        except Exception as exc:  # anything that stops a read stops the service's work
            cause = exc.__cause__ if isinstance(exc, Unavailable) and exc.__cause__ else exc
            return _reason(cause)
        return ""

    async def check(self) -> bool:
        """Check once (a check still running from before is waited for, not doubled); True if reachable."""
        if self._checking is None or self._checking.done():
            self._checking = asyncio.ensure_future(asyncio.to_thread(self._read))
        try:
            problem = await asyncio.wait_for(asyncio.shield(self._checking), self.timeout_s)
        except TimeoutError:
            problem = f"no answer within {self.timeout_s:g} s"
        reachable = not problem
        if reachable != self.reachable:
            if reachable:
                log.info("telemetry database reachable again")
            else:
                log.warning("telemetry database unreachable: %s", problem)
        self.reachable = reachable
        await self._report()
        return reachable

    async def _report(self) -> None:
        if self._setter is not None and self._reported != self.reachable:
            await self._setter(self.reachable)
            self._reported = self.reachable

    async def run(self) -> None:
        """Check every `interval_s` until cancelled."""
        while True:
            await self.check()
            await asyncio.sleep(self.interval_s)

    async def close(self) -> None:
        """Wait briefly for a check still running (its thread cannot be interrupted)."""
        if self._checking is not None and not self._checking.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._checking), self.timeout_s)
