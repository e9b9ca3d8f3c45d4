# FabricTwin developer commands. Everything runs from the project's virtual environment (.venv),
# created on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BENCH ?=
# Where `make bench` appends each result with its date, commit and CPU count (empty: nowhere).
BENCH_RECORD ?= docs/results.jsonl

.PHONY: venv proto lint test bench run lab clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e clients/python -e '.[dev]'
	$(PY) -m services.simulator.packet.warm_up  # compile the packet engine once (about a minute)
	$(PY) -m services.simulator.flow.warm_up  # and the FLOW engine's loop (about 10 s)
	touch $@

proto: venv
	$(PY) scripts/gen_protos.py

# Style, formatting, the protobuf contract and types (mypy: the files and strictness in pyproject.toml).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/buf lint
	$(VENV)/bin/mypy

test: venv
	$(PY) -m pytest

bench: venv
	$(PY) -m bench $(if $(BENCH_RECORD),--record $(BENCH_RECORD)) $(BENCH)

run: venv
	$(PY) -m services.simulator.packet.warm_up  # at once when compiled; else before the services start
	$(PY) -m services.simulator.flow.warm_up
	$(PY) -m services.stack

# The Ethernet mirror on a real fabric in Linux network namespaces (needs root): prints what it found.
lab: venv
	$(PY) -m tests.lab

clean:
	rm -rf .fabrictwin .pytest_cache .ruff_cache .mypy_cache
