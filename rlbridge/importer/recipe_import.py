"""`rlbridge import`: read a recipe with its engine's importer, solve for the canonical config
(rlbridge.importer.solver; its docstring says how) and give each setting its verdict (rlbridge.importer.verdicts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlbridge.errors import ConfigError
from rlbridge.importer.recipe import StaticRecipeSource, is_file, launch_environment
from rlbridge.importer.report import ImportResult
from rlbridge.importer.solver import Solver
from rlbridge.importer.verdicts import Verdicts


def import_recipe(
    source: str,
    engine: str,
    version: str | None = None,
    rewards: list[dict[str, Any]] | None = None,
    plugins=None,
    env: dict[str, str] | None = None,
) -> ImportResult:
    """Read `source` (a file or a command line) as a recipe of `engine` and return the canonical config and report.
    `env`: variables a launch script reads from its environment (`--env NAME=VALUE`), over this process's own."""
    from rlbridge.contract.registry import get_plugin_manager

    pm = plugins or get_plugin_manager()
    backend = pm.backend(engine)
    importer = backend.recipe_importer()
    if importer is None:
        raise ConfigError(f"--from {engine}: backend '{engine}' has no recipe importer")
    _check_text(source)
    try:
        with launch_environment(env or {}):
            recipe = importer.read(StaticRecipeSource(source), version)
    except SyntaxError as exc:  # a truncated or broken Python recipe (TRL), as Python itself reports it
        raise ConfigError(f"{exc.filename or source}:{exc.lineno}: not valid Python: {exc.msg}") from None
    if version and not backend.version_supported(version):
        raise ConfigError(
            f"--engine-version {version}: outside the range backend '{engine}' supports ({backend.supported_versions})"
        )
    search = Solver(backend, importer, recipe, explicit_version=version is not None, rewards=rewards)
    return Verdicts(search).result(search.run())


def _check_text(source: str) -> None:
    """A recipe file must be text: a binary file is one line naming where, not a decoding traceback."""
    path = Path(source)
    if not is_file(source):
        return  # a command line
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the recipe ({exc.strerror})") from None
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise ConfigError(
            f"{source}:{line}: not a text file (a NUL byte); rlbridge import reads a launch script, "
            "a command line or a config file"
        )
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{source}:{line}: not a text file (byte {exc.start} is not UTF-8); rlbridge import reads a "
            "launch script, a command line or a config file"
        ) from None
