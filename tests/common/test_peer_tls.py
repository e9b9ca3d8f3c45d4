"""TLS and the bearer token between the services: each service's client side takes its peer settings
(`--peer-tls-ca`, its own certificate for mutual TLS, the token) from the same configuration."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest
from fabrictwin.v1 import (
    common_pb2,
    simulation_pb2,
    simulation_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

from services.common.config import ServiceConfig
from services.common.peers import PeerAuth, auth_metadata, peer_auth, peer_channel
from services.common.server import create_server, serving
from services.simulator.__main__ import build as build_simulator
from services.topology.__main__ import build as build_topology

from .scripted_services import scripted_definitions
from .test_tls import OPENSSL, Pki, pki  # noqa: F401 - `pki` is a fixture

pytestmark = pytest.mark.skipif(
    OPENSSL is None, reason="the openssl CLI is not installed; cannot make certificates"
)
TOKEN = "peer-token"


def secured(pki: Pki, service: str, **fields) -> ServiceConfig:  # noqa: F811 - the fixture's value
    """A service serving mutual TLS with the test CA's server certificate, calling its peers the same way."""
    return ServiceConfig(
        service=service,
        port=0,
        tls_cert=str(pki.server_cert),
        tls_key=str(pki.server_key),
        tls_client_ca=str(pki.ca),
        peer_tls_ca=str(pki.ca),
        auth_token=TOKEN,
        **fields,
    )


async def get_fabric(channel: grpc.aio.Channel, auth: PeerAuth | str) -> str:
    stub = topology_pb2_grpc.TopologyServiceStub(channel)
    reply = await stub.GetFabric(
        topology_pb2.GetFabricRequest(name="fabrics/ok"), metadata=auth_metadata(auth), timeout=5
    )
    return reply.name


async def test_a_peer_channel_with_the_peer_settings_calls_a_mutual_tls_server(pki):  # noqa: F811
    async with serving(secured(pki, "scripted"), scripted_definitions()) as server:
        auth = peer_auth(secured(pki, "scripted"))
        async with peer_channel(server.address, auth) as channel:
            assert await get_fabric(channel, auth) == "fabrics/ok"


async def test_the_service_certificate_is_the_client_certificate_unless_another_is_given(pki):  # noqa: F811
    own = peer_auth(secured(pki, "scripted"))
    assert own.certificate_chain == pki.read("server_cert")
    other = peer_auth(
        secured(pki, "scripted", peer_tls_cert=str(pki.client_cert), peer_tls_key=str(pki.client_key))
    )
    assert (other.certificate_chain, other.private_key) == (pki.read("client_cert"), pki.read("client_key"))
    assert other.token == TOKEN


async def test_without_peer_settings_a_peer_channel_is_plaintext_and_cannot_reach_tls(pki):  # noqa: F811
    async with serving(secured(pki, "scripted"), scripted_definitions()) as server:
        plain = peer_auth(ServiceConfig(service="scripted", auth_token=TOKEN))
        assert plain.root_certificates is None
        async with peer_channel(server.address, plain) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await get_fabric(channel, plain)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_peer_channel_still_takes_a_bare_token(pki):  # noqa: F811
    async with serving(
        ServiceConfig(service="scripted", port=0, auth_token=TOKEN), scripted_definitions()
    ) as s:
        async with peer_channel(s.address, TOKEN) as channel:
            assert await get_fabric(channel, TOKEN) == "fabrics/ok"
        async with peer_channel(s.address) as channel:  # the old call: plaintext, no token
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await get_fabric(channel, "")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"peer_tls_cert": "client_cert"}, "--peer-tls-key"),
        ({"peer_tls_key": "client_key"}, "--peer-tls-cert"),
        ({"peer_tls_ca": "server_key"}, "--peer-tls-ca"),
    ],
    ids=["cert without key", "key without cert", "CA not a cert"],
)
def test_a_peer_tls_misconfiguration_fails_at_start_naming_the_flag(pki, fields, names):  # noqa: F811
    config = ServiceConfig(service="simulator", **{k: str(getattr(pki, v)) for k, v in fields.items()})
    with pytest.raises(ValueError, match=names):
        peer_auth(config)


def test_an_unreadable_peer_ca_fails_naming_the_flag(tmp_path):
    with pytest.raises(OSError, match=r"--peer-tls-ca .*absent\.pem"):
        peer_auth(ServiceConfig(service="simulator", peer_tls_ca=str(tmp_path / "absent.pem")))


async def test_a_tls_simulator_fetches_its_snapshot_from_a_tls_topology(pki, tmp_path):  # noqa: F811
    async with contextlib.AsyncExitStack() as stack:

        async def start(config: ServiceConfig, build) -> str:  # type: ignore[no-untyped-def]
            services, cleanup = await build(config)
            stack.push_async_callback(cleanup)
            running = await create_server(config, services)
            stack.push_async_callback(running.stop, 0)
            return running.address

        topology = await start(secured(pki, "topology", data_dir=str(tmp_path)), build_topology)
        simulator = await start(secured(pki, "simulator", topology_address=topology), build_simulator)
        caller = peer_auth(
            secured(pki, "client", peer_tls_cert=str(pki.client_cert), peer_tls_key=str(pki.client_key))
        )
        async with peer_channel(topology, caller) as channel:
            await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
                topology_pb2.CreateFabricRequest(
                    fabric_id="ft4", spec=topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=4))
                ),
                metadata=auth_metadata(caller),
            )
        job = simulation_pb2.Job(
            collective=simulation_pb2.COLLECTIVE_ALL_REDUCE, size_bytes=1 << 20, rank_count=8
        )
        spec = simulation_pb2.SimulationSpec(
            fabric="fabrics/ft4",
            jobs=[job],
            load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE),
        )
        async with peer_channel(simulator, caller) as channel:
            stub = simulation_pb2_grpc.SimulationServiceStub(channel)
            # StartSimulation fetches the snapshot from topology before it returns: over TLS.
            started = await stub.StartSimulation(
                simulation_pb2.StartSimulationRequest(spec=spec), metadata=auth_metadata(caller), timeout=30
            )
            updates = stub.WatchSimulation(
                simulation_pb2.WatchSimulationRequest(name=started.name), metadata=auth_metadata(caller)
            )
            last = [update async for update in updates][-1]
    assert last.state == common_pb2.JOB_STATE_SUCCEEDED, last.error.message
    assert last.result.makespan_ns > 0


async def test_peer_settings_do_not_leak_between_services_in_one_process(pki):  # noqa: F811
    # Two servers in one process, one TLS and one plaintext: each caller uses its own settings.
    async with (
        serving(secured(pki, "scripted"), scripted_definitions()) as tls_server,
        serving(ServiceConfig(service="scripted", port=0), scripted_definitions()) as plain_server,
    ):
        tls_auth = peer_auth(secured(pki, "scripted"))
        async with peer_channel(tls_server.address, tls_auth) as a, peer_channel(plain_server.address) as b:
            names = await asyncio.gather(get_fabric(a, tls_auth), get_fabric(b, ""))
    assert names == ["fabrics/ok", "fabrics/ok"]
