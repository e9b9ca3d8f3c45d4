import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import serving


async def test_a_server_on_port_zero_reports_serving():
    async with serving(ServiceConfig(service="t", port=0), []) as running:
        assert running.port > 0
        async with grpc.aio.insecure_channel(running.address) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
