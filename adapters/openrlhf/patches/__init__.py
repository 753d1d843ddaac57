"""Version-gated patches the OpenRLHF adapter applies in every OpenRLHF process (see ../boot.py).

OpenRLHF 0.11 on CPU (research: ../shared openrlhf.md §2.3): Ray actors that expect CUDA devices,
NCCL-only weight sync to vLLM, flash-attn's CUDA extension, and vLLM-CPU's prepacked weights.
Every patch waits for its module through a post-import hook.
"""

from __future__ import annotations

import functools
import sys
import types

from rlbridge.engine.vllm_cpu import CpuDeviceIndex
from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.patches import Patch, PatchKind, Target, no_cuda, on_cpu
from rlbridge.engine.kit import unpacked_linear_patch, wrap_once
from rlbridge_adapters.openrlhf.patches.determinism import PATCHES as DETERMINISM_PATCHES

RANGE = ">=0.11.0,<=0.11.2"
# the CPU enablement below, run end to end on 0.9.10, 0.10.4 and 0.11.2 (compat_matrix, issue 30); 0.9.10's
# sources of some targets differ (second fingerprints) in ways the patches do not touch
CPU_RANGE = ">=0.9.10,<=0.11.2"


# --- flash-attn without its CUDA extension ------------------------------------------------------


def _flash_attn_stubs() -> None:
    # flash_attn/flash_attn_interface.py imports the CUDA extension at module level; OpenRLHF only
    # needs flash_attn.bert_padding (pure torch) on CPU.
    if "flash_attn_2_cuda" not in sys.modules:
        sys.modules["flash_attn_2_cuda"] = types.ModuleType("flash_attn_2_cuda")
    # models/utils.py tries flash-attn's Triton cross-entropy first; on CPU it crashes inside Triton
    # instead of raising ImportError. A None entry makes that import raise ImportError.
    sys.modules["flash_attn.ops.triton.cross_entropy"] = None


FLASH_ATTN = Patch(
    name="openrlhf-cpu-flash-attn-stubs",
    engine="openrlhf",
    versions=CPU_RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="ModuleNotFoundError: No module named 'flash_attn_2_cuda' (openrlhf/models/ring_attn_utils.py:3 -> "
    "flash_attn/flash_attn_interface.py:15); then TypeError in Triton from models/utils.py:178 cross_entropy_loss",
    why="flash-attn built without CUDA has no extension module; OpenRLHF needs only its pure-torch padding helpers "
    "and has a pure-torch log-prob path when the Triton kernel is not importable.",
    probe=no_cuda,
    apply=_flash_attn_stubs,
    when=on_cpu,
    targets=(
        Target(
            "openrlhf.models.ring_attn_utils", "", ("42fed7f0d1a3", "fae284ce9bf1")
        ),  # 0.9.10: also flash_attn.utils.distributed (pure torch)
        Target("openrlhf.models.utils", "log_probs_from_logits", ("b34c15051b1a",)),
    ),
    check=lambda: _import_fails("openrlhf.models.ring_attn_utils"),
)


# --- CUDA device calls in the Ray actors ----------------------------------------------------------


def _cpu_cuda_calls() -> None:
    def patch(torch):
        cuda = torch.cuda
        if getattr(cuda, "_rlbridge_cpu", False) or cuda.is_available():
            return
        cuda.current_device = lambda: CpuDeviceIndex("cpu")
        for name in ("set_device", "synchronize", "empty_cache", "ipc_collect", "reset_peak_memory_stats"):
            setattr(cuda, name, lambda *a, **k: None)
        cuda.current_stream = lambda *a, **k: None
        cuda._rlbridge_cpu = True

    when_imported("torch", patch)

    def replay_buffer(module):
        cls = module.NaiveReplayBuffer
        original = cls.__init__

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            import torch

            self.target_device = torch.device("cpu")

        cls.__init__ = __init__

    when_imported("openrlhf.trainer.ppo_utils.replay_buffer", replay_buffer)


CUDA_CALLS = Patch(
    name="openrlhf-cpu-device-calls",
    engine="openrlhf",
    versions=CPU_RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="AttributeError: module 'torch._C' has no attribute '_cuda_setDevice' (utils/deepspeed/deepspeed.py:97, "
    "LOCAL_RANK set by trainer/ray/launcher.py:36); AssertionError: Torch not compiled with CUDA enabled "
    "(deepspeed.py:614 data.to(torch.cuda.current_device()), replay_buffer.py:40 target_device cuda:N)",
    why="Without CUDA, torch.cuda.current_device() answers the CPU device (formatted as index 0 where code builds "
    "'cuda:{index}'), the device-management calls are no-ops, and the replay buffer keeps its batches on the CPU.",
    probe=no_cuda,
    apply=_cpu_cuda_calls,
    when=on_cpu,
    targets=(
        Target("openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.setup_distributed", ("952beee6aae8",)),
        Target(
            "openrlhf.trainer.ppo_utils.replay_buffer", "NaiveReplayBuffer.__init__", ("fd72a232b559", "66c1a62c1710")
        ),
    ),
)


# --- weight sync to vLLM without NCCL -------------------------------------------------------------


class _StoreBroadcast:
    """The part of vLLM's PyNcclCommunicator OpenRLHF uses (broadcast from rank 0), over vLLM's
    TCPStore-backed StatelessProcessGroup instead of NCCL."""

    def __init__(self, host: str, port: int, rank: int, world_size: int) -> None:
        from vllm.distributed.utils import StatelessProcessGroup

        self.group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size)

    def broadcast(self, tensor, src: int = 0, stream=None):
        if self.group.rank == src:
            self.group.broadcast_obj(tensor.detach().cpu(), src=src)
        else:
            tensor.copy_(self.group.broadcast_obj(None, src=src))
        return tensor


def _store_process_group(master_address, master_port, rank, world_size, device=None):
    return _StoreBroadcast(master_address, master_port, rank, world_size)


def _update_weight(self, name, dtype, shape, empty_cache=False):
    """OpenRLHF's WorkerWrap.update_weight for a CPU vLLM engine: receive the actor's tensor in the
    actor's dtype, then load it in the engine's dtype (float32 on CPU, see FLOAT32_VLLM)."""
    import torch

    weight = torch.empty(shape, dtype=dtype)
    self._model_update_group.broadcast(weight, src=0)
    self.model_runner.model.load_weights(weights=[(name, weight.to(self.model_config.dtype))])


def _store_weight_sync() -> None:
    def distributed_util(module):
        module.stateless_init_process_group = _store_process_group

    def ppo_actor(module):  # imported the name at module level
        module.stateless_init_process_group = _store_process_group

    def worker_wrap(module):
        module.WorkerWrap.update_weight = _update_weight

    when_imported("openrlhf.utils.distributed_util", distributed_util)
    when_imported("openrlhf.trainer.ray.ppo_actor", ppo_actor)
    when_imported("openrlhf.trainer.ray.vllm_worker_wrap", worker_wrap)


STORE_WEIGHT_SYNC = Patch(
    name="openrlhf-cpu-weight-sync",
    engine="openrlhf",
    versions=CPU_RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="vLLM's PyNcclCommunicator needs NCCL (utils/distributed_util.py:21-27; ppo_actor.py:147 and :436; "
    "vllm_worker_wrap.py:40 torch.empty(..., device='cuda')); --vllm.sync_with_ray with gloo fails in "
    "ray/util/collective torch_gloo_collective_group.py:107 (DeepSpeed owns the default process group)",
    why="Broadcast each parameter from the actor to the vLLM workers over vLLM's own TCPStore group, and load it "
    "into the engine in the engine's dtype.",
    probe=no_cuda,
    apply=_store_weight_sync,
    when=on_cpu,
    targets=(
        Target("openrlhf.utils.distributed_util", "stateless_init_process_group", ("d5ae345ae591",)),
        Target("openrlhf.trainer.ray.vllm_worker_wrap", "WorkerWrap.update_weight", ("c34db2ff0b87",)),
    ),
)


# --- vLLM engines in float32 ----------------------------------------------------------------------


def _float32_engines() -> None:
    def patch(module):
        args_cls = module.vllm.AsyncEngineArgs

        def make(original):
            @functools.wraps(original)
            def __init__(self, *args, **kwargs):
                kwargs["dtype"] = "float32"
                original(self, *args, **kwargs)

            return __init__

        wrap_once(args_cls, "__init__", make)

    when_imported("openrlhf.trainer.ray.vllm_engine", patch)


FLOAT32_VLLM = Patch(
    name="openrlhf-cpu-float32-vllm",
    engine="openrlhf",
    versions=CPU_RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="vLLM worker dies with SIGILL (exit code -4) at the first generation: trainer/ray/vllm_engine.py:273 "
    "hard-codes dtype='bfloat16', and vLLM-CPU's bfloat16 kernels use AMX tiles, which this sandboxed CPU refuses",
    why="Run the CPU vLLM engines in float32; the weight sync casts the actor's bf16 tensors on load.",
    probe=no_cuda,
    apply=_float32_engines,
    when=on_cpu,
    targets=(
        Target("openrlhf.trainer.ray.vllm_engine", "create_vllm_engines", ("977c9ca7be1c", "f7023bd1ad7b")),
    ),  # 0.9.10: LLMRayActor
)


# --- vLLM-CPU prepacked weights -------------------------------------------------------------------

UNPACKED_LINEAR = unpacked_linear_patch(
    name="openrlhf-vllm-cpu-unpacked-linear",
    fixes="AttributeError: 'Parameter' object has no attribute 'weight_loader' "
    "(vllm/model_executor/layers/linear.py:1332) "
    "when OpenRLHF loads synced weights into vLLM-CPU, which prepacked them and dropped layer.weight",
    why="OpenRLHF loads weights without re-running process_weights_after_loading; plain F.linear on layer.weight "
    "sees every update.",
    when=on_cpu,
)


def _import_fails(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return True
    return False


# --- LoRA: vLLM gets the merged weights under the base model's names --------------------------------


def _vllm_name(name: str) -> str:
    """A peft parameter name as the base model (and vLLM) spells it."""
    return name.replace("base_model.model.", "", 1).replace(".base_layer.", ".")


def merged_lora_broadcast(original):
    """ActorPPOTrainer.broadcast_to_vllm for a peft actor: the merged weights under the base model's names."""

    @functools.wraps(original)
    def broadcast_to_vllm(self):
        model = self.actor.model.module
        if not hasattr(model, "merge_adapter"):  # not a peft model
            return original(self)
        named_parameters = model.named_parameters

        def base_named_parameters(*args, **kwargs):
            for name, param in named_parameters(*args, **kwargs):
                if "lora_" not in name:
                    yield _vllm_name(name), param

        model.merge_adapter()  # W += scale * B @ A in place, undone below (what TRL does for its vLLM sync)
        model.named_parameters = base_named_parameters
        try:
            return original(self)
        finally:
            del model.named_parameters
            model.unmerge_adapter()

    return broadcast_to_vllm


def _merged_lora_broadcast() -> None:
    def patch(module):
        wrap_once(module.ActorPPOTrainer, "broadcast_to_vllm", merged_lora_broadcast)

    when_imported("openrlhf.trainer.ray.ppo_actor", patch)


def _lora(native: dict) -> bool:
    args = list(native.get("args") or [])
    for flag in ("--ds.lora.rank", "--lora_rank"):
        if flag in args:
            value = args[args.index(flag) + 1]
            return str(value).isdigit() and int(value) > 0
    return False


MERGED_LORA_SYNC = Patch(
    name="openrlhf-lora-merged-weight-sync",
    engine="openrlhf",
    versions=RANGE,
    kind=PatchKind.UPSTREAM_BUG,
    fixes="ValueError: There is no module or parameter named 'base_model' in Qwen2ForCausalLM "
    "(vllm/model_executor/models/utils.py:412): with --ds.lora.rank, ActorPPOTrainer.broadcast_to_vllm "
    "(trainer/ray/ppo_actor.py:409) sends the peft model's parameters as they are named, "
    "base_model.model.<...>.base_layer.weight and the lora_A/lora_B tensors, which vLLM's load_weights rejects",
    why="Merge the adapter into the base weights (peft merge_adapter), send the base parameters under the base "
    "model's names and no adapter tensors, then unmerge: vLLM generates with the trained adapter, as TRL's "
    "vLLM sync does with peft.",
    probe=lambda: True,
    apply=_merged_lora_broadcast,
    when=lambda native: on_cpu(native) and _lora(native),  # measured on CPU; ZeRO-3 partitioned weights not handled
    targets=(Target("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer.broadcast_to_vllm", ("c4ad779d8da5",)),),
)


PATCHES = [
    FLASH_ATTN,
    CUDA_CALLS,
    STORE_WEIGHT_SYNC,
    FLOAT32_VLLM,
    UNPACKED_LINEAR,
    MERGED_LORA_SYNC,
    *DETERMINISM_PATCHES,
]
