"""Diagnosis: why a run failed or hangs, and what to change.

- causes: classify() turns what a failed run leaves (its exception, the launchers' failure record, the logs,
  the kernel's OOM counters) into `summary.json`'s `failure` record, and says whether it is retryable;
- hints: the knob to change for each failure kind;
- watchdog and stacks: the hang watchdog beside every run, and the stacks of every process of a run
  (`rlbridge stacks`), read from outside with py-spy;
- runstate: run_state.json, what a run directory knows of the run writing it, even a killed one;
- doctor: `rlbridge doctor RUN_DIR`, how the run there ended, in sentences.

The run (rlbridge.run) uses it to decide restarts (training.max_restarts) and to stop a hung engine;
the command line reads finished runs with it. It imports no engine and nothing of rlbridge.run.
"""
