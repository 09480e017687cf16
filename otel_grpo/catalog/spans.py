"""The span contract: the names of the spans, events and attributes the telemetry writes and the
sidecar reads (and `otel-grpo replay` writes again from the spill). Defined once, here.

- `grpo.step`: attributes `grpo.run_id`, `grpo.step`, `grpo.metric.<stat_key>` (the step's scalars);
- `grpo.phase.<name>`: child of the step span, attribute `grpo.phase`; duration = end - start;
- `grpo.samples`: attributes `grpo.run_id`, `grpo.step`, `grpo.samples.chunk`, `grpo.samples.count`;
  one `grpo.sample` event per sample.
The resource may carry `grpo.run_id` too (the reader's fallback).
A step number is an integer in 0 .. 2**63 - 1 (`check_step`): OTel attributes and the sidecar's
step column are int64.
"""

import operator
from typing import Any

STEP_SPAN = "grpo.step"
PHASE_PREFIX = "grpo.phase."
SAMPLES_SPAN = "grpo.samples"
SAMPLE_EVENT = "grpo.sample"

RUN_ID_ATTR = "grpo.run_id"
STEP_ATTR = "grpo.step"
PHASE_ATTR = "grpo.phase"
METRIC_PREFIX = "grpo.metric."
CHUNK_ATTR = "grpo.samples.chunk"
COUNT_ATTR = "grpo.samples.count"

MAX_STEP = 2**63 - 1


def check_step(step: Any) -> int:
    """`step` as an int in 0 .. MAX_STEP (any integer type: int, numpy's), else `ValueError` naming it."""
    try:
        number = None if isinstance(step, bool) else operator.index(step)
    except TypeError:
        number = None
    if number is None or not 0 <= number <= MAX_STEP:
        raise ValueError(f"step is {str(step)[:40]!r}, not an integer in 0 .. 2**63 - 1")
    return number
