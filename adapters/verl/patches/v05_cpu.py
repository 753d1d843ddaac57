"""verl 0.5.x on CPU: the HF rollout and FSDP2 run on gloo once these are patched at run time.

Measured facts, file:line of verl 0.5.0, in ../shared research (verl.md §2c). Each patch acts through
a post-import hook, so it touches verl only when verl imports the module concerned.
"""

from __future__ import annotations

import functools

from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.patches import Patch, PatchKind, Target, no_cuda, on_cpu
from rlbridge.engine.kit import is_wrapped, mark_wrapped, wrap_once

RANGE = ">=0.5.0,<0.6"


# --- gloo instead of NCCL -----------------------------------------------------------------------


def _gloo_backend() -> None:
    def patch(module):
        original = module.get_nccl_backend

        @functools.wraps(original)
        def get_nccl_backend() -> str:
            import torch

            return original() if torch.cuda.is_available() else "gloo"

        module.get_nccl_backend = get_nccl_backend

    def rebind(workers):  # fsdp_workers imported the name before we could patch it
        from verl.utils import device

        workers.get_nccl_backend = device.get_nccl_backend

    when_imported("verl.utils.device", patch)
    when_imported("verl.workers.fsdp_workers", rebind)


GLOO_BACKEND = Patch(
    name="verl-cpu-gloo-backend",
    engine="verl",
    versions=RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="RuntimeError: No available nccl backend found on device type cpu (verl/utils/device.py:86)",
    why="On a machine without CUDA the collective backend is gloo; get_nccl_backend() returns it instead of raising.",
    probe=no_cuda,
    apply=_gloo_backend,
    when=on_cpu,
    targets=(Target("verl.utils.device", "get_nccl_backend", ("4b0158a636fa",)),),
    check=lambda: _raises(lambda: __import__("verl.utils.device", fromlist=["x"]).get_nccl_backend()),
)


# --- cpu:gloo,cpu:gloo --------------------------------------------------------------------------


def _dedupe_backend_string() -> None:
    when_imported("torch.distributed", _dedupe_in)


def _dedupe_in(dist) -> None:
    def make(original):
        @functools.wraps(original)
        def init_process_group(*args, **kwargs):
            backend = kwargs.get("backend")
            if isinstance(backend, str) and "," in backend:
                seen, parts = set(), []
                for part in backend.split(","):
                    device = part.split(":")[0]
                    if device not in seen:
                        seen.add(device)
                        parts.append(part)
                kwargs["backend"] = ",".join(parts)
            return original(*args, **kwargs)

        return init_process_group

    wrap_once(dist, "init_process_group", make)


DEDUPE_BACKEND = Patch(
    name="verl-cpu-duplicate-gloo",
    engine="verl",
    versions=">=0.5.0,<=0.9.1",
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="ValueError: Duplicate device type cpu in backend string: cpu:gloo,cpu:gloo "
    "(verl 0.5 fsdp_workers.py:121; verl 0.9 utils/distributed.py:89)",
    why="verl builds f'cpu:gloo,{device}:{backend}', which names cpu twice on CPU; keep the first entry per device.",
    probe=no_cuda,
    apply=_dedupe_backend_string,
    when=on_cpu,
    targets=(
        Target("verl.workers.fsdp_workers", "ActorRolloutRefWorker.__init__", ("1926ca04aa84",), versions="<0.6"),
        # 0.9.0 passes get_nccl_backend() alone (nothing to dedupe), 0.9.1 the duplicated string
        Target(
            "verl.utils.distributed",
            "initialize_global_process_group",
            ("44d73356020a", "0b8a6c6c5487"),
            versions=">=0.9",
        ),
    ),
    check=lambda: _duplicate_backend_rejected(),
)


# --- flash attention is hard-coded --------------------------------------------------------------


def _sdpa_instead_of_flash() -> None:
    def patch(configuration_auto):
        auto = configuration_auto.AutoConfig
        original = auto.from_pretrained.__func__
        if is_wrapped(original):
            return

        def from_pretrained(cls, *args, **kwargs):
            if kwargs.get("attn_implementation") == "flash_attention_2":
                try:
                    import flash_attn  # noqa: F401
                except ImportError:
                    kwargs["attn_implementation"] = "sdpa"
            return original(cls, *args, **kwargs)

        auto.from_pretrained = classmethod(mark_wrapped(from_pretrained))

    # the module that defines AutoConfig, not the transformers package: touching its lazy attributes
    # while the package itself is being imported can re-enter a partial import
    when_imported("transformers.models.auto.configuration_auto", patch)


SDPA = Patch(
    name="verl-sdpa-without-flash-attn",
    engine="verl",
    versions=RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="ImportError: FlashAttention2 ... not installed: fsdp_workers.py:254 (actor/ref) and :1017 (critic) "
    "hard-code attn_implementation='flash_attention_2' with no config knob in 0.5",
    why="Where flash-attn is not installed (any CPU machine), load the model with sdpa attention instead.",
    probe=lambda: __import__("importlib").util.find_spec("flash_attn") is None,
    apply=_sdpa_instead_of_flash,
    when=on_cpu,
    targets=(Target("verl.workers.fsdp_workers", "ActorRolloutRefWorker._build_model_optimizer", ("525fa192e22f",)),),
    check=lambda: __import__("importlib").util.find_spec("flash_attn") is None,
)


# --- torch.cpu lacks the CUDA device-module functions verl calls ---------------------------------


def _cpu_device_module() -> None:
    when_imported("torch", _fill_torch_cpu)


def _fill_torch_cpu(torch) -> None:
    import psutil

    cpu = torch.cpu

    def rss_bytes(*_a, **_k) -> int:
        return psutil.Process().memory_info().rss

    fallbacks = {
        "memory_allocated": rss_bytes,
        "memory_reserved": rss_bytes,
        "max_memory_allocated": rss_bytes,
        "max_memory_reserved": rss_bytes,
        "reset_peak_memory_stats": lambda *a, **k: None,
        "empty_cache": lambda *a, **k: None,
        "ipc_collect": lambda *a, **k: None,
        "manual_seed": lambda seed: torch.manual_seed(seed),
        "manual_seed_all": lambda seed: torch.manual_seed(seed),
        "get_rng_state": lambda *a, **k: torch.get_rng_state(),
        "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
        "get_device_name": lambda *a, **k: "cpu",
        "mem_get_info": lambda *a, **k: (psutil.virtual_memory().available, psutil.virtual_memory().total),
        "set_device": lambda *a, **k: None,
    }
    for name, fn in fallbacks.items():
        if not hasattr(cpu, name):
            setattr(cpu, name, fn)


CPU_DEVICE_MODULE = Patch(
    name="verl-cpu-device-module",
    engine="verl",
    versions=RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="AttributeError: module 'torch.cpu' has no attribute 'memory_allocated' "
    "(verl/utils/profiler/performance.py:33; "
    "then manual_seed, get_rng_state, empty_cache... via get_torch_device())",
    why="verl treats torch.<device> as a CUDA-like module; give torch.cpu the missing functions (memory from the "
    "process RSS, RNG from torch's CPU generator, no-op cache calls). Existing functions are left alone.",
    probe=no_cuda,
    apply=_cpu_device_module,
    when=on_cpu,
    targets=(Target("verl.utils.device", "get_torch_device", ("ac596dd4e914",)),),
    check=lambda: not hasattr(__import__("torch").cpu, "memory_allocated"),
)


# --- CPUOffloadPolicy(pin_memory=True) ----------------------------------------------------------


def _unpinned_offload() -> None:
    def patch(module):
        def make(original):
            def cpu_offload_policy(*args, **kwargs):
                kwargs["pin_memory"] = False
                return original(*args, **kwargs)

            return cpu_offload_policy

        wrap_once(module, "CPUOffloadPolicy", make)

    when_imported("verl.workers.fsdp_workers", patch)


UNPINNED_OFFLOAD = Patch(
    name="verl-cpu-unpinned-offload",
    engine="verl",
    versions=RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="RuntimeError: Cannot access accelerator device when none is available: fsdp_workers.py:390/394 (ref, forced "
    "offload), :1122 (critic) build CPUOffloadPolicy(pin_memory=True)",
    why="Pinned memory needs an accelerator; without one, offload to unpinned CPU memory.",
    probe=no_cuda,
    apply=_unpinned_offload,
    when=on_cpu,
    targets=(
        Target("verl.workers.fsdp_workers", "ActorRolloutRefWorker._build_model_optimizer", ("525fa192e22f",)),
        Target("verl.workers.fsdp_workers", "CriticWorker._build_critic_model_optimizer", ("e1df970a4cc6",)),
    ),
)


# --- the HF rollout samples n x n responses (an upstream bug) -----------------------------------

HF_ROLLOUT_DIFF = """\
--- a/verl/workers/rollout/hf_rollout.py
+++ b/verl/workers/rollout/hf_rollout.py
@@ -85,7 +85,8 @@
                 "top_p": top_p,
                 "top_k": top_k,
                 "temperature": temperature,
-                "num_return_sequences": self.config.n,
+                # the trainer already repeated the batch rollout.n times (ray_trainer.py:1163)
+                "num_return_sequences": 1,
             }
 
         # make config according to generate mode
"""


def _hf_rollout_single_sample() -> None:
    def patch(module):
        rollout_cls = module.HFRollout

        def make(original):
            @functools.wraps(original)
            def __init__(self, *args, **kwargs):
                original(self, *args, **kwargs)
                from omegaconf import OmegaConf, open_dict

                config = (
                    OmegaConf.create(OmegaConf.to_container(self.config, resolve=True))
                    if OmegaConf.is_config(self.config)
                    else self.config
                )
                with open_dict(config) if OmegaConf.is_config(config) else _nullcontext():
                    config.n = 1  # the trainer repeats the batch n times before calling the rollout
                self.config = config

            return __init__

        wrap_once(rollout_cls, "__init__", make)

    when_imported("verl.workers.rollout.hf_rollout", patch)


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


HF_ROLLOUT_N = Patch(
    name="verl-hf-rollout-n-squared",
    engine="verl",
    versions=RANGE,
    kind=PatchKind.UPSTREAM_BUG,
    fixes="AssertionError: Two tensor dict must have identical batch size. Got torch.Size([4]) and torch.Size([8]) "
    "(ray_trainer.py:1200): ray_trainer.py:1163 repeats the batch by rollout.n and hf_rollout.py:88 asks generate() "
    "for num_return_sequences=n again, giving n^2 samples per prompt",
    why="The trainer owns the repetition (as for the vLLM/SGLang rollouts); the HF rollout must sample one sequence "
    "per (already repeated) prompt.",
    probe=lambda: True,
    apply=_hf_rollout_single_sample,
    when=lambda native: native.get("overrides", {}).get("actor_rollout_ref.rollout.name") == "hf",
    diff=HF_ROLLOUT_DIFF,
    targets=(Target("verl.workers.rollout.hf_rollout", "HFRollout._generate_minibatch", ("f17b4b0fe038",)),),
)


def _raises(fn) -> bool:
    try:
        fn()
    except Exception:
        return True
    return False


def _duplicate_backend_rejected() -> bool:
    """torch itself refuses the backend string verl builds on CPU (a 1-process group, unpatched)."""
    import tempfile

    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        try:
            dist.init_process_group(
                backend="cpu:gloo,cpu:gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1
            )
        except ValueError as exc:
            return "Duplicate" in str(exc)
        dist.destroy_process_group()
        return False


PATCHES = [GLOO_BACKEND, DEDUPE_BACKEND, SDPA, CPU_DEVICE_MODULE, UNPINNED_OFFLOAD, HF_ROLLOUT_N]
