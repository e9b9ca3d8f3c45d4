"""The CLI offers for import exactly what ImportFabric takes, and for export what ExportFabric writes."""

from __future__ import annotations

import pytest
from fabrictwin.cli import build_parser

from services.topology.formats import EXPORT_FORMATS
from services.topology.messages import IMPORT_FORMATS


def test_import_offers_only_formats_the_service_imports():
    parser = build_parser({})
    for name in IMPORT_FORMATS:
        assert parser.parse_args(["fabric", "import", "x", "--format", name]).format == name
    for refused in ("opensm_lfts", "node_link_json"):
        with pytest.raises(SystemExit):
            parser.parse_args(["fabric", "import", "x", "--format", refused])


@pytest.mark.parametrize("name", [*EXPORT_FORMATS, "opensm_lfts"])
def test_export_offers_every_format_the_service_writes(name):
    assert build_parser({}).parse_args(["fabric", "export", "f", "--format", name]).format == name
