"""How an exporter's ports are named as the twin's, the same way by `fabrictwin mirror`, `fabrictwin
telemetry import` and `Telemetry.import_text`.

With a node and no template, through the interface names the source's fabric keeps from LLDP
(`leaf0`'s `swp3` is `leaf0/p3` when a link of the fabric says so; an interface it does not name is
no fabric port and is left out); a template (`port_name`) names every port, Ethernet and SNMP ones
too ({node}, {device}, {port}: for an Ethernet interface the number its name ends in).
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import PortReading, SampleColumns, columns_of, prometheus
from fabrictwin.lldp import interface_ports
from fabrictwin.v1 import topology_pb2

if TYPE_CHECKING:
    from fabrictwin.client import Client

__all__ = ["PortNames", "prometheus_parser", "source_fabric_links"]

# The names prometheus.parse is asked for, to be named here: an InfiniBand port and any other device.
_SEPARATOR = "\x00"
_INFINIBAND_KEY = f"{_SEPARATOR}{{device}}{_SEPARATOR}{{port}}"
_DEVICE_KEY = f"{_SEPARATOR}{{device}}"
_TRAILING_NUMBER = re.compile(r"(\d{1,5})$")
_MAX_PORT = 65_535
_LISTED = 10  # interfaces named in a note at most


class PortNames:
    """How a Prometheus text's ports are named: the mirror's rule (module docstring, --help).

    `fabric_ports` (interface -> twin port, the node's entry of `interface_ports`) names the ports
    when given and not empty; else `port_name` (a template over {node}, {device} and {port}), else
    the defaults. `notes` collects what was left out, once per interface.
    """

    def __init__(
        self, node: str, port_name: str = "", fabric_ports: Mapping[str, str] | None = None, fabric: str = ""
    ) -> None:
        self.node = node
        self.fabric = fabric
        self.fabric_ports = dict(fabric_ports) if fabric_ports and not port_name else None
        self.port_name = port_name
        if port_name:
            fields = _template_fields(port_name)
            self.numbered = "port" in fields
        else:
            self.numbered = False
        self.notes: list[str] = []
        self._noted: set[str] = set()
        self._names: dict[str, str | None] = {}

    def _name(self, key: str) -> str | None:
        """The twin's name of a port parsed as `key` (see _INFINIBAND_KEY), None when left out."""
        parts = key.split(_SEPARATOR)
        if len(parts) == 3:
            device, port, infiniband = parts[1], parts[2], True
        elif len(parts) == 2:
            device, port, infiniband = parts[1], "", False
        else:
            raise InvalidArgumentError(f"a device label holds a NUL character: {key[:100]!r}")
        if self.fabric_ports is not None:
            return self.fabric_ports.get(f"{device}/p{port}" if infiniband else device)
        if not infiniband and self.numbered:
            match = _TRAILING_NUMBER.search(device)
            if match is None or not 1 <= int(match[1]) <= _MAX_PORT:
                return None
            port = str(int(match[1]))
        template = self.port_name
        if not template:
            template = "{device}/p{port}" if infiniband else "{device}"
            template = f"{{node}}/{template}" if self.node else template
        return template.format(node=self.node, device=device, port=port)

    def rename(self, readings: Iterable[PortReading]) -> list[PortReading]:
        """The readings under their twin names; InvalidArgumentError when two interfaces get one name."""
        named: list[PortReading] = []
        source: dict[str, str] = {}  # twin name -> the interface named so
        left_out: set[str] = set()
        for reading in readings:
            key = reading.port
            if key not in self._names:
                self._names[key] = self._name(key)
            name = self._names[key]
            interface = _interface(key)
            if name is None:
                left_out.add(interface)
                continue
            first = source.setdefault(name, interface)
            if first != interface:
                naming = f"--port-name {self.port_name!r}" if self.port_name else "the default names"
                raise InvalidArgumentError(
                    f"{naming} names two interfaces {name}: {first} and {interface}; include {{device}}"
                )
            named.append(dataclasses.replace(reading, port=name))
        self._note(left_out)
        return named

    def _note(self, left_out: set[str]) -> None:
        new = sorted(left_out - self._noted)
        if not new:
            return
        self._noted.update(new)
        shown = ", ".join(new[:_LISTED]) + (f" and {len(new) - _LISTED} more" if len(new) > _LISTED else "")
        count = f"{len(new)} interface{'s' if len(new) > 1 else ''}"
        if self.fabric_ports is not None:
            self.notes.append(f"{self.fabric} names no port for {count} of {self.node}, not stored: {shown}")
        else:
            self.notes.append(
                f"--port-name {self.port_name!r}: {count} end in no port number (1..{_MAX_PORT}), "
                f"not stored: {shown}"
            )


def _template_fields(template: str) -> set[str]:
    """The fields of a --port-name template; InvalidArgumentError when Prometheus ports cannot fill it."""
    try:
        fields = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
        template.format(node="n", device="d", port="1")
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise InvalidArgumentError(
            f"--port-name {template[:200]!r} does not format ({exc!r}): Prometheus ports take {{node}}, "
            "{device} and {port}"
        ) from None
    return fields


def _interface(key: str) -> str:
    """`swp3`, or `mlx5_0 port 1`: how a note or an error names the interface parsed as `key`."""
    parts = key.split(_SEPARATOR)
    return f"{parts[1]} port {parts[2]}" if len(parts) == 3 else parts[-1]


def source_fabric_links(client: Client, source: str) -> tuple[str, list[topology_pb2.Link]]:
    """The fabric a telemetry source belongs to and its links ('' and none when it has none)."""
    fabric = client.telemetry.get_source(source).fabric
    return fabric, list(client.fabrics.links(fabric)) if fabric else []


def prometheus_parser(
    node: str,
    port_name: str,
    where: str,
    fabric: str = "",
    links: Iterable[topology_pb2.Link] = (),
) -> tuple[Callable[[str, int], list[SampleColumns]], PortNames]:
    """The parser of Prometheus texts naming ports as `fabrictwin mirror` does: with `node` and no
    `port_name`, through the interface names `links` (those of `fabric`) keep."""
    fabric_ports: Mapping[str, str] | None = None
    if node and not port_name and fabric:
        fabric_ports = interface_ports(links).get(node, {})
    names = PortNames(node, port_name, fabric_ports, fabric)
    if fabric and not names.fabric_ports:
        names.notes.append(
            f"{fabric} names no interface of {node} (not imported from LLDP?): its ports keep the default "
            "names ({node}/{device}, InfiniBand {node}/{device}/p{port}); --port-name sets others"
        )

    def parse(text: str, time_ns: int) -> list[SampleColumns]:
        readings = prometheus.parse(
            text, time_ns, where=where, port_name=_INFINIBAND_KEY, device_port_name=_DEVICE_KEY
        )
        return columns_of(names.rename(readings))

    return parse, names
