"""`rlbridge submit --to kuberay`: the RayJob manifests, checked against the RayJob CRD schema of the
pinned KubeRay release (rlbridge/submit/schemas/). No Kubernetes API server runs here: applying and
following a job is not exercised (docs/scale.md)."""

import hashlib
import subprocess
import sys

import pytest
import yaml

from rlbridge.errors import ConfigError
from rlbridge.submit import kuberay
from rlbridge.run.loading import load_config
from rlbridge.testing import QUICKSTART

pytest.importorskip("jsonschema")

TWO_GPU_NODES = [
    "backend=verl",
    "resources.nodes=2",
    "resources.gpus_per_node=4",
    "resources.cpus_per_node=24",
    "training.batch_size=8",
    "checkpoint.interval=5",
    "rollout_workers.mode=ray",
    "rollout_workers.ray_resource=cpu_pool",
    "launcher.kuberay.image=registry.example/rlbridge-verl:0.9.1",
    "launcher.kuberay.namespace=team-rl",
    "launcher.kuberay.node_selector={nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}",
    "launcher.kuberay.shm_size=32Gi",
    "launcher.kuberay.checkpoint_claim=rl-checkpoints",
    "launcher.kuberay.cpu_workers=3",
    "launcher.kuberay.cpu_worker_cpus=12",
    "launcher.kuberay.backoff_limit=2",
    "launcher.kuberay.active_deadline_seconds=7200",
    "launcher.kuberay.ttl_seconds_after_finished=600",
    "launcher.kuberay.kueue_queue=team-rl-queue",
]


def _job(overrides):
    from rlbridge.submit.job import plan_job

    _, job = plan_job(load_config(QUICKSTART, overrides), "kuberay")
    return kuberay.manifests(job)


def test_the_vendored_crd_is_kuberays_file_at_the_pinned_release():
    note = (kuberay.CRD_FILE.parent / "README.md").read_text()
    assert kuberay.KUBERAY_VERSION in kuberay.CRD_FILE.name and f"`{kuberay.KUBERAY_VERSION}`" in note
    assert hashlib.sha256(kuberay.CRD_FILE.read_bytes()).hexdigest() in note


def test_a_two_node_gpu_job_with_a_cpu_worker_group_conforms_to_the_crd():
    config_map, ray_job = _job(TWO_GPU_NODES)
    assert kuberay.validate(ray_job) == []
    spec = ray_job["spec"]
    assert ray_job["apiVersion"] == "ray.io/v1" and ray_job["metadata"]["namespace"] == "team-rl"
    assert spec["entrypoint"] == "python -m rlbridge train /etc/rlbridge/config.yaml --no-progress"
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (2, 7200, 600)
    assert spec["suspend"] is True and ray_job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-rl-queue"
    head = spec["rayClusterSpec"]["headGroupSpec"]
    gpu, cpu = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert (gpu["replicas"], gpu["minReplicas"], gpu["maxReplicas"]) == (2, 2, 2)
    worker = gpu["template"]["spec"]
    limits = worker["containers"][0]["resources"]
    assert limits["limits"]["nvidia.com/gpu"] == limits["requests"]["nvidia.com/gpu"] == "4"
    assert limits["limits"]["cpu"] == "24" and gpu["rayStartParams"] == {"num-gpus": "4", "num-cpus": "24"}
    assert worker["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert worker["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    for group in (head, gpu, cpu):  # every pod: memory-backed /dev/shm and the checkpoint volume
        pod = group["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
        assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "rl-checkpoints"}
        assert {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]} >= {"/dev/shm", "/rlbridge"}
    assert (
        cpu["replicas"] == 3 and "nvidia.com/gpu" not in cpu["template"]["spec"]["containers"][0]["resources"]["limits"]
    )
    # KubeRay hands this string to `ray start --resources`: a quoted JSON object with the pool's resource
    assert yaml.safe_load(yaml.safe_load(cpu["rayStartParams"]["resources"])) == {"cpu_pool": 12}
    # the job's config: output and checkpoints on the volume, resumed by every retry
    job = yaml.safe_load(config_map["data"]["config.yaml"])
    assert (
        job["output_dir"] == "/rlbridge/quickstart" and job["checkpoint"]["dir"] == "/rlbridge/quickstart/checkpoints"
    )
    assert job["checkpoint"]["resume"] == "auto" and job["resources"]["ray_address"] == "auto"
    assert {"name": "rlbridge-config", "configMap": {"name": config_map["metadata"]["name"]}} in head["template"][
        "spec"
    ]["volumes"]


def test_the_schema_check_catches_a_misspelt_field_and_a_wrong_type():
    _, ray_job = _job(TWO_GPU_NODES)
    ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["tolerations"][0]["efect"] = (
        "NoSchedule"
    )
    ray_job["spec"]["backoffLimit"] = "2"
    errors = kuberay.validate(ray_job)
    assert any("backoffLimit" in e and "integer" in e for e in errors), errors
    assert any("tolerations.0" in e and "'efect'" in e for e in errors), errors


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["launcher.kuberay.image=null"], "launcher.kuberay.image"),
        (["launcher.kuberay.checkpoint_claim=null"], "launcher.kuberay.checkpoint_claim"),
        (["checkpoint.interval=0"], "checkpoint.interval"),
        (["rollout_workers.mode=process"], "rollout_workers.mode"),
        (["resources.gpus_per_node=auto"], "resources.gpus_per_node"),
    ],
)
def test_what_a_rayjob_cannot_honour_is_an_error_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        _job([*TWO_GPU_NODES, *overrides])


def test_dry_run_prints_the_manifests(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlbridge",
            "submit",
            str(QUICKSTART),
            "--to",
            "kuberay",
            "--dry-run",
            *(a for o in [*TWO_GPU_NODES, f"output_dir={tmp_path}/run"] for a in ("--set", o)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    objects = list(yaml.safe_load_all(res.stdout))
    assert [o["kind"] for o in objects] == ["ConfigMap", "RayJob"]
    assert kuberay.validate(objects[1]) == []
    assert (tmp_path / "run" / "submit" / "rayjob.yaml").read_text() == res.stdout


def test_ray_reward_actors_are_refused_on_an_engine_without_ray():
    from rlbridge.run.runner import prepare

    with pytest.raises(ConfigError, match=r"rollout_workers\.mode: ray .* backend 'trl' runs without Ray"):
        prepare(load_config(QUICKSTART, ["rollout_workers.mode=ray"]))
