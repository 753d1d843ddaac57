"""What this adapter supports (like OpenTelemetry contrib's package.py)."""

DISTRIBUTION = "trl"
# trl 1.0 is the first stable v1 API (vllm_mode colocate default, log_metric); tested at 1.0.x and the newest.
SUPPORTED_VERSIONS = ">=1.0,<2"
