"""examples/fabrictwin-story.ipynb runs against the real services and its outputs tell the seeds' story.

The four services start as subprocesses (`services.stack`, as `make run` starts them) with empty
data; the notebook is executed by nbclient in an ipykernel kernel ("python3", this interpreter:
ipykernel is in the dev extra) whose environment carries the `FABRICTWIN_*_ADDRESS` variables that
`Client.from_env()` reads. Cells are found by their Jupyter tags (`comparison`, `modes-frame`,
`sorted-utilisation`, `heatmap`, `diagnosis`, `go-back-n`), and each test reads one cell's outputs:
ECMP slower than ADAPTIVE and SPRAY with hot and idle uplinks at once, both pictures drawn, the
diagnosis naming ECMP pinning, Go-Back-N resending after drops that a lossy run without a transport
only counts. The comparison runs at FLOW fidelity and the drop story is a small PACKET run, so the
whole notebook takes seconds once the packet engine is compiled (the first PACKET run in a fresh
numba cache compiles it: a minute or two, within the cell timeout).
"""

from __future__ import annotations

import base64
import pathlib
import re
import sys

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from services.stack import running_stack

pytestmark = pytest.mark.system

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "examples" / "fabrictwin-story.ipynb"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_the_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:80]


def test_the_python3_kernel_is_this_interpreter():
    """nbclient's kernel_name "python3" is ipykernel's own spec, run with the interpreter of the tests."""
    command = KernelManager(kernel_name="python3").format_kernel_cmd()
    assert command[0] == sys.executable
    assert command[1:3] == ["-m", "ipykernel_launcher"]


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict[str, list[dict]]:
    """The notebook executed against a fresh stack: tag -> that cell's outputs."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    work = tmp_path_factory.mktemp("notebook")
    with running_stack(work / "stack") as stack, pytest.MonkeyPatch.context() as env:
        for name, address in stack.client_env.items():
            env.setenv(name, address)  # the kernel inherits the test process's environment
        env.delenv("FABRICTWIN_TOKEN", raising=False)
        env.delenv("FABRICTWIN_TOKEN_FILE", raising=False)
        client = NotebookClient(
            notebook, kernel_name="python3", timeout=900, resources={"metadata": {"path": str(work)}}
        )
        client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    return {tag: cell.outputs for cell in notebook.cells for tag in cell.metadata.get("tags", [])}


def printed(outputs: list[dict]) -> str:
    return "".join(o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == "stdout")


def displayed(outputs: list[dict], mime: str) -> list[str]:
    return [
        o["data"][mime]
        for o in outputs
        if o["output_type"] in ("execute_result", "display_data") and mime in o["data"]
    ]


def test_ecmp_is_slower_than_adaptive_and_spray_with_hot_and_idle_uplinks(executed):
    (text,) = displayed(executed["modes-frame"], "text/plain")
    header, *rows = text.splitlines()
    assert header.split() == ["label", "makespan_ns", "busbw_gbps", "uplink_share_hot", "uplink_share_idle"]
    modes = {}
    for row in rows:
        _index, label, makespan, busbw, hot, idle = row.split()
        modes[label] = {
            "makespan": int(makespan),
            "busbw": float(busbw),
            "hot": float(hot),
            "idle": float(idle),
        }
    assert set(modes) == {"ECMP", "ADAPTIVE", "SPRAY"}
    ecmp = modes["ECMP"]
    for even in ("ADAPTIVE", "SPRAY"):
        assert ecmp["makespan"] > 2 * modes[even]["makespan"]
        assert modes[even]["busbw"] > 2 * ecmp["busbw"]
        assert modes[even]["idle"] == 0
    assert ecmp["hot"] > 0 and ecmp["idle"] > 0.2  # hot and idle uplinks in the same run
    # The comparison table printed above it says the same in words.
    faster = re.search(r"ADAPTIVE finishes ([\d.]+)x faster than ECMP", printed(executed["comparison"]))
    assert faster is not None and float(faster[1]) > 2


@pytest.mark.parametrize(("tag", "panels"), [("sorted-utilisation", 3), ("heatmap", 2)])
def test_the_pictures_are_drawn_inline(executed, tag, panels):
    (png,) = displayed(executed[tag], "image/png")
    assert base64.b64decode(png).startswith(PNG_SIGNATURE)
    (text,) = displayed(executed[tag], "text/plain")
    assert f"with {panels} Axes" in text  # one panel per mode; the heatmap and its colour bar


def test_the_diagnosis_names_ecmp_pinning(executed):
    text = printed(executed["diagnosis"])
    first = text.splitlines()[0]
    assert first.startswith("ECMP_PINNING: ")
    hot, idle = re.search(r"(\d+) of \d+ links hot while (\d+) sit idle in the same window", first).groups()
    assert int(hot) > 0 and int(idle) > 0
    assert "pinned by ECMP" in text


def test_go_back_n_resends_after_a_drop_that_no_transport_only_counts(executed):
    line = re.compile(
        r"^(?P<label>.+?)\s+completion\s+(?P<us>[\d.]+) us,\s+(?P<lost>\d+) lost,\s+(?P<resent>\d+) resent,"
        r"\s+(?P<naks>\d+) NAKs",
        re.M,
    )
    runs = {m["label"]: m for m in line.finditer(printed(executed["go-back-n"]))}
    assert set(runs) == {"clean", "lossy, no transport", "lossy, Go-Back-N"}
    clean, counted, gbn = runs["clean"], runs["lossy, no transport"], runs["lossy, Go-Back-N"]
    assert int(clean["lost"]) == int(clean["resent"]) == 0
    assert int(counted["lost"]) > 0 and int(counted["resent"]) == 0
    assert int(gbn["lost"]) > 0 and int(gbn["naks"]) > 0
    assert int(gbn["resent"]) > 5 * int(gbn["lost"])  # everything in flight behind a loss, not the one packet
    assert float(gbn["us"]) > 1.1 * float(clean["us"])
