"""Samplers, constraints and the Pareto front on real Optuna studies (no Ray needed)."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch import record
from hpsearch.constraints import equivalence_key, violation
from hpsearch.planner.plan import runnable_grid_points
from hpsearch.sampler import create_sampler, distributions, grid_points
from hpsearch.search import Search
from hpsearch.search_spaces import SAMPLER_CLASS_NAMES, SAMPLERS, Constraints, parse_space
from hpsearch.store import open_storage
from hpsearch.trials.spec import TrialSpec

RANGE_SPACE = """\
parameters:
  per_device_batch_size: {choices: [8, 16, 32, 64]}
  world_size: {choices: [1, 2]}
  lr_rule: {choices: [constant, linear, sqrt]}
  base_lr: {low: 0.001, high: 0.1, log: true}
search: {sampler: SAMPLER, seed: SEED}
objectives:
"""
ONE = "  - {metric: val_accuracy, direction: maximize}\n"
TWO = ONE + "  - {metric: runtime_s, direction: minimize}\n"

GRID_SPACE = """\
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [8, 16, 32]}
  world_size: {choices: [1, 2]}
  lr_rule: {choices: [constant, linear, sqrt]}
  base_lr: 0.01
search: {sampler: grid, seed: 3}
"""


def _proposals(space_text: str, n: int) -> list[dict]:
    space = parse_space(space_text)
    study = optuna.create_study(directions=[o.direction for o in space.objectives], sampler=create_sampler(space))
    out = []
    for i in range(n):
        trial = study.ask(distributions(space))
        out.append(trial.params)
        study.tell(trial, [float(i % 3)] * len(space.objectives))
    return out


@pytest.mark.parametrize("sampler", [s for s in SAMPLERS if s not in ("grid", "bruteforce", "cmaes", "gp")]
                         + ["TPESampler", "QMCSampler"])
def test_every_named_sampler_is_seeded(sampler: str) -> None:
    objectives = TWO if sampler in ("nsga2", "nsga3", "random", "tpe", "qmc", "TPESampler", "QMCSampler") else ONE
    def text(seed: int) -> str:
        return RANGE_SPACE.replace("SAMPLER", sampler).replace("SEED", str(seed)) + objectives

    first, again = _proposals(text(5), 12), _proposals(text(5), 12)
    other = _proposals(text(6), 12)

    assert first == again
    assert first != other


@pytest.mark.parametrize(("short", "cls"), list(SAMPLER_CLASS_NAMES.items()))
def test_every_sampler_the_space_accepts_is_one_the_search_builds(short: str, cls: str) -> None:
    # BaseSampler and PartialFixedSampler once passed the schema and failed here, after Ray
    # had started; now the schema accepts exactly the samplers this builds.
    for written in (short, cls):
        space = parse_space(GRID_SPACE.replace("sampler: grid", f"sampler: {written}"))
        sampler = create_sampler(space)
        assert isinstance(sampler, optuna.samplers.BaseSampler)
        assert type(sampler).__name__ == ("StudyGridSampler" if short in ("grid", "bruteforce") else cls)


def test_the_grid_runs_every_configuration_once_and_frees_interrupted_ones() -> None:
    _run_the_grid(None, None)


def test_the_grid_reads_an_sql_store_as_it_changes(storage_url: str, unique_name: str) -> None:
    # Read incrementally (the trials new since the last ask, and those unfinished then): the
    # interrupted trial was read running, then failed; the queued one was read waiting.
    _run_the_grid(open_storage(storage_url), unique_name)


def _run_the_grid(storage: optuna.storages.BaseStorage | None, name: str | None) -> None:
    space = parse_space(GRID_SPACE)
    sampler = create_sampler(space)
    study = optuna.create_study(sampler=sampler, direction="maximize", storage=storage, study_name=name)
    seen = []
    for _ in range(5):
        trial = study.ask(distributions(space))
        seen.append(tuple(sorted(trial.params.items())))
        study.tell(trial, 0.5)
    cut = study.ask(distributions(space))
    assert len(sampler.remaining(study)) == 18 - 6
    cut.set_user_attr("status_reason", "interrupted")
    study.tell(cut, state=TrialState.FAIL)
    # A queued rerun holds its configuration: the grid does not hand it out a second time.
    study.enqueue_trial(dict(cut.params))

    left = sampler.remaining(study)
    assert len(left) == 18 - 5 - 1
    rest = []
    while sampler.remaining(study) or study.get_trials(states=(TrialState.WAITING,)):
        trial = study.ask(distributions(space))
        rest.append(tuple(sorted(trial.params.items())))
        study.tell(trial, 0.5)

    assert len(seen + rest) == 18
    assert len(set(seen + rest)) == 18
    assert tuple(sorted(cut.params.items())) in rest


def test_the_constraints_name_the_cap_a_configuration_breaks() -> None:
    spec = TrialSpec(per_device_batch_size=256, world_size=2, base_lr=0.01, lr_rule="linear", base_batch_size=8)

    assert violation(spec, Constraints(max_effective_batch_size=512)) is None
    assert "above max_effective_batch_size 256" in violation(spec, Constraints(max_effective_batch_size=256))
    assert violation(spec, Constraints(max_lr=0.5)) == "scaled lr 0.64 (linear rule at B 512) is above max_lr 0.5"


def test_equivalent_configurations_share_a_key_and_different_ones_do_not() -> None:
    def key(**kw: object) -> object:
        return equivalence_key(TrialSpec(**{"base_lr": 0.01, "base_batch_size": 8, **kw}))

    # Any rule at B = B0 gives base_lr; b x W x A splits of one B with one rule train alike.
    assert key(per_device_batch_size=8, lr_rule="constant") == key(per_device_batch_size=8, lr_rule="sqrt")
    assert key(per_device_batch_size=64, lr_rule="linear") == key(per_device_batch_size=32, world_size=2,
                                                                   lr_rule="linear")
    assert key(per_device_batch_size=64, lr_rule="linear") == key(per_device_batch_size=16, world_size=2,
                                                                   grad_accum_steps=2, lr_rule="linear")
    # sqrt from 0.01 and linear from 0.005 both reach lr 0.02 at B=32.
    assert key(per_device_batch_size=32, lr_rule="sqrt") == key(per_device_batch_size=32, lr_rule="linear",
                                                                base_lr=0.005)
    assert key(per_device_batch_size=32, lr_rule="sqrt") != key(per_device_batch_size=32, lr_rule="linear")
    assert key(per_device_batch_size=8, hyperparameters={"momentum": 0.9}) != key(per_device_batch_size=8)
    # The warmup starts at base_lr, so with a warmup base_lr tells trials apart.
    assert key(per_device_batch_size=32, lr_rule="sqrt", warmup_epochs=1) != key(
        per_device_batch_size=32, lr_rule="linear", base_lr=0.005, warmup_epochs=1)


def test_the_grid_plan_counts_only_configurations_the_constraints_let_run() -> None:
    space = parse_space(GRID_SPACE + "constraints: {max_effective_batch_size: 32, skip_equivalent: true}\n")

    runnable = runnable_grid_points(space, "cpu")

    batches = sorted({p["per_device_batch_size"] * p["world_size"] for p in runnable})
    assert batches == [8, 16, 32]
    # B=8: the three rules coincide (1). B=16 and B=32: three rules each, but b x W splits of
    # one B are equivalent (3 + 3). B=64 is over the cap.
    assert len(runnable) == 1 + 3 + 3


def test_the_pareto_front_is_optunas_on_the_studys_own_objectives(storage_url: str, unique_name: str) -> None:
    study = optuna.create_study(study_name=unique_name, storage=open_storage(storage_url),
                                directions=["maximize", "minimize"])
    study.set_metric_names(["val_accuracy", "runtime_s"])
    points = [(0.90, 10.0), (0.95, 20.0), (0.85, 5.0), (0.80, 30.0), (0.95, 25.0)]
    for accuracy, runtime in points:
        study.add_trial(optuna.trial.create_trial(
            params={"per_device_batch_size": 8}, distributions={"per_device_batch_size": optuna.distributions.CategoricalDistribution([8])},
            values=[accuracy, runtime], user_attrs={"val_accuracy": accuracy, "runtime_s": runtime}))

    front = Search(unique_name, storage_url).pareto_front()

    assert sorted(front["number"]) == [0, 1, 2]
    assert sorted(front["number"]) == sorted(t.number for t in study.best_trials)
    assert list(front.columns[:2]) == ["number", "state"]


FUSED_GRID = """\
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [8, 32]}
  world_size: 1
  lr_rule: {choices: [constant, linear, sqrt]}
  base_lr: {choices: [0.001, 0.01]}
search: {sampler: grid, seed: 3, n_trials: 12, fuse: true}
objectives:
  - {metric: val_accuracy, direction: maximize}
"""


def test_asking_ahead_holds_each_configuration_once_queued_ones_first(
        storage_url: str, unique_name: str, tmp_path) -> None:
    """The searcher asks the grid's configurations with their params written with the trial
    (``ask_at``) and finds queued ones with one query: what it asks reads back through Optuna as
    Optuna's own ask writes it, a queued configuration is taken off the queue first, and no
    configuration is asked twice."""
    from ray.tune.search import Searcher

    from hpsearch.store import patient_storage
    from hpsearch.tune.orchestrator import _create_study
    from hpsearch.tune.searcher import StudySearcher

    space = parse_space(FUSED_GRID)
    study = _create_study(patient_storage(storage_url, 30), unique_name, space)
    assert study.get_trials(states=(TrialState.WAITING,)) == []
    queued = {"per_device_batch_size": 32, "world_size": 1, "lr_rule": "sqrt", "base_lr": 0.01,
              "grad_accum_steps": 1}
    study.enqueue_trial(queued)
    assert [t.system_attrs["fixed_params"] for t in study.get_trials(states=(TrialState.WAITING,))] == [queued]

    searcher = StudySearcher(study, space, 12, "cpu", tmp_path, slots=2)
    groups = [searcher.suggest("t0"), searcher.suggest("t1")]
    assert searcher.suggest("t2") == Searcher.FINISHED

    trials = optuna.load_study(study_name=unique_name, storage=open_storage(storage_url)).get_trials()
    # b 32 fused, six members; at b 8 = B0 every rule gives base_lr: one trial per base LR trains
    # and the four exact duplicates wait for them (RUNNING, duplicate_of), asked like the others.
    assert sorted(len(g["trial"].members) for g in groups) == [2, 6]
    assert sum(record.DUPLICATE_OF in t.user_attrs for t in study.get_trials()) == 4
    assert trials[0].params == queued  # the queue first, through Optuna's ask
    assert all(t.state == TrialState.RUNNING for t in trials)
    configurations = [tuple(sorted(t.params.items())) for t in trials]
    assert sorted(configurations) == sorted(tuple(sorted(p.items())) for p in grid_points(space))
    reference = optuna.create_study(sampler=create_sampler(space), direction="maximize").ask(distributions(space))
    assert all(t.distributions == reference.distributions for t in trials)
    assert study.sampler.remaining(study) == []
