# Runs at the start of every Python process of an rlbridge verl run (this directory is put on
# PYTHONPATH, which Ray workers inherit): installs rlbridge's verl patches and instrumentation.
import os

if os.environ.get("RLBRIDGE_VERL_BOOT"):
    from rlbridge_adapters.verl import boot as _rlbridge_verl_boot

    _rlbridge_verl_boot.install()
elif os.environ.get("RLBRIDGE_VERL_PATCHES_ONLY"):
    # a native bench arm (rlbridge_adapters.verl.native): verl's own entry point with the CPU patches only
    from rlbridge.engine.patches import PatchKind as _rlbridge_kind
    from rlbridge.engine.patches import apply_from_environment as _rlbridge_apply
    from rlbridge_adapters.verl.boot import NATIVE_ENV as _rlbridge_native_env
    from rlbridge_adapters.verl.patches import PATCHES as _rlbridge_patches

    _rlbridge_apply([p for p in _rlbridge_patches if p.kind == _rlbridge_kind.CPU_ENABLEMENT or p.in_native_arms], _rlbridge_native_env,
                    "RLBRIDGE_VERL_PATCH_REPORT_UNUSED")
