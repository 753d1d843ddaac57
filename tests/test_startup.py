"""Each command imports only what it needs (issue 31): start-up time is measured by
benchmarks/startup.py (docs/benchmarks.md); these tests hold the imports that made it slow out."""

import json
import subprocess
import sys

from conftest import QUICKSTART, REPO, run_cli


def _modules_after(*argv: str) -> set[str]:
    """The modules loaded once `rlbridge ARGV` has run, in a fresh interpreter."""
    code = (
        "import sys, json\nfrom rlbridge.cli import main\nsys.argv = ['rlbridge', *json.loads(sys.argv[1])]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nsys.stderr.write('MODULES' + "
        "json.dumps(sorted(sys.modules)))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert "MODULES" in res.stderr, res.stderr[-2000:]
    return set(json.loads(res.stderr.rsplit("MODULES", 1)[1]))


def test_help_imports_neither_the_config_nor_the_plugin_machinery():
    loaded = _modules_after("--help")
    for module in (
        "pydantic",
        "yaml",
        "pluggy",
        "rlbridge.contract.config",
        "rlbridge.contract.registry",
        "rlbridge.run",
    ):
        assert module not in loaded, f"`rlbridge --help` imports {module}"


def test_plan_prints_without_rich():
    loaded = _modules_after("plan", str(QUICKSTART))
    assert "rlbridge.contract.config" in loaded  # (the probe works)
    assert "rich.console" not in loaded, "`rlbridge plan` prints plain text: rich's console is not needed"


def test_the_core_run_path_imports_no_asyncio():
    """asyncio (a tenth of plan's start-up) only where an async reward function is awaited."""
    res = subprocess.run(
        [sys.executable, "-c", "import sys, rlbridge.run.runner; print('asyncio' in sys.modules)"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert res.stdout.strip() == "False", res.stdout + res.stderr


def test_backends_lists_every_capability_table():
    res = run_cli("backends", env={"COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    assert "capabilities of 'trl'" in res.stdout and "num_generations" in res.stdout
