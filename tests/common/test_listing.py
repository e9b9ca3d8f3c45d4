"""AIP-160 filters and AIP-132 order_by over List responses' messages (services/common/listing.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from fabrictwin.v1 import common_pb2, scenario_pb2, telemetry_pb2

from services.common.errors import InvalidArgument, ResourceExhausted
from services.common.listing import MAX_FILTERED, Listing, select


def run(name: str, state: int, day: int, labels: dict[str, str] | None = None) -> scenario_pb2.Run:
    message = scenario_pb2.Run(name=name, state=state)
    message.create_time.FromDatetime(dt.datetime(2026, 11, day, tzinfo=dt.UTC))
    if labels:
        message.scenario.fabric = labels.get("fabric", "")
    return message


RUNS = [
    run("scenarios/a/runs/1", common_pb2.JOB_STATE_SUCCEEDED, 1, {"fabric": "fabrics/ft8"}),
    run("scenarios/a/runs/2", common_pb2.JOB_STATE_FAILED, 3, {"fabric": "fabrics/ft8"}),
    run("scenarios/b/runs/3", common_pb2.JOB_STATE_SUCCEEDED, 2, {"fabric": "fabrics/pod1"}),
    run("scenarios/b/runs/4", common_pb2.JOB_STATE_RUNNING, 4),
]


def names(filter: str = "", order_by: str = "", items=RUNS) -> list[str]:
    return [
        m.name.rsplit("/", 1)[-1] for m in select(items, Listing.of(items[0].DESCRIPTOR, filter, order_by))
    ]


@pytest.mark.parametrize(
    ("filter", "expected"),
    [
        ("", ["1", "2", "3", "4"]),
        ("state = SUCCEEDED", ["1", "3"]),
        ("state = JOB_STATE_FAILED", ["2"]),
        ("state != SUCCEEDED", ["2", "4"]),
        ('create_time > "2026-11-02T00:00:00Z"', ["2", "4"]),
        ('create_time >= "2026-11-02T00:00:00Z" AND state = SUCCEEDED', ["3"]),
        ("state = FAILED OR state = RUNNING", ["2", "4"]),
        ('state = SUCCEEDED AND scenario.fabric = "fabrics/ft8"', ["1"]),
        ('NOT scenario.fabric = "fabrics/ft8"', ["3", "4"]),
        ('-scenario.fabric = "fabrics/ft8"', ["3", "4"]),
        ('name : "/b/"', ["3", "4"]),
        ('(state = FAILED OR state = RUNNING) AND name : "scenarios/a"', ["2"]),
        ('state = SUCCEEDED scenario.fabric = "fabrics/pod1"', ["3"]),  # adjacent terms are ANDed
    ],
)
def test_filters_keep_what_they_say(filter, expected) -> None:
    assert names(filter) == expected


def test_order_by_sorts_stably_by_each_key() -> None:
    assert names(order_by="create_time") == ["1", "3", "2", "4"]
    assert names(order_by="create_time desc") == ["4", "2", "3", "1"]
    assert names(order_by="state, create_time desc") == ["4", "3", "1", "2"]  # RUNNING < SUCCEEDED < FAILED


def test_maps_repeated_fields_and_numbers() -> None:
    sources = [
        telemetry_pb2.Source(name="sources/x", port_count=10, kind=telemetry_pb2.SOURCE_KIND_LIVE),
        telemetry_pb2.Source(name="sources/y", port_count=300, kind=telemetry_pb2.SOURCE_KIND_SIMULATED),
    ]
    assert names("port_count > 100", items=sources) == ["y"]
    assert names("kind = LIVE", items=sources) == ["x"]
    scenarios = [
        scenario_pb2.Scenario(name="scenarios/p", modes=[common_pb2.LoadBalancing(mode=1)]),
        scenario_pb2.Scenario(
            name="scenarios/q", modes=[common_pb2.LoadBalancing(mode=1), common_pb2.LoadBalancing(mode=2)]
        ),
    ]
    assert names("modes.mode = ADAPTIVE", items=scenarios) == ["q"]  # any element
    from fabrictwin.v1 import topology_pb2

    fabrics = [
        topology_pb2.Fabric(name="fabrics/f1", labels={"site": "a"}),
        topology_pb2.Fabric(name="fabrics/f2", labels={"site": "b", "tier": "prod"}),
        topology_pb2.Fabric(name="fabrics/f3"),
    ]
    assert names('labels.site = "b"', items=fabrics) == ["f2"]
    assert names("labels:tier", items=fabrics) == ["f2"]
    assert names("labels.site != a", items=fabrics) == ["f2", "f3"]


@pytest.mark.parametrize(
    ("filter", "order_by", "field", "words"),
    [
        ("stat = SUCCEEDED", "", "filter", "no field 'stat'"),
        ("state = DONE", "", "filter", "not a value of JobState"),
        ("state =", "", "filter", "ends too early"),
        ("state SUCCEEDED", "", "filter", "comparator"),
        ('create_time > "yesterday"', "", "filter", "RFC 3339"),
        ("(state = FAILED", "", "filter", "ends too early"),
        ("", "state sideways", "order_by", "asc|desc"),
        ("", "nothing", "order_by", "no field"),
        ("", "results", "order_by", "repeated"),
        ("x" * 3000, "", "filter", "at most"),
    ],
)
def test_mistakes_name_the_field(filter, order_by, field, words) -> None:
    with pytest.raises(InvalidArgument) as caught:
        Listing.of(scenario_pb2.Run.DESCRIPTOR, filter, order_by)
    assert caught.value.field == field and words in str(caught.value)


def test_too_much_to_filter_is_refused() -> None:
    many = (scenario_pb2.Run(name=f"r/{i}") for i in range(MAX_FILTERED + 1))
    with pytest.raises(ResourceExhausted, match="more than"):
        select(many, Listing.of(scenario_pb2.Run.DESCRIPTOR, 'name : "r"', ""))
