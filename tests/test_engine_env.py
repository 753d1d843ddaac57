"""Engine environments and runs launched in them: staging, resumption, errors, Ctrl-C."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import MINIMAL, REPO, run_cli, write_config

LIGHT_RECIPES = """\
# A stand-in engine: small real packages, so the staging logic runs for real in seconds.
demo:
  distribution: six
  default: "1.16.0"
  torch: "pluggy>=1.3"
  versions:
    "1.16.0": {pins: []}
    "1.17.0": {pins: []}
    "broken": {version: "1.16.0", pins: ["rlbridge-no-such-package-xyz==9.9"]}
"""


def _use_recipes(monkeypatch, root: Path) -> Path:
    path = root / "engines.yaml"
    path.write_text(LIGHT_RECIPES)
    monkeypatch.setenv("RLBRIDGE_RECIPES", str(path))
    monkeypatch.setenv("RLBRIDGE_CACHE_DIR", str(root / "cache"))
    monkeypatch.setenv("RLBRIDGE_INSTALLER", "pip")
    return path


@pytest.fixture
def light_recipes(tmp_path, monkeypatch):
    """The stand-in engine, with an empty environment cache of this test's own."""
    return _use_recipes(monkeypatch, tmp_path)


@pytest.fixture(scope="module")
def demo_env_created(tmp_path_factory):
    """demo==1.16.0 created once for the tests that only read or use a finished environment (each creation
    installs rlbridge and its dependencies into a new venv: about a minute on 2 cores)."""
    root = tmp_path_factory.mktemp("shared-demo-env")
    with pytest.MonkeyPatch.context() as mp:
        _use_recipes(mp, root)
        first = run_cli("env", "create", "demo==1.16.0")
    return root, first


@pytest.fixture
def shared_demo_env(demo_env_created, monkeypatch):
    """The module's created demo environment, its cache and recipes set for this test; (root, first creation)."""
    root, first = demo_env_created
    _use_recipes(monkeypatch, root)
    return root, first


def test_env_create_is_idempotent_and_lists(shared_demo_env):
    root, first = shared_demo_env
    assert first.returncode == 0, first.stderr
    assert "[3/5] engine: six==1.16.0 pluggy>=1.3" in first.stderr
    env = root / "cache" / "envs" / "demo-1.16.0"
    python = env / "bin" / "python"
    assert subprocess.run([python, "-c", "import six, rlbridge"]).returncode == 0
    again = run_cli("env", "create", "demo==1.16.0")
    assert again.returncode == 0 and again.stderr.count("already done") == 5
    listed = run_cli("env", "list")
    assert "demo" in listed.stdout and "yes" in listed.stdout


def test_env_create_resumes_after_an_interrupted_stage(shared_demo_env):
    root, first = shared_demo_env
    assert first.returncode == 0, first.stderr
    env = root / "cache" / "envs" / "demo-1.16.0"
    (env / ".rlbridge" / "engine.done").unlink()  # as if killed during the engine install
    (env / ".rlbridge" / "rlbridge.done").unlink()
    res = run_cli("env", "create", "demo==1.16.0")
    assert res.returncode == 0
    assert "[1/5] venv: already done" in res.stderr and "[2/5] torch: already done" in res.stderr
    assert "[3/5] engine: six==1.16.0" in res.stderr and "[5/5] rlbridge:" in res.stderr


def test_env_create_names_the_failing_package(light_recipes):
    res = run_cli("env", "create", "demo==broken")
    assert res.returncode == 2
    assert "package 'rlbridge-no-such-package-xyz==9.9'" in res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_engine_version_lists_known_ones(light_recipes):
    res = run_cli("env", "create", "demo==0.1")
    assert res.returncode == 2 and "known versions: 1.16.0, 1.17.0, broken" in res.stderr


def test_engine_env_auto_without_an_environment_says_how_to_create_it(light_recipes, tmp_path):
    cfg = write_config(tmp_path, MINIMAL)
    # trl 1.8.0 has a recipe, but no environment exists in this test's empty cache
    res = run_cli(
        "train",
        str(cfg),
        "--set",
        "engine_env=auto",
        "--set",
        "engine_version=1.8.0",
        "--set",
        f"output_dir={tmp_path}/out",
        env={"RLBRIDGE_RECIPES": str(REPO / "compat_matrix" / "engines.yaml")},
    )
    assert res.returncode == 2
    assert "create it with `rlbridge env create trl==1.8.0`" in res.stderr
    assert not (tmp_path / "out").exists()


def _processes_in_group(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.engine
def test_ctrl_c_stops_the_engine_process_and_leaves_nothing_behind(tmp_path):
    pytest.importorskip("trl")
    cfg = write_config(tmp_path, MINIMAL)
    out = tmp_path / "out"
    # engine_env pointing at this very environment forces the separate engine process
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlbridge",
            "train",
            str(cfg),
            "--no-progress",
            "--set",
            f"engine_env={sys.prefix}",
            "--set",
            "training.steps=100000",
            "--set",
            f"output_dir={out}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT on a hang prints every thread's stack
        # as from a terminal: a suite started in the background (`make test &`) ignores SIGINT, Python then
        # installs no Ctrl-C handler in its children, and the run rightly ignores the signal too
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 240
    metrics = out / "metrics.jsonl"
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    engine_pid = int((out / "engine.pid").read_text())
    assert _processes_in_group(engine_pid)
    proc.send_signal(signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, stderr = proc.communicate(timeout=30)
        pytest.fail(f"rlbridge train still ran 60 s after Ctrl-C; its threads then:\n{stderr[-6000:]}")
    assert proc.returncode == 130, stderr
    assert not _processes_in_group(engine_pid), "the engine's process group outlived Ctrl-C"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps"] >= 2


@pytest.mark.engine
def test_engine_process_failure_is_reported_with_its_error(tmp_path):
    pytest.importorskip("trl")
    cfg = write_config(tmp_path, MINIMAL)
    res = run_cli(
        "train",
        str(cfg),
        "--no-progress",
        "--set",
        f"engine_env={sys.prefix}",
        "--set",
        "backend_options.trl.vllm_mdoe=server",
        "--set",
        f"output_dir={tmp_path}/out",
    )
    assert res.returncode == 2
    assert "exited with code 2" in res.stderr and "did you mean 'vllm_mode'" in res.stderr


def test_compat_run_uses_the_env_runs_the_suite_inside_and_writes_results(shared_demo_env, tmp_path):
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text('cells:\n  - {engine: demo, version: "1.16.0", tests: [translate, e2e-gpu]}\n')
    results = tmp_path / "results"
    res = run_cli(
        "compat",
        "run",
        "--engine",
        "demo",
        env={"RLBRIDGE_MATRIX": str(matrix), "RLBRIDGE_COMPAT_RESULTS": str(results), "CUDA_VISIBLE_DEVICES": ""},
    )
    # the suite ran in the stand-in environment, but nothing of its engine: a cell that tested
    # nothing is a failure (CI must not stay green when an environment lacks its engine)
    assert res.returncode == 1, res.stderr
    data = json.loads((results / "results.json").read_text())
    translate = data["demo|1.16.0|translate"]
    assert translate["status"] == "fail" and "no test of demo ran" in translate["reason"]
    assert "trl is not installed" not in translate["reason"]  # other backends' skips are not this cell's
    gpu = data["demo|1.16.0|e2e-gpu"]
    assert gpu["status"] == "not run" and gpu["reason"] == "no GPU"
    # provenance: the commit that ran, the versions installed in the environment, where the log is
    assert len(translate["rlbridge_commit"]) == 40 and isinstance(translate["dirty"], bool)
    assert translate["versions"]["six"] == "1.16.0"  # the cell's engine, as installed
    assert Path(translate["log"]).exists() and translate["required"] == ["translate", "e2e-gpu"]
    assert translate["started"].endswith("+00:00") and translate["machine"]["gpu"] is False
    table = (results / "RESULTS.md").read_text()
    assert "| demo | 1.16.0 | **FAIL** | plans only | **FAIL** | not run: no GPU |" in table
    assert "no test of demo ran" in table


def test_env_create_with_a_plugin_extra_installs_rlbridge_with_it(light_recipes, monkeypatch):
    """`env create --with reasoning-gym`: the plugin extra joins engine-env in the rlbridge stage
    (with the torch pin), and changing the extras reruns only that stage."""
    from rlbridge.envs import create as envs

    calls: list[list[str]] = []
    monkeypatch.setattr(envs, "_run", lambda cmd, env, log, what: calls.append(cmd))
    envs.create("demo==1.16.0", echo=lambda msg: None, cuda=False)
    assert any(f"{envs.REPO_ROOT}[engine-env]" in cmd for cmd in calls)
    calls.clear()
    envs.create("demo==1.16.0", echo=lambda msg: None, cuda=False, extras=("verifiers", "reasoning-gym"))
    assert len(calls) == 1 and calls[0][-3:] == [
        "-e",
        f"{envs.REPO_ROOT}[engine-env,reasoning-gym,verifiers]",
        "pluggy>=1.3",
    ]
    with pytest.raises(envs.EnvError, match="unknown plugin extra tensorboard"):
        envs.create("demo==1.16.0", echo=lambda msg: None, cuda=False, extras=("tensorboard",))


def test_an_environment_installed_from_another_checkout_is_pointed_at_this_one(light_recipes, monkeypatch, tmp_path):
    """Engine environments live in the user's cache, shared by every checkout; their rlbridge is an
    editable install of one of them. Run from another checkout, the engine processes would mix this
    checkout's core with that one's plugins and adapters (or miss them once it is deleted), so finding
    the environment reinstalls rlbridge from this checkout, and only rlbridge."""
    from rlbridge.engine.environments import env_python
    from rlbridge.envs import create as envs

    calls: list[list[str]] = []
    monkeypatch.setattr(envs, "_run", lambda cmd, env, log, what: calls.append(cmd))
    path = envs.create("demo==1.16.0", echo=lambda msg: None, cuda=False)
    env_python(path).parent.mkdir(parents=True, exist_ok=True)
    env_python(path).touch()
    record = path / "lib" / "python3.11" / "site-packages" / "rlbridge-0.1.0.dist-info" / "direct_url.json"
    record.parent.mkdir(parents=True)

    def installed_from(checkout: Path) -> None:
        record.write_text(json.dumps({"dir_info": {"editable": True}, "url": f"file://{checkout}"}))
        (path / ".rlbridge" / "rlbridge.done").write_text(f"stamp of {checkout}")

    installed_from(envs.REPO_ROOT)
    calls.clear()
    assert envs.find_env("demo", "1.16.0") == path
    assert calls == []
    installed_from(tmp_path / "deleted-ci-checkout")
    assert envs.find_env("demo", "1.16.0") == path
    assert len(calls) == 1 and calls[0][-3:] == ["-e", f"{envs.REPO_ROOT}[engine-env]", "pluggy>=1.3"]


def test_a_cells_select_narrows_its_e2e_tests_in_every_run_and_the_table_says_so(tmp_path, monkeypatch):
    """matrix.yaml `select` applies to the cell's e2e runs in make compat as well as in CI (where the
    cell's ci_select narrows it further), never to translate; RESULTS.md lists the cells that ran a subset."""
    from rlbridge.envs import compat

    commands: list[list[str]] = []
    monkeypatch.setattr(
        compat.subprocess, "run", lambda cmd, **kw: commands.append(cmd) or subprocess.CompletedProcess(cmd, 1, "", "")
    )
    (tmp_path / ".rlbridge").mkdir()
    monkeypatch.delenv(compat.CI_CELLS_ENV, raising=False)
    out = compat._run_tests(tmp_path, "e2e-cpu", "demo", ci_select="b", select="two_step")
    assert commands[-1][commands[-1].index("-k") + 1] == "(two_step)" and out["status"] == "fail"
    compat._run_tests(tmp_path, "translate", "demo", select="two_step")
    assert "-k" not in commands[-1]
    monkeypatch.setenv(compat.CI_CELLS_ENV, "1")
    compat._run_tests(tmp_path, "e2e-cpu", "demo", ci_select="b", select="two_step")
    assert commands[-1][commands[-1].index("-k") + 1] == "(two_step) and (b)"
    row = {"engine": "demo", "version": "1.0", "test": "e2e-cpu", "status": "pass", "passed": 1, "select": "two_step"}
    assert "- demo 1.0 e2e-cpu: `-k two_step`" in compat.render({"demo|1.0|e2e-cpu": row})


def test_a_blocked_test_is_neither_pass_nor_fail_and_the_table_names_the_blocker(shared_demo_env, tmp_path):
    """matrix.yaml `blocked: {test: why}`: the measured reason a test cannot run on this kind of machine
    (e.g. an engine version without a CPU build of its rollout) is recorded in RESULTS.md, and the cell's
    verdict comes from the tests that can run."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        'cells:\n  - {engine: demo, version: "1.16.0", tests: [translate, e2e-cpu],\n'
        '     blocked: {e2e-cpu: "ImportError: FP8 quantization not available (x.py:28)"}}\n'
    )
    results = tmp_path / "results"
    run_cli(
        "compat",
        "run",
        "--engine",
        "demo",
        env={"RLBRIDGE_MATRIX": str(matrix), "RLBRIDGE_COMPAT_RESULTS": str(results)},
    )
    data = json.loads((results / "results.json").read_text())
    assert data["demo|1.16.0|e2e-cpu"]["status"] == "blocked" and data["demo|1.16.0|translate"]["status"] == "fail"
    table = (results / "RESULTS.md").read_text()
    assert "| demo | 1.16.0 | **FAIL** | plans only | **FAIL** | blocked (below) |" in table
    assert "- demo 1.16.0 e2e-cpu: ImportError: FP8 quantization not available (x.py:28)" in table
    from rlbridge.envs.compat import cell_verdict

    assert cell_verdict([{"status": "pass"}, {"status": "blocked"}]) == "pass"
    assert cell_verdict([{"status": "blocked"}]) == "fail"  # nothing ran
