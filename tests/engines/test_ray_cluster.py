"""More than one node: a run joins an existing Ray cluster and is submitted to it as a Ray job.

The cluster is simulated on this one machine with Ray's own test utility (`ray.cluster_utils.Cluster`:
two raylets on loopback, each with its own CPUs and one logical GPU), started and stopped by this
test alone. `rlbridge submit` plans the quickstart here, submits it through Ray's job API, follows
its logs; the job's verl driver joins that cluster with `resources.nodes: 2`, and Ray's state API
then says where verl placed its workers. An OpenRLHF run joins such a cluster directly
(`resources.ray_address`) with `resources.nodes: 2`. Both check the run's own placement read-back
(summary.json `placement`, rlbridge.run.placement) per node as well.
"""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlbridge.testing import QUICKSTART


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_node_cluster(monkeypatch, gpus_per_node: int):
    """Two raylets on loopback, each with 8 CPUs and `gpus_per_node` logical GPUs (placement only), the
    head with a dashboard (Ray's job and state APIs). Returns (cluster, second node, dashboard port)."""
    from ray.cluster_utils import Cluster

    import ray._private.ray_constants as ray_constants

    # every Ray process of this cluster (raylets, dashboard agents, job drivers, workers) on loopback:
    # without it Ray resolves 127.0.0.1 to the machine's outward address. Ray reads the variable when it
    # is imported, so this process (whose Ray a collected module may have imported already) also gets
    # the constant: a driver joining in-process would otherwise dial the outward address and wait forever
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    port = _free_port()

    def node() -> dict:  # two raylets on one machine: their dashboard agents need their own ports
        return {"node_ip_address": "127.0.0.1", "num_cpus": 8, "num_gpus": gpus_per_node,
                "dashboard_agent_listen_port": _free_port(), "metrics_export_port": _free_port()}

    cluster = Cluster(initialize_head=True, head_node_args={**node(), "include_dashboard": True, "dashboard_host": "127.0.0.1",
                                                            "dashboard_port": port})
    try:
        second = cluster.add_node(**node())
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster, second, port


def _actor_nodes(port: int, name: str) -> set[str]:
    from ray.util.state import list_actors

    actors = list_actors(address=f"http://127.0.0.1:{port}", limit=10000, raise_on_missing_output=False)
    return {a.node_id for a in actors if name in a.class_name}


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: several minutes on two simulated nodes
def test_submit_runs_verl_on_a_two_node_cluster_with_workers_on_both_nodes(tmp_path, monkeypatch):
    verl = pytest.importorskip("verl", reason="runs in the verl engine environment (rlbridge compat run --engine verl)")
    if tuple(int(x) for x in verl.__version__.split(".")[:2]) < (0, 9):
        pytest.skip("one engine version proves the seam: verl 0.9 (vLLM rollout on CPU)")
    cluster, second, port = _two_node_cluster(monkeypatch, gpus_per_node=1)
    try:
        out = tmp_path / "run"
        res = subprocess.run(
            [sys.executable, "-m", "rlbridge", "submit", str(QUICKSTART), "--address", f"http://127.0.0.1:{port}",
             "--set", "backend=verl", "--set", "resources.nodes=2", "--set", "resources.gpus_per_node=0",
             "--set", "training.steps=2", "--set", "training.batch_size=2", "--set", "algorithm.group_size=4",
             "--set", "rollout.max_new_tokens=8", "--set", f"output_dir={out}"],
            capture_output=True, text=True, timeout=1500,
        )
        log = res.stdout + res.stderr
        assert res.returncode == 0, log[-4000:]
        job = json.loads((out / "submit" / "job.json").read_text())
        assert job["status"] == "SUCCEEDED" and "rlbridge train" in job["entrypoint"]
        assert "step 2" in (out / "submit" / "job.log").read_text() or (out / "metrics.jsonl").exists()
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2]
        plan = (out / "plan.yaml").read_text()
        assert "trainer.nnodes: 2" in plan and "address: auto" in plan
        nodes = _actor_nodes(port, "WorkerDict")  # verl's fused actor/rollout/ref workers, from Ray's state API
        assert {cluster.head_node.node_id, second.node_id} <= nodes, nodes
        # the run's own read-back saw the same: the actor role on both nodes, as colocate asked
        placement = json.loads((out / "summary.json").read_text())["placement"]
        assert placement["nodes"] == 2 and placement["roles"]["actor"]["nodes"] == ["node0", "node1"], placement
        assert placement["mismatches"] == [], placement
    finally:
        cluster.shutdown()  # only the raylets this test started


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: several minutes on two simulated nodes
def test_openrlhf_joins_a_two_node_cluster_and_trains_with_actors_on_both_nodes(tmp_path, monkeypatch):
    pytest.importorskip("openrlhf", reason="runs in the OpenRLHF engine environment (rlbridge compat run --engine openrlhf)")
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    # two nodes of 2 logical GPUs: OpenRLHF asks for 2 policy GPUs (one per node) and 2 vLLM engines
    cluster, second, port = _two_node_cluster(monkeypatch, gpus_per_node=2)
    try:
        out = tmp_path / "run"
        cfg = load_config(QUICKSTART, [
            "backend=openrlhf", "engine_env=current", "resources.nodes=2", "resources.gpus_per_node=0",
            f"resources.ray_address={cluster.address}", "training.steps=2", "training.batch_size=2",
            "algorithm.group_size=2", "rollout.max_new_tokens=8", "telemetry.progress=false", f"output_dir={out}"])
        summary = train(cfg, progress=False)
        assert summary["status"] == "completed"
        assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
        argv = yaml.safe_load((out / "plan.yaml").read_text())["native"]["args"]
        assert argv[argv.index("--actor.num_nodes") + 1] == "2"
        everything = _actor_nodes(port, "")  # every actor of the run, from Ray's state API
        assert {cluster.head_node.node_id, second.node_id} <= everything, everything
        placement = summary["placement"]
        assert placement["nodes"] == 2, placement
        assert placement["roles"]["actor"]["actors"] == ["PolicyModelActor", "PolicyModelActor"], placement
    finally:
        cluster.shutdown()  # only the raylets this test started
