"""TRL: the asynchronous loop (rollout.max_staleness, partial_rollouts, weight_sync_interval).

TRL 1.16's asynchronous trainer is `trl.experimental.async_grpo.AsyncGRPOTrainer` with `AsyncGRPOConfig`
(read in the installed wheel: `max_staleness` (default 4, stale samples are dropped), `weight_sync_steps`
(default 1), `max_inflight_tasks`, `queue_maxsize`, `vllm_server_base_url`). It generates only through a
`vllm serve` server, pauses that server with mode "keep" for each weight sync (in-flight requests continue
with the new weights: always partial rollouts), and sends weights with `WeightTransferClient`, NCCL only.
rlbridge's GRPOTrainer path is synchronous. Called by `TRLBackend`.
"""

from __future__ import annotations

from rlbridge.contract.backend import Capability, rejected

NO_ASYNC = (
    "rlbridge drives TRL's synchronous GRPOTrainer. TRL 1.16's asynchronous trainer (trl.experimental.async_grpo."
    "AsyncGRPOTrainer, AsyncGRPOConfig.max_staleness / weight_sync_steps) generates through a `vllm serve` server "
    "whose weights it updates over NCCL (WeightTransferClient), which needs CUDA; rlbridge does not start that "
    "server yet. Use backend: openrlhf (--train.async_enable), or keep the default"
)


def capabilities() -> list[Capability]:
    return [
        rejected("rollout.max_staleness", NO_ASYNC),
        rejected("rollout.partial_rollouts", NO_ASYNC),
        rejected("rollout.weight_sync_interval", NO_ASYNC),
    ]
