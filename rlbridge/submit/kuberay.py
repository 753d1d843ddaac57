"""`rlbridge submit CONFIG --to kuberay`: the run as a `ray.io/v1` RayJob for the KubeRay operator.

The config is planned here first (every check `rlbridge plan` makes), then written as two manifests:
a ConfigMap holding the resolved config, and a RayJob whose `rayClusterSpec` has a head group (the
training's driver: `rlbridge train` runs there), a GPU worker group of `resources.nodes` pods with
`resources.gpus_per_node` GPUs each, and optionally a CPU-only worker group for rollout work
(`launcher.kuberay.cpu_workers`; its pods advertise the custom Ray resource that
`rollout_workers.mode: ray` places reward actors by). Every pod gets a memory-backed /dev/shm; with
`launcher.kuberay.checkpoint_claim` every pod mounts that volume and the run's output and checkpoints
live on it, so an attempt after a failure (`backoffLimit`) resumes from the newest complete checkpoint.

`--dry-run` prints the manifests; otherwise they are applied with the `kubernetes` Python client
(`pip install 'rlbridge[kuberay]'`, which reads ~/.kube/config or the in-cluster account) and the
job is followed until it ends. Manifests are checked against the RayJob CRD schema of the pinned KubeRay
release (rlbridge/submit/schemas/, KUBERAY_VERSION) with `jsonschema` before they are printed or applied.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

KUBERAY_VERSION = "v1.7.0"
CRD_FILE = Path(__file__).parent / "schemas" / f"kuberay-{KUBERAY_VERSION}.ray.io_rayjobs.yaml"
CONFIG_MOUNT = "/etc/rlbridge"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TERMINAL_DEPLOYMENT = ("Complete", "Failed")


def resource_name(run_name: str) -> str:
    """A DNS-1123 label from the run's name (Kubernetes object names), at most 50 characters so that
    the operator's suffixes (-raycluster-xxxxx, -head-...) stay within 63."""
    name = re.sub(r"[^a-z0-9-]+", "-", run_name.lower()).strip("-")
    return ("rlb-" + name)[:50].rstrip("-")


def manifests(config, python: str = "python") -> list[dict[str, Any]]:
    """The ConfigMap and the RayJob that run `config` (a RunConfig that `rlbridge.submit.job.plan_job`
    planned). `python`: the interpreter in the image that has rlbridge."""
    from rlbridge.errors import ConfigError
    from rlbridge.run.loading import dump_config

    kr = config.launcher.kuberay
    res = config.resources
    if not kr.image:
        raise ConfigError(
            "launcher.kuberay.image is not set: name the container image of the Ray pods "
            "(it needs rlbridge and the engine installed)"
        )
    if kr.backoff_limit and not kr.checkpoint_claim:
        raise ConfigError(
            "launcher.kuberay.backoff_limit retries the job on a new Ray cluster, which resumes only from "
            "checkpoints on a volume: set launcher.kuberay.checkpoint_claim, or backoff_limit: 0"
        )
    if kr.backoff_limit and not config.checkpoint.interval:
        raise ConfigError(
            "launcher.kuberay.backoff_limit: a retry resumes from the newest checkpoint, and checkpoint.interval "
            "is 0 (none is saved): set checkpoint.interval, or backoff_limit: 0"
        )
    if kr.cpu_workers and config.rollout_workers.mode != "ray":
        raise ConfigError(
            "launcher.kuberay.cpu_workers adds CPU-only Ray pods for rollout work, which only "
            "rollout_workers.mode: ray uses: set it, or cpu_workers: 0"
        )
    name = resource_name(config.run_name or "run")
    job = config.model_copy(deep=True)
    if kr.checkpoint_claim:  # the run's directory on the volume, so that every attempt finds the last one's checkpoints
        job.output_dir = f"{kr.checkpoint_mount.rstrip('/')}/{job.run_name}"
        job.checkpoint.dir = f"{job.output_dir}/checkpoints"
        if kr.backoff_limit and job.checkpoint.resume is False:
            job.checkpoint.resume = "auto"  # the first attempt starts, each retry resumes
    else:
        job.output_dir = f"/tmp/rlbridge/{job.run_name}"
        job.checkpoint.dir = f"{job.output_dir}/checkpoints"
    job.telemetry.progress = False

    labels = {"app.kubernetes.io/managed-by": "rlbridge", "app.kubernetes.io/name": name}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config", "namespace": kr.namespace, "labels": labels},
        "data": {"config.yaml": dump_config(job)},
    }

    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": kr.shm_size}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if kr.checkpoint_claim:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": kr.checkpoint_claim}})
        mounts.append({"name": "checkpoints", "mountPath": kr.checkpoint_mount})

    def pod(
        container: str, resources: dict, extra_volumes=(), extra_mounts=(), node_selector=None, tolerations=None
    ) -> dict:
        spec: dict[str, Any] = {  # copies: each pod's lists are its own (and the YAML has no aliases)
            "containers": [
                {
                    "name": container,
                    "image": kr.image,
                    "resources": resources,
                    "volumeMounts": copy.deepcopy([*mounts, *extra_mounts]),
                }
            ],
            "volumes": copy.deepcopy([*volumes, *extra_volumes]),
        }
        if kr.service_account:
            spec["serviceAccountName"] = kr.service_account
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        if tolerations:
            spec["tolerations"] = [dict(t) for t in tolerations]
        return {"metadata": {"labels": dict(labels)}, "spec": spec}

    def amounts(cpus: int, memory: str, gpus: int = 0) -> dict:
        amount: dict[str, Any] = {"cpu": str(cpus), "memory": memory}
        if gpus:
            amount["nvidia.com/gpu"] = str(gpus)
        return {
            "requests": dict(amount),
            "limits": dict(amount),
        }  # requests == limits: Guaranteed QoS, never evicted first

    gpus = int(res.gpus_per_node)
    worker_cpus = res.cpus_per_node or max(8, 8 * gpus)
    head = {
        # the head schedules no training work: the engines' GPU workers go to the GPU group
        "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},
        "template": pod(
            "ray-head",
            amounts(kr.head_cpus, kr.head_memory),
            extra_volumes=[{"name": "rlbridge-config", "configMap": {"name": f"{name}-config"}}],
            extra_mounts=[{"name": "rlbridge-config", "mountPath": CONFIG_MOUNT, "readOnly": True}],
        ),
    }
    groups = [
        {
            "groupName": "gpu" if gpus else "workers",
            "replicas": res.nodes,
            "minReplicas": res.nodes,
            "maxReplicas": res.nodes,
            "rayStartParams": {"num-gpus": str(gpus), "num-cpus": str(worker_cpus)},
            "template": pod(
                "ray-worker",
                amounts(worker_cpus, kr.worker_memory, gpus),
                node_selector=kr.node_selector,
                tolerations=kr.tolerations if gpus else None,
            ),
        }
    ]
    if kr.cpu_workers:
        resource = config.rollout_workers.ray_resource
        groups.append(
            {
                "groupName": "cpu-rollout",
                "replicas": kr.cpu_workers,
                "minReplicas": kr.cpu_workers,
                "maxReplicas": kr.cpu_workers,
                # KubeRay passes this to `ray start --resources`: a JSON object inside a quoted string
                "rayStartParams": {
                    "num-gpus": "0",
                    "num-cpus": str(kr.cpu_worker_cpus),
                    "resources": json.dumps(json.dumps({resource: kr.cpu_worker_cpus})),
                },
                "template": pod(
                    "ray-worker", amounts(kr.cpu_worker_cpus, kr.cpu_worker_memory), node_selector=kr.cpu_node_selector
                ),
            }
        )
    cluster: dict[str, Any] = {"headGroupSpec": head, "workerGroupSpecs": groups}
    if kr.ray_version:
        cluster["rayVersion"] = kr.ray_version

    entrypoint = f"{python} -m rlbridge train {CONFIG_MOUNT}/config.yaml --no-progress"
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.run.runner import uses_ray

    if res.nodes > 1 and not uses_ray(get_plugin_manager().backend(config.backend)):
        # an engine without Ray that starts its own processes on every node (TRL: one accelerate launch per pod): one
        # Ray actor per worker pod starts them, each with its rank and rank 0's address (rlbridge.engine.nodes); the
        # pods meet in the run directory, so it must be on the shared volume
        if not kr.checkpoint_claim:
            raise ConfigError(
                f"resources.nodes ({res.nodes}): backend '{config.backend}' starts its processes on every pod, which "
                "find each other in the run directory: set launcher.kuberay.checkpoint_claim (a volume every pod "
                "mounts)"
            )
        entrypoint = (
            f"{python} -m rlbridge.engine.nodes --ray {CONFIG_MOUNT}/config.yaml {job.output_dir} {res.nodes} {gpus} "
            f"{python}"
        )
    spec: dict[str, Any] = {
        "entrypoint": entrypoint,
        "rayClusterSpec": cluster,
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": kr.ttl_seconds_after_finished,
        "backoffLimit": kr.backoff_limit,
    }
    if kr.active_deadline_seconds:
        spec["activeDeadlineSeconds"] = kr.active_deadline_seconds
    job_labels = dict(labels)
    if kr.kueue_queue:
        job_labels[KUEUE_QUEUE_LABEL] = kr.kueue_queue
        spec["suspend"] = True  # Kueue un-suspends it once the queue admits it
    ray_job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": kr.namespace, "labels": job_labels},
        "spec": spec,
    }
    return [config_map, ray_job]


# --- validation against the pinned CRD ------------------------------------------------------------


def _strict(schema: Any) -> Any:
    """The CRD's schema with unknown fields refused: the API server prunes them silently (a misspelt
    field would be a no-op there), so here an object with declared properties admits no others."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


_validator = None


def validate(ray_job: dict[str, Any]) -> list[str]:
    """Every way `ray_job` breaks the RayJob CRD schema of KUBERAY_VERSION (unknown fields included),
    as 'path: message'; [] when it conforms."""
    global _validator
    import yaml

    try:
        import jsonschema
    except ImportError as exc:
        from rlbridge.errors import RLBridgeError

        raise RLBridgeError("checking RayJob manifests needs jsonschema: pip install 'rlbridge[kuberay]'") from exc
    if _validator is None:
        crd = yaml.load(CRD_FILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        _validator = jsonschema.Draft202012Validator(_strict(v1["schema"]["openAPIV3Schema"]))
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in _validator.iter_errors(ray_job)
    ]
    name = ray_job.get("metadata", {}).get("name", "")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 label")
    return errors


def render(objects: list[dict[str, Any]]) -> str:
    import yaml

    return "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects)


# --- submission -----------------------------------------------------------------------------------


def submit(config, dry_run: bool = False, python: str | None = None, echo=print) -> int:
    """Plan `config` here, write its manifests to <output_dir>/submit/rayjob.yaml, print them
    (dry_run) or apply them and follow the RayJob until it ends; returns the exit code."""
    from rlbridge.errors import ConfigError
    from rlbridge.submit.job import plan_job

    _, job = plan_job(config, "kuberay")
    objects = manifests(job, python or "python")
    errors = validate(objects[1])
    if errors:
        raise ConfigError(f"the RayJob does not conform to KubeRay {KUBERAY_VERSION}'s CRD: " + "; ".join(errors[:5]))
    record = Path(job.output_dir) / "submit"
    record.mkdir(parents=True, exist_ok=True)
    (record / "rayjob.yaml").write_text(render(objects))
    if dry_run:
        sys.stdout.write(render(objects))
        return 0
    return _apply_and_follow(objects, record, echo)


def _apply_and_follow(objects: list[dict[str, Any]], record: Path, echo) -> int:
    """Create the ConfigMap and the RayJob, then poll the RayJob's status until its deployment is
    Complete or Failed; the status is written to <record>/job.json on every change. Not exercised
    here (no Kubernetes API server on these machines; docs/scale.md)."""
    from rlbridge.errors import RLBridgeError

    try:
        from kubernetes import client, config as kube_config
    except ImportError as exc:
        raise RLBridgeError(
            "--to kuberay applies the RayJob with the kubernetes client: pip install 'rlbridge[kuberay]' "
            "(or use --dry-run and kubectl apply -f)"
        ) from exc
    try:
        kube_config.load_kube_config()
    except Exception:
        kube_config.load_incluster_config()
    config_map, ray_job = objects
    namespace, name = ray_job["metadata"]["namespace"], ray_job["metadata"]["name"]
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    try:
        core.create_namespaced_config_map(namespace, config_map)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(config_map["metadata"]["name"], namespace, config_map)
    custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", ray_job)
    echo(f"RayJob {namespace}/{name} created; following its status")
    last: tuple = ()
    while True:
        status = custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name).get("status") or {}
        now = (
            status.get("jobDeploymentStatus"),
            status.get("jobStatus"),
            status.get("failed"),
            status.get("succeeded"),
        )
        if now != last:
            last = now
            (record / "job.json").write_text(
                json.dumps({"name": name, "namespace": namespace, **status}, indent=2, default=str)
            )
            echo(f"RayJob {name}: deployment {now[0]}, job {now[1]}")
        if status.get("jobDeploymentStatus") in TERMINAL_DEPLOYMENT:
            return 0 if status.get("jobStatus") == "SUCCEEDED" else 1
        time.sleep(5)
