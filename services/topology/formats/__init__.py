"""Topology formats: text <-> `Fabric`, one module per format, and the two entry points the servicer calls.

| format           | import | export | module            |
|------------------|--------|--------|-------------------|
| `ibnetdiscover`  | yes    | yes    | `ibnetdiscover.py` (also reads ibsim's short form) |
| `ibsim`          | yes    | yes    | `ibsim.py`        (ibsim net file; read as ibnetdiscover) |
| `json`           | yes    | yes    | `json_format.py`  (documented in docs/topology-formats.md) |
| `node_link_json` | no     | yes    | `node_link.py`    (networkx node-link JSON) |
| `ns3_hpcc`       | yes    | yes    | `ns3_hpcc.py`     (ns-3 HPCC `topology.txt`) |
| `lldp`           | yes    | no     | `lldp.py`         (`lldpcli -f json show neighbors` per node) |

Every importer returns a validated `Fabric` or raises `InvalidArgument` naming the line (or JSON path)
and what was expected, quoting at most ~200 characters of it; nothing is half-imported. Numbers are
checked against the bounds of limits.py before any arithmetic on them, and a dump describing a fabric
beyond the service's `FabricLimits` is refused with `ResourceExhausted` as soon as its size is known
(from a header where the format has one), before the fabric is built. Per-node formats (`lldp`) take
`documents`, (name, text) pairs, or a tar `archive` of them instead of one text. `opensm-lfts.dump`
(forwarding tables, not topology) lives with the routing engines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from services.common.errors import InvalidArgument, quote
from services.topology.fabric import Fabric
from services.topology.limits import DEFAULT_LIMITS, FabricLimits

__all__ = [
    "DOCUMENT_FORMATS",
    "EXPORT_FORMATS",
    "FORMATS",
    "IMPORT_FORMATS",
    "export_fabric",
    "import_fabric",
]

Importer = Callable[..., Fabric]
Exporter = Callable[[Fabric], str]


def _importers() -> dict[str, Importer]:
    # Imported lazily so that importing this package stays cheap (json_format pulls in nothing heavy,
    # but node_link needs networkx, which only the export of that format should load).
    from services.topology.formats import ibnetdiscover, json_format, ns3_hpcc

    return {
        "ibnetdiscover": ibnetdiscover.import_ibnetdiscover,
        "ibsim": ibnetdiscover.import_ibnetdiscover,  # ibsim's net files are ibnetdiscover's grammar
        "json": json_format.import_json,
        "ns3_hpcc": ns3_hpcc.import_ns3_hpcc,
    }


def _exporters() -> dict[str, Exporter]:
    from services.topology.formats import ibnetdiscover, ibsim, json_format, node_link, ns3_hpcc

    return {
        "ibnetdiscover": ibnetdiscover.export_ibnetdiscover,
        "ibsim": ibsim.export_ibsim,
        "json": json_format.export_json,
        "node_link_json": node_link.export_node_link_json,
        "ns3_hpcc": ns3_hpcc.export_ns3_hpcc,
    }


FORMATS = ("ibnetdiscover", "ibsim", "json", "lldp", "node_link_json", "ns3_hpcc")
IMPORT_FORMATS = ("ibnetdiscover", "ibsim", "json", "lldp", "ns3_hpcc")
EXPORT_FORMATS = ("ibnetdiscover", "ibsim", "json", "node_link_json", "ns3_hpcc")
DOCUMENT_FORMATS = ("lldp",)  # one document per node


def _check_format(format: str, allowed: tuple[str, ...], verb: str) -> None:
    if format in allowed:
        return
    if format in FORMATS:
        can = "imported but not exported" if verb == "export" else "exported but not imported"
        raise InvalidArgument("format", f"{format!r} can be {can}; {verb} one of {', '.join(allowed)}")
    raise InvalidArgument(
        "format", f"unknown topology format {quote(format)}; {verb} one of {', '.join(allowed)}"
    )


def import_fabric(
    format: str,
    text: str,
    *,
    default_link_speed_gbps: float = 400.0,
    default_link_latency_ns: int = 500,
    take_slower_end_on_speed_mismatch: bool = False,
    documents: Sequence[tuple[str, str]] | None = None,
    archive: bytes = b"",
    port_speeds_gbps: Mapping[str, float] | None = None,
    limits: FabricLimits = DEFAULT_LIMITS,
) -> Fabric:
    """Parse `text` (or, for DOCUMENT_FORMATS, `documents` or `archive`) in `format` into a Fabric.

    Parameters: `format` is one of IMPORT_FORMATS; `default_link_speed_gbps` is used where the text
    gives no link speed (ibsim short form without a width/speed, JSON links without `speed_gbps`);
    `default_link_latency_ns` where it gives no latency (ibnetdiscover never does).
    Raises InvalidArgument("format", ...) for an unknown or export-only format,
    InvalidArgument naming the line or JSON path for bad text, and ResourceExhausted for a fabric
    beyond `limits`.

    >>> f = import_fabric("ns3_hpcc", "3 1 2\\n2\\n0 2 100Gbps 0.001ms 0\\n1 2 100Gbps 0.001ms 0\\n")
    >>> f.num_hosts, f.num_switches, f.num_links
    (2, 1, 2)
    """
    _check_format(format, IMPORT_FORMATS, "import")
    if format in DOCUMENT_FORMATS:
        return _import_documents(format, text, documents, archive, port_speeds_gbps,
                                 default_link_speed_gbps, default_link_latency_ns,
                                 take_slower_end_on_speed_mismatch, limits)  # fmt: skip
    if documents or archive or port_speeds_gbps:
        given = "documents" if documents else "archive" if archive else "port_speeds_gbps"
        raise InvalidArgument(
            given, f"applies to {', '.join(DOCUMENT_FORMATS)} only; give {format} as content"
        )
    if not isinstance(text, str):
        raise InvalidArgument("text", f"must be text, got {type(text).__name__}")
    options = {}
    if format == "ibnetdiscover":
        options["rate_mismatch"] = "slower" if take_slower_end_on_speed_mismatch else "error"
    elif take_slower_end_on_speed_mismatch:
        raise InvalidArgument("take_slower_end_on_speed_mismatch", "applies to ibnetdiscover dumps only")
    return _importers()[format](
        text,
        default_link_speed_gbps=default_link_speed_gbps,
        default_link_latency_ns=default_link_latency_ns,
        limits=limits,
        **options,
    )


def _import_documents(
    format: str,
    text: str,
    documents: Sequence[tuple[str, str]] | None,
    archive: bytes,
    port_speeds_gbps: Mapping[str, float] | None,
    default_link_speed_gbps: float,
    default_link_latency_ns: int,
    take_slower_end_on_speed_mismatch: bool,
    limits: FabricLimits,
) -> Fabric:
    from services.topology.formats import lldp

    if take_slower_end_on_speed_mismatch:
        raise InvalidArgument("take_slower_end_on_speed_mismatch", "applies to ibnetdiscover dumps only")
    given = [
        name for name, value in (("content", text), ("documents", documents), ("archive", archive)) if value
    ]
    if len(given) != 1:
        raise InvalidArgument(
            "documents", f"{format} takes one of documents or archive, got {' and '.join(given) or 'neither'}"
        )
    if text:
        raise InvalidArgument("content", f"{format} is one document per node: give documents or archive")
    pairs = list(documents) if documents else lldp.documents_from_archive(archive)
    return lldp.import_lldp(
        pairs,
        default_link_speed_gbps=default_link_speed_gbps,
        default_link_latency_ns=default_link_latency_ns,
        port_speeds_gbps=port_speeds_gbps,
        limits=limits,
    )


def export_fabric(fabric: Fabric, format: str) -> str:
    """The text of `fabric` in `format` (one of EXPORT_FORMATS); unknown -> InvalidArgument("format")."""
    _check_format(format, EXPORT_FORMATS, "export")
    return _exporters()[format](fabric)
