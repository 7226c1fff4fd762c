"""The ``hpsearch`` command: a thin layer over the Python API.

Every command calls what a Python user would call (``hpsearch.start``, ``hpsearch.load``,
``Search.recommend``, ``hpsearch.list_studies``...) and prints it. Human output by default,
``--json`` where a script wants it. Errors of the hpsearch tree become one ``error:`` line on
stderr and their exit code (2 for bad input, docs/search.md lists them all); nothing else is
caught here.

Installed packages extend the command through two entry-point groups, so that the service
never imports them (the web dashboard is one: ``hpsearch dashboard``, ``hpsearch frontier`` and
the frontier file ``start`` writes come from ``hpsearch.dashboards.cli``):

- ``hpsearch.commands``: click commands added to ``hpsearch`` under the entry point's name;
- ``hpsearch.reports``: functions called with the ``Search`` at the end of ``start`` and
  ``resume``, returning ``{name: text}`` to print (``name: text``) and to add to ``--json``.

``hpsearch --help`` and every command's start stay light (a test checks it; docs/design.md,
"Imports"): rich's tables load inside the functions that print them, the workload checker
inside ``validate``, and the Python API keeps optuna, pandas, the analysis and Ray out of
``import hpsearch``.
"""

from __future__ import annotations

import atexit
import functools
import gc
import json
import math
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import hpsearch
from hpsearch import record
from hpsearch.errors import AnalysisError, HPSearchError, NoAnswerError, NoCompletedTrialError
from hpsearch.integrations.tracking import tracking_target
from hpsearch.planner.plan import grid_configurations, grid_warning
from hpsearch.progress import ProgressDisplay
from hpsearch.record import NOT_RUN_REASONS, PEAK_MEMORY_BYTES, REASON_BUDGET, RERUN_REASONS
from hpsearch.search_spaces import CORE_PARAMETERS, load_space, parse_budget_text, resolved_settings
from hpsearch.store import redact_url, store_name
from hpsearch.store.settings import resolve_settings
from hpsearch.study import (
    PENDING,
    TrialPhases,
    display_value,
    duplicates_line,
    format_bytes,
    format_seconds,
    fused_summary,
    group_label,
    is_solo_estimate,
    learned_nothing,
    param_names,
    ran_as_text,
    searched_params,
    span_of,
    to_csv,
    to_json,
)
from hpsearch.study.reasons import describe_reason, failure_summary, no_completion_summary
from hpsearch.trials.scaling import few_lrs_warning

if TYPE_CHECKING:
    from hpsearch.search import Search

__all__ = ["COMMANDS_GROUP", "REPORTS_GROUP", "cli", "main"]

#: Entry-point group of the commands other packages add to ``hpsearch``.
COMMANDS_GROUP = "hpsearch.commands"
#: Entry-point group of the reports other packages add to the end of ``start`` and ``resume``.
REPORTS_GROUP = "hpsearch.reports"


@functools.cache
def _plugin_commands() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=COMMANDS_GROUP)}


def _reports() -> list[Callable[[Any], Mapping[str, str]]]:
    return [ep.load() for ep in sorted(entry_points(group=REPORTS_GROUP), key=lambda ep: ep.name)]

_STORAGE_HELP = "Study store URL (default: $HPSEARCH_STORAGE, the space file's storage, sqlite:///hpsearch.db)."
_BUDGET_HELP = ("What the whole search may spend: a wall-clock time (40s, 90m, 2h, 1h30m) and/or device-hours "
                "(1.5dh), e.g. '2h, 4dh'; 'none' for no limit.")


def _budget_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """``--budget`` as a ``Budget``; bad text is a ``SpaceError``: one ``error:`` line, exit 2."""
    return None if value is None else parse_budget_text(value, source="--budget")


class _Group(click.Group):
    """Translates hpsearch errors into a message and an exit code, at the edge only; adds the
    commands of installed plugins (``COMMANDS_GROUP``), loaded only when run or listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_plugin_commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in _plugin_commands():
            loaded = _plugin_commands()[cmd_name].load()
            command = loaded if isinstance(loaded, click.Command) else None
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HPSearchError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hpsearch")
def cli() -> None:
    """Search batch size, world size and learning-rate scaling rules for data-parallel training."""


@cli.command()
@click.argument("space_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--study", "study_name", help="Study name (default: the file's 'study', else its file name).")
@click.option("--address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray).")
@click.option("--n-trials", type=click.IntRange(min=1),
              help="Trials to finish (default: the space's search.n_trials); the study keeps it as its total.")
@click.option("--budget", callback=_budget_option, help=_BUDGET_HELP + " Replaces the space's search.budget.")
@click.option("--mlflow", "mlflow_uri", metavar="URI",
              help="Also log the search to MLflow at URI (default: $MLFLOW_TRACKING_URI, the space's tracking.mlflow).")
@click.option("--no-confirm", is_flag=True,
              help="Do not confirm the answer by running it after the trials (the space's analysis.confirm).")
@click.option("--no-progress", is_flag=True, help="No live progress display.")
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
def start(space_file: Path, storage: str | None, study_name: str | None, address: str | None, n_trials: int | None,
          budget: Any, mlflow_uri: str | None, no_confirm: bool, no_progress: bool, as_json: bool) -> None:
    """Run a search defined by SPACE_FILE and print its trials, its frontier and its answer.

    After the trials the search confirms its answer (analysis.confirm): it runs the answer as
    new trials with new seeds and says whether it reached the target within the interval it
    stated before it ran (--no-confirm skips that).

    Ctrl-C stops it cleanly: finished trials are kept, the running ones are marked
    'interrupted', and 'hpsearch resume STUDY' finishes the study. Exits with status 4 when no
    trial completed (every one failed, was stopped or skipped), saying why in one line.
    """
    space = hpsearch.load_space(space_file)
    display, on_plan = _progress(n_trials or space.search.n_trials, space.objectives[0].metric,
                                 space.objectives[0].direction == "maximize", enabled=not no_progress and not as_json,
                                 quiet=as_json)
    with display:
        search = hpsearch.start(space, storage=storage, study=study_name, address=address,
                                on_event=display.on_event, on_plan=on_plan, budget=budget, mlflow=mlflow_uri,
                                confirm=False if no_confirm else None, n_trials=n_trials)
    _report(search, as_json, devices=on_plan.devices, devices_per_node=on_plan.node_devices)
    _require_completed(search)


@cli.command()
@click.argument("study")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray).")
@click.option("--n-trials", type=click.IntRange(min=1),
              help="A new total of finished trials for the study (default: the space's n_trials).")
@click.option("--budget", callback=_budget_option,
              help=_BUDGET_HELP + " A new total for the study, what earlier runs spent included (kept by the study).")
@click.option("--mlflow", "mlflow_uri", metavar="URI",
              help="Also log the search to MLflow at URI (default: $MLFLOW_TRACKING_URI, the space's tracking.mlflow).")
@click.option("--no-confirm", is_flag=True, help="Do not confirm the answer after the trials.")
@click.option("--no-progress", is_flag=True, help="No live progress display.")
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
def resume(study: str, storage: str | None, address: str | None, n_trials: int | None, budget: Any,
           mlflow_uri: str | None, no_confirm: bool, no_progress: bool, as_json: bool) -> None:
    """Finish STUDY after its search was killed, interrupted or out of budget (or extend it
    with --n-trials or --budget).

    Finished trials stay as they are; trials left running become FAIL 'interrupted' and their
    configurations, and those of trials the budget stopped, run again, until the study has
    n_trials finished trials or its budget is spent. Exits with status 4 when the study has no
    completed trial.
    """
    objective = hpsearch.load(study, storage=storage).space.objectives[0]  # a study hpsearch can resume
    display, on_plan = _progress(0, objective.metric, objective.direction == "maximize",
                                 enabled=not no_progress and not as_json, quiet=as_json)
    with display:
        search = hpsearch.resume(study, storage=storage, address=address, n_trials=n_trials,
                                 on_event=display.on_event, on_plan=on_plan, budget=budget, mlflow=mlflow_uri,
                                 confirm=False if no_confirm else None)
    _report(search, as_json, devices=on_plan.devices, devices_per_node=on_plan.node_devices)
    _require_completed(search)


@cli.command()
@click.argument("study")
@click.option("--devices", "-n", type=click.IntRange(min=1),
              help="Devices the answer is for (default: what the cluster offers one trial, as start answers for).")
@click.option("--runs", type=click.IntRange(min=1, max=16),
              help="Runs a round has (default: the space's analysis.confirm; auto: 2 where the budget fits them).")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray).")
@click.option("--no-progress", is_flag=True, help="No live progress display.")
@click.option("--json", "as_json", is_flag=True, help="Print the rounds and the answer as JSON.")
def confirm(study: str, devices: int | None, runs: int | None, storage: str | None, address: str | None,
            no_progress: bool, as_json: bool) -> None:
    """Run STUDY's answer for N devices as new trials, with seeds no earlier run of it used, and
    say whether it held: reached the target within the interval it stated before it ran. The
    runs are folded into the fits and the answer is given again, in rounds, until it holds or
    the confirmation budget (analysis.confirm_budget) is spent. None of the search's own trials
    runs. A study started before confirmation existed is confirmable.
    """
    objective = hpsearch.load(study, storage=storage).space.objectives[0]
    display, on_plan = _progress(0, objective.metric, objective.direction == "maximize",
                                 enabled=not no_progress and not as_json, quiet=True)
    with display:
        search = hpsearch.confirm(study, devices=devices, runs=runs, storage=storage, address=address,
                                  on_event=display.on_event, on_plan=on_plan)
    answer_devices = devices or on_plan.devices
    answer: Any = None
    refusal = None
    try:
        answer = search.recommend(answer_devices)
    except AnalysisError as exc:
        refusal = str(exc)
    if as_json:
        click.echo(json.dumps({"confirmations": [r.to_dict() for r in search.confirmations],
                               "recommendation": answer.to_dict() if answer is not None else {"error": refusal}},
                              default=str))
        return
    _print_rounds(search)
    if answer is not None:
        _print_recommendation(search.study_name, answer, brief=True)
    else:
        click.echo(f"no recommendation: {refusal}")


def _print_rounds(search: Search) -> None:
    """One line per confirmation round: the answer it ran, what it predicted before it ran, what
    its runs measured, and whether it held."""
    for round_ in search.confirmations:
        click.echo(f"confirmation {round_.describe()}")


def _require_completed(search: Search) -> None:
    """Exit status 4, with one line saying why, when the study has no COMPLETE trial."""
    line = no_completion_summary(search.study.get_trials(deepcopy=False))
    if line is not None:
        raise NoCompletedTrialError(f"study {search.study_name!r}: {line}")


def _progress(n_trials: int, objective: str, maximize: bool, *, enabled: bool, quiet: bool) -> tuple[Any, Any]:
    """The live display and the callback that announces the plan once the search is planned."""
    display = ProgressDisplay(n_trials, objective, maximize, enabled=enabled)

    def on_plan(plan: Any) -> None:
        on_plan.devices = plan.devices  # type: ignore[attr-defined]  # the answer at the end is for these,
        on_plan.node_devices = plan.node_devices  # type: ignore[attr-defined]  # on nodes of this many
        display.set_total(plan.n_trials)
        if quiet:
            return
        resumed = ""
        if plan.finished or plan.requeued:
            resumed = (f" ({plan.finished} already finished, {_count(plan.requeued, 'cut-short trial')} "
                       "queued to run again)")
        budget = _plan_budget(plan)
        if plan.n_trials == 0:
            click.echo(f"study {plan.study_name!r} has nothing left to run{resumed}{budget}", err=True)
            return
        click.echo(f"study {plan.study_name!r} in {redact_url(plan.storage)}: {_count(plan.n_trials, 'trial')} "
                   f"to run{resumed}, up to {plan.max_concurrent} at once on {plan.device}{budget}", err=True)

    on_plan.devices = None  # type: ignore[attr-defined]
    on_plan.node_devices = None  # type: ignore[attr-defined]
    return display, on_plan


def _plan_budget(plan: Any) -> str:
    """``; budget: 1m30s of 2m wall-clock spent (30s left), ...`` for a budgeted plan."""
    if not plan.budget.limited:
        return ""
    status = plan.budget_status()
    return f"; {status.describe()}" + ("; resume with a larger --budget to go on" if status.spent_out else "")


def _report(search: Search, as_json: bool, *, devices: int | None, devices_per_node: int | None = None) -> None:
    """The end of start and resume: the trial table, the frontier, the answer for the devices
    the cluster has (on its nodes of ``devices_per_node``), and the plugins' reports (the
    dashboard's writes the frontier as an HTML file)."""
    x, y = search.frontier_axes
    outputs: dict[str, str] = {}
    for report in _reports():
        outputs.update(report(search))
    answer: Any = None
    refusal = None
    trials = search.study.get_trials(deepcopy=False)
    # Nothing trained (every trial failed, or none ran): an answer's refusal would only ask for a
    # target ("no trial recorded val_accuracy ...; give one"), under trials that failed for a
    # reason no target fixes. The failures' reasons are what to read.
    trained = any(t.state.name in ("COMPLETE", "PRUNED") for t in trials)
    if devices and trained:
        try:
            answer = search.recommend(devices, devices_per_node=devices_per_node)
        except AnalysisError as exc:
            refusal = str(exc)
    budget = search.budget_status()
    if as_json:
        recommendation = answer.to_dict() if answer is not None else {"error": refusal} if refusal else None
        tracked = {"mlflow": search.tracking.to_dict()} if search.tracking is not None else {}
        click.echo(json.dumps({**search.summary(), **outputs, "recommendation": recommendation,
                               "budget": budget.to_dict(), **tracked}, default=str))
        return
    df = _marked(search.trials_dataframe())
    searched = _searched_params(search, df)
    columns = _table_columns(df, [x, y, *search.objectives], searched)
    console = _console()
    # The searched params that vary come before the batch columns: an optimizer left out
    # left two rows of one batch and LR at accuracies 0.11 and 0.93 unexplained.
    shown = _fit_columns(df, columns, console.width, first=["number", "state", y, x, *search.objectives, *searched])
    _print_table(console, df, shown, title=f"study {search.study_name}: trials")
    front = search.frontier(x=x, y=y)
    if len(front):
        _print_table(console, _marked(front, group=_GROUP in shown), shown, title=f"frontier: {x} vs {y} (non-dominated trials)")
    for line in _legend(df, shown):
        click.echo(line)
    for line in fused_summary(df).lines():  # as status says it; nothing for a study that never fused
        click.echo(line)
    chance = _at_chance(df)
    if chance:
        click.echo(chance)
    if not trained:
        for line in failure_summary(trials):
            click.echo(line)
    if len(shown) < len(columns):
        left_out = [_HEADERS.get(c, c) for c in columns if c not in shown]
        click.echo(f"not shown at this width: {', '.join(left_out)} (every column: hpsearch export "
                   f"{search.study_name})")
    summary = search.summary()
    duplicates = _duplicates_line(summary)
    if duplicates:
        click.echo(duplicates)
    if summary["confirmation_runs"]:
        target = f" of {summary['target']}" if summary["target"] is not None else ""
        click.echo(f"{summary['finished']}{target} trials finished, {_count(summary['confirmation_runs'], 'confirmation run')}")
    _print_rounds(search)
    if answer is not None:
        _print_recommendation(search.study_name, answer, brief=True)
    elif refusal:
        click.echo(f"no recommendation yet: {refusal}")
    for name, text in outputs.items():
        click.echo(f"{name.replace('_', ' ')}: {text}")
    if search.tracking is not None:
        click.echo(f"mlflow: {search.tracking.describe(search.study_name)}")
    if budget.budget.limited:
        stopped = search.summary()["cut_short"].get(REASON_BUDGET, 0)
        click.echo(budget.describe() + (f"; {_count(stopped, 'trial')} stopped or not started by the budget run "
                                        f"first on 'hpsearch resume {search.study_name} --budget MORE'"
                                        if stopped else ""))
    click.echo(f"study stored in {store_name(search.storage)} as {search.study_name!r}")


@cli.command()
@click.argument("study")
@click.option("--devices", "-n", type=click.IntRange(min=1), required=True,
              help="Devices (GPUs, or CPU slots) the run may use; the answer's world size is at most this.")
@click.option("--devices-per-node", type=click.IntRange(min=1),
              help="Devices one node holds: W ranks run on ceil(W / G) nodes, and across nodes their all-reduce "
                   "costs what trials that spanned nodes measured. Default: the most devices a trial of the study "
                   "ran on one node (said as assumed).")
@click.option("--target", help="The target, METRIC=VALUE (default: the space's analysis.target, else derived).")
@click.option("--minimize", type=click.Choice(["time", "device-hours"]), default="time", show_default=True,
              help="What the answer minimises to reach the target.")
@click.option("--allow-larger-batch", is_flag=True,
              help="Let the per-device batch go up to 4x the largest that ran, below the smallest that ran out of "
                   "memory and, where a rank's memory is known, at most what the memory fit predicts to fit.")
@click.option("--space", "space_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a follow-up space for these devices, centred on the answer (run it with "
                   "'hpsearch start FILE': the answer runs first).")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: the recommendation and the analysis (a refusal: its reason and the analysis so far).")
def recommend(study: str, devices: int, devices_per_node: int | None, target: str | None, minimize: str,
              allow_larger_batch: bool, space_out: Path | None, storage: str | None, as_json: bool) -> None:
    """What to run on N devices: per-device batch, world size, accumulation, LR rule, LR and the
    workload's own searched parameters, with the predicted time, device-hours and samples to the
    target, from the laws fitted to STUDY. The answer names the nodes it assumes ("16 devices on
    2 nodes of 8").

    Exits with status 5 when the study cannot answer yet (no trial reached the target, too few
    batch sizes...), saying why; with --json, after printing the refusal and the analysis so far.
    """
    search = hpsearch.load(study, storage=storage)
    try:
        analysis = search.analyze(target)
        answer = search.recommend(devices, minimize=minimize, allow_larger_batch=allow_larger_batch,
                                  analysis=analysis, devices_per_node=devices_per_node)
    except NoAnswerError as exc:
        if as_json:
            partial = exc.analysis.to_dict() if exc.analysis is not None else None
            click.echo(json.dumps({"recommendation": None, "refusal": str(exc), "analysis": partial, "space": None},
                                  default=str))
        raise
    if space_out is not None:
        space_out.write_text(search.follow_up_space(answer))
    if as_json:
        click.echo(json.dumps({"recommendation": answer.to_dict(), "analysis": analysis.to_dict(),
                               "space": None if space_out is None else str(space_out)}, default=str))
        return
    _print_recommendation(study, answer, brief=False)
    if space_out is not None:
        click.echo(f"follow-up space: {space_out} (hpsearch start {space_out})")


def _print_recommendation(study: str, answer: Any, *, brief: bool) -> None:
    """The answer in a few lines: what to run (the workload's own parameters too), what it is
    predicted to cost, what was extrapolated and (unless ``brief``) why."""
    kind = f" ({answer.device_kind})" if answer.device_kind else ""
    click.echo(f"recommendation for {_count(answer.devices, 'device')}{kind} of study {study!r}, to reach "
               f"{answer.target}, minimising {answer.minimize}:")
    rule = (f", {answer.rule} rule from base_lr {answer.base_lr:.4g}" if answer.rule and answer.base_lr is not None
            else "")
    click.echo(f"  run   b {answer.per_device_batch_size} x W {answer.world_size} x A {answer.grad_accum_steps} "
               f"= B {answer.effective_batch_size}, lr {answer.lr:.4g}{_interval(answer.lr_interval)}{rule}")
    # The LR above is the rule's, the schedule's peak: say what the trials did with it, so that
    # a cosine study's answer is set as a scheduler's initial LR, not as its last.
    click.echo(f"  sched {answer.schedule_text()}")
    layout = answer.layout
    # The nodes the answer assumes: printed where its ranks span nodes, and always in the full
    # answer (a default read off the trials is an assumption the user may need to correct).
    if layout is not None and (not brief or answer.nodes > 1):
        source = (f"{layout.source}; --devices-per-node G to say otherwise" if layout.assumed
                  else "devices per node given")
        click.echo(f"  nodes {layout} ({source}); the answer's {_count(answer.world_size, 'rank')} on "
                   f"{_count(answer.nodes, 'node')}")
    # The study's other parameters (the workload's own, such as hidden; momentum...), so that
    # what is printed can be run as it stands.
    others = {k: v for k, v in answer.params().items() if k not in CORE_PARAMETERS}
    if others:
        click.echo("  with  " + ", ".join(f"{k} {_fmt(v)}" for k, v in others.items()))
    # Beyond the LR law's peak (a surge) the answer does not scale its LR up: why, in the brief
    # answer too, since a sqrt or linear rule there sends users to LRs that diverge.
    if answer.lr_note:
        click.echo(f"  lr    {answer.lr_note}")
    # A trial that crossed the target at its first evaluation may have crossed it sooner: its
    # time, device-hours and samples are ceilings, and the line says so where the numbers are.
    most = "at most " if answer.upper_bound else ""
    click.echo(f"  cost  {most}{_duration(answer.time_s)}{_interval(answer.time_interval, _duration)} of training, "
               f"{most}{answer.device_hours:.3g}{_interval(answer.device_hours_interval)} device-hours, "
               f"{most}{answer.samples:,.0f}{_interval(answer.samples_interval, lambda v: f'{v:,.0f}')} samples "
               f"({answer.basis}){_draws(answer)}")
    if answer.emulation_note():  # the math of W, not its time: said where the time is
        click.echo(f"  note  {answer.emulation_note()}")
    if answer.compile_s:
        click.echo(f"  plus  compiling the model once: up to {_duration(answer.compile_s)} measured (torch.compile with a "
                   "cold cache; not in the cost above)")
    if answer.peak_memory_bytes is not None or answer.per_device_batch_cap is not None:
        peak = (f"{format_bytes(answer.peak_memory_bytes)} per rank "
                f"{'measured' if answer.step_time_s is None else 'predicted'}"
                if answer.peak_memory_bytes is not None else "peak not measured")
        cap = f", {answer.batch_cap_text()}" if answer.batch_cap_text() else ""
        click.echo(f"  mem   {peak}{cap}")
    for line in answer.extrapolated:
        click.echo(f"  extrapolated: {line}")
    if answer.confirmation is not None:
        click.echo(f"  {answer.confirmation.text}")
    if brief:
        click.echo(f"  (why, and other device counts: hpsearch recommend {study} --devices N)")
        return
    for line in answer.explanation:
        click.echo(f"  - {line}")
    if answer.alternatives:
        from rich.table import Table  # heavy: see the module's docstring

        table = Table("W", "b", "A", "B", "time", "device-hours", "extrapolated",
                      title="best configuration per world size")
        reasons: dict[str, int] = {}
        for alt in answer.alternatives:
            marks = [str(reasons.setdefault(r, len(reasons) + 1)) for r in alt.extrapolated]
            table.add_row(str(alt.world_size), str(alt.per_device_batch_size), str(alt.grad_accum_steps),
                          str(alt.effective_batch_size), _duration(alt.time_s), f"{alt.device_hours:.3g}",
                          ", ".join(marks) or "-")
        _console().print(table)
        for reason, mark in reasons.items():
            click.echo(f"  ({mark}) {reason}")


def _draws(answer: Any) -> str:
    """`` (90%, 480 of 500 draws)``: the level of a fitted answer's intervals and the bootstrap
    draws they rest on (those that left a model's support are dropped, not clipped); empty for
    an answer without intervals."""
    if answer.interval_draws is None or answer.interval_draws_total is None:
        return ""
    interval = answer.time_interval or answer.samples_interval
    level = f"{interval.level:.0%}, " if interval is not None else ""
    if answer.interval_draws < answer.interval_draws_total and answer.interval_coverage is not None:
        # The dropped draws may lie beyond either end: the label says the coverage it is sure of.
        return (f" ({level}{answer.interval_draws} of {answer.interval_draws_total} draws fitted: at least "
                f"{answer.interval_coverage:.0%} of all)")
    return f" ({level}{answer.interval_draws} of {answer.interval_draws_total} draws)"


def _interval(interval: Any, fmt: Any = None) -> str:
    if interval is None:
        return ""
    # A collapsed interval ("lr 0.16 [0.16, 0.16]") is no bound: its fit went exactly through
    # its points (one configuration per batch, no spread), so nothing measured the scatter.
    if interval.high - interval.low <= 1e-9 * max(abs(interval.high), abs(interval.low)):
        return " (no interval: the fit has no spread to bound it with)"
    fmt = fmt or (lambda v: f"{v:.3g}")
    return f" [{fmt(interval.low)}, {fmt(interval.high)}]"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "inf"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


@cli.command()
@click.argument("space_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the parsed space as JSON.")
def validate(space_file: Path, as_json: bool) -> None:
    """Check SPACE_FILE against the schema without running anything: also that its workload's
    module imports and takes every option and parameter the space hands it (no data is built)."""
    # The workload checker (its machinery; the workload's own module and torch as it checks):
    # validate's alone, milliseconds every other command and --help would pay.
    from hpsearch.workload_check import check_space_workload

    space = load_space(space_file)
    if space.tracking.mlflow:  # MLflow asked for and not installed: said here, before any search
        tracking_target(space, space.tracking.mlflow, space.study, asked=True)
    checked = check_space_workload(space)
    few, oversized = few_lrs_warning(space), grid_warning(space)
    for warning in (*checked.warnings, *(w for w in (few, oversized) if w)):
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        data = asdict(space)
        data.pop("source_text", None)
        click.echo(json.dumps(data, default=str))
        return
    searched = ", ".join(space.searched) or "none"
    size = space.grid_size()
    click.echo(f"{space_file}: ok")
    click.echo(f"  study {space.study!r}, workload {space.workload.name} x {_count(space.workload.epochs, 'epoch')}")
    if checked.passed:
        click.echo(f"  passed to the workload as options: {', '.join(checked.passed)}")
    click.echo(f"  searched: {searched}" + (f" ({_count(size, 'configuration')})" if size else ""))
    click.echo(f"  objectives: {', '.join(f'{o.direction} {o.metric}' for o in space.objectives)}")
    grid = grid_configurations(space)
    n_trials = space.search.n_trials if grid is None else min(space.search.n_trials, grid)  # as the search plans it
    click.echo(f"  sampler {space.search.sampler}, {_count(n_trials, 'trial')}, seed {space.search.seed}")
    if space.tracking.mlflow:
        click.echo(f"  tracked in MLflow at {redact_url(space.tracking.mlflow)}, experiment "
                   f"{space.tracking.experiment or space.study!r}")
    # What the search runs with, defaults filled in: otherwise a bare 'fuse: yes' (YAML's true)
    # or an n_trials the file leaves out shows only once trials run.
    click.echo("  resolved settings (defaults filled in):")
    for section, text in resolved_settings(space).items():
        click.echo(f"    {section}: {text}")


@cli.command(name="ls")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def ls_(storage: str | None, as_json: bool) -> None:
    """List the studies in a store (a store that does not exist has none, and is not created)."""
    url = resolve_settings(storage=storage).storage
    studies = hpsearch.list_studies(url)
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in studies], default=str))
        return
    if not studies:
        click.echo(f"no studies in {store_name(url)}")
        return
    from rich.table import Table  # heavy: see the module's docstring

    table = Table("study", "trials", "states", "best", "last activity", title=f"studies in {store_name(url)}")
    for s in studies:
        states = " ".join(f"{k.lower()} {v}" for k, v in sorted(s.states.items()))
        best = ("-" if s.best_values is None
                else ", ".join(f"{m} {_fmt(v)}" for m, v in zip(s.objectives, s.best_values)))
        last = s.last_activity.strftime("%Y-%m-%d %H:%M") if s.last_activity else "-"
        table.add_row(s.name, str(s.n_trials), states, best, last)
    _console().print(table)


@cli.command()
@click.argument("study")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--files", is_flag=True,
              help="Also delete the study's files on this machine: its runs folder (trial logs, saved weights) and "
                   "its frontier page.")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
def delete(study: str, storage: str | None, files: bool, yes: bool) -> None:
    """Delete STUDY and its trials from the store, so that its name can be used again.

    Asks first (--yes does not). Refused, with status 3, while a search writes the study (for
    SQLite, the file). Its runs folder and frontier page are kept, and named, unless --files;
    with --files, they are deleted only when their owner marker says they are this study's in
    this store alone (a copy of the store finds the same files), and otherwise kept with the
    reason.
    """
    search = hpsearch.load(study, storage=storage)
    if not yes:
        n_trials = search.summary()["n_trials"]
        also = "".join(f" and {path}" for path in search.file_verdict().delete) if files else ""
        try:
            confirmed = click.confirm(f"delete study {study!r} ({_count(n_trials, 'trial')}) from "
                                      f"{store_name(search.storage)}{also}?", default=False, err=True)
        except click.Abort:  # no answer: the end of the input
            click.echo(err=True)
            confirmed = False
        if not confirmed:
            click.echo("nothing deleted", err=True)
            sys.exit(1)
    deleted = search.delete(files=files)
    click.echo(f"deleted study {study!r} ({_count(deleted.n_trials, 'trial')}) from {deleted.storage}")
    kept = dict(deleted.kept)
    for path in deleted.files:
        if path not in kept:
            click.echo(f"  deleted {path}")
        else:
            click.echo(f"  kept {path}: {kept[path]}" if kept[path] else f"  kept {path} (--files deletes it)")


@cli.command(name="export-trial")
@click.argument("study")
@click.argument("number", type=click.IntRange(min=0))
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write trial.json and launch.sh into (created).")
@click.option("--world-size", type=click.IntRange(min=1),
              help="Ranks to train at (default: the trial's); the LR follows the trial's rule at the new batch.")
@click.option("--epochs", type=click.IntRange(min=1), help="Epochs to train (default: the trial's).")
@click.option("--nodes", type=click.IntRange(min=1),
              help="Nodes to run the ranks on (default: the trial's at its own world size, else 1); launch.sh then "
                   "runs once on each node, with NODE_RANK and RDZV_ENDPOINT set.")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def export_trial(study: str, number: int, output: Path, world_size: int | None, epochs: int | None,
                 nodes: int | None, storage: str | None, as_json: bool) -> None:
    """Write trial NUMBER of STUDY as a torchrun job: its full configuration and a launch
    script. 'bash DIR/launch.sh' trains it with torchrun (no Ray, no store) and writes the
    final weights (model.pt) and metrics (metrics.json) into DIR. A trial that spanned nodes
    runs on as many (torchrun's c10d rendezvous): 'NODE_RANK=i RDZV_ENDPOINT=HOST:PORT bash
    DIR/launch.sh' on each. A workload of your own must be importable where it runs
    (PYTHONPATH); launch.sh checks that first. A trial that failed is exported all the same
    (its job reproduces the failure), after a warning that says it failed and why."""
    job = hpsearch.load(study, storage=storage).export_trial(number, output, world_size=world_size, epochs=epochs,
                                                             nodes=nodes)
    for warning in job.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(job.to_dict()))
        return
    spec = job.spec
    click.echo(f"wrote {job.config} and {job.launch}")
    click.echo(f"  trial #{number} of {study!r}: b {spec.per_device_batch_size} x W {spec.world_size} x A "
               f"{spec.grad_accum_steps} = B {spec.effective_batch_size}, {spec.lr_rule} rule, lr {spec.lr:.4g}"
               + (f" (the trial: W {job.trial_world_size}, lr {job.trial_lr:.4g})" if spec.world_size != job.trial_world_size
                  else "") + f", {_count(spec.epochs, 'epoch')} on {spec.device}"
               + (f", {job.nodes} nodes ({' + '.join(map(str, job.processes_per_node))} processes)" if job.nodes > 1
                  else ""))
    for module in job.modules:
        folder = job.module_paths.get(module)
        click.echo(f"  the workload's module {module!r} must be importable where it runs"
                   + (f": PYTHONPATH={folder} bash {job.launch}" if folder is not None else " (PYTHONPATH)"))
    if job.nodes == 1:
        click.echo(f"  run it: bash {job.launch}")
    else:
        click.echo(f"  run it on each node, with the same endpoint (node 0's address and a free port): "
                   f"NODE_RANK=<0 to {job.nodes - 1}> RDZV_ENDPOINT=HOST:PORT bash {job.launch}")


@cli.command()
@click.argument("study")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="File to write (default: stdout).")
@click.option("--to", "to", nargs=2, type=(click.Choice(["mlflow"]), str), metavar="mlflow URI",
              help="Log the study to an experiment tracker instead: 'mlflow URI' (docs/tracking.md).")
@click.option("--experiment", help="With --to mlflow: the experiment (default: the space's tracking.experiment, "
                                   "else the study's name).")
@click.option("--devices", "-n", type=click.IntRange(min=1),
              help="With --to mlflow: the devices the study's recommendation is for (default: the most a trial used).")
@click.option("--json", "as_json", is_flag=True, help="With --to mlflow: print what was logged as JSON.")
def export(study: str, storage: str | None, fmt: str, output: Path | None, to: tuple[str, str] | None,
           experiment: str | None, devices: int | None, as_json: bool) -> None:
    """Write every trial of STUDY, with all params and attrs, as CSV or JSON; or, with
    --to mlflow URI, log it to MLflow: a parent run for the study and a nested run per trial.
    Exporting again adds no runs: those logged before are found and brought up to date."""
    if to is not None:
        report = hpsearch.load(study, storage=storage).export_to_mlflow(to[1], experiment=experiment, devices=devices)
        click.echo(json.dumps(report.to_dict()) if as_json else report.describe(study))
        return
    df = hpsearch.load(study, storage=storage).trials_dataframe(all_attrs=True)
    text = to_csv(df) if fmt == "csv" else to_json(df)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        click.echo(f"wrote {_count(len(df), 'trial')} to {output}", err=True)


@cli.command()
@click.argument("study")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def best(study: str, storage: str | None, as_json: bool) -> None:
    """Print the best COMPLETE trial of STUDY: best on its first objective, a tie broken by the
    next objective (never a trial another one beats on every objective). Exits with status 4
    when the study has no completed trial."""
    search = hpsearch.load(study, storage=storage)
    trial = search.best_trial
    if trial is None:
        if as_json:
            click.echo("null")
        line = no_completion_summary(search.study.get_trials(deepcopy=False)) or "no trial completed"
        raise NoCompletedTrialError(f"study {study!r}: {line}")
    values = dict(zip(search.objectives, trial.values))
    user_attrs = {k: v for k, v in trial.user_attrs.items() if k != record.CURVES}
    if as_json:
        click.echo(json.dumps({"number": trial.number, "values": values, "params": trial.params,
                               "user_attrs": user_attrs}, default=str))
        return
    click.echo(f"best trial #{trial.number} of {study!r}: " + ", ".join(f"{m} {_fmt(v)}" for m, v in values.items()))
    marks = {record.PER_DEVICE_BATCH_SIZE: ran_as_text(user_attrs)}
    if is_solo_estimate(user_attrs.get(record.RUNTIME_BASIS)):
        group = group_label(user_attrs.get(record.FUSED_GROUP), user_attrs.get(record.FUSED_MEMBERS))
        marks[record.RUNTIME_S] = "a solo estimate" + (f": it trained fused in group {group}" if group != "-" else "")
    for key, value in {**trial.params, **user_attrs}.items():
        # Dates, byte counts and thousands as people read them; the phases have their own view.
        text = display_value(key, value)
        if text is not None:
            mark = f" ({marks[key]})" if marks.get(key) else ""
            click.echo(f"  {key}: {text}{mark}")
    if record.PHASES in user_attrs:
        click.echo(f"  phases: hpsearch status {study} --trial {trial.number}")


@cli.command()
@click.argument("study")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--trial", "trial_number", type=click.IntRange(min=0), metavar="N",
              help="Show trial N instead: its configuration, state and reason, and where its time went (its phases).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(study: str, storage: str | None, trial_number: int | None, as_json: bool) -> None:
    """Progress of STUDY: trials by state, the best so far, the trials that trained fused (in
    which groups) and why others ran on their own, and the trials still running or pending
    (proposed, waiting for their devices).

    With --trial N, trial N alone: its configuration, state and reason, its fused group and
    step times where it trained fused, and its phases (asked, launched,
    devices free, devices reserved, ranks handed to workers, ranks ready, training started and
    ended, last report, told) with the seconds between them and what each gap was spent on
    (start-up, waiting for devices, training, the rest), so a slow orchestrator shows. Exits
    with status 2 when the study has no trial N.
    """
    search = hpsearch.load(study, storage=storage)
    if trial_number is not None:
        _print_trial_phases(search, search.trial_phases(trial_number), as_json)
        return
    summary = search.summary()
    df = search.trials_dataframe()
    keys = ("number", record.LR_RULE, record.PER_DEVICE_BATCH_SIZE, record.WORLD_SIZE, record.EFFECTIVE_BATCH_SIZE, record.EPOCHS_COMPLETED,
            "datetime_start")
    for state, key in (("RUNNING", "running"), ("PENDING", "pending")):
        rows = df[df.state == state] if len(df) else df
        summary[key] = [{k: _plain(row.get(k)) for k in keys} for _, row in rows.iterrows()]
    budget = search.budget_status()
    summary["budget"] = budget.to_dict()
    process = search.search_process()
    summary["search"] = process.to_dict()
    if as_json:
        click.echo(json.dumps(summary, default=str))
        return
    states = ", ".join(f"{k.lower()} {v}" for k, v in sorted(summary["states"].items())) or "no trials"
    click.echo(f"study {study!r} in {store_name(search.storage)}: {_count(summary['n_trials'], 'trial')} ({states})")
    if summary["target"] is not None:
        click.echo(f"finished {summary['finished']} of {summary['target']} (skipped, interrupted and budget-stopped "
                   "trials do not count)" + (f", {_count(summary['confirmation_runs'], 'confirmation run')} apart"
                                             if summary["confirmation_runs"] else ""))
    grid = search.grid_progress()
    if grid is not None:
        click.echo(grid.describe())
    for round_ in search.confirmations:
        click.echo(f"confirmation {round_.describe()}")
    if budget.budget.limited:
        click.echo(budget.describe())
    best_trial = summary["best_trial"]
    if best_trial is not None:
        values = ", ".join(f"{m} {_fmt(v)}" for m, v in best_trial["values"].items())
        click.echo(f"best so far: trial #{best_trial['number']}: {values}")
    for reason, n in summary["reasons"].items():
        # A trial the search cut short whose configuration has run again since is not waiting
        # for resume: counted, "2 trials interrupted ... resume runs it again" would show after
        # the resume that completed both.
        waiting = summary["cut_short"].get(reason, 0) if reason in RERUN_REASONS else n
        if waiting:
            click.echo(f"{_count(waiting, 'trial')} {reason}: {describe_reason(reason, waiting)}")
        if n - waiting:
            click.echo(f"{_count(n - waiting, 'trial')} {reason}, run again since: a later trial ran "
                       f"{'its configuration' if n - waiting == 1 else 'their configurations'} (rerun_of)")
    duplicates = _duplicates_line(summary)
    if duplicates:
        click.echo(duplicates)
    for line in fused_summary(df).lines():  # nothing for a study that never fused
        click.echo(line)
    trained, unstarted = summary["running"], summary["pending"]
    if (trained or unstarted) and process.running is False:
        # Trials stay RUNNING in the store when their search dies (kill -9): not training. Those
        # that never got their devices never ran: resume puts them back in the queue.
        resume = f"hpsearch resume {study}" + (f" --storage {store_name(storage)}" if storage else "")
        parts, does = [], []
        if trained:
            parts.append(f"{_count(len(trained), 'trial')} it left training ({_numbers(trained)}) "
                         f"{'was' if len(trained) == 1 else 'were'} cut short")
            does.append(f"marks {'it' if len(trained) == 1 else 'them'} interrupted and runs "
                        f"{'it' if len(trained) == 1 else 'them'} again")
        if unstarted:
            parts.append(f"{_count(len(unstarted), 'trial')} it had asked ({_numbers(unstarted)}) never started")
            does.append(f"runs {'it' if len(unstarted) == 1 else 'them'} from the queue")
        click.echo(f"the search is not running ({process.describe()}): {' and '.join(parts)}; "
                   f"'{resume}' {', '.join(does)}, and finishes the study")
        return
    for t in summary["running"]:
        click.echo(f"training: trial #{t['number']} {_shape(t)}, epochs done {_fmt(t[record.EPOCHS_COMPLETED])}")
    for t in summary["pending"]:
        click.echo(f"pending (waiting for its devices): trial #{t['number']} {_shape(t)}")


def _print_trial_phases(search: Search, trial: TrialPhases, as_json: bool) -> None:
    """``status --trial N``: the trial, then its phases as a table (each one's seconds since
    the trial was asked and since the phase before, and what that gap was spent on:
    ``hpsearch.study.PHASE_SPANS``) and where its time went, in one line."""
    if as_json:
        click.echo(json.dumps({"study": search.study_name, **trial.to_dict()}, default=str))
        return
    click.echo(f"trial #{trial.number} of {search.study_name!r} in {store_name(search.storage)}: {trial.state}")
    click.echo("  configuration: " + (", ".join(f"{k} {_fmt(v)}" for k, v in trial.params.items()) or "-"))
    if trial.status_reason:
        click.echo(f"  reason: {trial.status_reason}"
                   + (f": {trial.status_detail}" if trial.status_detail else f" ({describe_reason(trial.status_reason)})"))
    if trial.duplicate_of is not None:
        click.echo(f"  not trained: an exact duplicate of trial #{trial.duplicate_of}, whose end and values it "
                   "carries (duplicate_of)")
    memory = trial.memory_line()
    if memory is not None:
        click.echo(f"  memory: {memory}")
    for line in trial.fused.lines() if trial.fused is not None else ():
        click.echo(f"  {line}")
    timeline = trial.timeline
    if timeline is None:
        if trial.state in ("RUNNING", PENDING, "WAITING"):
            why = "it records them when it ends"
        elif trial.status_reason in NOT_RUN_REASONS or trial.duplicate_of is not None:
            why = "it never ran"
        else:
            why = "the study was written by a release that did not record them"
        click.echo(f"  no phases recorded ({why})")
        return
    click.echo(f"  {'phase':<18} {'since asked':>12} {'gap':>10}  gap spent on")
    for phase in timeline.phases:
        span = span_of(phase.name) if phase.gap_s is not None else None
        click.echo(f"  {phase.name:<18} {format_seconds(phase.at_s):>12} {format_seconds(phase.gap_s):>10}"
                   + (f"  {span.label}" if span is not None else ""))
    if timeline.missing:
        click.echo(f"  not reached: {', '.join(timeline.missing)}")
    click.echo(f"  {timeline.describe()}")


def _duplicates_line(summary: Mapping[str, Any]) -> str | None:
    """What ``summary`` (``Search.summary()``) says of the study's exact duplicates, in a line."""
    return duplicates_line({d["number"]: d[record.DUPLICATE_OF] for d in summary.get("duplicates", ())})


def _numbers(trials: list[dict[str, Any]]) -> str:
    """``#3, #4``: the numbers of ``status``'s listed trials."""
    return ", ".join(f"#{t['number']}" for t in trials)


def _plain(v: Any) -> Any:
    """A pandas cell as plain JSON-able data (NaN becomes None)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def _count(n: int, noun: str) -> str:
    """``1 trial``, ``2 trials``.

    Example:
        >>> _count(1, "trial"), _count(0, "device"), _count(12, "cut-short trial")
        ('1 trial', '0 devices', '12 cut-short trials')
    """
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


#: The trial table's column of a fused member's group (``_marked``).
_GROUP = "group"  # not a record name: the table's own column
#: The mark after a runtime that is an estimate of the trial alone (``runtime_basis: solo_estimate``).
_ESTIMATE = "~"
#: The mark after the per-device batch of a trial the search ran halved (``ran_as``).
_HALVED = "*"
#: The mark after the number of a confirmation run of the study's answer (``role``).
_CONFIRMATION = "c"
_TABLE_COLUMNS = ("number", "state", _GROUP, record.LR_RULE, record.PER_DEVICE_BATCH_SIZE, record.WORLD_SIZE, record.GRAD_ACCUM_STEPS,
                  record.EFFECTIVE_BATCH_SIZE, record.BASE_LR, "lr", record.VAL_ACCURACY, record.RUNTIME_S, record.DEVICE_SECONDS,
                  PEAK_MEMORY_BYTES, record.STATUS_REASON)
_HEADERS = {record.PER_DEVICE_BATCH_SIZE: "b", record.WORLD_SIZE: "W", record.GRAD_ACCUM_STEPS: "A",
            record.EFFECTIVE_BATCH_SIZE: "B", "number": "#", PEAK_MEMORY_BYTES: "peak memory"}
#: The columns a narrow terminal keeps first, after the trial's number, state, objectives and
#: searched params (``_report``'s ``first``): what a trial ran (the batch, the rule, the LR),
#: then how it ended.
_FIRST_COLUMNS = (record.EFFECTIVE_BATCH_SIZE, record.LR_RULE, "lr", record.PER_DEVICE_BATCH_SIZE, record.WORLD_SIZE, record.STATUS_REASON)


def _searched_params(search: Search, df: Any) -> list[str]:
    """The study's params that vary besides the core ones (``optimizer``, ``hidden``...), in
    first-seen order: ``hpsearch.study.searched_params``, as the dashboard's table shows them."""
    return searched_params(df, param_names(search.backend, search.study_name))


def _table_columns(df: Any, metrics: list[str], searched: list[str] | None = None) -> list[str]:
    """The trial-table columns: configuration (the batch, the rule and the LR, then the study's
    other searched params, ``_searched_params``) and measurements, the study's metrics, minus
    the columns that hold one value for every trial (a fixed parameter says nothing here)."""
    wanted = list(_TABLE_COLUMNS)
    at = wanted.index(record.LR) + 1
    wanted[at:at] = [p for p in searched or [] if p not in wanted]
    metrics = list(dict.fromkeys(metrics))
    # The study's own metrics beside the accuracy, after the configuration: a regression study's
    # val_loss came last, after the peak memory.
    at = wanted.index(record.VAL_ACCURACY)
    wanted[at:at] = [m for m in metrics if m not in wanted]
    always = {"number", "state", _GROUP, *metrics}
    if record.STATUS_REASON in df.columns and df[record.STATUS_REASON].notna().any():
        # Why trials ended as they did, also when every one ended the same way: a study whose
        # trials all failed with one reason showed a table of FAIL rows and no reason.
        always.add(record.STATUS_REASON)
    return [c for c in wanted if c in df.columns and (c in always or df[c].nunique(dropna=False) > 1)]


def _marked(df: Any, *, group: bool | None = None) -> Any:
    """The trial table as it is shown: the per-device batch of a trial the search ran halved
    marked (``1024*``: it ran as a smaller b with accumulation, ``ran_as``); for a study with
    fused trials, a ``group`` column (``g<group>/<members at its start>``, ``-`` for a trial of
    its own) and each fused member's runtime marked as an estimate of it alone (``12.3~``).
    ``group``: whether to add the column whatever the rows (the frontier's rows may all be trials
    of their own, under the trial table's columns); ``None``: where a row is a fused member.

    A fused member's ``runtime_s`` is not its wall time: unmarked, a group of twelve read as twelve
    trials that each took what the group's estimate says, beside trials of their own that did.
    Nor is a halved trial's b what its ranks held: unmarked, b 1024 read as a batch that fit.
    """
    df = _confirmation_marked(_halved_marked(df))
    fused = len(df) > 0 and record.FUSED_GROUP in df.columns and bool(df[record.FUSED_GROUP].notna().any())
    if not (fused if group is None else group):
        return df
    df = df.copy()
    groups = df[record.FUSED_GROUP] if record.FUSED_GROUP in df.columns else [None] * len(df)
    members = df[record.FUSED_MEMBERS] if record.FUSED_MEMBERS in df.columns else [None] * len(df)
    df[_GROUP] = [group_label(g, k) for g, k in zip(groups, members)]
    if record.RUNTIME_S in df.columns and record.RUNTIME_BASIS in df.columns:
        df[record.RUNTIME_S] = [_fmt(v) + (_ESTIMATE if is_solo_estimate(basis) and _fmt(v) != "-" else "")
                                for v, basis in zip(df[record.RUNTIME_S], df[record.RUNTIME_BASIS])]
    return df


def _at_chance(df: Any) -> str | None:
    """The line that says which completed trials learned nothing and so stand on no frontier,
    however fast (``hpsearch.study.learned_nothing``); ``None`` where none."""
    if not len(df) or "state" not in df.columns:
        return None
    done = df[df["state"].astype(str) == "COMPLETE"]
    nothing = done[learned_nothing(done)]
    if not len(nothing):
        return None
    numbers = ", ".join(f"#{n}" for n in nothing["number"])
    chance = sorted({_fmt(float(v)) for v in nothing[record.CHANCE_ACCURACY]})
    return (f"on no frontier, having learned nothing: {numbers} (val_accuracy at or below {' or '.join(chance)}, "
            "what always answering the validation set's commonest class scores)")


def _halved_marked(df: Any) -> Any:
    """``df`` with the per-device batch of each trial that ran halved (``ran_as``) as ``1024*``;
    ``df`` itself where none did."""
    if not len(df) or record.RAN_AS not in df.columns or record.PER_DEVICE_BATCH_SIZE not in df.columns:
        return df
    halved = [isinstance(ran, Mapping) for ran in df[record.RAN_AS]]
    if not any(halved):
        return df
    df = df.copy()
    df[record.PER_DEVICE_BATCH_SIZE] = [_fmt(b) + (_HALVED if mark else "")
                                        for b, mark in zip(df[record.PER_DEVICE_BATCH_SIZE], halved)]
    return df


def _confirmation_marked(df: Any) -> Any:
    """``df`` with each confirmation run's number marked (``24c``); ``df`` itself where none is."""
    if not len(df) or record.ROLE not in df.columns:
        return df
    marks = [role == record.ROLE_CONFIRMATION for role in df[record.ROLE]]
    if not any(marks):
        return df
    df = df.copy()
    df["number"] = [f"{n}{_CONFIRMATION if mark else ''}" for n, mark in zip(df["number"], marks)]
    return df


def _legend(df: Any, shown: Sequence[str]) -> list[str]:
    """The lines under the trial table that say what its marks mean, where it shows them."""
    lines = []
    if record.ROLE in df.columns and (df[record.ROLE] == record.ROLE_CONFIRMATION).any():
        lines.append(f"{_CONFIRMATION} after a number: a confirmation run of the study's answer, with a new seed "
                     "(counted apart from n_trials, and on no frontier: the search's own trials place it)")
    if record.PER_DEVICE_BATCH_SIZE in shown and record.RAN_AS in df.columns:
        halved = [f"#{n} {ran_as_text({record.RAN_AS: ran})}" for n, ran in zip(df["number"], df[record.RAN_AS])
                  if isinstance(ran, Mapping)]
        if halved:
            lines.append(f"{_HALVED} after b: ran halved with accumulation, the same effective batch, after running out "
                         f"of memory (search.on_oom: accumulate): {'; '.join(halved)}")
    if _GROUP in shown:
        lines.append("group gN/K: trained fused, as one model, with the other trials of group N (K members at its "
                     "start); '-' trained on its own")
    if record.RUNTIME_S in shown and _GROUP in df.columns and df[record.RUNTIME_S].astype(str).str.endswith(_ESTIMATE).any():
        lines.append(f"{_ESTIMATE} after a runtime: a fused member's solo estimate, what it would take alone on its "
                     "devices (runtime_basis: solo_estimate; the group's wall time is fused_runtime_s)")
    return lines


def _fit_columns(df: Any, columns: list[str], width: int, *, first: Sequence[str]) -> list[str]:
    """The columns of ``columns`` that fit side by side in ``width`` characters, uncut: those
    of ``first`` (``_report``: the number, state, objectives and searched params) and
    ``_FIRST_COLUMNS`` before the others, in the table's own order.

    Rich squeezes a table wider than the terminal by cutting every column short ("0.0…"), which
    left an 80-column terminal's end-of-search table unreadable; a column left out is better
    than every column cut, and ``hpsearch export`` has them all.
    """
    def cell_width(column: str) -> int:
        cells = [len(_cell(column, v)) for v in df[column].tolist()] if len(df) else []
        return max([len(_HEADERS.get(column, column)), *cells])

    order = list(dict.fromkeys([*first, *_FIRST_COLUMNS, *columns]))
    chosen: set[str] = set()
    used = 1  # the table's left edge; each column adds its cells, two spaces of padding and an edge
    for column in (c for c in order if c in columns):
        needed = cell_width(column) + 3
        if used + needed <= width or not chosen:
            chosen.add(column)
            used += needed
    return [c for c in columns if c in chosen]


def _print_table(console: Any, df: Any, columns: list[str], title: str) -> None:
    from rich.table import Table  # heavy: see the module's docstring

    table = Table(*[_HEADERS.get(c, c) for c in columns], title=title)
    for _, row in df.sort_values("number").iterrows():
        table.add_row(*[_cell(c, row[c]) for c in columns])
    console.print(table)


def _console() -> Any:
    """A console for tables: a terminal's own width; when output is not a terminal (a pipe, a
    log file), ``COLUMNS`` when it is set, else 120 columns instead of rich's 80, so that piped
    trial tables are not cut."""
    from rich.console import Console  # heavy: see the module's docstring

    console = Console()
    return console if console.is_terminal else Console(width=shutil.get_terminal_size((120, 24)).columns)


def _cell(column: str, v: Any) -> str:
    """A table cell: a byte count in a binary unit (``1.2 GiB``; ``hpsearch export`` has the
    bytes), anything else as ``_fmt``."""
    if column == PEAK_MEMORY_BYTES:
        return format_bytes(None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v))
    return _fmt(v)


def _shape(trial: Mapping[str, Any]) -> str:
    """``linear b=32 W=2 B=64``: a trial's rule and batch shape, as the status lines show it."""
    return (f"{trial[record.LR_RULE]} b={trial[record.PER_DEVICE_BATCH_SIZE]} W={trial[record.WORLD_SIZE]} "
            f"B={trial[record.EFFECTIVE_BATCH_SIZE]}")


def _fmt(v: Any) -> str:
    """A table cell's number: ``-`` for none; a whole number as it is (a column that also holds a
    trial not yet run is float, and printed b 1024 as ``1.02e+03``); others to three significant
    digits, without an exponent from 1,000 on (``2,050`` samples/s, not ``2.05e+03``)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        if math.isfinite(v) and abs(v) >= 1000:
            return f"{float(f'{v:.3g}'):,.0f}"
        return f"{v:.3g}"
    return str(v)


def main() -> None:
    """Console-script entry point."""
    atexit.register(_exit_promptly)  # registered first: runs after every other exit handler
    cli(prog_name="hpsearch")


def _exit_promptly() -> None:
    """Let the interpreter end without collecting what the command imported.

    After a search, Python's own teardown spends over a second in a last garbage collection over
    torch's, Ray's and Optuna's objects: longer than the report. Frozen objects are never
    collected, and everything that must happen at exit has happened by now (this runs after
    every other exit handler), but for the study's connections, which are closed first.
    """
    store = sys.modules.get("hpsearch.store")  # not imported: nothing to close
    if store is not None:
        store.close_storages()
    gc.freeze()
