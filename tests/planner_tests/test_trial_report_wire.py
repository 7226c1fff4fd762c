"""A trial's report survives its trip to the search: ``encode`` makes the Tune result, ``decode``
reads the very report back, failures, fused members and held-back evaluations included; and the
result keeps the keys Tune and its schedulers read (the metrics at the top level, no nested
dict, which Tune would flatten)."""

from __future__ import annotations

import pytest

from hpsearch import record
from hpsearch.planner.report import (
    EARLIER_KEY,
    FAILED_KEY,
    FINAL_KEY,
    MEMBER_KEY,
    PHASES_KEY,
    ReportKind,
    TrialReport,
    decode,
    encode,
)

EVALUATION = TrialReport(ReportKind.PROGRESS, {"evaluation": 3, record.SAMPLES_SEEN: 300, record.VAL_ACCURACY: 0.5})
PHASES = (("launched", 100.0), ("reserved", 100.5))

REPORTS = {
    "started": TrialReport(ReportKind.STARTED, {"node": "10.0.0.1", record.NODE_ID: "abc", record.NODES: 1}),
    "evaluation": EVALUATION,
    "final": TrialReport(ReportKind.FINAL, {record.VAL_ACCURACY: 0.9, record.RUNTIME_S: 2.0}, phases=PHASES,
                         earlier=(EVALUATION, EVALUATION)),
    "failure": TrialReport(ReportKind.FAILED, {record.RUNTIME_S: 1.0}, reason=record.REASON_DIVERGED,
                           detail="loss nan at step 3", phases=PHASES),
    "failure halved": TrialReport(ReportKind.FAILED, {record.DEVICE_SECONDS: 4.0}, reason=record.REASON_OUT_OF_MEMORY,
                                  detail="out of memory", phases=PHASES,
                                  ran_as={record.PER_DEVICE_BATCH_SIZE: 16, record.GRAD_ACCUM_STEPS: 2,
                                          "out_of_memory_at": 16}),
    "member failure": TrialReport(ReportKind.FAILED, member=2, reason=record.REASON_NO_RESULT, detail="", phases=PHASES),
    "member not run": TrialReport(ReportKind.FAILED, member=1, reason=record.REASON_EXCEEDS_MEMORY,
                                  detail="a member ran out alone", not_run=True),
    "member final": TrialReport(ReportKind.FINAL, {record.VAL_ACCURACY: 0.7}, member=0, phases=PHASES,
                                earlier=(TrialReport(ReportKind.PROGRESS, {"evaluation": 1}, member=0),
                                         TrialReport(ReportKind.PROGRESS, {"evaluation": 1}, member=1))),
    "restarted": TrialReport(ReportKind.RESTARTED, {"node": "n"}, members=(0, 3), detail="the group ran out"),
    "declined": TrialReport(ReportKind.FUSE_DECLINED, {record.FUSED_STEP_S: 0.01}, declined="fusing did not pay",
                            members=(0, 1), phases=PHASES),
}


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_a_report_reads_back_as_it_was_sent(name: str) -> None:
    report = REPORTS[name]
    assert decode(encode(report)) == report


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_a_result_holds_no_dict_for_tune_to_flatten(name: str) -> None:
    result = encode(REPORTS[name])
    assert not [k for k, v in result.items() if isinstance(v, dict)]
    for earlier in result.get(EARLIER_KEY, ()):  # the evaluations held back: dicts in a list, as Tune keeps them
        assert not [k for k, v in earlier.items() if isinstance(v, dict)]


def test_a_failure_result_carries_its_reason_at_the_top_where_the_search_reads_it() -> None:
    result = encode(REPORTS["failure halved"])
    assert result[FAILED_KEY] is True and FINAL_KEY not in result
    assert result[record.STATUS_REASON] == record.REASON_OUT_OF_MEMORY
    assert result[record.RAN_AS] == [(record.PER_DEVICE_BATCH_SIZE, 16), (record.GRAD_ACCUM_STEPS, 2),
                                     ("out_of_memory_at", 16)]
    assert result[PHASES_KEY] == [("launched", 100.0), ("reserved", 100.5)]


def test_a_final_report_keeps_its_metrics_where_schedulers_read_them() -> None:
    result = encode(REPORTS["member final"])
    assert result[record.VAL_ACCURACY] == 0.7 and result[MEMBER_KEY] == 0
    assert [e.get(MEMBER_KEY) for e in result[EARLIER_KEY]] == [0, 1]


def test_what_tune_adds_to_a_result_is_kept_as_a_metric() -> None:
    result = {**encode(REPORTS["evaluation"]), "training_iteration": 4, "trial_id": "t0"}
    report = decode(result)
    assert report.kind is ReportKind.PROGRESS and report.get("training_iteration") == 4
    assert encode(report) == result


def test_no_result_reads_as_a_report_of_nothing() -> None:
    assert decode(None) == decode({}) == TrialReport(ReportKind.PROGRESS)
