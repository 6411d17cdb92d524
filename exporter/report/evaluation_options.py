"""What a one-shot run's report evaluates, built from its evaluation flags
(``exporter.settings.evaluation_flags``): the deadline policy, SLOs and goodput bounds ``measure`` needs."""

from __future__ import annotations

from exporter.evaluation import EvaluationSpec
from exporter.settings.evaluation_flags import EvaluationFlags


def evaluation_spec(flags: EvaluationFlags) -> EvaluationSpec:
    """Deadlines, SLOs and goodput bounds."""
    return EvaluationSpec.of(flags.slo, from_scheduled=flags.from_scheduled)
