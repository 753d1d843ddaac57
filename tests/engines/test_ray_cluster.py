"""More than one node: a run joins an existing Ray cluster and is submitted to it as a Ray job.

The cluster is simulated on this one machine with Ray's own test utility (`ray.cluster_utils.Cluster`:
two raylets on loopback, each with its own CPUs and one logical GPU), started and stopped by this
test alone. `rlbridge submit` plans the quickstart here, submits it through Ray's job API, follows
its logs; the job's verl driver joins that cluster with `resources.nodes: 2`, and Ray's state API
then says where verl placed its workers.
"""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlbridge.testing import QUICKSTART


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: several minutes on two simulated nodes
def test_submit_runs_verl_on_a_two_node_cluster_with_workers_on_both_nodes(tmp_path, monkeypatch):
    verl = pytest.importorskip("verl", reason="runs in the verl engine environment (rlbridge compat run --engine verl)")
    if tuple(int(x) for x in verl.__version__.split(".")[:2]) < (0, 9):
        pytest.skip("one engine version proves the seam: verl 0.9 (vLLM rollout on CPU)")
    from ray.cluster_utils import Cluster
    from ray.util.state import list_actors

    # every Ray process of this cluster (raylets, dashboard agents, job drivers, workers) on loopback:
    # without it Ray resolves 127.0.0.1 to the machine's outward address
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    port = _free_port()

    def node() -> dict:  # two raylets on one machine: their dashboard agents need their own ports
        return {"node_ip_address": "127.0.0.1", "num_cpus": 8, "num_gpus": 1,  # logical GPUs: placement only
                "dashboard_agent_listen_port": _free_port(), "metrics_export_port": _free_port()}

    cluster = Cluster(initialize_head=True, head_node_args={**node(), "include_dashboard": True, "dashboard_host": "127.0.0.1",
                                                            "dashboard_port": port})
    try:
        second = cluster.add_node(**node())
        cluster.wait_for_nodes()
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
        actors = list_actors(address=f"http://127.0.0.1:{port}", limit=10000, raise_on_missing_output=False)
        workers = [a for a in actors if "WorkerDict" in a.class_name]  # verl's fused actor/rollout/ref workers
        nodes = {a.node_id for a in workers}
        assert {cluster.head_node.node_id, second.node_id} <= nodes, [(a.class_name, a.node_id) for a in workers]
    finally:
        cluster.shutdown()  # only the raylets this test started
