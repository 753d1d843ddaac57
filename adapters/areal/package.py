"""What this adapter supports (like OpenTelemetry contrib's package.py)."""

DISTRIBUTION = "areal"
# 1.0.4 is the only release on the package index (its single-controller trainer, PPOTrainer with a scheduler)
SUPPORTED_VERSIONS = "==1.0.4"
DEFAULT_VERSION = "1.0.4"
# This adapter's own tests (the conformance suite, rlbridge.testing.suite, runs on top of them), in its folder;
# the areal cell runs them as its test kind `areal-cpu` (ArealBackend.test_kinds)
TESTS = ("adapters/areal/tests/test_areal_plan.py", "adapters/areal/tests/test_areal_in_env.py")
