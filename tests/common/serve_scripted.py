"""`python -m tests.common.serve_scripted [flags]`: the scripted doubles served by run_service.

What a service's `__main__.py` does, for tests that need a real process (signals, exit codes, logs).
Its one extra flag, `--build-delay-ms`, makes the build log "building" and then take that long;
its cleanup logs "cleaned up" so that a test can see it ran.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from services.common.config import ServiceConfig
from services.common.server import ServiceDefinition, run_service

from .scripted_services import scripted_definitions

log = logging.getLogger("fabrictwin.scripted")


def extra_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--build-delay-ms", type=int, default=0, help="pretend the build is slow")


async def build(config: ServiceConfig) -> tuple[list[ServiceDefinition], object]:
    log.info("building", extra={"delay_ms": config.extra["build_delay_ms"]})
    await asyncio.sleep(config.extra["build_delay_ms"] / 1000)

    async def cleanup() -> None:
        log.info("cleaned up")

    return scripted_definitions(), cleanup


if __name__ == "__main__":
    run_service("scripted", build, extra_flags=extra_flags)
