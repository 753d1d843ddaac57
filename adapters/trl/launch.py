"""TRL across processes and machines: the trainer under `accelerate launch`, one process per training device
(layout.py plans the accelerate config). Imported only when a run starts; the rank side (`main`) imports
torch and trl through train.py.

The engine process (`run_launched`, called by train.run_trl) writes the accelerate config and the job (config,
plan, run directory) into RUN_DIR/accelerate/ and runs, on this node,

    accelerate launch --config_file RUN_DIR/accelerate/accelerate_config.yaml -m rlbridge_adapters.trl.launch JOB

Each rank (`main`) builds and trains the trainer exactly as the one-process path does (train.run_trl). Only the
main process (rank 0) reports: its steps, evaluations, checkpoints, samples and warnings are appended to
RUN_DIR/accelerate/events.jsonl, which the engine process follows and relays to the run's context, so that
metrics.jsonl, samples.jsonl and the checkpoint events are rank 0's whatever the world size (TRL gathers the
step's metrics and rewards from every rank before it logs). Any rank's error is appended there too.

One run, one stop: torchrun (accelerate's launcher for DDP and FSDP, running in the launch process) stops every
rank when one fails and exits non-zero; it starts each rank in a session of its own, so each rank also watches
its parent (rlbridge.engine.lifeline.ParentWatch) and stops with its whole tree when the launcher is gone, and
the launcher gets SIGTERM when the engine process dies (PR_SET_PDEATHSIG). The launcher runs in the engine
process's process group, which rlbridge's own launcher stops on failure and Ctrl-C.

More than one node (resources.nodes): one accelerate launch per node, started by the batch system's script
(rlbridge submit --to slurm | kuberay), each with its machine rank and the main node's address in the environment
(rlbridge.engine.nodes): the main node (rank 0) runs `rlbridge train`, whose engine process publishes the command;
every other node's agent runs it with its own machine rank.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

RANK_JOB_ENV = "RLBRIDGE_TRL_RANK_JOB"  # set in every rank: the job it runs (train.run_trl then trains in place)


def in_rank() -> bool:
    return bool(os.environ.get(RANK_JOB_ENV))


def _die_with_parent() -> None:  # preexec_fn: SIGTERM to the launcher when the engine process dies
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def launch_files(run_dir: Path) -> dict[str, Path]:
    base = Path(run_dir) / "accelerate"
    return {
        "dir": base,
        "config": base / "accelerate_config.yaml",
        "job": base / "job.json",
        "events": base / "events.jsonl",
    }


def accelerate_argv(
    native: dict[str, Any], files: dict[str, Path], node_rank: int, address: str, port: int
) -> list[str]:
    """The `accelerate launch` command of one node (layout.launch_command with the values filled in)."""
    from rlbridge_adapters.trl.layout import launch_command

    values = {"$NODE_RANK": str(node_rank), "$MAIN_ADDRESS": address, "$MAIN_PORT": str(port)}
    argv = launch_command(native, str(files["config"]), str(files["job"]))
    argv = [values.get(a, a) for a in argv]
    return [sys.executable, "-m", "accelerate.commands.launch", *argv[2:]]


def _check_runnable(native: dict[str, Any]) -> None:
    import importlib.util

    from rlbridge.errors import ConfigError

    acc = native["accelerate"]
    if acc["distributed_type"] == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(
            "training.strategy: deepspeed runs TRL through accelerate's DeepSpeed plugin, and this engine "
            f"environment ({sys.prefix}) has no DeepSpeed: install it there (pip install deepspeed), or use "
            "training.strategy: fsdp"
        )


def check_startable(native: dict[str, Any]) -> None:
    """A run over several nodes starts on each node with its rank and the main node's address, which only a
    batch system's script sets: refused here before `rlbridge train` writes anything."""
    from rlbridge.engine import nodes
    from rlbridge.errors import ConfigError

    machines = native.get("accelerate", {}).get("num_machines", 1)
    if machines > 1 and nodes.this_node(machines) is None:
        raise ConfigError(
            f"resources.nodes ({machines}): TRL runs one accelerate launch per node, each told its "
            f"machine rank and the main node's address ({nodes.NODE_RANK_ENV}, {nodes.MAIN_ADDRESS_ENV}); run it "
            "with `rlbridge submit --to slurm` (or kuberay), which sets them, or set resources.nodes: 1"
        )


def run_launched(plan, ctx) -> None:
    """Run the plan's trainer under `accelerate launch` on this node and relay rank 0's events to `ctx`."""
    import yaml

    from rlbridge.engine import nodes
    from rlbridge.engine.lifeline import kill_descendants
    from rlbridge.errors import ConfigError
    from rlbridge.helpers import free_port

    native = plan.native
    _check_runnable(native)
    acc = dict(native["accelerate"])  # a multi-node run has its node's rank: rlbridge train checked it first
    node = nodes.this_node(acc["num_machines"])
    node_rank, address, port = node if node is not None else (0, "127.0.0.1", free_port())
    files = launch_files(ctx.run_dir)
    files["dir"].mkdir(parents=True, exist_ok=True)
    acc.update(machine_rank=node_rank, main_process_ip=address, main_process_port=port)
    files["config"].write_text(yaml.safe_dump(acc, sort_keys=False))
    job = {
        "config": ctx.config.model_dump(mode="json", exclude_unset=True),
        "plan": plan.to_dict(),
        "run_dir": str(ctx.run_dir),
        "events": str(files["events"]),
    }
    files["job"].write_text(json.dumps(job))
    files["events"].write_text("")
    argv = accelerate_argv(native, files, node_rank, address, port)
    env = {**os.environ, **native["env"], RANK_JOB_ENV: str(files["job"])}
    if native.get("torch_threads"):
        env["OMP_NUM_THREADS"] = str(native["torch_threads"])
    if acc["num_machines"] > 1:  # what every other node runs: the command, and the run's own variables
        shared = {k: v for k, v in env.items() if k.startswith("RLBRIDGE_") and not k.endswith("_FD")}
        shared.pop(nodes.NODE_RANK_ENV, None)
        nodes.publish(
            ctx.run_dir,
            argv,
            {
                **native["env"],
                **shared,
                **({"OMP_NUM_THREADS": env["OMP_NUM_THREADS"]} if "OMP_NUM_THREADS" in env else {}),
            },
        )
    print(f"rlbridge: {' '.join(argv)}", flush=True)
    proc = subprocess.Popen(argv, env=env, preexec_fn=_die_with_parent)
    relay = EventRelay(files["events"], ctx)
    relay.start()
    try:
        rc = proc.wait()
    except BaseException:
        _stop(proc)
        raise
    finally:
        kill_descendants(grace_s=3.0, pid=proc.pid)  # nothing of the launch outlives it
        relay.finish()
    if relay.error is not None:
        raise relay.error
    if rc != 0:
        error = relay.rank_errors[0] if relay.rank_errors else None
        from rlbridge.errors import RLBridgeError

        where = f" in rank {error['rank']}: {error['message']}" if error else f" (exit code {rc}; see engine.log)"
        exc = (ConfigError if error and error.get("user_error") else RLBridgeError)(
            f"TRL's training processes (accelerate launch, {acc['num_processes']} of them) failed{where}"
        )
        raise exc


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the launcher (torchrun stops its ranks on it), SIGKILL after a grace period."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class EventRelay(threading.Thread):
    """Follows the ranks' events file and calls the run context for rank 0's events (step, eval, checkpoint,
    warning); keeps every rank's error."""

    def __init__(self, path: Path, ctx) -> None:
        super().__init__(name="rlbridge-trl-relay", daemon=True)
        self.path = Path(path)
        self.ctx = ctx
        self.done = threading.Event()
        self.rank_errors: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self._offset = 0
        self._partial = ""

    def run(self) -> None:
        try:
            while not self.done.is_set():
                if not self._read():
                    time.sleep(0.2)
            self._read()
        except BaseException as exc:  # surfaced by run_launched
            self.error = exc

    def finish(self) -> None:
        self.done.set()
        self.join(timeout=30)

    def _read(self) -> bool:
        with open(self.path, encoding="utf-8") as fh:
            fh.seek(self._offset)
            text = fh.read()
            self._offset = fh.tell()
        if not text:
            return False
        text, self._partial = self._partial + text, ""
        lines = text.split("\n")
        self._partial = lines.pop()  # an unfinished last line waits for the rest
        for line in lines:
            if line.strip():
                self._relay(json.loads(line))
        return True

    def _relay(self, event: dict[str, Any]) -> None:
        kind = event.pop("kind")
        if kind == "step":
            self.ctx.emit_step(
                event["step"],
                event["metrics"],
                native=event.get("native"),
                samples=event.get("samples"),
                rewards=event.get("rewards"),
            )
        elif kind == "checkpoint":
            self.ctx.checkpoint_saved(event["step"], event["path"])
        elif kind == "eval":
            self.ctx.emit_eval(event["step"], event["metrics"])
        elif kind == "warning":
            self.ctx.warn(event["message"])
        elif kind == "error":
            self.rank_errors.append(event)


def record_state(trainer, run_dir: Path) -> dict[str, Any]:
    """RUN_DIR/accelerate/state.json, written by rank 0 once the trainer has wrapped the model: the distributed
    type, backend and world size accelerate set up, the model's wrapper, and how many of its parameters this rank
    holds (a sharded strategy holds a share), read back from the processes rather than from the plan."""
    from torch.distributed.tensor import DTensor

    acc = trainer.accelerator
    model = trainer.model_wrapped
    params = list(model.parameters())
    local = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in params)
    plugin = getattr(acc.state, "fsdp_plugin", None)
    state = {
        "distributed_type": str(acc.distributed_type).rsplit(".", 1)[-1],
        "backend": acc.state.backend,
        "num_processes": acc.num_processes,
        "device": str(acc.device),
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in params),
        "parameters_on_rank0": local,
        "sharded_tensors": sum(isinstance(p, DTensor) for p in params),
        "fsdp": None
        if plugin is None
        else {
            "version": plugin.fsdp_version,
            "reshard_after_forward": plugin.reshard_after_forward
            if isinstance(plugin.reshard_after_forward, bool)
            else str(plugin.reshard_after_forward),
            "offload": type(plugin.cpu_offload).__name__ if plugin.cpu_offload is not None else None,
        },
        "mesh": None
        if getattr(acc, "torch_device_mesh", None) is None
        else dict(zip(acc.torch_device_mesh.mesh_dim_names, acc.torch_device_mesh.mesh.shape)),
        # TRL's own batch arithmetic at this world size (GRPOConfig.__post_init__)
        **{
            key: getattr(trainer.args, key, None)
            for key in (
                "per_device_train_batch_size",
                "gradient_accumulation_steps",
                "generation_batch_size",
                "steps_per_generation",
            )
        },
    }
    path = launch_files(run_dir)["dir"] / "state.json"
    path.write_text(json.dumps(state, indent=1))
    return state


# --- the rank side --------------------------------------------------------------------------------------------------


def _rank_context(config, plan, run_dir: Path, plugins, events_path: str, rank: int):
    """The run context of one rank: rank 0's events go to the events file; the other ranks' are dropped (their
    errors excepted), because TRL already gathers every rank's metrics and rewards into rank 0's log."""
    from rlbridge.engine.child import ChildContext

    class RankContext(ChildContext):
        def _send(self, **event) -> None:
            if rank != 0 and event.get("kind") != "error":
                return
            line = (json.dumps(event) + "\n").encode()
            fd = os.open(events_path, os.O_WRONLY | os.O_APPEND)
            try:  # one write of the whole line: ranks append to the same file
                os.write(fd, line)
            finally:
                os.close(fd)

    return RankContext(config, plan, run_dir, plugins, None)


def main(job_path: str) -> int:
    """One training process (`python -m rlbridge_adapters.trl.launch JOB`, started by accelerate launch)."""
    from rlbridge.engine import lifeline

    lifeline.ParentWatch(None, None).start()  # torchrun's own session per rank: stop when the launcher is gone
    from rlbridge.contract.backend import Plan
    from rlbridge.contract.config import RunConfig
    from rlbridge.contract.registry import get_plugin_manager

    job = json.loads(Path(job_path).read_text())
    rank = int(os.environ.get("RANK", "0"))
    ctx = None
    try:
        config = RunConfig.model_validate(job["config"])
        plan = Plan.from_dict(job["plan"])
        pm = get_plugin_manager()
        ctx = _rank_context(config, plan, Path(job["run_dir"]), pm, job["events"], rank)
        from rlbridge_adapters.trl.train import run_trl

        run_trl(plan, ctx)
        return 0
    except BaseException as exc:
        if ctx is not None:
            ctx._send(
                kind="error",
                rank=rank,
                message=f"{type(exc).__name__}: {exc}",
                traceback=traceback.format_exc(),
                user_error=exc.__class__.__module__.startswith("rlbridge"),
            )
        traceback.print_exc()
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        lifeline.kill_descendants(grace_s=3.0)  # this rank's reward workers go with it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
