"""The config's `launcher:` section: where `rlbridge submit --to slurm|kuberay` runs the job (rlbridge.submit);
`rlbridge train` ignores it."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rlbridge.contract.strict_model import StrictModel


class SlurmLauncher(StrictModel):
    """`rlbridge submit CONFIG --to slurm`: one sbatch job over resources.nodes nodes (docs/scale.md)."""

    partition: str | None = None
    """sbatch --partition; None: the cluster's default partition."""
    account: str | None = None
    """sbatch --account to charge; None: the user's default account."""
    qos: str | None = None
    """sbatch --qos; None: the association's default QoS."""
    time: str | None = None
    """sbatch --time, Slurm's format (e.g. '04:00:00', '2-00:00:00'); None: the partition's limit."""
    container_image: str | None = None
    """Run Ray and the training inside this container through pyxis/enroot (srun --container-image,
    e.g. 'nvcr.io#nvidia/pytorch:25.01-py3'); it needs rlbridge and the engine installed. None: the
    nodes' own environment (this checkout's Python and engine environment, on a shared file system)."""
    container_mounts: list[str] = Field(default_factory=list)
    """srun --container-mounts entries (SRC:DST) with container_image; the run and checkpoint
    directories must be among them or below one."""
    sbatch_lines: list[str] = Field(default_factory=list)
    """Extra sbatch options, one per entry, written as '#SBATCH <entry>' (e.g. '--constraint=h100',
    '--mail-type=END')."""
    setup: list[str] = Field(default_factory=list)
    """Shell lines run at the start of the job on the first node, before Ray (e.g. 'module load cuda/12.4')."""
    max_requeues: int = Field(0, ge=0)
    """Times the job is requeued after a preemption or when its time limit nears, each requeue resuming
    from the newest complete checkpoint (needs checkpoint.interval); 0: never requeued."""
    requeue_signal_s: int = Field(120, ge=10)
    """With max_requeues: Slurm signals the job this many seconds before its time limit, and the job
    requeues itself then."""
    ray_port: int = Field(6379, ge=1024, le=65535)
    """Port of the Ray head (its GCS) on the first node, for Ray engines."""
    python: str | None = None
    """Python on the nodes that runs `rlbridge train` (and has rlbridge); None: the submitting one,
    for nodes that share its file system, or 'python' inside container_image."""


class KubeRayLauncher(StrictModel):
    """`rlbridge submit CONFIG --to kuberay`: a ray.io/v1 RayJob for the KubeRay operator (docs/scale.md)."""

    image: str | None = None
    """Container image of every Ray pod; it needs rlbridge and the engine installed (required)."""
    namespace: str = "default"
    """Kubernetes namespace of the RayJob and its ConfigMap."""
    ray_version: str | None = None
    """rayClusterSpec.rayVersion: the Ray version in image; None leaves it to the operator."""
    service_account: str | None = None
    """Service account of the Ray pods; None: the namespace's default."""
    head_cpus: int = Field(4, ge=1)
    """CPU cores of the head pod (it runs the training's driver and schedules no GPU work)."""
    head_memory: str = "16Gi"
    """Memory of the head pod, a Kubernetes quantity."""
    worker_memory: str = "64Gi"
    """Memory of each GPU worker pod (one per resources.nodes), a Kubernetes quantity."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """nodeSelector of the GPU worker pods (e.g. {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3})."""
    tolerations: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )
    """Tolerations of the GPU worker pods (Kubernetes Toleration objects); the default tolerates the
    usual nvidia.com/gpu taint."""
    shm_size: str = "16Gi"
    """Size of the memory-backed /dev/shm of every Ray pod (NCCL and vLLM need far more than a pod's 64 MB)."""
    checkpoint_claim: str | None = None
    """An existing PersistentVolumeClaim (ReadWriteMany when the pods may land on different nodes),
    mounted at checkpoint_mount in every pod: output_dir and checkpoint.dir go there, so a retry after
    a failure (backoff_limit) resumes from its checkpoints. None: no volume, and nothing survives a pod."""
    checkpoint_mount: str = "/rlbridge"
    """Where checkpoint_claim is mounted; the run's directory is <checkpoint_mount>/<run_name>."""
    cpu_workers: int = Field(0, ge=0)
    """Pods of a CPU-only worker group for rollout work (rollout_workers.mode: ray places its actors
    there through the custom resource rollout_workers.ray_resource); 0: no such group."""
    cpu_worker_cpus: int = Field(16, ge=1)
    """CPU cores of each CPU-only worker pod."""
    cpu_worker_memory: str = "32Gi"
    """Memory of each CPU-only worker pod, a Kubernetes quantity."""
    cpu_node_selector: dict[str, str] = Field(default_factory=dict)
    """nodeSelector of the CPU-only worker pods."""
    backoff_limit: int = Field(0, ge=0)
    """RayJob backoffLimit: new attempts (each on a new Ray cluster) after a failed one, resuming from
    the checkpoints on checkpoint_claim (needs it and checkpoint.interval); 0: none."""
    ttl_seconds_after_finished: int = Field(3600, ge=0)
    """Seconds the finished job's Ray cluster is kept for inspection before it is deleted."""
    active_deadline_seconds: int | None = Field(None, ge=1)
    """Wall-clock limit of the whole job in seconds; None: none."""
    kueue_queue: str | None = None
    """Kueue LocalQueue: the RayJob is created suspended with the label kueue.x-k8s.io/queue-name, and
    Kueue admits it when the queue's quota allows. None: no Kueue."""


class LauncherConfig(StrictModel):
    """Where `rlbridge submit --to slurm|kuberay` runs the job; `rlbridge train` ignores this section."""

    slurm: SlurmLauncher = Field(default_factory=SlurmLauncher)
    """Slurm batch job settings (--to slurm)."""
    kuberay: KubeRayLauncher = Field(default_factory=KubeRayLauncher)
    """KubeRay RayJob settings (--to kuberay)."""
