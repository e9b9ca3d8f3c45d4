"""The per-namespace daemons: lldpd (every node) and node_exporter (every switch), their command lines,
configuration files, and a reader for `lldpcli -f json show neighbors`."""

from __future__ import annotations

import json
import pathlib
import shlex
import shutil
import sys
from dataclasses import dataclass, field

from .shell import in_netns

NODE_EXPORTER_NAMES = ("prometheus-node-exporter", "node_exporter")
EXPORTER_ADDRESS = "127.0.0.1:9100"


def node_exporter_binary() -> str | None:
    """Path of the node_exporter binary (Debian names it prometheus-node-exporter), or None."""
    for name in NODE_EXPORTER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


# ---- lldpd --------------------------------------------------------------------------------------------


def write_lldpd_files(workdir: pathlib.Path, node: str, is_switch: bool) -> tuple[pathlib.Path, pathlib.Path]:
    """Write `node`'s /etc/hosts replacement and lldpcli start-up configuration; return (hosts, conf).

    The hosts file answers lldpd's look-up of its own name locally (otherwise it waits on DNS for seconds
    on every loop). Port IDs are ifnames rather than MACs; switches advertise Router, hosts Station."""
    hosts = workdir / f"{node}.hosts"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.1.1 {node}\n")
    capability = "router" if is_switch else "station"
    conf = workdir / f"{node}.lldpd.conf"
    conf.write_text(
        "configure lldp portidsubtype ifname\n"
        "configure lldp tx-interval 1\n"
        f"configure system capabilities enabled {capability}\n"
    )
    return hosts, conf


def lldpd_argv(namespace: str, node: str, hosts: pathlib.Path, conf: pathlib.Path, socket: str) -> list[str]:
    """lldpd for `node`, in its network namespace plus a private UTS namespace (hostname = node, the LLDP
    system name) and a private mount namespace (its own tmpfs on /run, where lldpd's privilege separation
    chroots, and its own /etc/hosts). Its control socket lives outside /run so lldpcli reaches it from the
    root namespace. lldpd is also pid 1 of its own PID namespace: when it exits, the kernel kills and
    reaps its privilege-separated child, which would otherwise be left to the machine's pid 1 as a
    zombie (`unshare --fork` waits for it, and holds SIGTERM, so signal the whole process group)."""
    setup = (
        f"echo {shlex.quote(node)} > /proc/sys/kernel/hostname"
        " && mount -t tmpfs -o mode=0755 ftl-run /run"
        f" && mount --bind {shlex.quote(str(hosts))} /etc/hosts"
        f" && exec lldpd -d -u {shlex.quote(socket)} -O {shlex.quote(str(conf))}"
    )
    return in_netns(
        namespace,
        ["unshare", "--uts", "--mount", "--propagation", "private", "--pid", "--fork", "sh", "-c", setup],
    )


def lldpcli_argv(socket: str, *command: str) -> list[str]:
    """lldpcli against one lab lldpd, JSON output."""
    return ["lldpcli", "-u", socket, "-f", "json", *command]


@dataclass
class Neighbor:
    """One LLDP neighbour as seen on a local interface."""

    name: str | None
    port_id: str | None
    port_id_type: str | None
    capabilities: dict[str, bool] = field(default_factory=dict)


def _one_key_items(value) -> list[tuple[str, dict]]:
    """lldpcli JSON gives {key: obj} for one entry and [{key: obj}, ...] for several: flatten both."""
    items = value if isinstance(value, list) else [value]
    return [(key, obj) for item in items if isinstance(item, dict) for key, obj in item.items()]


def _as_list(value) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def parse_neighbors(text: str) -> dict[str, Neighbor]:
    """Local ifname -> Neighbor from the text of `lldpcli -f json show neighbors`."""
    doc = json.loads(text) if text.strip() else {}
    out: dict[str, Neighbor] = {}
    for lldp in _as_list(doc.get("lldp")):
        for ifname, body in _one_key_items(lldp.get("interface", [])):
            chassis = body.get("chassis", {})
            name = None
            if "id" not in chassis and len(chassis) == 1:
                name, chassis = next(iter(chassis.items()))
            port_id = body.get("port", {}).get("id", {})
            caps = {c.get("type"): bool(c.get("enabled")) for c in _as_list(chassis.get("capability"))}
            out[ifname] = Neighbor(name, port_id.get("value"), port_id.get("type"), caps)
    return out


# ---- node_exporter ------------------------------------------------------------------------------------


def node_exporter_argv(namespace: str, binary: str) -> list[str]:
    """node_exporter inside a switch namespace: only the netdev (byte/packet/drop counters), netclass
    (node_network_up, node_network_info{operstate}) and qdisc (what each port's tbf dropped)
    collectors, on the namespace's own loopback."""
    return in_netns(
        namespace,
        [
            binary,
            f"--web.listen-address={EXPORTER_ADDRESS}",
            "--collector.disable-defaults",
            "--collector.netdev",
            "--collector.netclass",
            "--collector.qdisc",
            "--web.disable-exporter-metrics",
        ],
    )


def scrape_command(namespace: str) -> str:
    """A shell command printing the namespace's node_exporter /metrics text (plain python3 stdlib)."""
    code = (
        "import sys, urllib.request; "
        f'sys.stdout.write(urllib.request.urlopen("http://{EXPORTER_ADDRESS}/metrics", timeout=5)'
        ".read().decode())"
    )
    return shlex.join(in_netns(namespace, [sys.executable, "-I", "-S", "-c", code]))
