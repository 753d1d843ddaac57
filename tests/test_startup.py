"""Each command imports only what it needs (issue 31): start-up time is measured by
benchmarks/startup.py (docs/benchmarks.md); these tests hold the imports that made it slow out."""

import json
import os
import subprocess
import sys

from tests.conftest import QUICKSTART, REPO, run_cli


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


def test_help_renders_without_markdown_and_traceback_machinery():
    """typer.rich_utils imports rich.markdown and rich.traceback at module level; rlbridge/cli.py imports it
    with stand-ins for both (a third of `--help`'s start-up)."""
    loaded = _modules_after("--help")
    assert "typer.rich_utils" in loaded  # (the probe works: typer rendered the help)
    for module in ("rich.markdown", "markdown_it", "rich.syntax", "pygments", "rich.traceback", "rich.pretty"):
        assert module not in loaded, f"`rlbridge --help` imports {module}"


def test_help_is_typers_own_rendering():
    """The same bytes as typer renders with the real rich.markdown and rich.traceback imported first (then
    rlbridge.cli leaves typer.rich_utils alone), for the top-level help and a command's."""
    code = "import sys\n{}from rlbridge.cli import main\nsys.argv = ['rlbridge', *sys.argv[1:]]\nmain()\n"
    env = {**os.environ, "COLUMNS": "100"}

    def run(prelude: str, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", code.format(prelude), *argv],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=120,
        )

    for argv in (["--help"], ["plan", "--help"]):
        light, full = run("", argv), run("import rich.markdown, rich.traceback\n", argv)
        assert light.returncode == full.returncode == 0, light.stderr + full.stderr
        assert "Commands" in light.stdout or "Options" in light.stdout
        assert light.stdout == full.stdout


def test_the_stand_ins_hand_over_to_rich():
    """Anything that does use typer's Markdown or Traceback gets rich's real classes, and rich.markdown
    imports for real afterwards."""
    code = (
        "import sys\nimport rlbridge.cli\nimport typer.rich_utils as ru\n"
        "assert 'rich.markdown' not in sys.modules and 'rich.traceback' not in sys.modules\n"
        "import rich.markdown, rich.traceback\n"
        "assert isinstance(ru.Markdown('*x*'), rich.markdown.Markdown)\n"
        "assert ru.Traceback.from_exception == rich.traceback.Traceback.from_exception\n"
        "assert rich.markdown.Markdown.__module__ == 'rich.markdown' and hasattr(rich.markdown, 'Heading')\n"
        "del sys.modules['rich.markdown']\n"
        "def other_typer(module):  # a typer version that imports a name the stand-in module lacks\n"
        "    from rich.markdown import Heading\n"
        "    module.Heading = Heading\n"
        "module = type(sys)('probe')\n"
        "rlbridge.cli._RichUtilsWithoutUnusedImports()._exec(other_typer, module)\n"
        "assert module.Heading is sys.modules['rich.markdown'].Heading\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.stdout.strip() == "ok", res.stdout + res.stderr


def test_plan_prints_without_rich():
    loaded = _modules_after("plan", str(QUICKSTART))
    assert "rlbridge.contract.config" in loaded  # (the probe works)
    assert "rlbridge_plugins.verifiers" in loaded and "rlbridge_plugins.openenv" in loaded
    assert "rich.console" not in loaded, "`rlbridge plan` prints plain text: rich's console is not needed"
    # the built-in plugins import asyncio and urllib where they run an episode or start a server
    for module in ("asyncio", "urllib.request"):
        assert module not in loaded, f"`rlbridge plan` imports {module}"


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
