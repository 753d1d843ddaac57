# Runs at the start of every Python process of an rlbridge verl run (this directory is put on
# PYTHONPATH, which Ray workers inherit): installs rlbridge's verl patches and instrumentation.
import os

if os.environ.get("RLBRIDGE_VERL_BOOT"):
    from rlbridge_adapters.verl import boot as _rlbridge_verl_boot

    _rlbridge_verl_boot.install()
