"""One run across several machines without Ray: the node agent, and what the main node publishes to it.

An engine that starts its own processes on every node (TRL: one `accelerate launch` per node) is told by the
batch system's script which node it is on and where the main node is, in the environment: RLBRIDGE_NODE_RANK
(0 on the main node), RLBRIDGE_MAIN_ADDRESS (the main node's address), RLBRIDGE_MAIN_PORT (the port its
rendezvous listens on). The main node runs `rlbridge train`; when its engine process starts the node's command,
it publishes that command (argv and extra environment) to RUN_DIR/nodes/launch.json on the file system the
nodes share. Every other node runs the agent, `python -m rlbridge.engine.nodes RUN_DIR`, which waits for a
launch published after the agent started, runs it with its own node rank, and waits for the next one (a restart
publishes again) until the main node's run has ended (run_state.json) or the script stops it. Slurm runs one
step over every node (SLURM_NODEID is the rank); KubeRay's RayJob places one Ray actor per worker pod
(`ray_job`, Ray only to start the processes).

Standard library only: the agent runs in whatever Python the batch script names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

NODE_RANK_ENV = "RLBRIDGE_NODE_RANK"
MAIN_ADDRESS_ENV = "RLBRIDGE_MAIN_ADDRESS"
MAIN_PORT_ENV = "RLBRIDGE_MAIN_PORT"
DEFAULT_PORT = 29500  # torchrun's


def this_node(num_machines: int) -> tuple[int, str, int] | None:
    """(node rank, main address, main port) from the environment, or None where the batch system set none."""
    rank, address = os.environ.get(NODE_RANK_ENV), os.environ.get(MAIN_ADDRESS_ENV)
    if rank is None or not address:
        return None
    node_rank = int(rank)
    if not 0 <= node_rank < num_machines:
        raise ValueError(f"{NODE_RANK_ENV}={rank} is outside the run's {num_machines} node(s)")
    return node_rank, address, int(os.environ.get(MAIN_PORT_ENV) or DEFAULT_PORT)


def launch_file(run_dir: str | Path) -> Path:
    return Path(run_dir) / "nodes" / "launch.json"


def publish(run_dir: str | Path, argv: list[str], env: dict[str, str]) -> None:
    """The main node's command for every other node (its own rank substituted there), written atomically."""
    path = launch_file(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"argv": argv, "env": env, "published": time.time()}))
    os.replace(tmp, path)


def _run_state(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "run_state.json").read_text())
    except (OSError, ValueError):
        return {}


def agent(run_dir: str | Path, poll_s: float = 1.0) -> int:
    """A non-main node: run each launch the main node's current run publishes (times are the main node's own: a
    launch counts when published after that run started), with this node's rank, until that run has ended."""
    run_dir = Path(run_dir)
    rank = os.environ.get(NODE_RANK_ENV)
    if rank is None:
        sys.stderr.write(f"rlbridge node agent: {NODE_RANK_ENV} is not set\n")
        return 2
    before = _run_state(run_dir).get("started")  # a previous run's state, left in the directory
    last, rc = None, 0
    while True:
        state = _run_state(run_dir)
        try:
            launch = json.loads(launch_file(run_dir).read_text())
        except (OSError, ValueError):
            launch = None
        current = state.get("status") == "running" and state.get("started") != before
        if current and launch and launch["published"] >= state["started"] and launch["published"] != last:
            last = launch["published"]
            argv = list(launch["argv"])
            if "--machine_rank" in argv:
                argv[argv.index("--machine_rank") + 1] = rank
            print(f"rlbridge node {rank}: {' '.join(argv)}", flush=True)
            rc = subprocess.run(argv, env={**os.environ, **launch["env"]}).returncode
            continue
        if state.get("started") != before and state.get("status") not in (None, "running"):
            return rc  # the main node's run (started after this agent) has ended
        time.sleep(poll_s)


def ray_job(config_path: str, run_dir: str, nodes: int, gpus: int, python: str) -> int:
    """A RayJob's entrypoint for a run over `nodes` pods without Ray in the engine (KubeRay, rlbridge.submit.kuberay):
    one Ray actor on each worker pod (a placement group, strictly spread, of the pod's GPUs each), ranked in
    bundle order; rank 0's runs `rlbridge train` with the others' rank and its own address in their environment,
    the others the node agent. Ray only starts the processes: the engine's own launcher does the rest. The pods
    share the run directory (a volume). Returns the first non-zero exit code, else 0."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address="auto", log_to_driver=True)
    bundle = {"CPU": 1.0, **({"GPU": float(gpus)} if gpus else {})}
    group = placement_group([dict(bundle) for _ in range(nodes)], strategy="STRICT_SPREAD")
    ray.get(group.ready(), timeout=900)

    @ray.remote
    class Node:
        def address(self) -> str:
            return ray.util.get_node_ip_address()

        def run(self, argv: list[str], env: dict[str, str]) -> int:
            return subprocess.run(argv, env={**os.environ, **env}).returncode

    actors = [
        Node.options(num_cpus=1, num_gpus=gpus, scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote()
        for i in range(nodes)
    ]
    main = ray.get(actors[0].address.remote())
    runs = []
    for rank, actor in enumerate(actors):
        env = {NODE_RANK_ENV: str(rank), MAIN_ADDRESS_ENV: main, MAIN_PORT_ENV: str(DEFAULT_PORT)}
        argv = (
            [python, "-m", "rlbridge", "train", config_path, "--no-progress"]
            if rank == 0
            else [python, "-m", "rlbridge.engine.nodes", run_dir]
        )
        runs.append(actor.run.remote(argv, env))
    codes = ray.get(runs)
    return next((c for c in codes if c), 0)


if __name__ == "__main__":
    if sys.argv[1] == "--ray":  # python -m rlbridge.engine.nodes --ray CONFIG RUN_DIR NODES GPUS PYTHON
        sys.exit(ray_job(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]))
    sys.exit(agent(sys.argv[1]))
