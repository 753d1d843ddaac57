"""The knob effect test: every canonical knob, on every backend, provably reaches the engine.

Part of the shipped suite (`rlbridge.testing.suite` imports it), so it runs for any backend, in-tree
or third-party, from what that backend declares. For each canonical knob
(rlbridge.contract.backend.canonical_knobs) it sets the engine-neutral sample value
(rlbridge.contract.effects.SAMPLES), plans (no engine is imported), and holds the plan to the
backend's own expectation, declared beside its capability table and returned by
`Backend.knob_effects()` (rlbridge.contract.effects says the forms):

* {native key: expected value}: the knob is honoured or approximated. Every key must be one the
  capability table names in its `native` (the table is a checked path, not prose), must hold the
  expected value in the plan (Backend.native_settings), and must differ from the plan of the same
  config without the knob (a knob that changes nothing is a silent drop). An approximated knob's note
  must show in the plan when its condition holds.
* REFUSED: this value is refused before anything starts, with an error naming the knob (a capability
  check, or the plugin that owns the knob), never a schema error.
* knobs the backend's capability table REJECTS need no entry: the test expects the capability error.

The plans need no engine, so these tests run for every registered backend wherever the suite runs;
where the backend's engine is installed and supported (in each engine-environment cell of
`rlbridge compat run`), the engine's own validator also checks every translated plan
(Backend.validate, what `rlbridge plan --check` does).

HOW TO ADD A KNOB: add a field to rlbridge/contract/config.py, a sample value to SAMPLES in
rlbridge/contract/effects.py, an entry to each adapter's capabilities() whose `native` names the native
key(s) it sets (as Backend.native_settings spells them), and its expected native values to each
adapter's knob effects (adapters/<engine>/effects.py for the in-tree ones). Knobs that the core itself
handles go to ALLOWED in rlbridge/contract/effects.py instead, with the reason.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from rlbridge.contract.backend import Support, canonical_knobs
from rlbridge.contract.effects import (
    ABSENT,
    ALLOWED,
    BASE_OVERRIDES,
    REFUSED,
    SAMPLE,
    SAMPLES,
    KnobEffect,
    as_knob_effect,
)
from rlbridge.errors import CapabilityError, RLBridgeError
from rlbridge.testing import QUICKSTART as BASE_CONFIG

PLANNED_KNOBS = sorted(SAMPLES)


def _plan(backend, overrides: list[str]):
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import prepare

    # the expectations describe the backend's default engine version; plan for it whatever is installed
    # (an older engine environment, e.g. verl 0.5.0, maps several knobs differently or not at all)
    pinned = [f"engine_version={backend.default_version}"] if backend.default_version else []
    config = load_config(
        BASE_CONFIG, [f"backend={backend.name}", *pinned, *BASE_OVERRIDES, *overrides]
    )  # schema errors fail here
    return prepare(config)


def _same(actual: Any, expected: Any) -> bool:
    if isinstance(expected, float) or isinstance(actual, float):
        try:
            return math.isclose(float(actual), float(expected), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(actual) == len(expected) and all(_same(a, e) for a, e in zip(actual, expected))
    return actual == expected


def _get(settings: dict[str, Any], key: str) -> Any:
    return settings.get(key, ABSENT)


def _set_knob(override: str) -> str:
    return override.split("=", 1)[0]


def test_every_canonical_knob_has_a_sample_value():
    knobs = set(canonical_knobs())
    assert not set(ALLOWED) & set(SAMPLES), "a knob is either allowed (handled by the core) or sampled"
    missing = sorted(knobs - set(SAMPLES) - set(ALLOWED))
    assert not missing, (
        f"add a sample value for these knobs to SAMPLES in rlbridge.contract.effects (or to ALLOWED): {missing}"
    )
    stale = sorted((set(SAMPLES) | set(ALLOWED)) - knobs)
    assert not stale, f"no such canonical knobs any more: {stale}"


@pytest.mark.plans_only
def test_knob_effects_cover_every_knob_the_backend_accepts(backend):
    """The backend declares an expectation for every knob its capability table honours or
    approximates, and none for knobs that do not exist or that it rejects."""
    table = backend.capability_table()
    declared = backend.knob_effects()
    stale = sorted(set(declared) - set(canonical_knobs()))
    assert not stale, f"{backend.name}.knob_effects() names knobs that do not exist: {stale}"
    allowed = sorted(set(declared) & set(ALLOWED))
    assert not allowed, (
        f"the core handles {allowed} for every backend (ALLOWED); remove them from {backend.name}.knob_effects()"
    )
    missing = sorted(k for k in PLANNED_KNOBS if table[k].support is not Support.REJECTED and k not in declared)
    assert not missing, (
        f"{backend.name} honours or approximates these knobs: declare what each does to its plan in "
        f"{type(backend).__name__}.knob_effects() (see rlbridge.contract.effects): {missing}"
    )
    rejected = sorted(
        k
        for k, d in declared.items()
        if table[k].support is Support.REJECTED and as_knob_effect(d).expect is not REFUSED
    )
    assert not rejected, f"{backend.name} rejects {rejected}: no native values to expect (leave them out)"


@pytest.mark.plans_only
@pytest.mark.parametrize("knob", PLANNED_KNOBS)
def test_every_knob_takes_effect(backend, knob):
    """Plan-only: the knob's non-default value reaches the native key(s) the capability table names,
    or is refused naming the knob; validated by the engine's own code where the engine is installed."""
    table = backend.capability_table()
    cap = table[knob]
    sample = SAMPLES[knob]
    declared = backend.knob_effects().get(knob)
    effect = as_knob_effect(declared) if declared is not None else KnobEffect({})
    value = sample.value if effect.value is SAMPLE else effect.value
    context = [*sample.context, *effect.context]

    if cap.support is Support.REJECTED or effect.expect is REFUSED:
        with pytest.raises(RLBridgeError) as info:
            _plan(backend, [*context, f"{knob}={json.dumps(value)}"])
        message = str(info.value)
        if cap.support is Support.REJECTED:
            # a knob of the sample's context that this backend rejects too may be refused first (it is
            # tested under its own name); a core check of the knob's own value names it first
            first = [k for k in map(_set_knob, context) if k in table and table[k].support is Support.REJECTED]
            assert any(k in message for k in (knob, *first)), f"the refusal must name {knob}: {message}"
            assert isinstance(info.value, CapabilityError) or message.startswith(knob), message
        else:
            assert knob in message, f"the refusal must name {knob}: {message}"
        return

    expect = effect.expect
    assert expect, (
        f"{backend.name}'s capability table says {knob} is {cap.support.value}: declare its native values in "
        f"{type(backend).__name__}.knob_effects()"
    )
    prepared = _plan(backend, [*context, f"{knob}={json.dumps(value)}"])
    settings = backend.native_settings(prepared.plan)
    for key, wanted in expect.items():
        assert key in cap.native or any(key.startswith(f"{n}.") for n in cap.native), (
            f"{backend.name}: {key} is not among the native keys its capability table names for {knob}: {cap.native}"
        )
        got = _get(settings, key)
        assert _same(got, wanted), f"{backend.name}: {knob}={value!r} should set {key}={wanted!r}, plan has {got!r}"
    try:  # the same config without the knob must plan differently under those keys
        baseline = backend.native_settings(_plan(backend, context).plan)
    except RLBridgeError:
        baseline = None  # the context alone is incomplete (e.g. placement.args for 'split')
    if baseline is not None:
        assert any(not _same(_get(baseline, k), w) for k, w in expect.items()), (
            f"{backend.name}: {knob}={value!r} changes none of {sorted(expect)}: the default plans the same"
        )
    if cap.support is Support.APPROXIMATED and (cap.approximate_when is None or cap.approximate_when(prepared.config)):
        assert any(note.startswith(f"{knob}:") for note in prepared.plan.approximations), prepared.plan.approximations
    installed = backend.installed_version()
    if installed and backend.version_supported(installed) and installed == (backend.default_version or installed):
        from rlbridge.contract.models import BUILTIN_PREFIX, looks_local, materialize_model
        from rlbridge.run.runner import model_paths

        # verl's config code loads the config of the models it is given (e.g. the critic's): hub ids
        # (effect values such as model.path: org/model) cannot be validated offline
        if all(path.startswith(BUILTIN_PREFIX) or looks_local(path) for _, path in model_paths(prepared.config)):
            materialize_model(prepared.config)
            backend.validate(prepared.plan)  # the engine's own config code accepts every translated value


# ---- one real run per engine: the seed reaches the engine, evaluation reaches metrics ----

EVAL_SMALL = {"type": "generator", "name": "digit_copy", "args": {"num_rows": 8}}


@pytest.mark.engine
def test_seed_changes_first_step_samples_and_evaluation_is_logged(backend, tmp_path):
    """Two 1-step runs through the engine's own trainer that differ only in training.seed sample
    different first-step prompts/completions, and each evaluates data.eval (eval_interval 1) into
    eval_metrics.jsonl. (`backend` is the conformance suite's fixture: every installed engine.)"""
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train
    from rlbridge.testing import requirement_unmet

    base = [
        f"backend={backend.name}",
        "training.steps=1",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "telemetry.samples_per_step=8",
        "resources.gpus_per_node=auto",
        f"data.eval={json.dumps(EVAL_SMALL)}",
        "data.eval_interval=1",
    ]
    unmet = requirement_unmet(
        backend, load_config(BASE_CONFIG, base), "data.eval", "data.eval_interval", "training.seed"
    )
    if unmet:
        pytest.skip(f"{backend.name} declares it does not evaluate or seed: {unmet}")
    first_step = {}
    for seed in (1, 2):
        out = tmp_path / f"seed{seed}"
        summary = train(load_config(BASE_CONFIG, [*base, f"training.seed={seed}", f"output_dir={out}"]), progress=False)
        assert summary["status"] == "completed"
        rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        first_step[seed] = sorted((r["prompt"], r["completion"]) for r in rows if r["step"] == 1)
        evals = [json.loads(line) for line in (out / "eval_metrics.jsonl").read_text().splitlines()]
        assert evals and all(math.isfinite(e["eval/reward/mean"]) for e in evals), evals
    assert first_step[1] and first_step[2] and first_step[1] != first_step[2]
