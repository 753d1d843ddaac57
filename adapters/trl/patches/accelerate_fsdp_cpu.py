"""FSDP2 on CPU ranks through accelerate (training.strategy: fsdp with resources.cpu_ranks_per_node > 1).

accelerate 1.16's `AcceleratorState.__init__` (accelerate/state.py) turns ACCELERATE_USE_FSDP (set by
`accelerate launch` from the config's distributed_type FSDP) into DistributedType.FSDP only when the process
group is a GPU-like one (MULTI_GPU, MULTI_XPU, ...). A CPU rank is MULTI_CPU (gloo), so the FSDP plugin is
dropped without a word and every rank trains a whole DDP replica: `training.strategy: fsdp` would be a silent
no-op on CPU. PyTorch's FSDP2 (`fully_shard`) itself runs on CPU tensors over gloo (its DTensor shards and
all-gathers), and accelerate's FSDP2 path (`fsdp2_prepare_model`) needs nothing CUDA-specific for it.

The patch completes the state's initialisation the way accelerate does for a GPU rank: a MULTI_CPU state whose
Accelerator was given an FSDP plugin becomes DistributedType.FSDP with that plugin. CPU enablement, not an
upstream bug (accelerate does not claim FSDP on CPU).
"""

from __future__ import annotations

from rlbridge.engine.patches import Patch, PatchKind, Target
from rlbridge.engine.kit import wrap_once


def _drops_fsdp_on_cpu() -> bool:
    """accelerate's own list of process groups that may become FSDP still leaves MULTI_CPU out."""
    import inspect

    from accelerate.state import AcceleratorState

    source = inspect.getsource(AcceleratorState.__init__)
    return "DistributedType.MULTI_CPU" not in source.split("ACCELERATE_USE_FSDP")[0].rsplit("elif", 1)[-1]


def fsdp_on_cpu_ranks() -> None:
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    def make(original):
        def __init__(self, *args, fsdp_plugin=None, **kwargs):
            original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
            if self.distributed_type == DistributedType.MULTI_CPU and fsdp_plugin is not None:
                self.distributed_type = DistributedType.FSDP
                self.fsdp_plugin = fsdp_plugin
                PartialState._shared_state["distributed_type"] = DistributedType.FSDP

        return __init__

    wrap_once(AcceleratorState, "__init__", make)


def _fsdp_on_cpu(native: dict) -> bool:
    acc = native.get("accelerate") or {}
    return acc.get("distributed_type") == "FSDP" and bool(acc.get("use_cpu"))


ACCELERATE_FSDP_CPU = Patch(
    name="accelerate-fsdp-on-cpu-ranks",
    engine="accelerate",
    versions=">=1.16,<1.17",  # read in accelerate 1.16.0's state.py
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="training.strategy fsdp on CPU ranks trains plain DDP: accelerate/state.py AcceleratorState.__init__ makes "
    "ACCELERATE_USE_FSDP a DistributedType.FSDP only for GPU-like process groups, and a gloo CPU rank is MULTI_CPU",
    why="FSDP2's fully_shard runs on CPU tensors over gloo; the patch gives a MULTI_CPU state the FSDP plugin its "
    "Accelerator passed, as accelerate does for a GPU rank, so the model is sharded as the plan says",
    probe=_drops_fsdp_on_cpu,
    apply=fsdp_on_cpu_ranks,
    when=_fsdp_on_cpu,
    targets=(Target("accelerate.state", "AcceleratorState.__init__", ("344ef262b5f2",)),),
)
