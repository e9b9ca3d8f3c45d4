"""The packet-engine reference scenario in ns-3 (run inside the ns-3 virtual environment).

k-ary fat-tree of point-to-point links (100 Gb/s, 1 us each), every host i sends `--bytes` to host
(i+1) mod H at line rate over UDP, 1500-byte IP packets (1472-byte UDP payload), per-packet
spreading by Ipv4GlobalRouting::RandomEcmpRouting. Prints one JSON object: packets delivered,
bytes delivered, simulated completion time and the wall time of Simulator::Run.

Usage: .venv-ns3/bin/python bench/ns3/reference.py --k 8 --bytes 10000000
"""

import argparse
import json
import time

from ns import ns


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--bytes", type=int, default=10_000_000)
    parser.add_argument("--rate", default="100Gbps")
    parser.add_argument("--delay", default="1us")
    parser.add_argument("--slice-us", type=float, default=5.0)
    parser.add_argument("--limit-s", type=float, default=1.0)
    args = parser.parse_args()
    k, half = args.k, args.k // 2
    payload = 1472

    ns.Config.SetDefault("ns3::Ipv4GlobalRouting::RandomEcmpRouting", ns.BooleanValue(True))
    hosts = ns.NodeContainer()
    hosts.Create(k * half * half)
    edges, aggs, cores = ns.NodeContainer(), ns.NodeContainer(), ns.NodeContainer()
    edges.Create(k * half)
    aggs.Create(k * half)
    cores.Create(half * half)
    stack = ns.InternetStackHelper()
    for group in (hosts, edges, aggs, cores):
        stack.Install(group)

    p2p = ns.PointToPointHelper()
    p2p.SetDeviceAttribute("DataRate", ns.StringValue(args.rate))
    p2p.SetChannelAttribute("Delay", ns.StringValue(args.delay))
    address = ns.Ipv4AddressHelper()
    subnet = [0]

    def connect(a, b):
        devices = p2p.Install(a, b)
        n = subnet[0]
        subnet[0] += 1
        address.SetBase(
            ns.Ipv4Address(f"10.{n >> 14}.{(n >> 6) & 0xFF}.{(n & 0x3F) << 2}"),
            ns.Ipv4Mask("255.255.255.252"),
        )
        return address.Assign(devices)

    host_address = []
    for pod in range(k):
        for e in range(half):
            edge = edges.Get(pod * half + e)
            for h in range(half):
                interfaces = connect(hosts.Get((pod * half + e) * half + h), edge)
                host_address.append(interfaces.GetAddress(0))
            for a in range(half):
                connect(edge, aggs.Get(pod * half + a))
        for a in range(half):
            for c in range(half):
                connect(aggs.Get(pod * half + a), cores.Get(a * half + c))
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()

    count = hosts.GetN()
    port = 9000
    sinks = []
    for i in range(count):
        sink = ns.PacketSinkHelper(
            "ns3::UdpSocketFactory", ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
        )
        apps = sink.Install(hosts.Get(i))
        apps.Start(ns.Seconds(0))
        sinks.append(apps.Get(0))
    for i in range(count):
        target = ns.InetSocketAddress(host_address[(i + 1) % count], port).ConvertTo()
        onoff = ns.OnOffHelper("ns3::UdpSocketFactory", target)
        onoff.SetAttribute("OnTime", ns.StringValue("ns3::ConstantRandomVariable[Constant=1000]"))
        onoff.SetAttribute("OffTime", ns.StringValue("ns3::ConstantRandomVariable[Constant=0]"))
        onoff.SetAttribute("DataRate", ns.StringValue(args.rate))
        onoff.SetAttribute("PacketSize", ns.UintegerValue(payload))
        onoff.SetAttribute("MaxBytes", ns.UintegerValue(args.bytes))
        apps = onoff.Install(hosts.Get(i))
        apps.Start(ns.Seconds(0))

    # OnOffApplication keeps an event pending until its on-period ends, so Simulator::Run would not
    # stop at the last delivery: run in slices and stop at the first slice by whose end every
    # sent byte has arrived (the completion time is exact to one slice).
    packet_sinks = [ns.DynamicCast[ns.PacketSink](s) for s in sinks]
    per_host = -(-args.bytes // payload) * payload
    expected = per_host * count
    slice_s = args.slice_us * 1e-6
    wall = 0.0
    delivered_bytes = 0
    elapsed = 0.0
    while delivered_bytes < expected and elapsed < args.limit_s:
        elapsed += slice_s
        ns.Simulator.Stop(ns.Seconds(slice_s))
        start = time.perf_counter()
        ns.Simulator.Run()
        wall += time.perf_counter() - start
        delivered_bytes = sum(int(s.GetTotalRx()) for s in packet_sinks)
    completion = ns.Simulator.Now().GetSeconds()
    ns.Simulator.Destroy()
    packets = delivered_bytes // payload
    print(
        json.dumps(
            {
                "ns3_packets": packets,
                "ns3_delivered_bytes": delivered_bytes,
                "ns3_completion_s": completion,
                "ns3_wall_s": wall,
                "ns3_packets_per_s": packets / wall if wall > 0 else 0.0,
            }
        )
    )


if __name__ == "__main__":
    main()
