"""More than one node: a run joins an existing Ray cluster and is submitted to it as a Ray job.

The cluster is simulated on this one machine with Ray's own test utility (`ray.cluster_utils.Cluster`:
two raylets on loopback, each with its own CPUs and one logical GPU), started and stopped by this
test alone. `rlbridge submit` plans the quickstart here, submits it through Ray's job API, follows
its logs; the job's verl driver joins that cluster with `resources.nodes: 2`, and Ray's state API
then says where verl placed its workers. An OpenRLHF run joins such a cluster directly
(`resources.ray_address`) with `resources.nodes: 2`. Both check the run's own placement read-back
(summary.json `placement`, rlbridge.run.placement_readback) per node as well.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlbridge.helpers import free_port
from rlbridge.testing import QUICKSTART


def _two_node_cluster(monkeypatch, gpus_per_node: int, second_node: dict | None = None):
    """Two raylets on loopback, each with 8 CPUs and `gpus_per_node` logical GPUs (placement only), the
    head with a dashboard (Ray's job and state APIs); `second_node` overrides the second raylet's
    arguments (e.g. a CPU-only node with a custom resource). Returns (cluster, second node, dashboard port)."""
    from ray.cluster_utils import Cluster

    import ray._private.ray_constants as ray_constants

    # every Ray process of this cluster (raylets, dashboard agents, job drivers, workers) on loopback:
    # without it Ray resolves 127.0.0.1 to the machine's outward address. Ray reads the variable when it
    # is imported, so this process (whose Ray a collected module may have imported already) also gets
    # the constant: a driver joining in-process would otherwise dial the outward address and wait forever
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    port = free_port()

    def node() -> dict:  # two raylets on one machine: their dashboard agents need their own ports
        return {
            "node_ip_address": "127.0.0.1",
            "num_cpus": 8,
            "num_gpus": gpus_per_node,
            "dashboard_agent_listen_port": free_port(),
            "metrics_export_port": free_port(),
        }

    cluster = Cluster(
        initialize_head=True,
        head_node_args={**node(), "include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": port},
    )
    try:
        second = cluster.add_node(**{**node(), **(second_node or {})})
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
            [
                sys.executable,
                "-m",
                "rlbridge",
                "submit",
                str(QUICKSTART),
                "--address",
                f"http://127.0.0.1:{port}",
                "--set",
                "backend=verl",
                "--set",
                "resources.nodes=2",
                "--set",
                "resources.gpus_per_node=0",
                "--set",
                "training.steps=2",
                "--set",
                "training.batch_size=2",
                "--set",
                "algorithm.group_size=4",
                "--set",
                "rollout.max_new_tokens=8",
                "--set",
                f"output_dir={out}",
            ],
            capture_output=True,
            text=True,
            timeout=1500,
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
    pytest.importorskip(
        "openrlhf", reason="runs in the OpenRLHF engine environment (rlbridge compat run --engine openrlhf)"
    )
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    # two nodes of 2 logical GPUs: OpenRLHF asks for 2 policy GPUs (one per node) and 2 vLLM engines
    cluster, second, port = _two_node_cluster(monkeypatch, gpus_per_node=2)
    try:
        out = tmp_path / "run"
        cfg = load_config(
            QUICKSTART,
            [
                "backend=openrlhf",
                "engine_env=current",
                "resources.nodes=2",
                "resources.gpus_per_node=0",
                f"resources.ray_address={cluster.address}",
                "training.steps=2",
                "training.batch_size=2",
                "algorithm.group_size=2",
                "rollout.max_new_tokens=8",
                "telemetry.progress=false",
                f"output_dir={out}",
            ],
        )
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


# --- rollout_workers.mode: ray: reward actors on the CPU-only node ----------------------------------
# reward factories at module level: the Ray actors import them by path (PYTHONPATH set below)


def node_reward():
    def reward(inputs):
        return [1.0 for _ in inputs]

    return reward


def hangs():
    def reward(inputs):
        while True:  # CPU-bound: only killing the actor stops it
            pass

    return reward


def exits():
    def reward(inputs):
        os._exit(3)

    return reward


def raises():
    def reward(inputs):
        raise ValueError("plugin bug on purpose")

    return reward


def starts_slowly(seconds: float):
    time.sleep(seconds)  # building it takes longer than a call's timeout_s: an actor's start is not a call

    def reward(inputs):
        return [0.0 for _ in inputs]

    return reward


def logs_calls(path: str, seconds: float = 0.3):
    def reward(inputs):
        start = time.time()
        time.sleep(seconds)
        with open(path, "a") as fh:
            fh.write(f"{start} {time.time()}\n")
        return [0.5 for _ in inputs]

    return reward


FRESH_PROCESS_ENV = "RLBRIDGE_TEST_FRESH_PROCESS"  # set in the process a test re-runs itself in


def _rerun_in_a_fresh_process(test_name: str, tmp_path: Path) -> bool:
    """Run this module's test `test_name` in an interpreter of its own; True once it passed there.

    After an in-process verl run of an earlier test (its driver inits and shuts down Ray in the pytest
    process), every actor that process creates later was cancelled before it started ("all references to
    the actor were removed"): in make test's verl cell, in the compat matrix's verl 0.9.1 cell and in
    `-k "test_two_step_run or ray_reward_pool"`. A test that starts Ray actors itself runs apart from them.
    False in that fresh process: the caller goes on with the test.
    """
    if os.environ.get(FRESH_PROCESS_ENV):
        return False
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            f"{__file__}::{test_name}",
            "-q",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(tmp_path / "t"),
        ],
        env={**os.environ, FRESH_PROCESS_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = tmp_path / "fresh-process.log"
    log.write_text(res.stdout + res.stderr)
    errors = [ln for ln in res.stdout.splitlines() if ln.startswith(("E ", "FAILED", "ERROR"))]
    assert res.returncode == 0 and "1 passed" in res.stdout, "\n".join(errors[-60:]) + f"\n(all of it: {log})"
    return True


def _spec(factory: str, **args) -> dict:
    return {"name": factory, "weight": 1.0, "args": args, "factory": f"{__name__}:{factory}"}


def _inputs(n: int):
    from rlbridge.contract.rewards import RewardInput

    return [RewardInput(prompt="p", completion=str(i), completion_ids=[i]) for i in range(n)]


@pytest.mark.engine  # starts Ray (the machine-wide engine lock); about 30 s
def test_ray_reward_pool_runs_on_the_cpu_only_node_with_the_process_pools_fault_semantics(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray", reason="runs in an engine environment with Ray (verl, OpenRLHF)")
    verl = pytest.importorskip("verl", reason="one Ray environment proves the pool: verl 0.9's")
    if tuple(int(x) for x in verl.__version__.split(".")[:2]) < (0, 9):
        pytest.skip("one Ray environment proves the pool: verl 0.9's")
    if _rerun_in_a_fresh_process(
        "test_ray_reward_pool_runs_on_the_cpu_only_node_with_the_process_pools_fault_semantics", tmp_path
    ):
        return
    from ray.util.state import list_actors, list_tasks

    from rlbridge.engine.workers import RewardScorer, Settings

    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(
            [str(Path(__file__).parents[1]), str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]
        ),
    )
    cluster, cpu_node, port = _two_node_cluster(
        monkeypatch, gpus_per_node=1, second_node={"num_cpus": 4, "num_gpus": 0, "resources": {"cpu_pool": 4}}
    )
    try:
        ray.init(address=cluster.address)
        settings = dict(
            mode="ray",
            ray_resource="cpu_pool",
            ray_num_cpus=1,
            batch_size=4,
            timeout_s=30.0,  # no call here comes near it but the hang below: a busy machine is not a fault
            on_error="zero",
            error_threshold=1.0,
        )
        with RewardScorer([_spec("node_reward")], Settings(num_workers=2, **settings)) as scorer:
            scored = scorer.score(_inputs(16))
            assert scored.totals == [1.0] * 16 and scorer.take_counts()["reward/errors"] == 0
            pool = scorer._pool
            assert {a["node_id"] for a in pool.where()} == {cpu_node.node_id}
            # read back from Ray: the actors and each of the 4 calls ran on the CPU-only node
            actors = [
                a
                for a in list_actors(address=f"http://127.0.0.1:{port}", limit=1000, raise_on_missing_output=False)
                if a.class_name == "RewardActor" and a.state == "ALIVE"
            ]
            assert len(actors) == 2 and {a.node_id for a in actors} == {cpu_node.node_id}, actors
            deadline, calls = time.time() + 60, []
            while time.time() < deadline and len(calls) < 4:  # task events reach the GCS a moment later
                calls = [
                    t
                    for t in list_tasks(
                        address=f"http://127.0.0.1:{port}",
                        limit=10000,
                        raise_on_missing_output=False,
                        filters=[("func_or_class_name", "=", "RewardActor.run")],
                    )
                    if t.state == "FINISHED"
                ]
                time.sleep(1)
            assert len(calls) == 4 and {t.node_id for t in calls} == {cpu_node.node_id}, calls

        # faults, as the process pool counts them: a hang is killed at timeout_s and its actor replaced,
        # a dying actor is a crash, an exception an error; the pool keeps serving after each
        # (a replacement's start-up is not part of its first call's timeout: every actor here takes longer
        # to start than timeout_s, as a busy machine's did, when every call after the hang timed out)
        specs = [_spec("starts_slowly", seconds=7.0)]
        specs += [_spec("hangs"), _spec("exits"), _spec("raises"), _spec("node_reward")]
        with RewardScorer(specs, Settings(num_workers=1, **{**settings, "timeout_s": 6.0})) as scorer:
            started = time.time()
            scored = scorer.score(_inputs(4))
            counts = scorer.take_counts()
            assert (counts["reward/timeouts"], counts["reward/crashes"], counts["reward/errors"]) == (4, 4, 4), counts
            assert scored.per_plugin["node_reward"] == [1.0] * 4 and scored.totals == [1.0] * 4
            assert scorer._pool.replaced == 2 and len(scorer._pool.where()) == 1  # the hung and the dead actor
            assert time.time() - started < 120
            assert scorer.score_plugin("node_reward", _inputs(3)) == [1.0] * 3

        # per-plugin concurrency: max_concurrency 1 over 2 actors means no two calls overlap
        log_path = tmp_path / "calls.txt"
        spec = _spec("logs_calls", path=str(log_path))
        with RewardScorer([spec], Settings(num_workers=2, max_concurrency=1, **settings)) as scorer:
            scorer.score(_inputs(16))
        spans = sorted(tuple(map(float, line.split())) for line in log_path.read_text().splitlines())
        assert len(spans) == 4 and all(a[1] <= b[0] + 0.01 for a, b in zip(spans, spans[1:])), spans
        log_path.unlink()
        with RewardScorer([spec], Settings(num_workers=2, **settings)) as scorer:  # without the cap: 2 at once
            scorer.score(_inputs(16))
        spans = sorted(tuple(map(float, line.split())) for line in log_path.read_text().splitlines())
        assert any(a[1] > b[0] for a, b in zip(spans, spans[1:])), spans
    finally:
        ray.shutdown()
        cluster.shutdown()  # only the raylets this test started


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: a verl run on two simulated nodes
def test_verl_scores_its_rewards_on_ray_actors_on_the_cpu_only_node(tmp_path, monkeypatch):
    verl = pytest.importorskip("verl", reason="runs in the verl engine environment (rlbridge compat run --engine verl)")
    if tuple(int(x) for x in verl.__version__.split(".")[:2]) < (0, 9):
        pytest.skip("one engine version proves the seam: verl 0.9 (vLLM rollout on CPU)")
    if _rerun_in_a_fresh_process("test_verl_scores_its_rewards_on_ray_actors_on_the_cpu_only_node", tmp_path):
        return
    from ray.util.state import list_actors, list_tasks

    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    # the head: the logical GPU verl trains on; the second node: CPUs and the rollout resource only
    cluster, cpu_node, port = _two_node_cluster(
        monkeypatch, gpus_per_node=1, second_node={"num_cpus": 4, "num_gpus": 0, "resources": {"rollout_cpu": 4}}
    )
    try:
        out = tmp_path / "run"
        share = Path(__file__).parents[2] / "examples" / "native_rewards" / "trl_reward.py"
        cfg = load_config(
            QUICKSTART,
            [
                "backend=verl",
                "engine_env=current",
                "resources.gpus_per_node=0",
                f"resources.ray_address={cluster.address}",
                "training.steps=2",
                "training.batch_size=2",
                "algorithm.group_size=4",
                "rollout.max_new_tokens=8",
                # a native reward goes to the pool (the built-in digit_match is scored in process)
                f"reward=[{{native: trl, function: '{share}:digit_share'}}]",
                "rollout_workers.mode=ray",
                "rollout_workers.num_workers=1",
                "telemetry.progress=false",
                f"output_dir={out}",
            ],
        )
        summary = train(cfg, progress=False)
        assert summary["status"] == "completed"
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2] and all("reward/mean" in r for r in rows), rows
        address = f"http://127.0.0.1:{port}"
        actors = [
            a
            for a in list_actors(address=address, limit=10000, raise_on_missing_output=False)
            if a.class_name == "RewardActor"
        ]
        assert actors and {a.node_id for a in actors} == {cpu_node.node_id}, actors
        deadline, calls = time.time() + 60, []
        while time.time() < deadline and not calls:  # task events reach the GCS a moment after the calls
            calls = list_tasks(
                address=address,
                limit=10000,
                raise_on_missing_output=False,
                filters=[("func_or_class_name", "=", "RewardActor.run")],
            )
            time.sleep(1)
        assert calls and {t.node_id for t in calls} == {cpu_node.node_id}, calls
    finally:
        cluster.shutdown()  # only the raylets this test started
