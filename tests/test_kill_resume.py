"""A half-written checkpoint is never resumed from, on any engine.

The end-to-end test (SIGKILL of the whole run mid-training, then `rlbridge train --resume`, on every
engine) is in the conformance suite: rlbridge.testing.suite,
test_sigkill_of_the_whole_run_mid_training_then_resume_continues. These tests build what a run killed
while saving leaves behind (a torn tensor file, a missing shard, an empty or stale pointer file) and
check which checkpoint each adapter resumes from.
"""

import pytest

from rlbridge.errors import ConfigError

torch = pytest.importorskip("torch")


def _save(path, value=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(value if value is not None else {"w": torch.arange(64, dtype=torch.float32)}, path)


def _tear(path):
    """What a SIGKILL in the middle of torch.save leaves: the file's first part only."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_trl_skips_a_checkpoint_killed_while_saving(tmp_path):
    pytest.importorskip("trl")
    from rlbridge_adapters.trl.train import _latest_checkpoint, mark_complete

    for step in (1, 2, 3):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_text("x")
    mark_complete(tmp_path / "checkpoint-1", 1)
    mark_complete(tmp_path / "checkpoint-2", 2)
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text('{"global_st')  # killed while saving
    assert _latest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-2")
    mark_complete(tmp_path / "checkpoint-3", 3)
    assert _latest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-3")


def _verl_checkpoint(root, step, torn=None):
    folder = root / f"global_step_{step}"
    for name in (
        "actor/model_world_size_1_rank_0.pt",
        "actor/optim_world_size_1_rank_0.pt",
        "actor/extra_state_world_size_1_rank_0.pt",
        "data.pt",
    ):
        _save(folder / name)
    (folder / "actor" / "huggingface").mkdir()
    (folder / "actor" / "huggingface" / "config.json").write_text("{}")
    if torn:
        _tear(folder / torn)
    return folder


def test_verl_resumes_from_the_newest_complete_checkpoint_not_its_tracker(tmp_path):
    from rlbridge_adapters.verl.train import checkpoint_complete, resume_point

    _verl_checkpoint(tmp_path, 2)
    _verl_checkpoint(tmp_path, 4)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    assert resume_point(tmp_path) == tmp_path / "global_step_4"
    # killed while writing step 6's optimizer shard, the tracker still at 4
    _verl_checkpoint(tmp_path, 6, torn="actor/optim_world_size_1_rank_0.pt")
    assert not checkpoint_complete(tmp_path / "global_step_6")
    assert resume_point(tmp_path) == tmp_path / "global_step_4"
    # killed between the shards and data.pt: no data loader state, so not a checkpoint
    (tmp_path / "global_step_6" / "data.pt").unlink()
    _save(tmp_path / "global_step_6" / "actor" / "optim_world_size_1_rank_0.pt")
    assert resume_point(tmp_path) == tmp_path / "global_step_4"
    # killed while writing the tracker: verl itself fails on the empty file (int('')); rlbridge does not read it
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("")
    _save(tmp_path / "global_step_6" / "data.pt")
    assert resume_point(tmp_path) == tmp_path / "global_step_6"
    # a checkpoint the tracker names, truncated afterwards, is skipped
    _tear(tmp_path / "global_step_6" / "actor" / "model_world_size_1_rank_0.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("6")
    assert resume_point(tmp_path) == tmp_path / "global_step_4"


def test_verl_without_a_complete_checkpoint_says_how_to_start_over(tmp_path):
    from rlbridge_adapters.verl.train import resume_point

    _verl_checkpoint(tmp_path, 2, torn="data.pt")
    with pytest.raises(ConfigError, match=r"checkpoint.resume: no complete .*global_step_2.*without --resume"):
        resume_point(tmp_path)


def _deepspeed_tag(role_dir, step, model=True, optim=True):
    tag = role_dir / f"global_step{step}"
    if model:
        _save(
            tag / "mp_rank_00_model_states.pt",
            {"module": {}, "global_step": step, "data_loader_state_dict": {"i": step}},
        )
    if optim:
        _save(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    return tag


def test_openrlhf_points_deepspeed_at_the_newest_complete_tag(tmp_path):
    from rlbridge_adapters.openrlhf.resume import resume_point

    actor = tmp_path / "_actor"
    _deepspeed_tag(actor, 2)
    _deepspeed_tag(actor, 4)
    (actor / "latest").write_text("global_step4")
    _deepspeed_tag(actor, 6, optim=False)  # killed before its optimizer shards; `latest` still names 4
    assert resume_point(tmp_path) == 4 and (actor / "latest").read_text() == "global_step4"
    # `latest` torn and step 6 without its optimizer shards (the other steps have theirs): not complete
    (actor / "latest").write_text("")
    assert resume_point(tmp_path) == 4 and (actor / "latest").read_text() == "global_step4"
    # killed while DeepSpeed wrote `latest` for step 6: empty; step 6 complete by its files
    _save(actor / "global_step6" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (actor / "latest").write_text("")
    assert resume_point(tmp_path) == 6 and (actor / "latest").read_text() == "global_step6"
    # `latest` names a tag whose model states are torn: the one before, and `latest` says so
    _tear(actor / "global_step6" / "mp_rank_00_model_states.pt")
    assert resume_point(tmp_path) == 4 and (actor / "latest").read_text() == "global_step4"
    assert not list(actor.glob(".*tmp"))  # replaced atomically, nothing left over


def test_openrlhf_actor_and_critic_resume_from_the_same_step(tmp_path):
    from rlbridge_adapters.openrlhf.resume import resume_point

    for role in ("_actor", "_critic"):
        _deepspeed_tag(tmp_path / role, 2)
        (tmp_path / role / "latest").write_text("global_step2")
    _deepspeed_tag(tmp_path / "_actor", 4)
    (tmp_path / "_actor" / "latest").write_text("global_step4")  # the critic was killed before its step 4
    assert resume_point(tmp_path) == 2
    assert (
        (tmp_path / "_actor" / "latest").read_text() == (tmp_path / "_critic" / "latest").read_text() == "global_step2"
    )
    with pytest.raises(ConfigError, match="no complete"):
        resume_point(tmp_path / "elsewhere")


def test_checkpoints_are_reported_once_complete(tmp_path):
    """The checkpoint hook promises a complete checkpoint: the follower reports a directory only once
    the adapter's check passes, and one a killed run left incomplete once the resumed run saved it."""
    from rlbridge.engine.follower import EventFollower
    from rlbridge_adapters.verl.train import checkpoint_complete

    reported = []

    class Ctx:
        def checkpoint_saved(self, step, path):
            reported.append(step)

    _verl_checkpoint(tmp_path, 2)
    _verl_checkpoint(tmp_path, 4, torn="data.pt")  # left by the killed run
    follower = EventFollower(
        tmp_path / "events.jsonl",
        Ctx(),
        lambda n, s: n,
        lambda n: True,
        checkpoint_dir=str(tmp_path),
        checkpoint_glob="global_step_*",
        checkpoint_complete=checkpoint_complete,
    )
    follower._checkpoints()
    assert reported == []  # 2 was reported by the run that saved it; 4 is not complete
    _save(tmp_path / "global_step_4" / "data.pt")
    follower._checkpoints()
    assert reported == [4]
