"""Placement policies and their read-back (issue 16): the layouts the built-in policies give, what each
engine does with a policy it cannot express, and the comparison of a run's measured placement
(placement.json, as rlbridge.engine.ray_placement writes it) with the layout. Plan-level and pure: the
engine runs that produce real placement.json files are tests/engines/test_placement_engines.py."""

import json

import pytest

from rlbridge.errors import RLBridgeError
from rlbridge.run.loading import load_config
from rlbridge.run.placement_readback import compare, read_back
from rlbridge.run.runner import prepare
from rlbridge.testing import QUICKSTART

ORL = {"PolicyModelActor": ("actor",), "ReferenceModelActor": ("reference",), "RolloutRayActor": ("rollout",)}
NODES = [{"node_id": "n-head"}, {"node_id": "n-two"}]


def _prepared(*overrides):
    return prepare(load_config(QUICKSTART, list(overrides)))


def _actor(cls, node, *gpus):
    return {
        "actor_id": f"{cls}-{node}-{gpus}",
        "class_name": cls,
        "node_id": node,
        "state": "ALIVE",
        "gpus": list(gpus),
    }


def test_the_plan_carries_the_policy_layout_and_split_on_cpu_counts_logical_gpus():
    plan = _prepared(
        "backend=openrlhf", "resources.gpus_per_node=0", "placement.policy=split", "placement.args={rollout_gpus: 2}"
    ).plan
    assert plan.layout == {"actor": 1, "rollout": 2, "reference": 1, "shared": False}
    args = plan.native["args"]
    assert (
        args[args.index("--vllm.num_engines") + 1] == "2" and args[args.index("--actor.num_gpus_per_node") + 1] == "1"
    )
    assert plan.native["ray"]["logical_gpus"] == 3  # one training GPU and two rollout GPUs of the private cluster
    colocate = _prepared("backend=openrlhf", "resources.gpus_per_node=0").plan
    assert colocate.layout == {"actor": 1, "rollout": 1, "reference": 1, "shared": True}


def test_engines_that_cannot_split_say_why():
    # verl and TRL split only in their asynchronous loops (tests/test_async.py plans them)
    with pytest.raises(
        RLBridgeError, match="hybrid engine only.*rollout.max_staleness >= 1 with placement.policy: split"
    ):
        _prepared(
            "backend=verl", "resources.gpus_per_node=0", "placement.policy=split", "placement.args={rollout_gpus: 1}"
        )
    with pytest.raises(RLBridgeError, match="placement.policy=split"):
        _prepared(
            "backend=trl", "resources.gpus_per_node=0", "placement.policy=split", "placement.args={rollout_gpus: 1}"
        )


def test_split_measured_as_asked_has_no_mismatch():
    placed = {
        "nodes": NODES[:1],
        "actors": [
            _actor("PolicyModelActor", "n-head", "0"),
            _actor("RolloutRayActor", "n-head", "1"),
            _actor("AgentLoopThing", "n-head"),
        ],
    }
    check = compare({"actor": 1, "rollout": 1, "reference": 1, "shared": False}, placed, ORL)
    assert check["mismatches"] == []
    assert check["roles"]["actor"]["devices"] == ["node0:gpu0"] and check["roles"]["rollout"]["devices"] == [
        "node0:gpu1"
    ]


def test_colocate_with_the_rollout_on_its_own_gpu_is_a_mismatch():
    placed = {
        "nodes": NODES[:1],
        "actors": [_actor("PolicyModelActor", "n-head", "0"), _actor("RolloutRayActor", "n-head", "1")],
    }
    (mismatch,) = compare({"actor": 1, "rollout": 1, "reference": 1, "shared": True}, placed, ORL)["mismatches"]
    assert mismatch.startswith("rollout: on ['node0:gpu1'], not on the actor's devices ['node0:gpu0']")


def test_fewer_rollout_engines_than_devices_are_the_layout_and_no_mismatch():
    plan = _prepared(
        "backend=openrlhf",
        "resources.gpus_per_node=0",
        "placement.policy=split",
        "placement.args={rollout_gpus: 3}",
        "rollout.data_parallel_size=2",
    ).plan
    assert plan.layout == {"actor": 1, "rollout": 2, "reference": 1, "shared": False}
    placed = {
        "nodes": NODES[:1],
        "actors": [
            _actor("PolicyModelActor", "n-head", "0", "1"),
            _actor("RolloutRayActor", "n-head", "0"),
            _actor("ReferenceModelActor", "n-head", "0", "1"),
        ],
    }
    colocated = {"actor": 2, "rollout": 1, "reference": 2, "shared": True}  # one engine on two shared devices
    assert compare(colocated, placed, ORL)["mismatches"] == []
    placed["actors"][1] = _actor("RolloutRayActor", "n-head", "2")
    (mismatch,) = compare(colocated, placed, ORL)["mismatches"]
    assert mismatch.startswith("rollout: on ['node0:gpu2'], not on the actor's devices")


def test_split_with_a_shared_gpu_a_wrong_count_and_a_missing_node_are_mismatches():
    placed = {
        "nodes": NODES,
        "actors": [_actor("PolicyModelActor", "n-head", "0"), _actor("RolloutRayActor", "n-head", "0")],
    }
    found = compare({"actor": 2, "rollout": 1, "reference": 2, "shared": False}, placed, ORL, nodes=2)["mismatches"]
    assert any(m.startswith("actor: the policy gives it 2 device(s)") for m in found)
    assert any(m.startswith("rollout: shares ['node0:gpu0'] with the actor") for m in found)
    assert "actor: runs on 1 of the 2 nodes (resources.nodes)" in found


def test_a_missing_role_and_an_unreported_actor_are_mismatches():
    placed = {"nodes": NODES[:1], "actors": [{**_actor("PolicyModelActor", "n-head"), "gpus": None}]}
    found = compare({"actor": 1, "rollout": 1, "shared": True}, placed, ORL)["mismatches"]
    assert "rollout: no Ray actor of the run holds the rollout role" in found
    assert any(m.startswith("no device report from ['PolicyModelActor']") for m in found)


def test_read_back_stores_the_check_next_to_what_was_read(tmp_path):
    placed = {
        "nodes": NODES,
        "actors": [
            _actor("PolicyModelActor", "n-head", "0"),
            _actor("PolicyModelActor", "n-two", "0"),
            _actor("RolloutRayActor", "n-head", "1"),
            _actor("RolloutRayActor", "n-two", "1"),
        ],
    }
    (tmp_path / "placement.json").write_text(json.dumps(placed))
    check = read_back(tmp_path, {"actor": 2, "rollout": 2, "shared": False}, ORL, nodes=2)
    assert check["mismatches"] == [] and check["roles"]["actor"]["nodes"] == ["node0", "node1"]
    assert json.loads((tmp_path / "placement.json").read_text())["check"] == check
    assert read_back(tmp_path, {}, {}) is None  # a backend without an actor table is not checked


def test_rlbridge_plan_shows_the_layout():
    from typer.testing import CliRunner

    from rlbridge.cli import app

    res = CliRunner().invoke(
        app,
        [
            "plan",
            str(QUICKSTART),
            "--set",
            "backend=openrlhf",
            "--set",
            "resources.gpus_per_node=4",
            "--set",
            "placement.policy=split",
            "--set",
            "placement.args={rollout_gpus: 1}",
            "--set",
            "training.batch_size=6",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "# placement: split: actor 3, rollout 1, reference 3 device(s), separate" in res.output
