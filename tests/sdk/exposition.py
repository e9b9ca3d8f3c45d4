"""Exposition written two ways from one description of the families, as an exporter writes both from its
one set of metrics: the text format and the protobuf format (varint-delimited MetricFamily messages)."""

from __future__ import annotations

from fabrictwin.prometheus.metrics_pb2 import MetricFamily

Labels = dict[str, str]
Family = tuple[str, str, list[tuple[Labels, float, int | None]]]  # name, type, (labels, value, ms)

TYPES = {"counter": 0, "gauge": 1, "summary": 2, "untyped": 3, "histogram": 4}


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def as_protobuf(families: list[Family]) -> bytes:
    stream = b""
    for name, kind, metrics in families:
        family = MetricFamily(name=name, help=f"{name} help", type=TYPES[kind])
        for labels, value, stamp in metrics:
            metric = family.metric.add()
            for key, text in labels.items():
                metric.label.add(name=key, value=text)
            if kind in ("counter", "gauge", "untyped"):
                getattr(metric, kind).value = value
            if stamp is not None:
                metric.timestamp_ms = stamp
        body = family.SerializeToString()
        stream += varint(len(body)) + body
    return stream


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def as_text(families: list[Family]) -> str:
    lines = []
    for name, kind, metrics in families:
        lines += [f"# HELP {name} {name} help", f"# TYPE {name} {kind}"]
        for labels, value, stamp in metrics:
            written = ",".join(f'{key}="{_escaped(text)}"' for key, text in labels.items())
            suffixes = ("_sum", "_count") if kind in ("summary", "histogram") else ("",)
            for suffix in suffixes:
                number = repr(value) if isinstance(value, float) else str(value)
                line = f"{name}{suffix}{{{written}}} {number}"
                lines.append(line if stamp is None else f"{line} {stamp}")
    return "\n".join(lines) + "\n"
