"""What this adapter supports (like OpenTelemetry contrib's package.py)."""

DISTRIBUTION = "trl"
# trl 1.0 is the first stable v1 API (vllm_mode colocate default, log_metric); tested at 1.0.x and the newest.
SUPPORTED_VERSIONS = ">=1.0,<2"
# The version a plan targets when no TRL is installed where the plan is made (the recipe default).
DEFAULT_VERSION = "1.16.0"
# This adapter's own tests (the conformance suite, rlbridge.testing.suite, runs on top of them), in its folder:
# tests/ those of rlbridge's own environment, tests/in_env/ those that need TRL installed, with vLLM: the
# trl 1.16.0-vllm cell runs them (its test kind e2e-cpu-vllm, TRLBackend.test_kinds); the other cells skip them.
TESTS = (
    "adapters/trl/tests/test_reward_faults_trl.py",
    "adapters/trl/tests/test_trl_adapter.py",
    "adapters/trl/tests/test_trl_async.py",
    "adapters/trl/tests/test_trl_async_scoring.py",
    "adapters/trl/tests/test_trl_environment.py",
    "adapters/trl/tests/test_trl_multiprocess.py",
    "adapters/trl/tests/in_env/test_trl_async_in_env.py",
    "adapters/trl/tests/in_env/test_trl_vllm.py",
)
