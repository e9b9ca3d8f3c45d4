"""FabricTwin's Python SDK: a typed, synchronous client for the four services, and the `fabrictwin` CLI.

>>> from fabrictwin import Client, collective_job
>>> client = Client.from_env()  # doctest: +SKIP
>>> fabric = client.fabrics.create_fat_tree(8, fabric_id="ft8")  # doctest: +SKIP

Messages are the generated protobuf classes of `fabrictwin.v1`; errors are `fabrictwin.errors`.
The SDK depends on grpcio and protobuf only.
"""

from __future__ import annotations

from fabrictwin.client import Addresses, Client
from fabrictwin.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    FabricTwinError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)
from fabrictwin.specs import (
    bit_errors,
    collective_job,
    link_down,
    load_balancing,
    marginal_transceiver,
    simulation_spec,
)
from fabrictwin.units import parse_duration_ns, parse_size

__all__ = [
    "Addresses",
    "AlreadyExistsError",
    "Client",
    "DeadlineExceededError",
    "FabricTwinError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "__version__",
    "bit_errors",
    "collective_job",
    "link_down",
    "load_balancing",
    "marginal_transceiver",
    "parse_duration_ns",
    "parse_size",
    "simulation_spec",
]

__version__ = "0.1.0"
