"""The read model: what a study says, computed in one place for every reader.

The CLI, the study API (``hpsearch.Search``), the dashboard and the analysis all read a study
through this package: the trial record's names and directions, the trials table (one bulk read
of Optuna's tables, behind a schema-version guard, or Optuna's public API), the summary, the
best trial, finished counts, the searched params a trial table shows, the study listing, a cheap
revision for pollers, Pareto fronts, exports, where a trial's time went (its phases) and which
trials trained fused. Nothing here writes to a store.

Example:
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"number": [0, 1, 2], "state": ["COMPLETE", "COMPLETE", "FAIL"],
    ...                       "val_accuracy": [0.9, 0.95, None], "runtime_s": [3.0, 8.0, None],
    ...                       "status_reason": [None, None, "diverged"]})
    >>> best_trial_number(frame, ["val_accuracy", "runtime_s"], ["maximize", "minimize"]), finished_count(frame)
    (1, 3)
    >>> frontier_numbers(frame, "runtime_s", "val_accuracy")
    [0, 1]
"""

from hpsearch.study._confirmations import (
    HELD,
    INCOMPLETE,
    MISSED,
    RUNNING,
    ConfirmationRound,
    ConfirmationRun,
    ConfirmationStatus,
    confirmation_rounds,
    confirmation_status,
    is_confirmation,
    same_answer,
    trial_params,
)
from hpsearch.study._export import to_csv, to_json
from hpsearch.study._fused import (
    SOLO_ESTIMATE,
    FusedSummary,
    FusedTrial,
    fused_summary,
    fused_trial,
    group_label,
    group_members,
    is_solo_estimate,
    number_ranges,
    off_reason,
)
from hpsearch.study._pareto import (
    check_direction,
    direction,
    frontier_axes,
    frontier_candidates,
    frontier_numbers,
    learned_nothing,
    pareto_front,
)
from hpsearch.study._phases import (
    PHASE_SPANS,
    Phase,
    PhaseSpan,
    PhaseTimeline,
    TrialPhases,
    format_seconds,
    phase_timeline,
    span_of,
    trial_phases,
)
from hpsearch.study._schema import TESTED_SCHEMA_VERSIONS, direct_sql, sql_store
from hpsearch.study._studies import StudyInfo, list_studies, param_names, study_info, study_infos
from hpsearch.study._summary import (
    BestTrial,
    StudyListing,
    StudySummary,
    best_trial_number,
    cut_short_counts,
    duplicate_counts,
    duplicates_line,
    finished_count,
    is_finished,
    reason_counts,
    searched_params,
    state_counts,
    study_listing,
    summarize,
)
from hpsearch.study._table import (
    PENDING,
    display_state,
    display_value,
    evaluations,
    ran_as_text,
    read_attr,
    read_trials,
    revision,
    trial_configurations,
    with_scaled_lr,
)
from hpsearch.study._units import format_bytes

__all__ = [
    "HELD",
    "INCOMPLETE",
    "MISSED",
    "PENDING",
    "PHASE_SPANS",
    "RUNNING",
    "SOLO_ESTIMATE",
    "TESTED_SCHEMA_VERSIONS",
    "BestTrial",
    "ConfirmationRound",
    "ConfirmationRun",
    "ConfirmationStatus",
    "FusedSummary",
    "FusedTrial",
    "Phase",
    "PhaseSpan",
    "PhaseTimeline",
    "StudyInfo",
    "StudyListing",
    "StudySummary",
    "TrialPhases",
    "best_trial_number",
    "check_direction",
    "confirmation_rounds",
    "confirmation_status",
    "cut_short_counts",
    "direct_sql",
    "direction",
    "display_state",
    "display_value",
    "duplicate_counts",
    "duplicates_line",
    "evaluations",
    "finished_count",
    "format_bytes",
    "format_seconds",
    "frontier_axes",
    "frontier_candidates",
    "frontier_numbers",
    "fused_summary",
    "fused_trial",
    "group_label",
    "group_members",
    "is_confirmation",
    "is_finished",
    "is_solo_estimate",
    "learned_nothing",
    "list_studies",
    "number_ranges",
    "off_reason",
    "param_names",
    "pareto_front",
    "phase_timeline",
    "ran_as_text",
    "read_attr",
    "read_trials",
    "reason_counts",
    "revision",
    "same_answer",
    "searched_params",
    "span_of",
    "sql_store",
    "state_counts",
    "study_info",
    "study_infos",
    "study_listing",
    "summarize",
    "to_csv",
    "to_json",
    "trial_configurations",
    "trial_params",
    "trial_phases",
    "with_scaled_lr",
]
