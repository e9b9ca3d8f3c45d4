"""The four services with mutual TLS and a bearer token on every listener, calling each other the same way.

A stored run crosses every service-to-service call: orchestrator -> topology, simulator and telemetry;
simulator -> topology (snapshots) and telemetry (series); telemetry -> topology (the fabric's links).
"""

from __future__ import annotations

import grpc
import pytest
from fabrictwin.v1 import (
    common_pb2,
    scenario_pb2,
    scenario_pb2_grpc,
    simulation_pb2,
    topology_pb2,
    topology_pb2_grpc,
)

from services.common.config import ServiceConfig
from services.common.peers import auth_metadata, peer_auth, peer_channel
from tests.common.test_tls import OPENSSL, pki  # noqa: F401 - `pki` is a fixture
from tests.in_process import in_process_stack

pytestmark = pytest.mark.skipif(
    OPENSSL is None, reason="the openssl CLI is not installed; cannot make certificates"
)
TOKEN = "stack-token"


async def test_a_stored_run_crosses_every_service_over_mutual_tls_with_the_token(pki, tmp_path):  # noqa: F811
    settings = {
        "tls_cert": str(pki.server_cert),
        "tls_key": str(pki.server_key),
        "tls_client_ca": str(pki.ca),
        "peer_tls_ca": str(pki.ca),
        "auth_token": TOKEN,
    }
    client = peer_auth(
        ServiceConfig(
            service="client",
            peer_tls_ca=str(pki.ca),
            peer_tls_cert=str(pki.client_cert),
            peer_tls_key=str(pki.client_key),
            auth_token=TOKEN,
        )
    )
    metadata = auth_metadata(client)
    async with in_process_stack(tmp_path, simulator_replicas=2, settings=settings) as stack:
        async with peer_channel(stack.topology.address, client) as channel:
            await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
                topology_pb2.CreateFabricRequest(
                    fabric_id="ls",
                    spec=topology_pb2.FabricSpec(
                        leaf_spine=topology_pb2.LeafSpineSpec(leaves=2, spines=4, hosts_per_leaf=4)
                    ),
                ),
                metadata=metadata,
            )
        job = simulation_pb2.Job(
            collective=simulation_pb2.COLLECTIVE_ALL_REDUCE,
            size_bytes=64 << 20,
            rank_count=8,
            placement=simulation_pb2.PLACEMENT_POLICY_SCATTERED,
        )
        modes = [
            common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP, seed=3),
            common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE),
        ]
        scenario = scenario_pb2.Scenario(fabric="fabrics/ls", jobs=[job], modes=modes, store_telemetry=True)
        async with peer_channel(stack.orchestrator.address, client) as channel:
            scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
            created = await scenarios.CreateScenario(
                scenario_pb2.CreateScenarioRequest(scenario=scenario), metadata=metadata
            )
            started = await scenarios.RunScenario(
                scenario_pb2.RunScenarioRequest(scenario=created.name), metadata=metadata
            )
            updates = scenarios.WatchRun(
                scenario_pb2.WatchRunRequest(name=started.name), metadata=metadata, timeout=120
            )
            run = [update async for update in updates][-1]
            assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
            diagnosis = await scenarios.Diagnose(
                scenario_pb2.DiagnoseRequest(
                    source=run.results[0].telemetry_source, ports=["leaf-*->spine-*"]
                ),
                metadata=metadata,
            )
            assert [f.kind for f in diagnosis.findings] == [scenario_pb2.FINDING_KIND_ECMP_PINNING]
            with pytest.raises(grpc.aio.AioRpcError) as refused:  # the listener still wants the token
                await scenarios.GetRun(scenario_pb2.GetRunRequest(name=run.name))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
