"""The training layout's knobs on verl (docs/scale.md): strategy, sharding, offload, tensor/pipeline/expert
parallel sizes, the hybrid-shard group, the CPU ranks and the rollout's replicas. Their capability
entries (joined to the table by knobs.py) and their translation live here, beside each other.

Every key was read in verl's packaged config (`verl/trainer/config/`: `_generated_ppo_trainer.yaml`,
`_generated_ppo_megatron_trainer.yaml`, `engine/fsdp.yaml`, `engine/megatron.yaml`) and in the engine code
that reads it, for 0.5.0, 0.6.x, 0.7.x, 0.9.0 and 0.9.1; where a key exists only in some versions, the
constant below says from when, and the translation follows the target version:

* strategy: fsdp is FSDP2 (`actor/ref/critic.strategy: fsdp2`; verl's FSDP1 'fsdp' hard-codes
  sync_module_states=True, which torch refuses without a GPU, so one FSDP everywhere). megatron is the
  Hydra defaults group `model_engine=megatron` (0.7.1+), which composes Megatron-Core actor, reference and
  critic configs (`*.megatron.*`); before 0.7.1 Megatron is a config of its own (`--config-name
  ppo_megatron_trainer`). verl has no DeepSpeed strategy.
* sharding, FSDP: `fsdp_config.reshard_after_forward` true is FULL_SHARD (parameters), false SHARD_GRAD_OP
  (gradients) (verl/workers/engine/fsdp/utils.py get_sharding_strategy; FSDP2 fully_shard's
  reshard_after_forward); `fsdp_size: 1` makes every rank a replica (HSDP with shard groups of one: none).
  Megatron: `use_distributed_optimizer` shards the optimizer states, `use_megatron_fsdp` (0.9.0+)
  everything.
* shard_group_size: `fsdp_size` (verl/workers/engine/fsdp/utils.py create_device_mesh: a (ddp, fsdp) mesh).
* offload: `fsdp_config.param_offload` / `optimizer_offload` (the engine moves them to CPU between uses:
  FSDPEngine.to), `megatron.param_offload` / `optimizer_offload` (and `grad_offload` in 0.7.1-0.9.0; 0.9.1's
  param_offload also releases the gradient buffers). verl's FSDP engines keep every forward-only model, the
  reference, in CPU memory whatever its config says (FSDP2 CPUOffloadPolicy / FSDP1 CPUOffload for
  forward-only models: engine/fsdp/transformer_impl.py, 0.5.0 fsdp_workers.py), so offload.reference false
  is approximated there.
* tensor/pipeline/expert parallel sizes and, under megatron, sequence_parallel_size:
  `megatron.tensor_model_parallel_size`, `pipeline_model_parallel_size`, `expert_model_parallel_size`,
  `context_parallel_size`, for actor, reference and critic (the reference's follow the actor's through
  oc.select in verl's own config; rlbridge writes them all).
* rollout.data_parallel_size: verl starts world_size / (rollout tensor x data x pipeline parallel size)
  replicas on the rollout's devices (verl/workers/rollout/llm_server.py LLMServerManager), so only that
  number can be honoured.
* resources.cpu_ranks_per_node: `trainer.n_gpus_per_node` on CPU, each a logical GPU of the run's private
  Ray cluster and one gloo rank of verl's FSDP (patches/v09_cpu.py's CPU platform).
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import Capability, approximated, gpus_per_node, honoured
from rlbridge.contract.config import RunConfig
from rlbridge.contract.knob_checks import Check, refuse_when

FSDP2 = "fsdp2"
MEGATRON = "megatron"
MODEL_ENGINE_SINCE = Version("0.7.1")  # the model_engine defaults group (megatron); before: its own config name
CRITIC_FSDP_SINCE = Version("0.9.0")  # critic.fsdp.*; before: critic.model.fsdp_config.*
REF_FSDP_SIZE_SINCE = Version("0.6.0")  # ref.fsdp_config.fsdp_size; 0.5.0's reference shares the actor's mesh
GRAD_OFFLOAD_UNTIL = Version("0.9.1")  # megatron.grad_offload in 0.7.1-0.9.0 (0.9.1: param_offload releases grads)
MEGATRON_FSDP_SINCE = Version("0.9.0")  # megatron.use_megatron_fsdp
CPU_RANKS_SINCE = Version("0.9.0")  # the CPU platform (patches/v09_cpu.py) several gloo ranks were measured with

A, REF, CRITIC = "actor_rollout_ref.actor.", "actor_rollout_ref.ref.", "critic."
CRITIC_FSDP = ("critic.fsdp.", "critic.model.fsdp_config.")  # from 0.9.0, before
# Where the layout's plan departs from verl's own defaults whatever the config says, and why (rlbridge import, plan
# --explain)
DIFFERENCES = {
    f"{A}strategy": "training.strategy auto and fsdp are FSDP2 everywhere: verl's default FSDP1 ('fsdp') hard-codes "
    "sync_module_states=True, which torch refuses without a GPU, and one FSDP on CPU and GPUs runs the same code",
    f"{REF}strategy": "the reference follows the actor's strategy (FSDP2)",
    "critic.strategy": "the critic follows the actor's strategy (FSDP2)",
}
NO_DEEPSPEED = (
    "verl trains with FSDP or Megatron-Core (actor.strategy fsdp, fsdp2, megatron; verl/workers/engine registers "
    "no DeepSpeed engine); use training.strategy: fsdp or megatron, or backend: openrlhf for DeepSpeed ZeRO"
)
MEGATRON_NEEDS_GPUS = (
    "verl's Megatron engine runs on CUDA (or Ascend) devices only: Megatron-Core builds its model-parallel groups "
    "on NCCL and its kernels on TransformerEngine, and verl registers it for those devices "
    "(verl/workers/engine/megatron/transformer_impl.py); on CPU use training.strategy: fsdp"
)
OFFLINE = (
    "rlbridge runs verl's sft_trainer as one process with verl's default FSDP layout (FSDP1 on GPUs, FSDP2 on "
    "CPU: adapters/verl/stages.py); remove it, or use backend: trl"
)


def _version(config: RunConfig) -> Version:
    from rlbridge_adapters.verl.backend import VerlBackend

    return VerlBackend.target_version(config)


def strategy(config: RunConfig) -> str:
    """verl's actor strategy for the config: fsdp2, or megatron."""
    return MEGATRON if config.training.strategy == MEGATRON else FSDP2


def _async_split(config: RunConfig) -> bool:
    return config.placement.policy == "split" and config.rollout.max_staleness >= 1


def training_devices(config: RunConfig) -> int:
    """verl's training processes: every GPU of every node (with an async trainer, those its rollout pool
    leaves), or on CPU resources.cpu_ranks_per_node logical GPUs per node."""
    gpus, nodes = gpus_per_node(config), config.resources.nodes
    if gpus == 0:
        return config.resources.cpu_ranks_per_node * nodes
    if _async_split(config):
        return max(gpus - int(config.placement.args.get("rollout_gpus", 1)) // nodes, 1) * nodes
    return gpus * nodes


def data_parallel_size(config: RunConfig) -> int:
    """The data-parallel ranks the mini batch is split over (verl's dp: devices / (tp x pp x cp or Ulysses))."""
    return max(training_devices(config) // config.training.model_parallel_size, 1)


def rollout_devices(config: RunConfig) -> int:
    """The devices verl's rollout replicas are started on: the async trainers' rollout pool, else every
    training device (the hybrid engine)."""
    if _async_split(config):
        return int(config.placement.args.get("rollout_gpus", 1))
    return training_devices(config)


def uses_reference(config: RunConfig) -> bool:
    """Whether verl builds a reference model (a KL term in the loss or the reward)."""
    return config.algorithm.kl_coef > 0


def reference_offloaded(config: RunConfig) -> bool:
    offload = config.training.offload
    return offload.parameters if offload.reference is None else offload.reference


def _critic_fsdp(version: Version) -> str:
    return CRITIC_FSDP[0] if version >= CRITIC_FSDP_SINCE else CRITIC_FSDP[1]


# --- the capability checks ----------------------------------------------------------------------


def _check_strategy(config: RunConfig) -> str | None:
    chosen = config.training.strategy
    if chosen == "deepspeed":
        return NO_DEEPSPEED
    if config.is_offline and chosen != "auto" and (chosen == MEGATRON or gpus_per_node(config) > 0):
        # sft_trainer keeps verl's engine.strategy on GPUs (FSDP1 'fsdp'), FSDP2 on CPU (stages.py)
        return OFFLINE.replace("remove it", "leave training.strategy: auto")
    if chosen != MEGATRON:
        return None
    version = _version(config)
    if version < MODEL_ENGINE_SINCE:
        return (
            f"verl {version} composes Megatron from a trainer config of its own (--config-name "
            "ppo_megatron_trainer), which rlbridge's plan does not compose; verl 0.7.1+ selects it with "
            "model_engine=megatron: use engine_version 0.9.1"
        )
    if gpus_per_node(config) == 0:
        return MEGATRON_NEEDS_GPUS
    if config.training.deterministic:
        return (
            "verl's full_determinism is an FSDP engine setting (fsdp_config.full_determinism); its Megatron "
            "engine has none: set training.deterministic: false, or training.strategy: fsdp"
        )
    return None


def _check_sharding(config: RunConfig) -> str | None:
    sharding = config.training.sharding
    if sharding == "auto":
        return None
    if config.is_offline:
        return OFFLINE
    if strategy(config) == MEGATRON:
        if sharding == "gradients":
            return (
                "verl's Megatron engine shards the optimizer states (use_distributed_optimizer: optimizer) or "
                "everything (use_megatron_fsdp: parameters); it has no gradient-only sharding: use optimizer or "
                "parameters"
            )
        if sharding == "parameters" and _version(config) < MEGATRON_FSDP_SINCE:
            return f"verl {_version(config)} has no megatron.use_megatron_fsdp (0.9.0+); use engine_version 0.9.1"
        return None
    if sharding == "optimizer":
        return (
            "verl's FSDP shards gradients with the optimizer states (reshard_after_forward false: SHARD_GRAD_OP) "
            "or parameters too (FULL_SHARD); it has no optimizer-only sharding (ZeRO-1): use gradients, or "
            "training.strategy: megatron (its distributed optimizer)"
        )
    group = config.training.shard_group_size
    if sharding == "none" and group not in (None, 1):
        return (
            f"sharding none is verl's fsdp_size 1 (every rank a whole replica), which training.shard_group_size "
            f"{group} contradicts; remove one of them"
        )
    return None


def _check_shard_group_size(config: RunConfig) -> str | None:
    if config.training.shard_group_size is None:
        return None
    if config.is_offline:
        return OFFLINE
    if strategy(config) == MEGATRON:
        return (
            "verl's Megatron engine has no hybrid-shard group (fsdp_size is its FSDP engine's); its data-parallel "
            "groups follow from the tensor, pipeline and context parallel sizes: remove training.shard_group_size"
        )
    return None


def _check_offload(config: RunConfig) -> str | None:
    offload = config.training.offload
    if not (offload.parameters or offload.optimizer or offload.reference):
        return None
    if config.is_offline:
        return OFFLINE
    if gpus_per_node(config) == 0:
        return (
            "on CPU (resources.gpus_per_node 0) the training state already lives in CPU memory: offload has "
            "nothing to move; remove training.offload"
        )
    return None


def _needs_megatron(knob: str, what: str) -> Check:
    return refuse_when(
        lambda c: getattr(c.training, knob.split(".")[1]) != 1 and strategy(c) != MEGATRON,
        f"verl's FSDP engine splits no layers across devices (data parallelism and Ulysses sequence "
        f"parallelism only); {what} for training is Megatron's: set training.strategy: megatron",
    )


def _check_replicas(config: RunConfig) -> str | None:
    wanted = config.rollout.data_parallel_size
    if wanted is None:
        return None
    tp = config.rollout.tensor_parallel_size
    devices = rollout_devices(config)
    replicas = max(devices // tp, 1)
    if wanted == replicas:
        return None
    return (
        f"verl starts one rollout replica per rollout.tensor_parallel_size ({tp}) of the rollout's {devices} "
        f"device(s) (LLMServerManager: world_size / (tensor x data x pipeline parallel size)), so "
        f"rollout.data_parallel_size can only be {replicas} here; leave it unset"
    )


def _check_cpu_ranks(config: RunConfig) -> str | None:
    ranks = config.resources.cpu_ranks_per_node
    if ranks == 1 or gpus_per_node(config) > 0:
        return None  # with GPUs the core refuses any other value (check_devices)
    if config.is_offline:
        return OFFLINE
    version = _version(config)
    if version < CPU_RANKS_SINCE:
        return (
            f"rlbridge's CPU enablement of verl {version} (patches/v05_cpu.py) runs one rank; several gloo ranks "
            "run on verl 0.9's CPU platform: use engine_version 0.9.1, or resources.cpu_ranks_per_node: 1"
        )
    return None


def _reference_kept_on_cpu(config: RunConfig) -> bool:
    """When verl's FSDP reference ignores offload.reference false: a reference model on GPUs, FSDP."""
    return (
        uses_reference(config)
        and gpus_per_node(config) > 0
        and strategy(config) == FSDP2
        and not reference_offloaded(config)
    )


def capabilities() -> list[Capability]:
    fsdp_keys = ("reshard_after_forward", "fsdp_size", "param_offload", "optimizer_offload")
    critic_fsdp = {key: tuple(f"{prefix}{key}" for prefix in CRITIC_FSDP) for key in fsdp_keys}
    sizes = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size")

    def megatron(key: str, roles: tuple[str, ...] = (A, REF, CRITIC)) -> tuple[str, ...]:
        return tuple(f"{role}megatron.{key}" for role in roles)

    return [
        honoured(
            "training.strategy",
            (f"{A}strategy", f"{REF}strategy", "critic.strategy", "model_engine"),
            _check_strategy,
            note="auto and fsdp: FSDP2 for actor, reference and critic (strategy fsdp2); megatron: "
            "model_engine=megatron (verl 0.7.1+, GPUs): Megatron-Core actor, reference and critic",
        ),
        honoured(
            "training.sharding",
            (
                f"{A}fsdp_config.reshard_after_forward",
                f"{REF}fsdp_config.reshard_after_forward",
                *critic_fsdp["reshard_after_forward"],
                f"{A}fsdp_config.fsdp_size",
                f"{REF}fsdp_config.fsdp_size",
                *critic_fsdp["fsdp_size"],
                *megatron("use_distributed_optimizer", (A, CRITIC)),
                *megatron("use_megatron_fsdp", (A, CRITIC)),
            ),
            _check_sharding,
            note="fsdp: parameters = reshard_after_forward true (FULL_SHARD), gradients = false (SHARD_GRAD_OP), "
            "none = fsdp_size 1 (every rank a replica); megatron: optimizer = use_distributed_optimizer, none = "
            "without it, parameters = use_megatron_fsdp (0.9.0+); auto: verl's default (FULL_SHARD; the "
            "distributed optimizer)",
        ),
        honoured(
            "training.shard_group_size",
            (f"{A}fsdp_config.fsdp_size", f"{REF}fsdp_config.fsdp_size", *critic_fsdp["fsdp_size"]),
            _check_shard_group_size,
            note="fsdp_size: a (replica, shard) device mesh, HSDP (the reference's from 0.6.0; 0.5.0's uses the "
            "actor's mesh)",
        ),
        approximated(
            "training.offload",
            (
                f"{A}fsdp_config.param_offload",
                f"{A}fsdp_config.optimizer_offload",
                f"{REF}fsdp_config.param_offload",
                *critic_fsdp["param_offload"],
                *critic_fsdp["optimizer_offload"],
                *megatron("param_offload"),
                *megatron("optimizer_offload", (A, CRITIC)),
                *megatron("grad_offload", (A, CRITIC)),
            ),
            "verl's FSDP engine keeps the reference model in CPU memory whatever offload.reference says "
            "(CPUOffloadPolicy for its forward-only models): offload.reference false is not honoured",
            _check_offload,
            when=_reference_kept_on_cpu,
        ),
        honoured(
            "training.tensor_parallel_size",
            megatron(sizes[0]),
            _needs_megatron("training.tensor_parallel_size", "tensor parallelism"),
            note="megatron only",
        ),
        honoured(
            "training.pipeline_parallel_size",
            megatron(sizes[1]),
            _needs_megatron("training.pipeline_parallel_size", "pipeline parallelism"),
            note="megatron only",
        ),
        honoured(
            "training.expert_parallel_size",
            megatron(sizes[2]),
            _needs_megatron("training.expert_parallel_size", "expert parallelism"),
            note="megatron only",
        ),
        honoured(
            "rollout.data_parallel_size",
            ("trainer.n_gpus_per_node", "actor_rollout_ref.rollout.tensor_model_parallel_size"),
            _check_replicas,
            note="verl always runs rollout devices / rollout.tensor_parallel_size replicas: that value only",
        ),
        honoured(
            "resources.cpu_ranks_per_node",
            ("trainer.n_gpus_per_node", "launch.ray.logical_gpus"),
            _check_cpu_ranks,
            note="on CPU: trainer.n_gpus_per_node logical GPUs of the run's private Ray cluster, one FSDP rank "
            "(gloo) each (verl 0.9+)",
        ),
    ]


# --- the translation ---------------------------------------------------------------------------


def translate(config: RunConfig, o: dict[str, Any], version: Version) -> None:
    """Add the layout's keys to the override dict `o` (in place)."""
    if strategy(config) == MEGATRON:
        _megatron(config, o, version)
    else:
        _fsdp(config, o, version)


def _fsdp(config: RunConfig, o: dict[str, Any], version: Version) -> None:
    tr = config.training
    critic = config.algorithm.name == "ppo"
    critic_fsdp = _critic_fsdp(version)
    o[f"{A}strategy"] = FSDP2
    o[f"{REF}strategy"] = FSDP2
    if critic:
        o["critic.strategy"] = FSDP2
    if tr.sharding in ("parameters", "gradients"):
        reshard = tr.sharding == "parameters"
        o[f"{A}fsdp_config.reshard_after_forward"] = reshard
        o[f"{REF}fsdp_config.reshard_after_forward"] = reshard
        if critic:
            o[f"{critic_fsdp}reshard_after_forward"] = reshard
    group = 1 if tr.sharding == "none" else tr.shard_group_size
    if group is not None:
        o[f"{A}fsdp_config.fsdp_size"] = group
        if version >= REF_FSDP_SIZE_SINCE:
            o[f"{REF}fsdp_config.fsdp_size"] = group
        if critic:
            o[f"{critic_fsdp}fsdp_size"] = group
    o[f"{A}fsdp_config.param_offload"] = tr.offload.parameters
    o[f"{A}fsdp_config.optimizer_offload"] = tr.offload.optimizer
    o[f"{REF}fsdp_config.param_offload"] = reference_offloaded(config)
    if critic:
        o[f"{critic_fsdp}param_offload"] = tr.offload.parameters
        o[f"{critic_fsdp}optimizer_offload"] = tr.offload.optimizer


def _megatron(config: RunConfig, o: dict[str, Any], version: Version) -> None:
    tr = config.training
    roles = (A, REF, CRITIC) if config.algorithm.name == "ppo" else (A, REF)
    trained = tuple(r for r in roles if r != REF)
    o["model_engine"] = MEGATRON
    for role in roles:  # what the megatron group's own configs say, written as the fsdp plan writes fsdp2
        o[f"{role}strategy"] = MEGATRON
        o[f"{role}megatron.tensor_model_parallel_size"] = tr.tensor_parallel_size
        o[f"{role}megatron.pipeline_model_parallel_size"] = tr.pipeline_parallel_size
        o[f"{role}megatron.expert_model_parallel_size"] = tr.expert_parallel_size
        o[f"{role}megatron.context_parallel_size"] = tr.sequence_parallel_size
    if tr.sharding in ("none", "optimizer"):
        for role in trained:
            o[f"{role}megatron.use_distributed_optimizer"] = tr.sharding == "optimizer"
    elif tr.sharding == "parameters":
        for role in trained:
            o[f"{role}megatron.use_megatron_fsdp"] = True
    for role in trained:
        o[f"{role}megatron.param_offload"] = tr.offload.parameters
        o[f"{role}megatron.optimizer_offload"] = tr.offload.optimizer
        if version < GRAD_OFFLOAD_UNTIL:
            o[f"{role}megatron.grad_offload"] = tr.offload.parameters
    o[f"{REF}megatron.param_offload"] = reference_offloaded(config)
