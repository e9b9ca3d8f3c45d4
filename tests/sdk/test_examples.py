"""The shipped example scenarios run from the CLI against the real services and show what they claim."""

from __future__ import annotations

import asyncio

import pytest
from fabrictwin import Client
from fabrictwin.cli import main as cli_main
from fabrictwin.examples import EXAMPLES, run_example

from tests.in_process import in_process_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    loop = asyncio.new_event_loop()
    manager = in_process_stack(tmp_path_factory.mktemp("examples"))
    running = loop.run_until_complete(manager.__aenter__())
    import threading

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield running
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.run_until_complete(manager.__aexit__(None, None, None))
    loop.close()


@pytest.fixture(scope="module")
def client(stack):
    with Client(**stack.addresses) as client:
        yield client


@pytest.fixture(scope="module")
def results(client):
    """Every example run once: name -> {run label: Simulation}."""
    return {name: dict(run_example(client, name, timeout=300)[1]) for name in EXAMPLES}


def test_go_back_n_under_a_marginal_transceiver_loses_packets_resends_windows_and_is_slower(results):
    runs = results["go-back-n-marginal"]
    clean, bursty = runs["clean"].result, runs["marginal-bursty"].result
    independent = runs["same-mean-independent"].result
    assert clean.corrupted_packets == 0
    for lossy in (bursty, independent):
        assert lossy.corrupted_packets > 0
        assert lossy.retransmitted_packets > lossy.corrupted_packets  # a window per loss, not a packet
        assert lossy.makespan_ns > clean.makespan_ns


def test_pfc_incast_trades_drops_for_head_of_line_blocking(results):
    runs = results["pfc-incast"]
    lossy, pfc = runs["lossy-go-back-n"].result, runs["pfc"].result
    assert lossy.drops > 0 and pfc.drops == 0
    innocent = {
        label: next(j for j in runs[label].result.jobs if j.label == "innocent").completion_ns
        for label in runs
    }
    assert innocent["pfc"] > 1.3 * innocent["innocent-alone"]


def test_dcqcn_evens_out_what_pfc_alone_shares_per_port(results):
    runs = results["dcqcn-fair-share"]

    def jain(label: str) -> float:
        rates = [f.size_bytes / (f.finish_ns - f.start_ns) for f in runs[label].result.flows]
        return sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))

    assert jain("pfc-only") < 0.93
    assert jain("dcqcn-tuned") > 0.98
    tuned = runs["dcqcn-tuned"].result
    assert tuned.cnp_sent == tuned.cnp_handled > 0


def test_infiniband_credits_remove_the_congestion_drops_of_the_same_incast(results):
    runs = results["ib-credits-incast"]
    assert runs["rocev2-lossy"].result.drops > 0
    ib = runs["infiniband-credits"].result
    assert ib.drops == 0 and ib.xmit_wait_ns > 0
    assert max(link.peak_input_buffer_bytes for link in ib.links) <= 64 * 1024


def test_sharp_takes_about_half_the_rings_time_and_host_traffic(results):
    runs = results["sharp-vs-ring"]
    ring, sharp = runs["ring"].result, runs["sharp"].result
    n = ring.jobs[0].ranks
    assert sharp.jobs[0].completion_ns / ring.jobs[0].completion_ns == pytest.approx(
        n / (2 * (n - 1)), rel=0.05
    )


def test_the_routing_reaction_sets_how_long_a_link_failure_stalls_the_ring(results):
    runs = results["link-failure-reroute"]
    time = {label: sim.result.makespan_ns for label, sim in runs.items()}
    assert time["no-failure"] < time["fast-recovery"] < time["subnet-manager"] < time["routing-protocol"]
    assert time["routing-protocol"] > 1_000_000_000  # Ethernet convergence: a second
    assert runs["subnet-manager"].result.xmit_discards > 0


def test_the_cli_lists_and_runs_an_example(stack, capsys):
    addresses = [f"--{name}={address}" for name, address in stack.addresses.items()]
    assert cli_main([*addresses, "example", "list"]) == 0
    assert "pfc-incast" in capsys.readouterr().out
    assert cli_main([*addresses, "example", "run", "ib-credits-incast"]) == 0
    out = capsys.readouterr().out
    assert "infiniband-credits" in out and "PortXmitWait" in out
    assert cli_main([*addresses, "example", "run", "no-such-example"]) == 2
