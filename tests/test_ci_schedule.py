"""make test's scheduler (scripts/ci_test.py) and the CI cells it reads from matrix.yaml."""

import importlib.util
import json
import sys
import time

import pytest
from tests.conftest import REPO

from rlbridge.envs.compat import ci_cells
from rlbridge.errors import RLBridgeError


def test_ci_cells_are_the_matrix_cells_with_a_ci_field(tmp_path):
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "cells:\n"
        "  - {engine: trl, version: '1.16.0', tests: [translate]}\n"
        "  - {engine: verl, version: '0.9.1', tests: [translate], ci: {peak_gib: 10, warm_s: 400}}\n"
    )
    assert ci_cells(matrix) == [{"cell": "verl==0.9.1", "peak_gib": 10.0, "warm_s": 400.0}]
    matrix.write_text("cells:\n  - {engine: verl, version: '0.9.1', tests: [translate], ci: {peak: 10}}\n")
    with pytest.raises(RLBridgeError, match="verl==0.9.1: `ci` needs exactly peak_gib and warm_s"):
        ci_cells(matrix)
    assert {c["cell"] for c in ci_cells()} >= {"verl==0.9.1", "openrlhf==0.11.2"}  # the shipped matrix's


def test_the_longest_ready_job_takes_a_free_slot_and_memory_is_respected(monkeypatch):
    """Two slots within 20 GiB. The pytest phase starts first and the longest cell whose environment is
    ready (z) beside it; when z ends, of the cells ready then the longest (b) takes its slot, not the
    shortest; c (15 GiB) never runs beside b (10 GiB) or pytest-envs (10 GiB), and while it waits the
    longest jobs that fit run instead: pytest-envs (which waited for every environment), then a."""
    spec = importlib.util.spec_from_file_location("ci_test_under_test", REPO / "scripts" / "ci_test.py")
    ci = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, ci)  # its dataclasses look their module up there
    spec.loader.exec_module(ci)
    cells = [
        {"cell": "a==1", "peak_gib": 3, "warm_s": 30},
        {"cell": "b==1", "peak_gib": 10, "warm_s": 400},
        {"cell": "c==1", "peak_gib": 15, "warm_s": 300},
        {"cell": "z==1", "peak_gib": 1, "warm_s": 500},
    ]
    events = []
    # z's environment is ready at once, the others a little later: z alone can take the second slot
    durations = {"install": 0, "env z==1": 0.01, "pytest": 0.6, "cell z==1": 0.2, "cell b==1": 0.5, "pytest-envs": 0.3}

    def fake_phase(name, cmd, log, env=None, junit=None):
        phase = ci.Phase(name, started=time.time(), ok=True)
        ci.PHASES.append(phase)
        events.append(("start", name))
        time.sleep(durations.get(name, 0.05 if name.startswith("env ") else 0.1))
        events.append(("end", name))
        phase.ended = time.time()
        return phase

    class Listed:
        stdout = json.dumps(cells)

    monkeypatch.setattr(ci, "run_phase", fake_phase)
    monkeypatch.setattr(ci, "finish", lambda: 0)
    monkeypatch.setattr(ci.subprocess, "run", lambda *a, **k: Listed())
    monkeypatch.setenv("RLBRIDGE_CI_MEM_GIB", "20")
    monkeypatch.setenv("RLBRIDGE_CI_TEST_JOBS", "2")
    monkeypatch.delenv("CI_CELLS", raising=False)
    monkeypatch.delenv("RLBRIDGE_CI_ENGINE_LOCK", raising=False)
    assert ci.main() == 0
    tests = [(kind, name) for kind, name in events if not name.startswith(("env ", "install"))]
    starts = [name for kind, name in tests if kind == "start"]
    assert starts == ["pytest", "cell z==1", "cell b==1", "pytest-envs", "cell a==1", "cell c==1"], tests
    running: set[str] = set()
    for kind, name in tests:
        running = running | {name} if kind == "start" else running - {name}
        assert not ({"cell b==1", "cell c==1"} <= running or {"pytest-envs", "cell c==1"} <= running), tests
        assert len(running) <= 2, tests
