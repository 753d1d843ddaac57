"""An engine process that dies is named: Ray's nested error (the driver's task failed because an
actor it called died) is read down to the actor that died, its pid, how, and its log."""

from rlbridge.engine.ray_failures import describe_ray_failure

# the shape of what verl 0.9.1's driver raised when its WorkerDict was SIGKILLed (ray 2.60)
RAY_ERROR = """ray::TaskRunner.run() (pid=9282, ip=192.0.2.2, actor_id=abc, repr=<verl.trainer.main_ppo.TaskRunner object at 0x7f>)
  File "/x/verl/trainer/ppo/ray_trainer.py", line 1200, in fit
    output = self.actor_rollout_wg.update_actor(batch)
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict
\tactor_id: 60a7b34c
\tpid: 9758
\tip: 192.0.2.2
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file."""


class RayTaskError(Exception):
    pass


def test_the_innermost_dead_actor_is_named_with_its_log(tmp_path):
    (tmp_path / "worker-b42c-01000000-9282.err").write_text("")
    (tmp_path / "worker-b42c-01000000-9758.err").write_text("a warning\n")
    failure = describe_ray_failure(RayTaskError(RAY_ERROR), tmp_path)
    assert failure["process"] == "Ray actor WorkerDict (pid 9758)"
    assert failure["via"] == "Ray task TaskRunner.run (pid 9282)"
    assert failure["log"].endswith("-9758.err") and "Worker exit type: SYSTEM_ERROR" in failure["how"]
    assert any("ActorDiedError" in line for line in failure["error"])


def test_a_worker_that_wrote_a_traceback_is_quoted_from_its_own_log(tmp_path):
    (tmp_path / "worker-b42c-01000000-9758.err").write_text(
        'noise\nTraceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\nRuntimeError: CUDA out of '
        "memory\n"
    )
    failure = describe_ray_failure(RayTaskError(RAY_ERROR), tmp_path)
    assert failure["error"][0] == "RuntimeError: CUDA out of memory"
    assert failure["error"][1].startswith("Traceback")


def test_every_failure_kind_has_its_own_hint():
    """hint() is one function per kind (_HINTS); a kind added to RETRYABLE without one would fall through to the
    catch-all 'an error nothing above explains', which is only for 'error'."""
    from rlbridge.diagnosis.causes import RETRYABLE
    from rlbridge.diagnosis.hints import _HINTS

    assert set(_HINTS) == set(RETRYABLE) - {"error"}
