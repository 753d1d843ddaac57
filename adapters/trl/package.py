"""What this adapter supports (like OpenTelemetry contrib's package.py)."""

DISTRIBUTION = "trl"
# trl 1.0 is the first stable v1 API (vllm_mode colocate default, log_metric); tested at 1.0.x and the newest.
SUPPORTED_VERSIONS = ">=1.0,<2"
# The version a plan targets when no TRL is installed where the plan is made (the recipe default).
DEFAULT_VERSION = "1.16.0"
# This adapter's own tests (the conformance suite, rlbridge.testing.suite, runs on top of them).
TESTS = (
    "tests/test_trl_adapter.py",
    "tests/test_trl_vllm.py",
    "tests/test_trl_environment.py",
    "tests/test_trl_async.py",
    "tests/test_trl_async_scoring.py",
    "tests/test_trl_multiprocess.py",
    "tests/engines/test_trl_async_in_env.py",
)
