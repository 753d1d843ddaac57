"""Placement read-back against real Ray and real engines (issue 16), on CPU with Ray logical GPUs.

- Ray alone (any engine environment, seconds): actors of a private cluster report their node and the
  logical GPUs Ray assigned them, and the driver's snapshot merges that with Ray's actor table.
- verl 0.9.1 `colocate` and OpenRLHF 0.11.2 `split` and `colocate`: two training steps each; the run's
  summary carries the measured placement per role and its comparison with the policy's layout.
  OpenRLHF cannot colocate on CPU (its colocated weight sync is CUDA IPC): the read-back must say so.
"""

import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path

import pytest

from rlbridge.run.loading import load_config
from rlbridge.testing import QUICKSTART

REPO = Path(__file__).resolve().parents[2]


def _installed(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


SMALL = [
    "engine_env=current",
    "resources.gpus_per_node=0",
    "training.steps=2",
    "training.batch_size=2",
    "algorithm.group_size=2",
    "rollout.max_new_tokens=8",
    "telemetry.progress=false",
]


def test_ray_actors_report_their_node_and_logical_gpus(tmp_path):
    ray = pytest.importorskip("ray", reason="runs in an engine environment with Ray")
    from rlbridge.engine.ray_cluster import ray_cluster
    from rlbridge.engine.events import EVENTS_ENV

    events = tmp_path / "events.jsonl"
    # every worker boots like a verl run's processes (rlbridge.engine.ray_engine): that starts the reporter
    env = {
        EVENTS_ENV: str(events),
        "RLBRIDGE_BOOT": "rlbridge_adapters.verl.boot:install",
        "PYTHONPATH": os.pathsep.join([str(REPO / "rlbridge" / "engine" / "boot"), *sys.path]),
    }

    @ray.remote(num_gpus=1, num_cpus=0)
    class Trainer:
        def gpus(self):
            return ray.get_gpu_ids()

    @ray.remote(num_cpus=0)
    class Helper:
        def ping(self):
            return 1

    with ray_cluster(2, env, logical_gpus=3, run_dir=tmp_path):
        trainers = [Trainer.remote() for _ in range(2)]
        helper = Helper.remote()
        assigned = sorted(str(g) for t in trainers for g in ray.get(t.gpus.remote()))
        ray.get(helper.ping.remote())
        deadline = time.time() + 30
        while time.time() < deadline and (not events.exists() or events.read_text().count("placement_actor") < 3):
            time.sleep(0.5)
    placed = json.loads((tmp_path / "placement.json").read_text())
    assert len(placed["nodes"]) == 1 and placed["nodes"][0]["gpus"] == 3
    by_class = {}
    for actor in placed["actors"]:
        by_class.setdefault(actor["class_name"], []).append(actor)
        assert actor["node_id"] == placed["nodes"][0]["node_id"]
    assert sorted(g for a in by_class["Trainer"] for g in a["gpus"]) == assigned and len(set(assigned)) == 2
    assert by_class["Helper"][0]["gpus"] == []


def _run(backend, tmp_path, *overrides):
    from rlbridge.run.runner import train

    cfg = load_config(QUICKSTART, [f"backend={backend}", *SMALL, f"output_dir={tmp_path}/run", *overrides])
    summary = train(cfg, progress=False)
    assert summary["status"] == "completed"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["placement"] == summary["placement"]
    return summary["placement"]


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: CI's engine cells keep one run per engine seam
@pytest.mark.skipif(_installed("verl") != "0.9.1", reason="needs verl 0.9.1 installed here")
def test_verl_colocate_places_actor_rollout_and_reference_on_one_logical_gpu(tmp_path):
    # no KL: verl 0.9.1's reference model does not initialise on CPU ("Cannot access accelerator device
    # when none is available", measured); the fused WorkerDict would hold it on the same device
    placement = _run("verl", tmp_path, "placement.policy=colocate")
    assert placement["mismatches"] == [], placement
    devices = {role: placement["roles"][role]["devices"] for role in ("actor", "rollout", "reference")}
    assert devices["actor"] == devices["rollout"] == devices["reference"] == ["node0:gpu0"], placement


@pytest.mark.engine
@pytest.mark.matrix_only
@pytest.mark.skipif(_installed("openrlhf") != "0.11.2", reason="needs OpenRLHF 0.11.2 installed here")
def test_openrlhf_split_gives_the_rollout_logical_gpus_of_its_own(tmp_path):
    placement = _run("openrlhf", tmp_path, "placement.policy=split", "placement.args={rollout_gpus: 2}")
    assert placement["mismatches"] == [], placement
    actor, rollout = placement["roles"]["actor"]["devices"], placement["roles"]["rollout"]["devices"]
    assert len(actor) == 1 and len(rollout) == 2 and not set(actor) & set(rollout), placement
    assert placement["roles"]["rollout"]["actors"] == ["RolloutRayActor", "RolloutRayActor"]


@pytest.mark.engine
@pytest.mark.matrix_only
@pytest.mark.skipif(_installed("openrlhf") != "0.11.2", reason="needs OpenRLHF 0.11.2 installed here")
def test_openrlhf_colocate_on_cpu_is_reported_as_not_realised(tmp_path, capsys):
    placement = _run("openrlhf", tmp_path, "placement.policy=colocate")
    (mismatch,) = placement["mismatches"]
    assert mismatch.startswith("rollout: on ['node0:gpu") and "not on the actor's devices" in mismatch, placement
    assert "placement 'colocate' not realised as asked: rollout" in capsys.readouterr().err
