"""The `rlbridge` command line. Imports no torch or engine unless a command trains."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Optional

import typer

from rlbridge.errors import RLBridgeError


class _ImportOnUse(type):
    """Metaclass of a stand-in for a rich class: calling it or reading one of its attributes imports the real
    class (from the module in `_module`) and hands over to it."""

    def _real(cls):
        import importlib

        return getattr(importlib.import_module(cls._module), cls.__name__)

    def __call__(cls, *args, **kwargs):
        return cls._real()(*args, **kwargs)

    def __getattr__(cls, name):
        return getattr(cls._real(), name)


class _RichUtilsWithoutUnusedImports:
    """Imports typer.rich_utils (typer's help renderer, on first `--help` or usage error) with stand-ins for
    rich.markdown's Markdown and rich.traceback's Traceback, which it imports at module level: they pull in
    markdown-it, pygments, rich.pretty and attrs, a third of `rlbridge --help`'s start-up
    (benchmarks/startup.py), and rlbridge uses neither (help text is in typer's "rich" markup mode and pretty
    exceptions are off); a stand-in imports the real class if anything uses it. The output is typer's own."""

    _deferred = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}

    def find_spec(self, fullname, path, target=None):
        if fullname != "typer.rich_utils":
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            real_exec = spec.loader.exec_module
            spec.loader.exec_module = lambda module: self._exec(real_exec, module)
        return spec

    def _exec(self, real_exec, module) -> None:
        import functools
        import types

        stubs = {}
        for module_name, class_name in self._deferred.items():
            if module_name not in sys.modules:  # already imported: typer gets the real class
                stub = stubs[module_name] = types.ModuleType(module_name)
                setattr(stub, class_name, _ImportOnUse(class_name, (), {"_module": module_name}))
                stub.__getattr__ = functools.partial(self._real_attribute, module_name, stub)  # any other name
        sys.modules.update(stubs)
        try:
            real_exec(module)
        finally:
            for module_name, stub in stubs.items():  # a later `import rich.markdown` loads the real module
                if sys.modules.get(module_name) is stub:
                    del sys.modules[module_name]

    @staticmethod
    def _real_attribute(module_name: str, stub, name: str):
        """A name the stand-in module lacks (another typer version may import more): the real module's."""
        import importlib

        if name.startswith("__"):  # the import system's own probes (__path__, __spec__...)
            raise AttributeError(name)
        if sys.modules.get(module_name) is stub:
            del sys.modules[module_name]
        return getattr(importlib.import_module(module_name), name)


sys.meta_path.insert(0, _RichUtilsWithoutUnusedImports())

app = typer.Typer(
    help="One config, any RL post-training engine (TRL, verl, OpenRLHF).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class _Console:
    """A rich Console made on first use: importing rich's console costs `rlbridge --help` and commands
    that print plain text a tenth of their start-up time (benchmarks/startup.py)."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console = None

    def __getattr__(self, name: str):
        if self._console is None:
            from rich.console import Console

            stream = sys.stderr if self._stderr else sys.stdout
            # wide tables when output goes to a file or pipe (rich would wrap at 80 columns)
            self._console = Console(stderr=self._stderr, width=None if stream.isatty() else 200)
        return getattr(self._console, name)


def Table(*columns, **options):  # noqa: N802 - rich's Table, imported when a command prints one
    from rich.table import Table as RichTable

    return RichTable(*columns, **options)


def escape(markup: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(markup)


out = _Console()
err = _Console(stderr=True)
_state = {"debug": False}

SetOption = typer.Option(None, "--set", "-s", help="Override a config key: --set training.steps=10 (repeatable).")
PluginOption = typer.Option(
    None,
    "--plugin",
    "-p",
    help="Load a plugin module without packaging: a .py file or a module name (repeatable; adds to the config's "
    "plugins).",
)


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")) -> None:
    _state["debug"] = debug


def _load(config: Optional[Path], overrides: Optional[list[str]], plugins: Optional[list[str]] = None):
    from pathlib import Path as _Path

    from rlbridge.contract.local_plugins import absolute_ref
    from rlbridge.run.loading import load_config

    cfg = load_config(config, overrides or [])
    if plugins:  # -p paths are relative to the current directory, as pytest's are
        cfg.plugins = [*cfg.plugins, *(absolute_ref(p, [_Path.cwd()]) for p in plugins)]
    return cfg


@app.command()
def train(
    config: Path = typer.Argument(..., help="YAML config file."),
    set_: Optional[list[str]] = SetOption,
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar (e.g. in CI logs)."),
    plugin: Optional[list[str]] = PluginOption,
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue from the newest complete checkpoint (checkpoint.resume=true), e.g. after the run was killed.",
    ),
    no_fit_check: bool = typer.Option(
        False,
        "--no-fit-check",
        help="Train even where the predicted peak memory exceeds the device's (docs/memory.md says when).",
    ),
) -> None:
    """Train: plan the config for its backend, then run it and write output_dir. A pipeline file (a
    top-level `stages` list, docs/stages.md) runs its stages in order; --set takes STAGE.key=value."""
    from rlbridge.run.pipeline import is_pipeline, run_pipeline
    from rlbridge.run.runner import train as run_train

    if is_pipeline(config):
        if plugin or resume:
            raise RLBridgeError(
                "a pipeline skips its finished stages and resumes a failed one by itself; "
                "give -p/--plugin in the stage configs (plugins:) and leave out --resume"
            )
        record = run_pipeline(config, set_ or [], progress=False if no_progress else None)
        for stage in record["stages"]:
            how = "skipped (finished before)" if stage.get("skipped") else stage["status"]
            out.print(
                f"[green]{stage['name']}[/green] ({stage['algorithm']} on {stage['backend']}): {how}; "
                f"{stage['run_dir']}"
            )
        out.print(
            f"[green]pipeline done[/green]: {len(record['stages'])} stages; rlbridge report "
            f"{Path(record['stages'][0]['run_dir']).parent}"
        )
        return

    cfg = _load(config, [*(set_ or []), *(["checkpoint.resume=true"] if resume else [])], plugin)
    summary = run_train(cfg, progress=False if no_progress else None, fit_check=not no_fit_check)
    learned = (
        f"{summary['loss']} {summary['loss_first']:.3f} -> {summary['loss_last']:.3f}"
        if "loss" in summary
        else f"reward {summary.get('reward_first', float('nan')):.3f} -> {summary.get('reward_last', float('nan')):.3f}"
    )
    out.print(
        f"[green]done[/green]: {summary['steps']} steps, {learned}, {summary['wall_s']:.1f} s; files in "
        f"{summary['output_dir']}"
    )


@app.command()
def reproduce(
    run_dir: Path = typer.Argument(..., help="A finished run's directory (it holds manifest.json and config.yaml)."),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Where the rerun writes (default: RUN_DIR-reproduce)."
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    rebuild: bool = typer.Option(
        True,
        "--rebuild/--no-rebuild",
        help="When no engine environment matches the manifest, build one from its engine's recipe and pin the "
        "manifest's versions (--no-rebuild: refuse, naming the differences).",
    ),
) -> None:
    """Rerun RUN_DIR in an engine environment matching its manifest, into a new directory, and compare the
    two step by step: identical, same within noise, or different (naming the first step and metric that
    differ, and what in the manifests differs). Exit code 1 when different."""
    from rlbridge.bench.reproduce import describe, reproduce as run_reproduce

    report = run_reproduce(
        run_dir,
        output,
        progress=False if no_progress else None,
        rebuild=rebuild,
        echo=lambda line: print(line, file=sys.stderr),
    )
    out.print(escape(describe(report)), highlight=False)
    if report["verdict"] == "different":
        raise typer.Exit(1)


@app.command()
def submit(
    config: Path = typer.Argument(..., help="YAML config file."),
    to: str = typer.Option(
        "ray",
        "--to",
        help="Where to run: ray (an existing Ray cluster, --address), slurm (an sbatch job that starts Ray on its "
        "nodes) or kuberay (a RayJob for the KubeRay operator).",
    ),
    address: Optional[str] = typer.Option(
        None,
        "--address",
        help="--to ray: the Ray cluster's job-submission address (its dashboard, e.g. http://head:8265).",
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="--to slurm | kuberay: print the batch script or the manifests instead of submitting them.",
    ),
    follow: bool = typer.Option(
        True,
        "--follow/--no-follow",
        help="--to slurm: wait for the job and print its log as it grows (--no-follow: submit and return).",
    ),
    set_: Optional[list[str]] = SetOption,
    plugin: Optional[list[str]] = PluginOption,
    job_python: Optional[str] = typer.Option(
        None,
        "--job-python",
        help="Python on the cluster's nodes that has rlbridge and the engine (default: this engine environment's, "
        "for clusters that share it).",
    ),
) -> None:
    """Run CONFIG as a job on a cluster: an existing Ray cluster, a Slurm allocation or Kubernetes (KubeRay)."""
    if address and to != "ray":
        raise RLBridgeError(f"--address is for --to ray; --to {to} starts a Ray cluster of its own")
    if dry_run and to == "ray":
        raise RLBridgeError(
            "--dry-run is for --to slurm and --to kuberay (`rlbridge plan CONFIG` shows what a Ray job would run)"
        )
    cfg = _load(config, set_ or [], plugin)
    if to == "ray":
        from rlbridge.submit.job import submit as run_submit

        if not address:
            raise RLBridgeError("--to ray needs --address (the Ray cluster's dashboard, e.g. http://head:8265)")
        code = run_submit(cfg, address, job_python, echo=out.print)
    elif to == "slurm":
        from rlbridge.submit.slurm import submit as slurm_submit

        code = slurm_submit(cfg, dry_run=dry_run, follow=follow, python=job_python, echo=out.print)
    elif to == "kuberay":
        from rlbridge.submit.kuberay import submit as kuberay_submit

        code = kuberay_submit(cfg, dry_run=dry_run, python=job_python, echo=out.print)
    else:
        raise RLBridgeError(f"--to {to}: not a target; use ray, slurm or kuberay")
    raise typer.Exit(code)


def _validate_where_it_runs(prepared) -> str:
    """Validate a plan with the engine's own config code where the engine runs: here, or in its engine
    environment (engine_env: auto, an engine this process lacks). Returns the engine and version that did."""
    import subprocess

    from rlbridge.run.runner import engine_python

    python, no_env = engine_python(prepared.config, prepared.backend)
    if python is None or Path(python).absolute() == Path(sys.executable).absolute():
        if no_env is not None and prepared.backend.installed_version() is None:
            raise no_env  # neither here nor in an engine environment: how to create one
        prepared.backend.require_engine()
        prepared.backend.validate(prepared.plan)
        return f"{prepared.plan.engine} {prepared.backend.installed_version()}"
    res = subprocess.run(
        [str(python), "-m", "rlbridge.engine.validate"],
        input=json.dumps(prepared.plan.to_dict()),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise RLBridgeError((res.stderr.strip().splitlines() or [f"validating in {python} failed, no output"])[-1])
    return f"{res.stdout.strip().splitlines()[-1]} (in the engine environment {Path(python).parent.parent})"


@app.command()
def plan(
    config: Path = typer.Argument(..., help="YAML config file."),
    set_: Optional[list[str]] = SetOption,
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    check: bool = typer.Option(
        False, "--check", help="Also validate the plan with the engine's own config code (imports the engine)."
    ),
    plugin: Optional[list[str]] = PluginOption,
    explain: bool = typer.Option(
        False,
        "--explain",
        help="For each knob set in CONFIG: the native key(s) and value(s) it becomes on this backend, or how it is "
        "approximated.",
    ),
    memory: bool = typer.Option(
        False,
        "--memory",
        help="Predict each device's peak memory for every role and phase of a step, and whether it fits "
        "(docs/memory.md); builds a builtin model to read its shape, loads no weights.",
    ),
    gpu_memory: Optional[float] = typer.Option(
        None, "--gpu-memory", help="With --memory: one GPU's memory in GiB (default: the visible GPU's)."
    ),
) -> None:
    """Print the engine-native configuration a run of CONFIG would use (nothing is started)."""
    from rlbridge.run.runner import prepare

    prepared = prepare(_load(config, set_, plugin))
    if memory:
        from rlbridge.contract.memory import GiB
        from rlbridge.contract.memory_check import describe, predict_run

        prediction = predict_run(
            prepared.config,
            prepared.backend,
            prepared.plan,
            prepared.plan.layout,
            gpu_bytes=int(gpu_memory * GiB) if gpu_memory else None,
        )
        if prediction is None:
            raise RLBridgeError(
                f"backend '{prepared.plan.backend}' declares no memory behaviour (Backend.memory_behaviour)"
            )
        print(describe(prediction, f"{prepared.plan.backend} ({config.name})"))
        return
    if check:
        err.print(f"plan validated by {_validate_where_it_runs(prepared)}")
    if explain:
        table = Table(
            "knob",
            "value",
            f"on {prepared.plan.backend}: native key = value",
            title=f"where each knob set in {config.name} lands",
            title_justify="left",
        )
        for knob, value, where in prepared.backend.explain(prepared.config, prepared.plan):
            table.add_row(knob, escape(value), escape(where))
        out.print(table)
        for note in prepared.plan.approximations:
            out.print(f"approximated: {escape(note)}")
        from rlbridge.importer.differences import default_differences

        for d in default_differences(prepared.backend, prepared.config, prepared.plan.native):
            out.print(
                f"differs from {prepared.plan.backend}'s own default: {d.key}: {prepared.plan.backend} {d.engine!r}, "
                f"rlbridge {d.planned!r} ({d.reason})",
                markup=False,
                highlight=False,
                emoji=False,
            )
        return
    if as_json:
        print(json.dumps(prepared.plan.to_dict(), indent=2))
        return
    print(f"# backend: {prepared.plan.backend} ({prepared.plan.engine_requirement})")
    if prepared.plan.layout:  # the placement policy's layout (run.placement_readback checks it after a Ray run)
        roles = ", ".join(f"{role} {n}" for role, n in prepared.plan.layout.items() if role != "shared")
        print(
            f"# placement: {prepared.config.placement.policy}: {roles} device(s)"
            + (", shared" if prepared.plan.layout.get("shared") else ", separate")
        )
    for note in prepared.plan.approximations:
        print(f"# approximated: {note}")
    print(prepared.backend.render_native(prepared.plan))


@app.command()
def knobs(
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Write the Markdown page to this file (docs/knobs.md)."
    ),
) -> None:
    """What every backend does with every canonical knob, as Markdown (generated from the capability tables)."""
    from rlbridge.run.knobdoc import builtin_backends, knob_markdown

    text = knob_markdown(builtin_backends())
    if output:
        output.write_text(text)
        err.print(f"wrote {output}")
    else:
        print(text, end="")


@app.command()
def backends(
    capabilities: bool = typer.Option(True, "--capabilities/--no-capabilities", help="Show each capability table."),
) -> None:
    """Installed engines, their versions, supported ranges and capability tables."""
    from rlbridge.contract.registry import get_plugin_manager

    pm = get_plugin_manager()
    table = Table("backend", "engine", "installed", "supported", "status", "from")
    for name, reg in sorted(pm.items["backend"].items()):
        cls = reg.item
        version = cls.installed_version()
        status = (
            "not installed" if version is None else ("ok" if cls.version_supported(version) else "unsupported version")
        )
        table.add_row(
            name, cls.distribution, version or "-", cls.supported_versions, status, reg.distribution or reg.provider
        )
    out.print(table)
    if capabilities:
        for name, reg in sorted(pm.items["backend"].items()):
            caps = Table("knob", "support", "native", "note", title=f"capabilities of '{name}'", title_justify="left")
            for cap in reg.item().capabilities():
                caps.add_row(cap.knob, cap.support.value, ", ".join(cap.native), cap.note)
            out.print(caps)


@app.command()
def plugins() -> None:
    """Everything registered through the `rlbridge` entry-point group, and where it came from."""
    from rlbridge.contract.registry import get_plugin_manager

    pm = get_plugin_manager()
    table = Table("kind", "name", "plugin", "distribution", "description")
    for kind, items in pm.items.items():
        for name, reg in sorted(items.items()):
            desc = getattr(reg.item, "description", "") or ""
            table.add_row(kind, name, reg.provider, reg.distribution or "-", desc)
    out.print(table)


@app.command()
def schema(
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
) -> None:
    """The JSON Schema of the config file."""
    from rlbridge.contract.config import RunConfig
    from rlbridge.contract.strict_model import document_fields

    document_fields()
    text = json.dumps(RunConfig.model_json_schema(), indent=2) + "\n"
    if output:
        output.write_text(text)
        err.print(f"wrote {output}")
    else:
        print(text, end="")


@app.command()
def doctor(
    run_dir: Optional[Path] = typer.Argument(
        None, help="A run directory: explain how its run failed or hung (or that it runs)."
    ),
) -> None:
    """What is installed or missing: Python, core libraries, engines, torch and CUDA. With RUN_DIR: why
    the run there failed or hung, in which process, the evidence and what to change (docs/faults.md)."""
    if run_dir is not None:
        from rlbridge.diagnosis.doctor import explain

        for line in explain(run_dir):
            out.print(escape(line), highlight=False, soft_wrap=True)
        return
    import importlib.metadata
    import platform
    import subprocess

    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.machine import cache_dir, count_gpus

    table = Table("check", "status")
    table.add_row("python", f"{platform.python_version()} ({sys.executable})")
    for dist in ("pydantic", "pluggy", "PyYAML", "typer", "rich", "packaging", "pillow"):
        try:
            table.add_row(dist, importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            table.add_row(dist, "[yellow]missing[/yellow]" + (" (no reward.png)" if dist == "pillow" else ""))
    probe = "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())"
    try:
        res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
        if res.returncode == 0:
            version, cuda, n = res.stdout.split()
            table.add_row(
                "torch", f"{version}; CUDA {'available, ' + n + ' device(s)' if cuda == 'True' else 'not available'}"
            )
        else:
            table.add_row("torch", "[yellow]missing[/yellow] (pip install torch==<version> before an engine extra)")
    except subprocess.TimeoutExpired:
        table.add_row("torch", "[red]import timed out[/red]")
    table.add_row("NVIDIA GPUs (nvidia-smi)", str(count_gpus()))
    pm = get_plugin_manager()
    from rlbridge.engine.environments import envs_dir, is_complete

    ready: dict[str, list[str]] = {}  # engine -> its complete environments (`rlbridge env list` without sizes)
    for path in sorted(envs_dir().iterdir()) if envs_dir().is_dir() else []:
        if path.is_dir() and not path.name.startswith(".") and is_complete(path):
            engine, _, version = path.name.partition("-")
            ready.setdefault(engine, []).append(f"{version} ({path})")
    for name, reg in sorted(pm.items["backend"].items()):
        cls = reg.item
        version = cls.installed_version()
        if version is None and ready.get(name):
            default = _default_env_label(name)
            runs = (
                f"engine_env: auto runs {name} {default} there"
                if any(env.startswith(f"{default} (") for env in ready[name])
                else f"engine_env: auto needs {default}: `rlbridge env create {name}`"
            )
            status = (
                f"not installed here; engine environment{'s' if len(ready[name]) > 1 else ''} ready: "
                f"{', '.join(ready[name])}; {runs}"
            )
        elif version is None:
            status = (
                f"[yellow]not installed here[/yellow] (`rlbridge env create {name}`; engine_env: auto runs it there)"
            )
        elif cls.version_supported(version):
            status = f"{cls.distribution} {version} (supported: {cls.supported_versions})"
        else:
            status = f"[red]{cls.distribution} {version} unsupported[/red] (supported: {cls.supported_versions})"
        table.add_row(f"backend {name}", status)
    table.add_row("cache dir", str(cache_dir()))
    out.print(table)


def _default_env_label(engine: str) -> str | None:
    """The version `engine_env: auto` runs an engine at (its recipe's default label), None if it has no recipe."""
    from rlbridge.envs.create import EnvError, recipe_for

    try:
        return recipe_for(engine).label
    except EnvError:
        return None


@app.command()
def stacks(
    run_dir: Path = typer.Argument(..., help="The directory of a run that is training now."),
    save: bool = typer.Option(False, "--save", help="Also write them to RUN_DIR/stacks/ (.txt and .json)."),
) -> None:
    """The Python stack of every process of a live run (py-spy), each with its role (trainer, Ray actor,
    vLLM engine, reward worker), and the process the run most likely waits on."""
    from rlbridge.diagnosis import stacks as run_stacks

    procs, culprit = run_stacks.of_run(run_dir)
    print(run_stacks.render(procs, culprit), end="")
    if save:
        import time as _time

        err.print(f"wrote {run_stacks.write(run_dir, procs, culprit, _time.strftime('live-%Y%m%d-%H%M%S'))}")


env_app = typer.Typer(
    help="Engine environments: one isolated Python environment per engine version.", no_args_is_help=True
)
app.add_typer(env_app, name="env")


@env_app.command("create")
def env_create(
    spec: str = typer.Argument(..., help="ENGINE or ENGINE==VERSION, e.g. trl==1.16.0"),
    with_: Optional[list[str]] = typer.Option(
        None,
        "--with",
        help="Also install an rlbridge plugin extra the engine's processes need "
        "(reasoning-gym, openenv, verifiers; repeatable), e.g. --with reasoning-gym.",
    ),
) -> None:
    """Create (or finish creating) the environment; idempotent and resumable."""
    from rlbridge.envs.create import create

    path = create(spec, echo=lambda msg: err.print(msg, highlight=False, markup=False), extras=tuple(with_ or ()))
    out.print(f"environment ready: {path}")


@env_app.command("list")
def env_list() -> None:
    """Environments in the cache, complete or not."""
    from rlbridge.envs.create import list_envs

    table = Table("engine", "version", "complete", "size (MB)", "path")
    for env in list_envs():
        table.add_row(
            env["engine"],
            env["version"],
            "yes" if env["complete"] else "no (run env create again)",
            f"{env['size_mb']:.0f}",
            env["path"],
        )
    out.print(table)


@env_app.command("remove")
def env_remove(spec: str = typer.Argument(..., help="ENGINE==VERSION")) -> None:
    """Delete an environment."""
    from rlbridge.envs.create import remove

    out.print(f"removed {remove(spec)}")


@app.command()
def patches(
    args: Optional[list[str]] = typer.Argument(None, help="[ENGINE] to list, or: export NAME, or: check [ENGINE]"),
) -> None:
    """List version-gated engine patches with their status here, `patches export NAME` to write
    an upstream-ready description, or `patches check` to tell, in every engine environment, which
    patches are still needed (unpatched path run where possible; target fingerprints compared)."""
    from rlbridge.engine.patches import export, patch_status
    from rlbridge.contract.registry import get_plugin_manager

    args = args or []
    backends = sorted(get_plugin_manager().items["backend"].items())
    if args[:1] == ["export"]:
        if len(args) != 2:
            raise RLBridgeError("usage: rlbridge patches export NAME")
        for _, reg in backends:
            for patch in reg.item().patches():
                if patch.name == args[1]:
                    print(export(patch))
                    return
        raise RLBridgeError(f"no patch named '{args[1]}' (see `rlbridge patches`)")
    if args[:1] == ["check"]:
        _patches_check(args[1:])
        return
    if len(args) > 1:
        raise RLBridgeError(
            "usage: rlbridge patches [ENGINE] | rlbridge patches export NAME | rlbridge patches check [ENGINE]"
        )
    table = Table("backend", "patch", "gates on", "range", "kind", "status here", "fixes")
    for name, reg in backends:
        if args and name != args[0]:
            continue
        for patch in reg.item().patches():
            table.add_row(
                name, patch.name, patch.engine, patch.versions, patch.kind.value, patch_status(patch), patch.fixes
            )
    out.print(table)


def _patches_check(engines: list[str]) -> None:
    """Per engine environment (and this one): is each patch still needed? Runs the unpatched path
    where the patch says how (rlbridge.engine.patch_check), and compares target fingerprints."""
    import subprocess

    from rlbridge.envs.create import list_envs

    from rlbridge.engine.environments import env_python

    pythons = [("this environment", Path(sys.executable))]
    pythons += [(f"{e['engine']}-{e['version']}", env_python(Path(e["path"]))) for e in list_envs() if e["complete"]]
    table = Table("environment", "backend", "patch", "gates on", "in range", "targets", "still needed")
    for label, python in pythons:
        res = subprocess.run(
            [str(python), "-m", "rlbridge.engine.patch_check", *engines], capture_output=True, text=True, timeout=600
        )
        if res.returncode != 0:
            table.add_row(
                label,
                "-",
                "-",
                "-",
                "-",
                "-",
                "[red]checker failed[/red]: "
                f"{escape(res.stderr.strip().splitlines()[-1] if res.stderr.strip() else str(res.returncode))}",
            )
            continue
        for entry in json.loads(res.stdout.strip().splitlines()[-1]):
            targets = ", ".join(
                f"{t['target'].split(':')[-1] or t['target']} {t['status']}" for t in entry.get("targets", [])
            )
            table.add_row(
                label,
                f"{entry['backend']} {entry['engine_version']}",
                entry["patch"],
                entry["gates_on"],
                "yes" if entry["in_range"] else f"no ({entry['range']})",
                escape(targets),
                escape(entry.get("needed", "-")),
            )
    out.print(table)


@app.command()
def bench(
    spec: Path = typer.Argument(..., help="Bench spec YAML: base config, arms, seeds (see docs/benchmarks.md)."),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Bench directory (default: the spec's output_dir)."
    ),
    lock: Optional[list[Path]] = typer.Option(
        None,
        "--lock",
        metavar="FILE",
        help="Hold an exclusive flock on this file during each run (machines shared with "
        "other jobs); repeat it for several slots: each run takes the first free one, and none is held between runs.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Resolve arms, check fairness and plans; run nothing."),
    report_only: bool = typer.Option(
        False, "--report-only", help="Write the report from the runs already done; run nothing."
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
) -> None:
    """A/B runs: every arm x seed as one real run, then report.md, results.json and plots."""
    from rlbridge.bench.arms import run_bench

    data = run_bench(
        spec,
        output,
        lock,
        progress=not no_progress,
        dry_run=dry_run,
        report_only=report_only,
        echo=lambda m: err.print(m, highlight=False, markup=False),
    )
    if dry_run:
        out.print(f"{len(data['jobs'])} runs planned; nothing run (--dry-run)")
        return
    done = sum(a["runs_completed"] for a in data["arms"].values())
    out.print(f"[green]done[/green]: {done} runs, {len(data['arms'])} arms; report in {data['bench_dir']}/report.md")


@app.command()
def report(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories (output_dir of `rlbridge train`)."),
    output: Path = typer.Option(Path("report.html"), "--output", "-o", help="The HTML file to write."),
) -> None:
    """One self-contained HTML page: canonical metric plots of the runs on shared axes, config
    differences, summaries and sampled completions. Opens in any browser, no server."""
    from rlbridge.bench.html_report import write_report

    path = write_report(run_dirs, output)
    out.print(f"[green]report[/green]: {len(run_dirs)} run{'s' if len(run_dirs) != 1 else ''} -> {path}")


@app.command("import")
def import_(
    recipe: str = typer.Argument(..., help="A launch script, a command line (quoted), or a config file of the engine."),
    from_: str = typer.Option(..., "--from", help="The recipe's engine: verl, openrlhf or trl."),
    engine_version: Optional[str] = typer.Option(
        None,
        "--engine-version",
        help="The engine version the recipe is for (default: the adapter's; OpenRLHF: from the flag spelling).",
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Write the canonical config here (and the report next to it, <stem>.import.txt)."
    ),
    reward: Optional[list[str]] = typer.Option(
        None,
        "--reward",
        help="Reward plugin for the config, NAME or NAME:WEIGHT (repeatable); replaces the recipe's own rewards "
        "(its reward model or reward-function file, imported by default).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    env: Optional[list[str]] = typer.Option(
        None,
        "--env",
        help="NAME=VALUE (repeatable): a variable the launch script reads from its environment, e.g. one a `case` "
        "branches on; PWD=DIR reads the script as launched from DIR (default: its own directory).",
    ),
) -> None:
    """Read a verl, OpenRLHF or TRL recipe into a canonical config; report how every setting maps."""
    from rlbridge.importer.recipe_import import import_recipe
    from rlbridge.importer.report import write

    variables = {}
    for item in env or []:
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier():
            raise RLBridgeError(f"--env {item}: expected NAME=VALUE (a shell variable name, then =)")
        variables[name] = value
    rewards = []
    for item in reward or []:
        name, _, weight = item.partition(":")
        try:
            rewards.append({"name": name, **({"weight": float(weight)} if weight else {})})
        except ValueError:
            raise RLBridgeError(f"--reward {item}: the weight after ':' must be a number") from None
    result = import_recipe(recipe, from_, engine_version, rewards or None, env=variables)
    if as_json:
        print(json.dumps(result.report_data(), indent=2, default=str))
    else:
        print(result.report(), end="")
    if output:
        report = write(result, output)
        err.print(f"wrote {output} and {report}")
    elif not as_json:
        print("\n# canonical config (-o FILE writes it)")
        print(result.to_yaml(), end="")


compat_app = typer.Typer(help="The compatibility matrix (compat_matrix/).", no_args_is_help=True)
app.add_typer(compat_app, name="compat")


@compat_app.command("run")
def compat_run(
    engine: Optional[str] = typer.Option(None, "--engine", help="Only this engine's cells."),
    version: Optional[str] = typer.Option(None, "--version", help="Only this version (or environment label)."),
) -> None:
    """Create each cell's environment, run the conformance suite in it, write compat_matrix/RESULTS.md."""
    from rlbridge.envs.compat import results_dir, run_matrix

    results = run_matrix(engine, version, echo=lambda m: err.print(m, highlight=False, markup=False))
    failed = [r for r in results if r["status"] == "fail"]
    not_run = [r for r in results if r["status"] == "not run"]
    out.print(
        f"{len(results)} results, {len(failed)} failed, {len(not_run)} not run (no GPU); table in "
        f"{results_dir() / 'RESULTS.md'}"
    )
    if failed:
        raise typer.Exit(1)


def main() -> None:
    try:
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:  # typer turns Ctrl-C into exit code 130 and returns it
            if code == 130:
                err.print("[yellow]interrupted[/yellow]")
            sys.exit(code)
    except RLBridgeError as exc:
        if _state["debug"]:
            traceback.print_exc()
        err.print("[red]error:[/red] ", end="")  # the message itself literally: `script.sh:100:` is no emoji code
        err.print(str(exc), markup=False, emoji=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/yellow]")
        sys.exit(130)
    except Exception as exc:  # usage errors from typer's click
        name = type(exc).__name__
        if name == "Exit":
            sys.exit(getattr(exc, "exit_code", 0))
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            sys.exit(2)
        if name == "Abort":
            err.print("[yellow]aborted[/yellow]")
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()
