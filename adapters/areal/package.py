"""What this adapter supports (like OpenTelemetry contrib's package.py)."""

DISTRIBUTION = "areal"
# 1.0.4 is the only release on the package index (its single-controller trainer, PPOTrainer with a scheduler)
SUPPORTED_VERSIONS = "==1.0.4"
DEFAULT_VERSION = "1.0.4"
# This adapter's own tests (the conformance suite, rlbridge.testing.suite, runs on top of them), in its folder:
# tests/ those of rlbridge's own environment, tests/in_env/ those that need AReaL installed (the areal cell runs
# them with the shared suite, rlbridge.envs.compat.kind_args).
TESTS = (
    "adapters/areal/tests/test_areal_plan.py",
    "adapters/areal/tests/in_env/test_areal_in_env.py",
    "adapters/areal/tests/in_env/test_areal_plan_in_env.py",
)
