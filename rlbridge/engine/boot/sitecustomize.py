# Runs at the start of every Python process of an rlbridge run of a Ray engine (this directory is put
# on PYTHONPATH, which Ray workers and vLLM engine processes inherit): calls the adapter's installer
# named by RLBRIDGE_BOOT (module:function, rlbridge.engine.ray_engine.boot_env), which installs its
# patches and instrumentation. Nothing happens without the variable.
import os

if os.environ.get("RLBRIDGE_BOOT"):
    import importlib as _rlbridge_importlib

    _rlbridge_module, _, _rlbridge_function = os.environ["RLBRIDGE_BOOT"].partition(":")
    getattr(_rlbridge_importlib.import_module(_rlbridge_module), _rlbridge_function)()
