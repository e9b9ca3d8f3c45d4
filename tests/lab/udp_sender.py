#!/usr/bin/env python3
"""RoCEv2-like UDP traffic for the namespace lab; plain python3 stdlib, run inside a host namespace.

udp_sender.py send --src IP --sport N --dst IP [--dport 4791] --rate-mbit R [--payload B]
                   --seconds T [--start-at EPOCH]
    Paced UDP from an UNCONNECTED socket bound to (src, sport), with sendto(): a connected socket
    would carry a random per-socket hash and make the switches' ECMP choice random. The rate counts
    Ethernet frame bytes (payload + 42 bytes of UDP, IPv4 and Ethernet headers), as link counters and
    tc do. Prints one JSON line at exit: packets, payload_bytes, wire_bytes, send_errors, seconds.
udp_sender.py sink [--port 4791]
    Binds the port (so arriving flows cause no ICMP port-unreachable), prints "ready", discards what
    arrives; on SIGTERM prints one JSON line: packets, payload_bytes.
udp_sender.py probe DST [DST ...] [--timeout S]
    Checks that each DST answers: a UDP datagram to port 9 must come back as port-unreachable
    (ECONNREFUSED). Exits 0 when all answered, else 1 naming the silent ones.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time

HEADER_BYTES = 8 + 20 + 14  # UDP + IPv4 + Ethernet: what a veth's byte counters add to the payload
TICK_S = 0.0005
MAX_BURST_S = 0.002  # catch up at most this much sending time in one burst


def send(args: argparse.Namespace) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.src, args.sport))
    payload = bytes(args.payload)
    target = (args.dst, args.dport)
    pps = args.rate_mbit * 1e6 / 8 / (args.payload + HEADER_BYTES)
    max_burst = max(1, int(pps * MAX_BURST_S))
    delay = args.start_at - time.time() if args.start_at else 0.0
    if delay > 0:
        time.sleep(delay)
    start = time.monotonic()
    end = start + args.seconds
    slots = packets = errors = 0  # slots: sending opportunities used or skipped so far
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = int((now - start) * pps)
        slots = max(slots, due - max_burst)  # fell far behind: skip the deficit instead of a huge burst
        while slots < due:
            try:
                sock.sendto(payload, target)
                packets += 1
            except OSError:
                errors += 1
            slots += 1
        time.sleep(TICK_S)
    result = {
        "packets": packets,
        "payload_bytes": packets * args.payload,
        "wire_bytes": packets * (args.payload + HEADER_BYTES),
        "send_errors": errors,
        "seconds": round(time.monotonic() - start, 4),
    }
    print(json.dumps(result), flush=True)
    return 0


def sink(args: argparse.Namespace) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("0.0.0.0", args.port))
    counts = {"packets": 0, "payload_bytes": 0}

    def finish(_signum, _frame):
        print(json.dumps(counts), flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, finish)
    print("ready", flush=True)
    buf = bytearray(65536)
    while True:
        n = sock.recv_into(buf)
        counts["packets"] += 1
        counts["payload_bytes"] += n


def probe(args: argparse.Namespace) -> int:
    silent = []
    for dst in args.dst:
        if not _answers(dst, args.timeout):
            silent.append(dst)
    if silent:
        print(f"no answer from {' '.join(silent)}", flush=True)
        return 1
    return 0


def _answers(dst: str, timeout: float) -> bool:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((dst, 9))
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                sock.send(b"probe")
                sock.recv(16)
            except ConnectionRefusedError:
                return True
            except (TimeoutError, OSError):
                continue
        return False
    finally:
        sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    p_send = sub.add_parser("send")
    p_send.add_argument("--src", required=True)
    p_send.add_argument("--sport", type=int, required=True)
    p_send.add_argument("--dst", required=True)
    p_send.add_argument("--dport", type=int, default=4791)
    p_send.add_argument("--rate-mbit", type=float, required=True)
    p_send.add_argument("--payload", type=int, default=1000)
    p_send.add_argument("--seconds", type=float, required=True)
    p_send.add_argument("--start-at", type=float, default=0.0)
    p_sink = sub.add_parser("sink")
    p_sink.add_argument("--port", type=int, default=4791)
    p_probe = sub.add_parser("probe")
    p_probe.add_argument("dst", nargs="+")
    p_probe.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    return {"send": send, "sink": sink, "probe": probe}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
