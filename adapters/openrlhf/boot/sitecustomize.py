# Runs at the start of every Python process of an rlbridge OpenRLHF run (this directory is put on
# PYTHONPATH, which Ray actors and vLLM engine processes inherit): installs rlbridge's patches and
# instrumentation for OpenRLHF.
import os

if os.environ.get("RLBRIDGE_OPENRLHF_BOOT"):
    from rlbridge_adapters.openrlhf import boot as _rlbridge_openrlhf_boot

    _rlbridge_openrlhf_boot.install()
elif os.environ.get("RLBRIDGE_OPENRLHF_PATCHES_ONLY"):
    # a native bench arm (rlbridge_adapters.openrlhf.native): OpenRLHF's own entry point with the CPU patches only
    from rlbridge_adapters.openrlhf.native import install_patches_only as _rlbridge_patches_only

    _rlbridge_patches_only()
