"""What this adapter supports (like OpenTelemetry contrib's package.py)."""

DISTRIBUTION = "openrlhf"
# 0.9.10 is the first release with --max_len/--max_new_tokens; 0.10.2 renamed every flag (dotted).
SUPPORTED_VERSIONS = ">=0.9.10,<=0.11.2"
DEFAULT_VERSION = "0.11.2"
# This adapter's own tests (the conformance suite, rlbridge.testing.suite, runs on top of them), in its folder:
# tests/ those of rlbridge's own environment, tests/in_env/ those that need OpenRLHF installed (every OpenRLHF
# cell runs them with the shared suite, rlbridge.envs.compat.kind_args).
TESTS = (
    "adapters/openrlhf/tests/test_openrlhf_plan.py",
    "adapters/openrlhf/tests/in_env/test_openrlhf_async_in_env.py",
    "adapters/openrlhf/tests/in_env/test_openrlhf_code_interpreter_in_env.py",
    "adapters/openrlhf/tests/in_env/test_openrlhf_data_parallel_in_env.py",
    "adapters/openrlhf/tests/in_env/test_openrlhf_in_env.py",
    "adapters/openrlhf/tests/in_env/test_openrlhf_layout_in_env.py",
    "adapters/openrlhf/tests/in_env/test_openrlhf_lora_sync_in_env.py",
    "adapters/openrlhf/tests/in_env/test_openrlhf_reward_faults_in_env.py",
    "adapters/openrlhf/tests/in_env/test_openrlhf_stages_in_env.py",
    "adapters/openrlhf/tests/in_env/test_openrlhf_token_ids_in_env.py",
)
