"""Resolve a config, check it against the chosen backend, plan it, and run it."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbridge import __version__
from rlbridge.contract.backend import Backend, Plan, Support
from rlbridge.contract.config import RunConfig, check_devices
from rlbridge.contract.plugin_args import check_args
from rlbridge.contract.data import check_source
from rlbridge.errors import ConfigError, EngineNotAvailableError, RLBridgeError
from rlbridge.run.loading import dump_config
from rlbridge.contract.models import BUILTIN_PREFIX, check_model_dir, exists, looks_local, transformers_in
from rlbridge.contract.local_plugins import export_local_plugins, register_local_plugins
from rlbridge.contract.native_rewards import check_reward_spec
from rlbridge.contract.registry import PluginManager, get_plugin_manager
from rlbridge.machine import count_gpus


def resolve(config: RunConfig, *, copy: bool = True) -> RunConfig:
    """Fill what 'auto' and templates leave open, so that the plan is fully determined. copy=False fills
    `config` itself: for a caller that validated it for this call (the importer's search resolves
    thousands, and the deep copy was a quarter of a TRL import)."""
    if copy:
        config = config.model_copy(deep=True)
    if config.run_name is None:
        config.run_name = "run"
    config.output_dir = config.output_dir.replace("{run_name}", config.run_name)
    if config.resources.gpus_per_node == "auto":
        config.resources.gpus_per_node = count_gpus()
    if config.checkpoint.dir is None:
        config.checkpoint.dir = str(Path(config.output_dir) / "checkpoints")
    if config.checkpoint.resume == "auto":  # resume when a previous run left checkpoints, else start
        ckpt = Path(config.checkpoint.dir)
        config.checkpoint.resume = ckpt.is_dir() and any(ckpt.iterdir())
    return config


@dataclass
class Prepared:
    config: RunConfig
    backend: Backend
    plan: Plan


def model_paths(config: RunConfig) -> list[tuple[str, str]]:
    """Every model a run loads, as (config field, path): the policy, the critic, reward models."""
    paths = [("model.path", config.model.path)]
    if config.critic.path:
        paths.append(("critic.path", config.critic.path))
    paths += [(f"reward[{i}].model", spec.model) for i, spec in enumerate(config.reward) if spec.model]
    if config.offline.reference_model:
        paths.append(("offline.reference_model", config.offline.reference_model))
    return paths


def engine_python(config: RunConfig, backend: Backend) -> tuple[Path | None, RLBridgeError | None]:
    """(the Python the engine will run in, None for this process; why there is none yet, or None): what the
    pre-flight checks that must look where the engine runs (native rewards, the transformers that loads the
    model) ask, without failing where the engine environment is not created yet."""
    from rlbridge.envs.create import EnvError

    try:
        return choose_engine_python(config, backend), None
    except (EnvError, EngineNotAvailableError) as exc:
        return None, exc


def check_native_rewards(config: RunConfig, backend: Backend, pm: PluginManager, engine_elsewhere: bool) -> None:
    """Native reward functions (`native:` + `function:`) load and fit their convention where they will run:
    this process when the engine runs here, else the engine environment (whose packages, verl's scorer for
    one, this process may lack). Without that environment they are checked here, and a module missing here
    asks for the environment (engine_elsewhere: the job's nodes have their own, so it is left to the job)."""
    entries = [(f"reward[{i}]", spec.model_dump(mode="json")) for i, spec in enumerate(config.reward) if spec.native]
    if not entries:
        return
    python, no_env = engine_python(config, backend)
    if python is None or Path(python).absolute() == Path(sys.executable).absolute():  # venvs: not resolve()
        from rlbridge.contract.native_rewards import check_reward_specs

        failures, where = check_reward_specs(entries, pm), f"in this Python ({sys.prefix})"
    else:
        res = subprocess.run(
            [str(python), "-m", "rlbridge.contract.native_rewards"],
            input=json.dumps(entries),
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise ConfigError(
                f"{entries[0][0]}.function: checking the native reward functions in {python} failed: "
                + (res.stderr.strip().splitlines() or ["no output"])[-1]
            )
        failures = json.loads(res.stdout.strip().splitlines()[-1])
        where = f"in the engine environment ({Path(python).parent.parent})"
    if no_env is not None and engine_elsewhere:
        failures = [f for f in failures if not f["missing"]]
    if not failures:
        return
    failure = failures[0]
    if not failure["missing"]:
        raise ConfigError(failure["message"])
    function = dict(entries)[failure["where"]]["function"]
    if no_env is not None:
        raise ConfigError(
            f"{failure['where']}.function: {function} needs module '{failure['missing']}', which is not installed "
            f"here; it runs in backend {backend.name}'s engine environment, and there is none to check it in: {no_env}"
        )
    provider = next(
        (
            f"the package '{b}' (the {b} engine)"
            for b in sorted(pm.items["backend"])
            if pm.backend(b).distribution.replace("-", "_").lower() == failure["missing"].lower()
        ),
        f"the package that provides '{failure['missing']}'",
    )
    raise ConfigError(
        f"{failure['where']}.function: {function} needs module '{failure['missing']}', which is not installed "
        f"{where}, where backend {backend.name} runs this reward: add {provider} there, or use a reward function it "
        "has"
    )


def uses_ray(backend: Backend) -> bool:
    """Whether the backend runs on Ray (its capability table honours resources.ray_address)."""
    from rlbridge.contract.backend import Support

    return backend.capability_table()["resources.ray_address"].support is not Support.REJECTED


def prepare(config: RunConfig, plugins: PluginManager | None = None, engine_elsewhere: bool = False) -> Prepared:
    """Every check that can fail before anything is written or started, then the plan. engine_elsewhere: the
    engine runs on other machines (`rlbridge submit`), so a missing engine environment here is no error."""
    pm = plugins or get_plugin_manager()
    config = resolve(config)
    register_local_plugins(pm, config.plugins)  # before any lookup: they may provide the backend too
    export_local_plugins(config.plugins)  # for the engine processes, which inherit this environment
    backend = pm.backend(config.backend)
    if config.resources.ray_address is None and os.environ.get("RAY_ADDRESS") and uses_ray(backend):
        config.resources.ray_address = os.environ["RAY_ADDRESS"]  # Ray's own convention, made explicit in the plan
    if config.rollout_workers.mode == "ray" and not uses_ray(backend):
        ray_engines = (
            ", ".join(name for name in sorted(pm.items["backend"]) if uses_ray(pm.backend(name))) or "none installed"
        )
        raise ConfigError(
            f"rollout_workers.mode: ray runs rewards on actors of the run's Ray cluster, and backend "
            f"'{backend.name}' runs without Ray: use rollout_workers.mode: process (or a Ray engine: {ray_engines})"
        )
    if config.engine_version and not backend.version_supported(config.engine_version.split("-")[0]):
        raise ConfigError(
            f"engine_version: {backend.distribution} {config.engine_version} is outside the range backend "
            f"'{backend.name}' supports ({backend.supported_versions}); pick a version in it"
        )
    for field, path in model_paths(config):
        if path.startswith(BUILTIN_PREFIX):
            pm.get("model_builder", path[len(BUILTIN_PREFIX) :], field)
        elif looks_local(path):
            if not exists(path, field):
                raise ConfigError(
                    f"{field}: '{path}' does not exist; point it at a model directory, a hub id (org/name), "
                    f"or a built-in model such as 'builtin:tiny-digits'"
                )
            # a directory that is not a model fails here, not inside an engine; architectures as the engine's
            # transformers knows them; a tokenizer where the run loads one from that directory
            check_model_dir(
                path,
                field,
                tokenizer=field == "model.path" or field.startswith("reward["),
                transformers_dir=transformers_in(engine_python(config, backend)[0]),
            )
    # plugins exist, and their args bind to their factories (rlbridge.contract.plugin_args)
    for field_name, source in (("data.train", config.data.train), ("data.eval", config.data.eval)):
        if source is None:
            continue
        check_source(source, field_name, pm)
        if source.type == "generator":
            generate = pm.get("data_source", source.name, f"{field_name}.name").generate
            check_args(generate, source.args, f"{field_name}.args", source.name, {"seed": config.training.seed})
    for i, spec in enumerate(config.reward):
        if spec.native is None:  # a plugin; native functions are checked where they run, below
            check_reward_spec(spec, pm, f"reward[{i}]")
        if spec.native is None and spec.model is None:
            check_args(
                pm.get("reward", spec.name, f"reward[{i}].name").factory, spec.args, f"reward[{i}].args", spec.name
            )
        elif spec.model is not None and set(spec.args) - {"batch_size"}:
            raise ConfigError(f"reward[{i}].args: a model reward takes only batch_size (got {sorted(spec.args)})")
    if config.environment is not None:
        env = pm.get("environment", config.environment.name, "environment.name")
        check_args(env.factory, config.environment.args, "environment.args", config.environment.name)
    check_native_rewards(config, backend, pm, engine_elsewhere)
    policy = pm.get("placement", config.placement.policy, "placement.policy")
    layout = policy.layout(config)  # the policy checks placement.args itself
    backend.check_capabilities(config)  # a knob the backend cannot honour is named before batch arithmetic on it
    check_devices(config, layout if isinstance(layout, dict) else {})
    if isinstance(layout, dict) and config.rollout.data_parallel_size is not None:
        # the rollout's engines take replicas x tensor-parallel devices of the ones the policy gives the rollout
        layout = {**layout, "rollout": config.rollout.data_parallel_size * config.rollout.tensor_parallel_size}
    for i, sink in enumerate(config.telemetry.sinks):
        plugin = pm.get("telemetry_sink", sink.name, f"telemetry.sinks[{i}].name")
        check_args(plugin.factory, sink.args, f"telemetry.sinks[{i}].args", sink.name, {"run_dir": config.output_dir})
    for engine in config.backend_options:
        if engine not in pm.items["backend"]:
            raise ConfigError(
                f"backend_options.{engine}: no backend named '{engine}'; available: "
                f"{', '.join(sorted(pm.items['backend']))}"
            )
    plan = backend.plan(config)
    plan.layout = dict(layout) if isinstance(layout, dict) else {}
    return Prepared(config, backend, plan)


def train(
    config: RunConfig, plugins: PluginManager | None = None, progress: bool | None = None, fit_check: bool = True
) -> dict[str, Any]:
    """Run the whole job: plan, write the run files, train, summarise. Returns summary.json's content. fit_check:
    refuse, before anything is written or started, a run whose predicted peak memory exceeds the device's
    (rlbridge.contract.memory_check.fit_check; `rlbridge train --no-fit-check` turns it off)."""
    pm = plugins or get_plugin_manager()
    prepared = prepare(config, pm)
    config, backend, plan = prepared.config, prepared.backend, prepared.plan
    if fit_check:
        from rlbridge.contract.memory_check import fit_check as check_memory

        check_memory(config, backend, plan, plan.layout, pm)
    backend.check_startable(plan)
    engine_python = choose_engine_python(config, backend)
    from rlbridge.run.summary import summarize
    from rlbridge.run.runtime import RunContext
    from rlbridge.run.sinks import RunSinks

    from rlbridge.diagnosis import runstate

    run_dir = Path(config.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    previous = runstate.previous_run(run_dir)  # a run killed here before (raises if one still runs)
    shutil.rmtree(run_dir / "patches", ignore_errors=True)  # per-process patch reports of this run only
    (run_dir / "placement.json").unlink(missing_ok=True)  # where this run's actors were (run.placement_readback)
    if not config.checkpoint.resume:
        for stale in ("metrics.jsonl", "eval_metrics.jsonl", "native_metrics.jsonl", "samples.jsonl"):
            (run_dir / stale).unlink(missing_ok=True)
    (run_dir / "config.yaml").write_text(dump_config(config))
    (run_dir / "plan.yaml").write_text(plan.to_yaml())
    from rlbridge.run import manifest

    manifest.write(
        run_dir, manifest.build(config, backend, plan, engine_python, model_paths(config))
    )  # what `rlbridge reproduce` rebuilds
    shutil.rmtree(manifest.digest_dir(run_dir), ignore_errors=True)
    sinks = RunSinks.build(config, run_dir, pm)
    show = config.telemetry.progress if progress is None else progress
    bar = None
    if show:
        from rlbridge.run.progress import TrainingProgress

        bar = TrainingProgress(config.training.steps, f"{config.run_name} [{backend.name}]")
    ctx = RunContext(config, plan, run_dir, pm, sinks, bar)
    summary: dict[str, Any] = {
        "run_name": config.run_name,
        "backend": backend.name,
        "engine_version": backend.installed_version() if engine_python is None else config.engine_version,
        "engine_python": str(engine_python) if engine_python else sys.executable,
        "rlbridge_version": __version__,
        "python": platform.python_version(),
        "approximations": plan.approximations,
    }
    if previous is not None:
        summary["previous_run"] = previous
        after = f" after step {previous['last_step']}" if "last_step" in previous else ""
        ctx.warn(
            f"the previous run in {run_dir} (pid {previous.get('pid')}) was killed{after}: {previous['reason']}; "
            + (
                "resuming from its last complete checkpoint"
                if config.checkpoint.resume
                else "starting over (--resume continues from its last checkpoint)"
            )
        )
    state = runstate.start(run_dir, backend=backend.name, engine_python=summary["engine_python"])
    pm.hook.rlbridge_run_start(config=config, plan=plan, run_dir=str(run_dir))
    sinks.call("rlbridge_run_start", config=config, plan=plan, run_dir=str(run_dir))
    started = time.time()
    from rlbridge.engine.patch_report import PATCH_DIR_ENV

    saved_patch_dir = os.environ.get(PATCH_DIR_ENV)
    os.environ[PATCH_DIR_ENV] = str((run_dir / "patches").resolve())  # every engine process reports there
    saved_digest_dir = os.environ.get(manifest.DATA_DIGEST_ENV)
    os.environ[manifest.DATA_DIGEST_ENV] = str(
        manifest.digest_dir(run_dir).resolve()
    )  # the data rows' hashes, from where they load
    summary["restarts"] = []  # training.max_restarts: one entry per restart, with its cause
    try:
        if bar is not None:
            with bar:
                _attempts(backend, plan, ctx, engine_python, summary["restarts"])
        else:
            _attempts(backend, plan, ctx, engine_python, summary["restarts"])
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        summary["engine_version"] = ctx.engine_version or summary["engine_version"]
        summary.update(status=status, error=f"{type(exc).__name__}: {exc}", wall_s=time.time() - started)
        if getattr(exc, "failure", None):  # the cause (rlbridge.diagnosis.causes): kind, process, role, evidence, hint
            summary["failure"] = failure = exc.failure
            ctx.warn(
                f"{failure.get('kind')} in {failure.get('process')}: {failure.get('evidence')}"[:500]
                + f"; what to change: {failure.get('hint')}"
                + (f"; log: {failure['log']}" if failure.get("log") else "")
            )
        summary.update(
            summarize(ctx.history),
            checkpoints=ctx.checkpoints,
            nonfinite_steps=ctx.nonfinite_steps,
            evaluations=ctx.evals,
        )
        ctx.close()
        _restore_env(PATCH_DIR_ENV, saved_patch_dir)
        _restore_env(manifest.DATA_DIGEST_ENV, saved_digest_dir)
        runstate.finish(run_dir, state, status)
        (run_dir / "error.txt").write_text("".join(traceback.format_exception(exc)))
        summary["sink_errors"] = sinks.errors
        _finish(run_dir, ctx.history, summary, config, engine_python)
        try:
            pm.hook.rlbridge_run_failed(error=exc, summary=summary)
        finally:
            _end_sinks(sinks, run_dir, summary, "rlbridge_run_failed", error=exc)
        raise
    ctx.close()
    _restore_env(PATCH_DIR_ENV, saved_patch_dir)
    _restore_env(manifest.DATA_DIGEST_ENV, saved_digest_dir)
    _check_placement(config, backend, plan, run_dir, summary, ctx)
    runstate.finish(run_dir, state, "completed")
    summary["engine_version"] = ctx.engine_version or summary["engine_version"]
    summary.update(status="completed", wall_s=time.time() - started)
    summary.update(
        summarize(ctx.history), checkpoints=ctx.checkpoints, nonfinite_steps=ctx.nonfinite_steps, evaluations=ctx.evals
    )
    summary["sink_errors"] = sinks.errors
    _finish(run_dir, ctx.history, summary, config, engine_python)
    pm.hook.rlbridge_run_end(summary=summary)
    _end_sinks(sinks, run_dir, summary, "rlbridge_run_end")
    return summary


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _end_sinks(sinks, run_dir: Path, summary: dict[str, Any], hook: str, **kwargs: Any) -> None:
    """The sinks' last hook; a sink failing in it is added to summary.json (already written)."""
    before = len(sinks.errors)
    sinks.call(hook, summary=summary, **kwargs)
    if len(sinks.errors) > before:
        summary["sink_errors"] = sinks.errors
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def choose_engine_python(config: RunConfig, backend: Backend) -> Path | None:
    """None to run the engine in this process; else the Python of the engine environment to launch."""
    mode = config.engine_env
    # a restart starts the engine afresh: its own process, not this one (training.max_restarts)
    here_python = Path(sys.executable) if config.training.max_restarts else None
    if mode == "current":
        backend.require_engine()
        return here_python
    if mode == "auto":
        here = backend.installed_version()
        wanted = config.engine_version
        if here is not None and backend.version_supported(here) and (wanted is None or wanted == here):
            return here_python
        from rlbridge.envs.create import find_env
        from rlbridge.engine.environments import env_python

        return env_python(find_env(backend.name, wanted))
    from rlbridge.run.launch import python_of

    return python_of(mode)


def _check_placement(
    config: RunConfig, backend: Backend, plan: Plan, run_dir: Path, summary: dict[str, Any], ctx
) -> None:
    """Where the engine's Ray actors were, against the placement policy's layout: into the summary, and
    each mismatch as a warning (rlbridge.run.placement_readback)."""
    from rlbridge.run.placement_readback import read_back

    try:
        check = read_back(run_dir, plan.layout, backend.placement_roles(plan), config.resources.nodes)
    except Exception as exc:  # reading placement back never fails a run that trained
        ctx.warn(f"placement read-back failed: {type(exc).__name__}: {exc}")
        return
    if check is None:
        return
    summary["placement"] = {"policy": config.placement.policy, **check}
    for mismatch in check["mismatches"]:
        ctx.warn(f"placement '{config.placement.policy}' not realised as asked: {mismatch}")


def _attempts(backend: Backend, plan: Plan, ctx, engine_python: Path | None, restarts: list[dict[str, Any]]) -> None:
    """Run the engine under the hang watchdog; after a retryable failure (rlbridge.diagnosis.causes), while
    training.max_restarts allows, wait (training.restart_backoff_s, doubled each time) and start it again
    from its last complete checkpoint (from the start when none was saved yet). Raises the last failure
    with its cause in `exc.failure`; a Ctrl-C of the user's stays a KeyboardInterrupt."""
    from rlbridge.diagnosis.causes import OomCounters, classify
    from rlbridge.diagnosis.watchdog import HangError, HangWatchdog

    config, training = ctx.config, ctx.config.training
    oom = OomCounters.now()
    intervals: list[float] = []  # the run's own step intervals, across restarts (the watchdog's bound)
    while True:
        ctx.engine_process = None
        stop = (lambda: _stop_engine(ctx)) if engine_python is not None else None
        watchdog = HangWatchdog(
            ctx,
            ctx.run_dir,
            training,
            len(restarts),
            stop_engine=stop,
            intervals=intervals,
            actor_roles=backend.placement_roles(plan),
        )
        try:
            with watchdog:
                _launch(backend, plan, ctx, engine_python)
            return
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) and watchdog.fired is None:
                raise
            if watchdog.fired and engine_python is None:
                watchdog.stop_captured()
            failure = watchdog.fired or classify(
                exc,
                ctx.run_dir,
                config,
                steps_done=ctx.steps_done,
                oom=oom,
                actor_roles=backend.placement_roles(plan),
                in_process=engine_python is None,
            )
            if watchdog.fired and getattr(exc, "failure", None):  # what the engine's own account adds (its log)
                failure.setdefault("log", exc.failure.get("log"))
            again = (
                failure["retryable"]
                and len(restarts) < training.max_restarts
                and not (failure["kind"] == "hang" and training.on_hang == "fail")
            )
            if not again:
                if watchdog.fired:  # the engine's own end (SIGTERM, an interrupt) is the watchdog's doing
                    error = HangError(f"hang: {failure['evidence']}; stacks in {failure['stacks']}")
                    error.failure = failure
                    raise error from None
                exc.failure = failure
                raise
        _stop_leftovers(ctx.run_dir)
        wait = min(600.0, training.restart_backoff_s * 2 ** len(restarts))
        checkpoint = ctx.checkpoints[-1]["path"] if ctx.checkpoints else None
        restarts.append(
            {
                "n": len(restarts) + 1,
                "kind": failure["kind"],
                "process": failure["process"],
                "role": failure.get("role"),
                "evidence": str(failure.get("evidence", ""))[:400],
                "after_step": ctx.steps_done,
                "from_checkpoint": checkpoint,
                "backoff_s": wait,
                "at": time.time(),
                # a hang's frame, stacks file and bound: what doctor and a reader need to see it was one
                **{k: failure[k] for k in ("frame", "stacks", "bound_s", "waited_s") if k in failure},
            }
        )
        ctx.warn(
            f"restart {len(restarts)} of training.max_restarts={training.max_restarts}: {failure['kind']} in "
            f"{failure['process']} after step {ctx.steps_done}; "
            + (f"resuming from {checkpoint}" if checkpoint else "starting over (no checkpoint yet)")
            + f" in {wait:g} s"
        )
        time.sleep(wait)
        if (
            checkpoint is not None
        ):  # an earlier run's checkpoints (checkpoint.resume already true) stay the base otherwise
            config.checkpoint.resume = _restart_point(backend, config, checkpoint)
        layout = plan.layout
        plan = backend.plan(config)  # the same plan, resuming
        plan.layout = layout
        ctx.restarted(plan, restarts[-1])


def _restart_point(backend, config: RunConfig, checkpoint: str) -> str | bool:
    """What a restart resumes from: the failed attempt's last checkpoint the run recorded, as a path where
    the backend honours a path exactly, else the newest complete one (True). A killed engine process's
    Ray workers can train on for a moment before they are stopped and save checkpoints of steps that
    have no row in metrics.jsonl (seen on verl 0.5.0, whose steps take 0.1 s): resuming from the newest
    would lose those steps' rows."""
    cap = backend.capability_table().get("checkpoint.resume")
    trial = config.model_copy(deep=True)
    trial.checkpoint.resume = checkpoint
    exact = cap is not None and (
        cap.support is Support.HONOURED
        or (
            cap.support is Support.APPROXIMATED and cap.approximate_when is not None and not cap.approximate_when(trial)
        )
    )
    return checkpoint if exact else True


def _stop_leftovers(run_dir: Path) -> None:
    """Before a restart: SIGKILL what the failed attempt left running (a killed engine process's Ray
    cluster or vLLM engine, re-parented away from it). Every process of a run inherits the run's patch
    directory in its environment (rlbridge.engine.patch_report); this process and its other children
    (the plot helper started before it was set) are spared."""
    import signal

    from rlbridge.engine.patch_report import PATCH_DIR_ENV

    needle = f"{PATCH_DIR_ENV}={(run_dir / 'patches').resolve()}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def _stop_engine(ctx) -> None:
    """The hang watchdog's stop: SIGTERM to every process of the engine's tree, SIGKILL 5 s later."""
    import signal

    from rlbridge.diagnosis.stacks import tree

    proc = getattr(ctx, "engine_process", None)
    if proc is None:
        return
    pids = [p["pid"] for p in tree(proc.pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.time() + 5
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)


def _launch(backend: Backend, plan: Plan, ctx, engine_python: Path | None) -> None:
    if engine_python is None:
        from rlbridge.run.engine_log import engine_output_to

        saved = dict(os.environ)
        try:
            with engine_output_to(ctx.run_dir / "engine.log"):  # the console keeps rlbridge's own lines
                backend.train(plan, ctx)  # run, or run_stage for an offline stage
        finally:  # an engine run here sets variables (VERL_FULL_DETERMINISM...) the next run must not inherit
            for name in set(os.environ) - set(saved):
                del os.environ[name]
            os.environ.update(saved)
    else:
        from rlbridge.run.launch import run_in_env

        run_in_env(engine_python, plan, ctx)


def _finish(
    run_dir: Path,
    history: list[dict[str, float]],
    summary: dict[str, Any],
    config: RunConfig,
    engine_python: Path | None,
) -> None:
    from rlbridge.run.summary import plot

    files = ["config.yaml", "plan.yaml", "metrics.jsonl", "native_metrics.jsonl", "samples.jsonl", "summary.json"]
    if history:
        title = f"{config.run_name} on {config.backend}"
        skipped = plot(history, run_dir / "reward.png", title)
        if skipped and engine_python is not None:  # no Pillow here: the engine environment has it
            res = subprocess.run(
                [
                    str(engine_python),
                    "-m",
                    "rlbridge.run.summary",
                    str(run_dir / "metrics.jsonl"),
                    str(run_dir / "reward.png"),
                    title,
                ],
                capture_output=True,
                text=True,
            )
            skipped = None if res.returncode == 0 else skipped
        if skipped:
            summary["plot_skipped"] = skipped
        else:
            files.append("reward.png")
    from rlbridge.engine.patch_report import merge

    if merge(run_dir) is not None:  # the per-process patch reports, merged
        files.append("patches.json")
    from rlbridge.run import manifest

    if manifest.complete(run_dir, model_paths(config)) is not None:  # data-row hashes and what the patches did
        files.append(manifest.MANIFEST_FILE)
    if (run_dir / "model").is_dir():  # an offline stage's trained model (docs/stages.md): a pipeline's next input
        files.append("model")
        summary["model"] = str(run_dir / "model")
    summary["files"] = files
    summary["output_dir"] = str(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
