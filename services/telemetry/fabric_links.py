"""The links of a fabric version in SQL: saved once from the topology service, read by group queries.

A fabric version is identified by the fabric's name and create time (a fabric deleted and created
again under the same name is another version). A source is bound to the version current when its
ports were first grouped, so a simulated run keeps the links it ran on.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import Connection

from services.telemetry.groups import FabricLinks
from services.telemetry.schema import fabric_links, sources
from services.telemetry.sql import dialect_insert

__all__ = ["delete_unused_links", "load_links", "save_links"]

_FIELDS = ("node_a", "port_a", "tier_a", "node_b", "port_b", "tier_b")


def save_links(connection: Connection, links: FabricLinks) -> None:
    """Store a fabric version's links unless they are stored already (another source may be saving
    the same version at the same moment: a link already there is skipped)."""
    stored = connection.execute(
        sa.select(sa.func.count())
        .select_from(fabric_links)
        .where(fabric_links.c.fabric == links.fabric, fabric_links.c.version == links.version)
    ).scalar_one()
    if stored:
        return
    columns = [getattr(links, name) for name in _FIELDS]
    rows = [
        {
            "fabric": links.fabric,
            "version": links.version,
            "link_index": i,
            **dict(zip(_FIELDS, values, strict=True)),
        }
        for i, values in enumerate(zip(*columns, strict=True))
    ]
    if rows:
        insert = dialect_insert(connection, fabric_links).on_conflict_do_nothing(
            index_elements=["fabric", "version", "link_index"]
        )
        connection.execute(insert, rows)


def load_links(connection: Connection, fabric: str, version: int) -> FabricLinks | None:
    """A fabric version's links, or None if they were never saved."""
    query = (
        sa.select(*(fabric_links.c[name] for name in _FIELDS))
        .where(fabric_links.c.fabric == fabric, fabric_links.c.version == version)
        .order_by(fabric_links.c.link_index)
    )
    rows = connection.execute(query).all()
    if not rows:
        return None
    columns = [list(values) for values in zip(*rows, strict=True)]
    return FabricLinks(fabric, version, *columns)


def delete_unused_links(connection: Connection, fabric: str, version: int) -> None:
    """Delete a fabric version's links when no source is bound to it any more."""
    used = connection.execute(
        sa.select(sa.func.count())
        .select_from(sources)
        .where(sources.c.fabric == fabric, sources.c.fabric_version == version)
    ).scalar_one()
    if not used:
        connection.execute(
            sa.delete(fabric_links).where(fabric_links.c.fabric == fabric, fabric_links.c.version == version)
        )
