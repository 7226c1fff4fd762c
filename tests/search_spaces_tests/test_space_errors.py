"""Every way a space file can be wrong gives a SpaceError naming the key path and the line."""

from __future__ import annotations

import pathlib
import textwrap

import pytest

from hpsearch.search_spaces import HPSearchError, SpaceError, load_space, parse_space

# Lines 1-3; tests append sections after them, so their lines start at 4.
VALID_PARAMETERS = "parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\n"


def error_of(text: str) -> SpaceError:
    with pytest.raises(SpaceError) as caught:
        parse_space(text, source="space.yaml")
    return caught.value


def dedent(text: str) -> str:
    return textwrap.dedent(text)


def test_message_reads_file_line_key_path_then_reason() -> None:
    error = error_of("parameters:\n  per_device_batch_size: 8\n  base_lr: -0.1\n")

    assert str(error) == "space.yaml:3 at 'parameters.base_lr': base_lr must be > 0, got -0.1"
    assert error.reason == "base_lr must be > 0, got -0.1"
    assert error.source == "space.yaml"
    assert isinstance(error, HPSearchError)
    assert error.exit_code == 2


def test_unknown_top_level_key_suggests_the_close_name() -> None:
    error = error_of(VALID_PARAMETERS + "serach:\n  n_trials: 3\n")

    assert (error.key_path, error.line) == ("serach", 4)
    assert "unknown key 'serach'" in error.reason
    assert "did you mean 'search'?" in error.reason


@pytest.mark.parametrize(
    ("section", "typo", "meant"),
    [
        ("workload", "epoch", "epochs"),
        ("scaling", "base_batch", "base_batch_size"),
        ("search", "ntrials", "n_trials"),
        ("resources", "gpu_per_worker", "gpus_per_worker"),
    ],
)
def test_unknown_section_key_suggests_the_close_name(section: str, typo: str, meant: str) -> None:
    error = error_of(VALID_PARAMETERS + f"{section}:\n  {typo}: 1\n")

    assert (error.key_path, error.line) == (f"{section}.{typo}", 5)
    assert f"did you mean '{meant}'?" in error.reason


def test_unknown_key_far_from_any_name_lists_the_allowed_keys_without_a_guess() -> None:
    error = error_of(VALID_PARAMETERS + "search:\n  zzz: 1\n")

    assert "did you mean" not in error.reason
    assert "expected one of: sampler, n_trials" in error.reason


def test_unknown_objective_key_suggests_the_close_name() -> None:
    error = error_of(VALID_PARAMETERS + "objectives:\n  - {metric: val_loss, directon: minimize}\n")

    assert (error.key_path, error.line) == ("objectives[0].directon", 5)
    assert "did you mean 'direction'?" in error.reason


def test_unknown_range_key_suggests_the_close_name() -> None:
    error = error_of("parameters:\n  per_device_batch_size: 8\n  base_lr: {low: 0.1, hihg: 1.0}\n")

    assert (error.key_path, error.line) == ("parameters.base_lr.hihg", 3)
    assert "did you mean 'high'?" in error.reason


def test_choices_mapping_with_extra_keys_is_refused() -> None:
    error = error_of(
        "parameters:\n  per_device_batch_size: {choices: [8], log: true}\n  base_lr: 0.1\n"
    )

    assert (error.key_path, error.line) == ("parameters.per_device_batch_size.log", 2)


def test_objective_direction_error_points_at_its_list_item() -> None:
    text = VALID_PARAMETERS + dedent("""\
        objectives:
          - {metric: val_accuracy, direction: maximize}
          - metric: runtime_s
            direction: min
        """)
    error = error_of(text)

    assert (error.key_path, error.line) == ("objectives[1].direction", 7)
    assert "did you mean 'minimize'?" in error.reason


@pytest.mark.parametrize(
    ("objectives", "key_path", "line", "fragment"),
    [
        ("objectives: []\n", "objectives", 4, "non-empty list"),
        ("objectives:\n  - val_accuracy\n", "objectives[0]", 5, "must be a mapping"),
        (
            "objectives:\n  - {metric: accuracy, direction: maximize}\n",
            "objectives[0].metric",
            5,
            "did you mean 'val_accuracy'?",
        ),
        (
            "objectives:\n  - {metric: val_loss}\n",
            "objectives[0].direction",
            5,
            "needs 'direction'",
        ),
        (
            "objectives:\n  - {metric: val_loss, direction: minimize}\n  - {metric: val_loss, direction: maximize}\n",
            "objectives[1].metric",
            6,
            "once",
        ),
    ],
)
def test_bad_objectives_are_refused(
    objectives: str, key_path: str, line: int, fragment: str
) -> None:
    error = error_of(VALID_PARAMETERS + objectives)

    assert (error.key_path, error.line) == (key_path, line)
    assert fragment in error.reason


def test_missing_parameters_points_at_the_document() -> None:
    error = error_of("study: x\nsearch: {n_trials: 3}\n")

    assert (error.key_path, error.line) == ("parameters", 1)


def test_missing_required_parameter_points_at_the_parameters_mapping() -> None:
    error = error_of("study: x\nparameters:\n  per_device_batch_size: 8\n")

    assert (error.key_path, error.line) == ("parameters.base_lr", 2)
    assert "parameters must set 'base_lr'" in error.reason


def test_missing_range_bound_points_at_the_parameter() -> None:
    error = error_of("parameters:\n  per_device_batch_size: 8\n  base_lr: {low: 0.1}\n")

    assert (error.key_path, error.line) == ("parameters.base_lr.high", 3)


def test_missing_objective_key_points_at_the_list_item() -> None:
    error = error_of(VALID_PARAMETERS + "objectives:\n  - metric: val_loss\n")

    assert (error.key_path, error.line) == ("objectives[0].direction", 5)


def test_yaml_syntax_error_gives_the_line_of_the_problem() -> None:
    error = error_of("parameters:\n  per_device_batch_size: 8\n base_lr: 0.1\n")

    assert (error.key_path, error.line) == ("", 3)
    assert error.reason.startswith("invalid YAML:")


def test_unclosed_flow_list_is_a_syntax_error() -> None:
    error = error_of("parameters:\n  per_device_batch_size: {choices: [8, 16}\n  base_lr: 0.1\n")

    assert error.line == 2
    assert error.reason.startswith("invalid YAML:")


def test_tab_indentation_is_a_syntax_error_at_its_line() -> None:
    assert error_of("parameters:\n\tbase_lr: 0.1\n").line == 2


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n# and another\n", "---\n"])
def test_empty_or_comment_only_file_is_refused(text: str) -> None:
    error = error_of(text)

    assert (error.key_path, error.line) == ("", 1)
    assert "empty" in error.reason


@pytest.mark.parametrize(
    ("text", "what"),
    [("- a\n- b\n", "a list"), ("just words\n", "a string"), ("42\n", "an integer")],
)
def test_document_that_is_not_a_mapping_is_refused(text: str, what: str) -> None:
    error = error_of(text)

    assert (error.key_path, error.line) == ("", 1)
    assert f"must be a mapping (key: value), got {what}" in error.reason


def test_duplicate_key_names_both_lines() -> None:
    error = error_of(VALID_PARAMETERS + "search:\n  n_trials: 3\n  seed: 1\n  n_trials: 4\n")

    assert (error.key_path, error.line) == ("search.n_trials", 7)
    assert "duplicate key 'n_trials' (first set at line 5)" in error.reason


def test_duplicate_top_level_section_is_refused() -> None:
    error = error_of(VALID_PARAMETERS + "parameters:\n  base_lr: 0.2\n")

    assert (error.key_path, error.line) == ("parameters", 4)


def test_duplicate_key_inside_a_flow_mapping_is_refused() -> None:
    error = error_of(
        "parameters:\n  per_device_batch_size: 8\n  base_lr: {low: 0.1, low: 0.2, high: 1}\n"
    )

    assert (error.key_path, error.line) == ("parameters.base_lr.low", 3)


def test_several_yaml_documents_are_refused_at_the_second() -> None:
    error = error_of(VALID_PARAMETERS + "---\n" + VALID_PARAMETERS)

    assert (error.key_path, error.line) == ("", 4)
    assert "one YAML document" in error.reason


def test_undecodable_bytes_give_the_line_of_the_first_bad_byte(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_bytes(VALID_PARAMETERS.encode() + b"\x89PNG\r\n\x1a\n\xff\xfe")

    with pytest.raises(SpaceError) as caught:
        load_space(path)

    assert caught.value.line == 4
    assert "UTF-8" in caught.value.reason
    assert str(caught.value).startswith(f"{path}:4: ")


def test_control_characters_in_utf8_text_are_refused_at_their_line() -> None:
    error = error_of(VALID_PARAMETERS + "study: a\x00b\n")

    assert error.line == 4
    assert "#x0000" in error.reason


def test_binary_bytes_given_to_parse_space_are_refused() -> None:
    with pytest.raises(SpaceError) as caught:
        parse_space(bytes(range(128, 256)))

    assert caught.value.line == 1


def test_missing_file_is_a_space_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "nope.yaml"

    with pytest.raises(SpaceError) as caught:
        load_space(path)

    assert str(caught.value) == f"{path}: no such file"
    assert caught.value.line is None


def test_directory_is_a_space_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SpaceError) as caught:
        load_space(tmp_path)

    assert "is a directory" in caught.value.reason


def test_file_stem_that_is_not_a_study_name_asks_for_study(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "my space.yaml"
    path.write_text(VALID_PARAMETERS)

    with pytest.raises(SpaceError) as caught:
        load_space(path)

    assert (caught.value.key_path, caught.value.line) == ("study", 1)
    assert "set 'study:'" in caught.value.reason


@pytest.mark.parametrize(
    ("section", "key_path", "line", "fragment"),
    [
        ("study: 'has space'\n", "study", 4, "got 'has space'"),
        ("study: 2024\n", "study", 4, "quote it"),
        ("storage: ''\n", "storage", 4, "must not be empty"),
        ("workload: {name: 'my.pkg:a:b'}\n", "workload.name", 4, "package.module:function"),
        ("workload: {name: 'class'}\n", "workload.name", 4, "built-in name"),
        ("workload: {epochs: 0}\n", "workload.epochs", 4, "epochs must be >= 1, got 0"),
        ("workload: {epochs: 100001}\n", "workload.epochs", 4, "<= 100000"),
        ("workload: {options: [1, 2]}\n", "workload.options", 4, "must be a mapping"),
        ("scaling: {base_batch_size: 0}\n", "scaling.base_batch_size", 4, ">= 1"),
        ("scaling: {base_batch_size: 8.0}\n", "scaling.base_batch_size", 4, "write 8 without"),
        ("scaling:\n  warmup_epochs: -1\n", "scaling.warmup_epochs", 5, ">= 0"),
        ("scaling:\n  warmup_epochs: .inf\n", "scaling.warmup_epochs", 5, "finite"),
        ("search: {n_trials: 0}\n", "search.n_trials", 4, "n_trials must be >= 1, got 0"),
        ("search: {n_trials: true}\n", "search.n_trials", 4, "got a boolean: true"),
        ("search: {n_trials: '10'}\n", "search.n_trials", 4, "must be an integer, got a string"),
        ("search: {max_concurrent: many}\n", "search.max_concurrent", 4, "'auto' or an integer"),
        ("search: {max_concurrent: 0}\n", "search.max_concurrent", 4, ">= 1"),
        ("search: {scheduler: median}\n", "search.scheduler", 4, "must be one of 'none', 'asha'"),
        ("search: {scheduler: {grace_epochs: 1}}\n", "search.scheduler", 4, "needs a 'name'"),
        ("search: {scheduler: {name: asha, grace_epochs: 0}}\n", "search.scheduler.grace_epochs", 4, "> 0"),
        ("search: {scheduler: {name: asha, reduction_factor: 1}}\n", "search.scheduler.reduction_factor", 4,
         ">= 2"),
        ("search: {scheduler: {name: asha, grace: 1}}\n", "search.scheduler.grace", 4,
         "did you mean 'grace_epochs'?"),
        ("search: {scheduler: {name: none, grace_epochs: 1}}\n", "search.scheduler.grace_epochs", 4,
         "applies to scheduler 'asha' only"),
        ("constraints: {max_effective_batch_size: 0}\n", "constraints.max_effective_batch_size", 4, ">= 1"),
        ("constraints: {max_lr: 0}\n", "constraints.max_lr", 4, "max_lr must be > 0"),
        ("constraints: {skip_equivalent: 1}\n", "constraints.skip_equivalent", 4, "true or false"),
        ("constraints: {max_batch: 64}\n", "constraints.max_batch", 4, "unknown key 'max_batch'"),
        ("search: {sampler: tpee}\n", "search.sampler", 4, "did you mean 'tpe'?"),
        ("search: {seed: -1}\n", "search.seed", 4, ">= 0"),
        ("search: {seed: 4294967296}\n", "search.seed", 4, "<= 4294967295"),
        ("resources: {device: gpu}\n", "resources.device", 4, "'auto', 'cpu', 'cuda'"),
        ("resources: {cpus_per_worker: 0}\n", "resources.cpus_per_worker", 4, ">= 1"),
        ("resources: {gpus_per_worker: -1}\n", "resources.gpus_per_worker", 4, ">= 0"),
        (
            "resources: {device: cpu, gpus_per_worker: 1}\n",
            "resources.gpus_per_worker",
            4,
            "device 'cpu'",
        ),
        (
            "resources: {device: cuda, gpus_per_worker: 0}\n",
            "resources.gpus_per_worker",
            4,
            "device 'cuda'",
        ),
        ("search: [1]\n", "search", 4, "must be a mapping"),
    ],
)
def test_bad_section_values_are_refused(
    section: str, key_path: str, line: int, fragment: str
) -> None:
    error = error_of(VALID_PARAMETERS + section)

    assert (error.key_path, error.line) == (key_path, line)
    assert fragment in error.reason


def test_cmaes_with_several_objectives_is_refused() -> None:
    text = VALID_PARAMETERS + dedent("""\
        objectives:
          - {metric: val_loss, direction: minimize}
          - {metric: runtime_s, direction: minimize}
        search:
          sampler: cmaes
        """)
    error = error_of(text)

    assert (error.key_path, error.line) == ("search.sampler", 8)


@pytest.mark.parametrize("sampler", ["grid", "bruteforce", "GridSampler"])
def test_grid_sampler_names_the_parameter_that_is_a_range(sampler: str) -> None:
    text = dedent(f"""\
        parameters:
          per_device_batch_size: {{choices: [8, 16]}}
          base_lr: 0.1
          weight_decay: {{low: 0.0, high: 0.1}}
        search:
          sampler: {sampler}
        """)
    error = error_of(text)

    assert (error.key_path, error.line) == ("parameters.weight_decay", 4)
    assert "must be {choices: [...]}" in error.reason


def test_absurdly_long_integer_is_refused_cleanly() -> None:
    error = error_of("parameters:\n  per_device_batch_size: " + "9" * 5000 + "\n  base_lr: 0.1\n")

    assert (error.key_path, error.line) == ("parameters.per_device_batch_size", 2)
    assert "5000 digits" in error.reason


def test_unsafe_python_tag_is_refused_without_running_anything() -> None:
    error = error_of(
        VALID_PARAMETERS + "workload:\n  options: {x: !!python/object/apply:os.getcwd []}\n"
    )

    assert (error.key_path, error.line) == ("workload.options.x", 5)
    assert "unsupported YAML value" in error.reason


def test_recursive_alias_is_refused() -> None:
    error = error_of(VALID_PARAMETERS + "workload:\n  options: {x: &a [*a]}\n")

    assert error.key_path.startswith("workload.options.x")
    assert "recursive alias" in error.reason


def test_exponential_alias_expansion_is_refused() -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    error = error_of("\n".join(lines) + "\n")

    assert "more than" in error.reason


def test_complex_mapping_key_is_refused() -> None:
    error = error_of("? [a, b]\n: 1\n")

    assert error.line == 1
    assert "keys must be plain values" in error.reason


def test_non_string_top_level_key_is_refused() -> None:
    error = error_of(VALID_PARAMETERS + "1: x\n")

    assert (error.key_path, error.line) == ("1", 4)
    assert "keys must be strings" in error.reason


def test_impossible_date_is_refused_at_its_line() -> None:
    error = error_of("parameters:\n  per_device_batch_size: 8\n  base_lr: 2024-02-30\n")

    assert (error.key_path, error.line) == ("parameters.base_lr", 3)


def test_absurdly_deep_nesting_is_refused_cleanly() -> None:
    error = error_of("a: " + "[" * 5000 + "]" * 5000 + "\n")

    assert "nested too deeply" in error.reason


def test_asha_with_two_objectives_is_refused_at_the_scheduler_key() -> None:
    text = VALID_PARAMETERS + (
        "objectives:\n"
        "  - {metric: val_accuracy, direction: maximize}\n"
        "  - {metric: runtime_s, direction: minimize}\n"
        "search:\n"
        "  scheduler: asha\n"
    )
    with pytest.raises(SpaceError) as caught:
        parse_space(text, source="space.yaml")

    assert caught.value.key_path == "search.scheduler"
    assert caught.value.line == text.splitlines().index("  scheduler: asha") + 1
    assert "single objective" in caught.value.reason
