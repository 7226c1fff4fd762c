"""space.yaml -> a validated, typed ``SearchSpace``.

Pure data: this package imports neither torch, ray nor plotly.

Example:
    >>> from hpsearch.search_spaces import parse_space
    >>> space = parse_space('''
    ... parameters:
    ...   per_device_batch_size: {choices: [8, 32, 128]}
    ...   base_lr: {low: 1.0e-3, high: 1.0e-1, log: true}
    ... ''')
    >>> sorted(space.searched)
    ['base_lr', 'per_device_batch_size']
"""

from hpsearch.record import METRICS
from hpsearch.search_spaces._budget_text import format_duration, parse_budget_text
from hpsearch.search_spaces._examples import example_path, list_examples
from hpsearch.search_spaces._resolved import resolved_settings
from hpsearch.search_spaces.errors import HPSearchError, SpaceError
from hpsearch.search_spaces.loader import load_space, parse_space, space_error, space_from_mapping
from hpsearch.search_spaces.space import (
    CORE_PARAMETERS,
    DATA_PATHS,
    ENGINE_PARAMETERS,
    LR_RULES,
    MAX_GRAD_NORM,
    MAX_N_TRIALS,
    ON_OOM_MODES,
    OPTIMIZER_PARAMETERS,
    OPTIMIZERS,
    PRECISIONS,
    SAMPLER_CLASS_NAMES,
    SAMPLERS,
    SAVE_MODEL_MODES,
    SWITCHES,
    TRAINING_PARAMETERS,
    AnalysisSpec,
    Budget,
    Choice,
    Constraints,
    Fixed,
    FloatRange,
    IntRange,
    LoaderSpec,
    Objective,
    Parameter,
    ResourceSpec,
    ScalingSpec,
    SearchSettings,
    SearchSpace,
    TrackingSpec,
    WorkloadSpec,
)

__all__ = [
    "CORE_PARAMETERS",
    "DATA_PATHS",
    "ENGINE_PARAMETERS",
    "LR_RULES",
    "MAX_GRAD_NORM",
    "MAX_N_TRIALS",
    "METRICS",
    "ON_OOM_MODES",
    "OPTIMIZERS",
    "OPTIMIZER_PARAMETERS",
    "PRECISIONS",
    "SAMPLERS",
    "SAMPLER_CLASS_NAMES",
    "SAVE_MODEL_MODES",
    "SWITCHES",
    "TRAINING_PARAMETERS",
    "AnalysisSpec",
    "Budget",
    "Choice",
    "Constraints",
    "Fixed",
    "FloatRange",
    "HPSearchError",
    "IntRange",
    "LoaderSpec",
    "Objective",
    "Parameter",
    "ResourceSpec",
    "ScalingSpec",
    "SearchSettings",
    "SearchSpace",
    "SpaceError",
    "TrackingSpec",
    "WorkloadSpec",
    "example_path",
    "format_duration",
    "list_examples",
    "load_space",
    "parse_budget_text",
    "parse_space",
    "resolved_settings",
    "space_error",
    "space_from_mapping",
]
