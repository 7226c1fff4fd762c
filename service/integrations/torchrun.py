"""A trial as a torchrun job: its full configuration and a launch script (``hpsearch export-trial``).

The last step of a search is training the chosen configuration for real, on one's own
machines, with PyTorch's own launcher. ``export_trial`` writes, into a folder:

- ``trial.json``: the trial's ``TrialSpec`` (every parameter, the workload and its options,
  the scaling rule, the seed...), where it came from, and what the trial recorded;
- ``launch.sh``: ``torchrun --standalone --nproc-per-node W -m hpsearch.trials.run trial.json``
  on one node; on N nodes, torchrun's c10d rendezvous (below).

``bash launch.sh`` needs neither Ray nor the study's store. Exported at another world size
(``world_size=``), the configuration keeps its per-device batch and accumulation, so its
effective batch changes and its LR is the trial's rule applied to the new one.

A workload of the user's own (``"my_pkg.module:function"``, or a Lightning module's classes)
is imported by name where the job runs: its module must be importable there, as it was for
the search. ``launch.sh`` checks that first, and exits with status 2 and one line saying which
module and which folder to put on ``PYTHONPATH`` when it is not.

A trial whose ranks spanned nodes (its ``nodes`` attr, ``resources.span_nodes``) is exported
for as many nodes, the same folder run once on each::

    NODE_RANK=0 RDZV_ENDPOINT=node0:29400 bash launch.sh    # on node 0, which serves the rendezvous
    NODE_RANK=1 RDZV_ENDPOINT=node0:29400 bash launch.sh    # on node 1

which runs ``torchrun --nnodes N --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint
$RDZV_ENDPOINT --rdzv-id STUDY-trial-NUMBER --rdzv-conf is_host=...``: the mainstream
multi-node launch. ``--node-rank`` is left out because torchrun ignores it under c10d (it
numbers the nodes itself as they join); ``NODE_RANK`` picks this node's process count and makes
node 0 the one that serves the rendezvous at ``RDZV_ENDPOINT``, instead of torchrun guessing
from host names. ``MASTER_ADDR`` and ``MASTER_PORT`` stand in for ``RDZV_ENDPOINT``; without
either, or without ``NODE_RANK``, ``launch.sh`` exits with status 2 and one line naming the
variable. The record says how many nodes, not how many ranks each ran, so the W ranks are split
as evenly as possible (W 6 on 2 nodes: 3 + 3; W 5: 3 + 2), node 0 taking the larger shares.
Exported at another world size, the job runs on one node unless ``nodes=`` says otherwise.
``trial.json``'s ``layout`` records the nodes, the processes of each, and where the count came
from (``trial``, ``option``, or ``other world size``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch import record
from hpsearch.errors import ResourceError, TrialNotFoundError
from hpsearch.record import DEVICE, NOT_RUN_REASONS, RERUN_REASONS
from hpsearch.store import space_of_study
from hpsearch.study import trial_params
from hpsearch.study.reasons import describe_reason
from hpsearch.trials.spec import TrialSpec, ran_shape, trial_spec

if TYPE_CHECKING:
    import optuna

__all__ = ["CONFIG_FILE", "LAUNCH_FILE", "RUN_FILES", "ExportedTrial", "export_trial", "node_processes", "user_modules"]

#: The configuration file ``hpsearch.trials.run`` reads.
CONFIG_FILE = "trial.json"
#: The script that runs it with torchrun.
LAUNCH_FILE = "launch.sh"

#: What a run of the job writes beside its script (rank 0), besides ``CONFIG_FILE`` and ``LAUNCH_FILE``.
RUN_FILES = ("metrics.json", "metrics.jsonl", "model.pt")

#: The workload options that name a class of the user's by ``"module:Class"`` (``workload.lightning``).
_CLASS_OPTIONS = ("module", "datamodule")

#: What the trial recorded, copied into the configuration to compare a run against.
_RECORDED = (record.VAL_ACCURACY, record.VAL_LOSS, record.TRAIN_LOSS, record.LR, record.LAST_LR, record.SAMPLES_SEEN,
             record.STEPS, record.EPOCHS_COMPLETED, record.RUNTIME_S, record.COMPILE_S, record.DEVICE, record.MODEL_PATH,
             record.NODES, record.NODE_IDS)

#: torchrun's default port for a c10d rendezvous endpoint given without one: the one launch.sh's example shows.
_RDZV_PORT = 29400


@dataclass(frozen=True)
class ExportedTrial:
    """A trial written out as a torchrun job.

    Attributes:
        study: The study's name.
        number: The trial's number.
        folder: Where the files are.
        spec: The configuration the job trains (its ``world_size`` and ``epochs`` as exported).
        trial_world_size: The world size the trial ran at.
        trial_lr: The peak LR the trial ran at.
        modules: The user's modules the workload imports by name (``"my_workload"`` for
            ``"my_workload:make_workload"``); none for a built-in workload. Each must be
            importable where the job runs.
        module_paths: For each of ``modules`` importable here, the folder it was found in (what
            ``PYTHONPATH`` needs where it is not installed).
        warnings: What the user should know before running it, first that the trial did not
            complete (it failed, and why: the job reproduces the failure; it was stopped or
            never ran), then a module not importable here, files of an earlier run in the folder.
        processes_per_node: How many of the job's ranks each node runs, node 0 first (one
            entry for a single-node job).
        trial_nodes: How many nodes the trial's ranks ran on (1 for a study recorded before
            trials could span nodes).
        nodes_from: Where the node count came from: ``trial`` (the trial's own, exported at
            its world size), ``option`` (``nodes=``) or ``other world size`` (one node).
    """

    study: str
    number: int
    folder: Path
    spec: TrialSpec
    trial_world_size: int
    trial_lr: float
    modules: tuple[str, ...] = ()
    module_paths: dict[str, Path] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    processes_per_node: tuple[int, ...] = ()
    trial_nodes: int = 1
    nodes_from: str = "trial"

    @property
    def nodes(self) -> int:
        """How many nodes the job runs on (``launch.sh`` runs once on each)."""
        return max(1, len(self.processes_per_node))

    @property
    def rdzv_id(self) -> str:
        """The job's torchrun rendezvous id on several nodes: ``STUDY-trial-NUMBER``."""
        return f"{self.study}-trial-{self.number}"

    @property
    def config(self) -> Path:
        """``trial.json``."""
        return self.folder / CONFIG_FILE

    @property
    def launch(self) -> Path:
        """``launch.sh``."""
        return self.folder / LAUNCH_FILE

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``hpsearch export-trial --json``)."""
        return {"study": self.study, "number": self.number, "folder": str(self.folder), "config": str(self.config),
                "launch": str(self.launch), record.WORLD_SIZE: self.spec.world_size, "epochs": self.spec.epochs,
                record.EFFECTIVE_BATCH_SIZE: self.spec.effective_batch_size, "lr": self.spec.lr,
                "trial_world_size": self.trial_world_size, "trial_lr": self.trial_lr,
                record.NODES: self.nodes, "processes_per_node": list(self.processes_per_node),
                "trial_nodes": self.trial_nodes, "nodes_from": self.nodes_from,
                "modules": list(self.modules), "module_paths": {m: str(p) for m, p in self.module_paths.items()},
                "warnings": list(self.warnings)}


def export_trial(study: optuna.Study, number: int, folder: str | os.PathLike[str], *,
                 world_size: int | None = None, epochs: int | None = None, nodes: int | None = None) -> ExportedTrial:
    """Write trial ``number`` of ``study`` as a torchrun job into ``folder`` (created).

    Args:
        study: A study started by hpsearch (its space text says how the trial was built).
        number: The trial's number.
        folder: Where to write ``trial.json`` and ``launch.sh``.
        world_size: Train at this many ranks instead of the trial's (the LR follows the
            trial's rule at the new effective batch).
        epochs: Train this many epochs instead of the trial's.
        nodes: Run the ranks on this many nodes (split as evenly as possible); default: the
            trial's own node count at its own world size, one node at another.

    Raises:
        TrialNotFoundError: the study has no such trial, or it never got a full configuration.
        SpaceError: the study was not started by hpsearch.
        ResourceError: ``nodes`` is below 1 or above the world size (each node runs a rank).
    """
    space = space_of_study(study)
    trial = next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
    if trial is None:
        raise TrialNotFoundError(f"study {study.study_name!r} has no trial #{number} "
                                 f"(it has {len(study.get_trials(deepcopy=False))} trials)")
    configuration = trial_params(trial)  # a confirmation run's values its params could not hold too
    missing = [p for p in space.parameters if p not in configuration]
    if missing:
        raise TrialNotFoundError(f"trial #{number} of study {study.study_name!r} has no {', '.join(missing)}: "
                                 "it stopped before its configuration was chosen")
    recorded = str(trial.user_attrs.get(DEVICE) or "")
    device = "cuda" if recorded.startswith("cuda") else "cpu" if recorded else (
        space.resources.device if space.resources.device != "auto" else "cpu")
    # At the shape it trained (a trial halved by search.on_oom: accumulate ran out of memory at
    # its own per-device batch), with the same effective batch and LR.
    params = {**configuration, **ran_shape(trial.user_attrs.get(record.RAN_AS))}
    # The seed it ran with (a confirmation run's is its own; older trials recorded none and ran
    # with the space's).
    seed = trial.user_attrs.get(record.SEED)
    seeded: dict[str, Any] = {"seed": int(seed)} if isinstance(seed, int) else {}  # not a record name: the spec's field
    # The study's data (text_lm's text hash): the job refuses to train on other data, as its ranks did.
    data = study.user_attrs.get(record.ATTR_DATA_FINGERPRINT)
    if isinstance(data, Mapping) and "sha256" in data:
        seeded["data_fingerprint"] = str(data["sha256"])
    ran = trial_spec(space, params, device=device, **seeded)
    # Real ranks under torchrun (the trial may have emulated its ranks on fewer devices), and
    # the weights saved: they are what this run is for.
    spec = trial_spec(space, {**params, record.WORLD_SIZE: world_size or ran.world_size}, device=device,
                      epochs=epochs or ran.epochs, emulated_ranks=1, save_model=True, **seeded)
    # The layout: the trial's nodes when it is exported as it ran; at another world size its node
    # count says nothing about the new one, so one node unless asked.
    trial_nodes = max(1, int(trial.user_attrs.get(record.NODES) or 1))
    if nodes is not None:
        count, nodes_from = nodes, "option"
    elif spec.world_size == ran.world_size:
        count, nodes_from = min(trial_nodes, spec.world_size), "trial"
    else:
        count, nodes_from = 1, "other world size"
    if not 1 <= count <= spec.world_size:
        raise ResourceError(f"a job runs on 1 to world size nodes (each node runs at least one rank): got {count} "
                            f"nodes for world size {spec.world_size}")
    out = Path(folder).resolve()
    earlier = [name for name in RUN_FILES if (out / name).exists()]
    out.mkdir(parents=True, exist_ok=True)
    modules = user_modules(spec)
    paths = {m: p for m in modules if (p := _module_folder(m)) is not None}
    ended = _ended_warning(trial)
    warnings = [ended] if ended is not None else []
    warnings += [f"the workload's module {m!r} is not importable here: put the folder that holds it on PYTHONPATH "
                f"where the job runs (launch.sh checks and stops if it is not)" for m in modules if m not in paths]
    if earlier:
        warnings.append(f"{out} holds an earlier run ({', '.join(earlier)}): the new run replaces these files as it "
                        "writes them; export into another folder to keep both")
    exported = ExportedTrial(study.study_name, number, out, spec, ran.world_size, ran.lr, modules, paths,
                             tuple(warnings), node_processes(spec.world_size, count), trial_nodes, nodes_from)
    config = {
        "spec": spec.to_dict(),
        "study": study.study_name,
        "trial": number,
        "state": trial.state.name,
        record.EFFECTIVE_BATCH_SIZE: spec.effective_batch_size,
        "lr": spec.lr,
        "workload_factory_options": spec.factory_options,
        "trial_world_size": ran.world_size,
        "trial_epochs": ran.epochs,
        "trial_effective_batch_size": ran.effective_batch_size,
        "trial_lr": ran.lr,
        "trial_nodes": trial_nodes,
        "layout": {record.NODES: exported.nodes, "processes_per_node": list(exported.processes_per_node),
                   "nodes_from": nodes_from,
                   "split": "as even as possible, node 0 first: the trial records its nodes, not its ranks per node"},
        "recorded": {k: trial.user_attrs[k] for k in _RECORDED if k in trial.user_attrs},
    }
    exported.config.write_text(json.dumps(config, indent=1, default=str) + "\n", encoding="utf-8")
    exported.launch.write_text(_launch_script(exported), encoding="utf-8")
    exported.launch.chmod(0o755)
    return exported


def _ended_warning(trial: optuna.trial.FrozenTrial) -> str | None:
    """What the user must know first about exporting a trial that did not complete: that it
    failed and why, was stopped or never ran; ``None`` for a COMPLETE trial.

    A failed trial is exported all the same: its job reproduces the failure, which is what
    exporting it is usually for. Without this line, the export of a trial that had failed
    ``workload_error`` read like any other, and its job's failure came as a surprise.
    """
    state = trial.state.name
    if state == "COMPLETE":
        return None
    reason = trial.user_attrs.get(record.STATUS_REASON)
    detail = str(trial.user_attrs.get(record.STATUS_DETAIL) or "").strip().splitlines()
    why = f"{reason}: {detail[0][:300]}" if reason and detail else (
        f"{reason} ({describe_reason(str(reason))})" if reason else "no reason recorded")
    number = f"trial #{trial.number}"
    if state == "FAIL" and reason in RERUN_REASONS:
        return f"{number} did not finish: {why}; the job trains it in full"
    if state == "FAIL":
        return (f"{number} failed: {why}; the job trains the configuration that failed, so expect the same "
                "failure (which reproduces it)")
    if reason in NOT_RUN_REASONS:
        return f"{number} never ran: {why}; the job trains it, as the search did not"
    if state == "PRUNED":
        return f"{number} was stopped early: {why}; the job trains all its epochs"
    return f"{number} has not finished (it is {state}); the job trains it from the start"


def node_processes(world_size: int, nodes: int) -> tuple[int, ...]:
    """How many of ``world_size`` ranks each of ``nodes`` nodes runs, node 0 first: as even as
    possible, the larger shares first. Its fullest node runs no more ranks than the fullest node
    of any other split, so on nodes alike the job fits wherever the trial's ranks did.

    Example:
        >>> node_processes(6, 2), node_processes(5, 2), node_processes(4, 1)
        ((3, 3), (3, 2), (4,))
    """
    base, extra = divmod(world_size, nodes)
    return tuple(base + (node < extra) for node in range(nodes))


def user_modules(spec: TrialSpec) -> tuple[str, ...]:
    """The user's modules a trial's workload imports by name: the module of a
    ``"pkg.module:function"`` workload, and those of a Lightning workload's classes.

    Example:
        >>> plugin = TrialSpec(per_device_batch_size=16, base_lr=0.1, workload="my_workload:make_workload")
        >>> user_modules(plugin), user_modules(TrialSpec(per_device_batch_size=16, base_lr=0.1))
        (('my_workload',), ())
    """
    names = [spec.workload, *(spec.workload_options.get(k) for k in _CLASS_OPTIONS)]
    modules = [n.partition(":")[0] for n in names if isinstance(n, str) and ":" in n]
    return tuple(dict.fromkeys(modules))


def _module_folder(module: str) -> Path | None:
    """The folder to put on ``PYTHONPATH`` for ``module`` (where its top-level package or file
    is), ``None`` when it is not importable here. Only the top-level package is looked up: its
    import runs no code of the module itself."""
    top = module.partition(".")[0]
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin or found.origin in ("built-in", "frozen"):
        return None
    origin = Path(found.origin)
    return (origin.parent.parent if origin.name == "__init__.py" else origin.parent).resolve()


def _schedule_note(spec: TrialSpec) -> str:
    """The trial's LR over its steps, in a few words (``hpsearch.trials.scaling.lr_at``)."""
    start = "0" if spec.warmup_from == "zero" else f"base_lr {spec.base_lr:g}"
    warmup = f"warmup from {start} over {spec.warmup_epochs:g} epochs" if spec.warmup_epochs > 0 else "no warmup"
    return f"LR: {warmup}, then schedule {spec.schedule}."


def _launch_script(exported: ExportedTrial) -> str:
    spec = exported.spec
    was = "" if (spec.world_size, spec.lr) == (exported.trial_world_size, exported.trial_lr) else \
        f" (the trial ran at W {exported.trial_world_size}, lr {exported.trial_lr:.6g})"
    where = _nodes_note(exported) if exported.nodes > 1 else (
        f"""# Runs {spec.world_size} rank(s) on this machine with PyTorch's torchrun (no Ray, no study store), each
# with the same training loop as the search's trials.""")
    several = "" if exported.nodes > 1 else \
        " To run it on several nodes, export it with\n# 'hpsearch export-trial --nodes N'."
    return f"""#!/usr/bin/env bash
# Trial #{exported.number} of study {shlex.quote(exported.study)} as a torchrun job (written by 'hpsearch export-trial').
# {spec.workload}, {spec.epochs} epochs, seed {spec.seed}, on {spec.device}: b {spec.per_device_batch_size} x W {spec.world_size} x A {spec.grad_accum_steps} = B {spec.effective_batch_size};
# {spec.lr_rule} rule from base_lr {spec.base_lr:g} at B0 {spec.base_batch_size}: lr {spec.lr:.6g}{was}.
# {_schedule_note(spec)}
#
{where} hpsearch{_modules_note(exported)} must be
# importable by the python that torchrun runs: checked first. Rank 0 writes metrics.jsonl (each evaluation),
# metrics.json (the final metrics) and model.pt (the final weights) beside this script;
# 'bash launch.sh --out DIR' writes them to DIR.{several}
set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
{_node_checks(exported)}torchrun="$(command -v torchrun)" || {{ echo "error: torchrun is not on PATH: activate the environment hpsearch is installed in" >&2; exit 2; }}
python="$(dirname "$torchrun")/python"  # the interpreter torchrun runs the ranks with
[ -x "$python" ] || python=python3
# Each module the ranks import by name, checked before any rank starts (one line, not one traceback per rank).
for module in {" ".join(shlex.quote(m) for m in ("hpsearch", *exported.modules))}; do
  if ! "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' "$module" 2>/dev/null; then
    case "$module" in
{_module_cases(exported)}    esac
    exit 2
  fi
done
exec "$torchrun" {_torchrun_flags(exported)} -m hpsearch.trials.run "$here/{CONFIG_FILE}" "$@"
"""


def _nodes_note(exported: ExportedTrial) -> str:
    """``launch.sh``'s comment on a job of several nodes: the layout, and how to run it on each."""
    spec, nodes = exported.spec, exported.nodes
    source = {"trial": f"as the trial ran on {nodes} nodes",
              "option": f"as asked (--nodes {nodes}; the trial ran on {exported.trial_nodes})"}.get(
        exported.nodes_from, "")
    layout = " + ".join(str(n) for n in exported.processes_per_node)
    runs = "".join(f"#   NODE_RANK={i} RDZV_ENDPOINT=node0.example:{_RDZV_PORT} bash launch.sh"
                   + ("   # on node 0, which serves the rendezvous\n" if i == 0 else f"   # on node {i}\n")
                   for i in range(nodes))
    return f"""# Runs {spec.world_size} ranks on {nodes} nodes, {layout} processes (NODE_RANK 0 first){", " + source if source else ""},
# with PyTorch's torchrun (no Ray, no study store), each with the same training loop as the search's
# trials. The trial records how many nodes, not how many ranks each ran: the split is as even as possible.
# Run this folder (copied to each node, or on a shared file system) on every node, with that node's
# NODE_RANK and the same RDZV_ENDPOINT everywhere (node 0's address and a free port):
{runs}# MASTER_ADDR and MASTER_PORT stand in for RDZV_ENDPOINT when it is not set. Start node 0 within a minute
# of the others (they wait that long for its rendezvous store). torchrun's c10d rendezvous numbers the
# nodes itself, so rank 0, which writes the files named below, may run on any node: '--out DIR' on a
# shared file system puts them in one place. Where a host name resolves to a loopback address, set GLOO_SOCKET_IFNAME
# (CPU) or NCCL_SOCKET_IFNAME (CUDA) to the interface that carries the nodes' traffic.
# On each node,"""


def _node_checks(exported: ExportedTrial) -> str:
    """``launch.sh``'s lines that read a job of several nodes' ``NODE_RANK`` and rendezvous
    endpoint, stopping with one line (status 2) when they are missing; none on one node."""
    nodes = exported.nodes
    if nodes == 1:
        return ""
    last = nodes - 1
    arms = "".join(f"  {i}) nproc={n}; is_host={'true' if i == 0 else 'false'} ;;\n"
                   for i, n in enumerate(exported.processes_per_node))
    return f"""# This node's share of the ranks (NODE_RANK) and where the nodes meet (RDZV_ENDPOINT), from the environment.
case "${{NODE_RANK:-}}" in
{arms}  '') echo "error: NODE_RANK is not set: this node's rank among the job's {nodes} nodes, 0 to {last} (0 on the node RDZV_ENDPOINT names)" >&2; exit 2 ;;
  *) echo "error: NODE_RANK is '$NODE_RANK': it must be this node's rank among the job's {nodes} nodes, 0 to {last}" >&2; exit 2 ;;
esac
if [ -n "${{RDZV_ENDPOINT:-}}" ]; then
  endpoint="$RDZV_ENDPOINT"
elif [ -n "${{MASTER_ADDR:-}}" ] && [ -n "${{MASTER_PORT:-}}" ]; then
  endpoint="$MASTER_ADDR:$MASTER_PORT"
elif [ -n "${{MASTER_ADDR:-}}" ]; then
  echo "error: MASTER_PORT is not set: the port of node 0's rendezvous, the same on every node (or set RDZV_ENDPOINT=HOST:PORT)" >&2; exit 2
else
  echo "error: RDZV_ENDPOINT is not set: node 0's HOST:PORT, the same on every node (or set MASTER_ADDR and MASTER_PORT)" >&2; exit 2
fi
"""


def _torchrun_flags(exported: ExportedTrial) -> str:
    """torchrun's options: ``--standalone`` on one node; on several, the c10d rendezvous at the
    endpoint that ``_node_checks`` read, node 0 serving it (``is_host``) rather than torchrun
    matching the endpoint against host names, which a DNS alias or a NAT'd address defeats."""
    if exported.nodes == 1:
        return f"--standalone --nproc-per-node {exported.spec.world_size}"
    return (f'--nnodes {exported.nodes} --nproc-per-node "$nproc" --rdzv-backend c10d --rdzv-endpoint "$endpoint" '
            f'--rdzv-id {shlex.quote(exported.rdzv_id)} --rdzv-conf "is_host=$is_host"')


def _modules_note(exported: ExportedTrial) -> str:
    """``, and the workload's module my_workload (found in DIR when exported; PYTHONPATH)``."""
    if not exported.modules:
        return ""
    found = ", ".join(f"{m} in {p}" for m, p in exported.module_paths.items())
    return (f" and the workload's module(s) {', '.join(exported.modules)} (on PYTHONPATH"
            + (f"; found when exported: {found}" if found else "") + ")")


def _double_quoted(text: str) -> str:
    """``text`` safe inside a double-quoted shell string."""
    return "".join("\\" + c if c in '\\"$`' else c for c in text)


def _module_cases(exported: ExportedTrial) -> str:
    """The ``case`` arms of ``launch.sh``'s module check: the line each missing module prints."""
    arms = ['      hpsearch) echo "error: hpsearch is not importable by $python: activate the environment it is '
            'installed in" >&2 ;;\n']
    for module in exported.modules:
        folder = exported.module_paths.get(module)
        hint = f"PYTHONPATH={_double_quoted(shlex.quote(str(folder)))} bash $0" if folder is not None else \
            "put the folder that holds it on PYTHONPATH"
        arms.append(f"      {shlex.quote(module)}) echo \"error: the workload's module '{module}' is not importable: "
                    f"{hint}\" >&2 ;;\n")
    return "".join(arms)
