"""When the burn-rate alerts fire and resolve after a breach: the figures by design (windows, thresholds,
`for`, the objective), checked against Prometheus' own rule engine (``promtool test rules`` on series that
reproduce a breach after enough healthy history) and against the runbook's table, which states them.

By design, for a breach that misses a share ``f`` of the deadlines (where the objective allows ``1 - O``)
starting after a healthy history longer than the long window: a window of ``W`` minutes burns above the
threshold ``T`` once it holds ``W * T * (1 - O) / f`` minutes of the breach, so a pair fires that long
after the breach began (its long window) plus its `for`, and resolves once its short window holds less,
``W_short * (1 - T * (1 - O) / f)`` minutes after the breach ends. A pair whose burn ``f / (1 - O)`` is
not above ``T`` never fires.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import files
from tests.deploy.files import needs_promtool, promtool

LABELS = 'instance="a:9468",job="fluidity-exporter",target="llm",module="chat",tier="medium"'
UNITS = {"m": 1, "h": 60, "d": 1440}
DEADLINES_PER_MINUTE = 1000


def minutes(duration: str) -> int:
    """``"1d"`` -> 1440: a duration of the rules in minutes."""
    return sum(int(n) * UNITS[unit] for n, unit in re.findall(r"(\d+)([mhd])", duration))


@dataclass(frozen=True)
class Pair:
    """One window pair of a burn-rate alert, as the rule file has it."""

    alert: str
    long: str
    short: str
    threshold: float
    for_: str
    severity: str

    def labels(self) -> dict[str, str]:
        return {"severity": self.severity, "long_window": self.long, "short_window": self.short}

    def budget_share(self, breach: float) -> float | None:
        """The share of a window the breach must fill to burn above the threshold; None: never."""
        objective, _ = files.objective()
        share = self.threshold * (1 - objective) / breach
        return share if share < 1 else None

    def fires_after(self, breach: float) -> float | None:
        """Minutes from the breach's start to the alert firing, by design."""
        share = self.budget_share(breach)
        return None if share is None else minutes(self.long) * share + minutes(self.for_)

    def resolves_after(self, breach: float) -> float | None:
        """Minutes from the breach's end to the alert resolving (the short window clears first)."""
        share = self.budget_share(breach)
        return None if share is None else minutes(self.short) * (1 - share)


def pairs(prefix: str = "FluidityErrorBudget") -> list[Pair]:
    """The window pairs of the probes' burn-rate alerts (``prefix``: those of another family)."""
    out = []
    for alert in files.alerts():
        labels = alert["labels"]
        if "long_window" in labels and alert["alert"].startswith(prefix):
            (threshold,) = set(re.findall(r"> ([\d.]+)", alert["expr"]))
            windows = (labels["long_window"], labels["short_window"])
            out.append(Pair(alert["alert"], *windows, float(threshold), alert["for"], labels["severity"]))
    return out


@dataclass(frozen=True)
class Breach:
    """A breach of ``share`` missed deadlines for ``length`` minutes after ``start`` healthy minutes,
    sampled (and the rules evaluated) every ``step`` minutes."""

    share: float
    start: int
    length: int
    step: int
    alert: str

    def series(self, tail: int) -> list[dict[str, str]]:
        per = DEADLINES_PER_MINUTE * self.step
        healthy, breached, after = self.start // self.step, self.length // self.step, tail // self.step
        missed = f"0x{healthy} {per * self.share:g}+{per * self.share:g}x{breached - 1} "
        missed += f"{per * self.share * breached:g}x{after}"
        total = f"0+{per}x{healthy + breached + after}"
        return [
            {"series": f"fluidity_probe_deadlines_total{{{LABELS}}}", "values": total},
            {"series": f"fluidity_probe_deadlines_missed_total{{{LABELS}}}", "values": missed},
        ]


def events(breach: Breach) -> list[tuple[Pair, float, float]]:
    """(pair, minute it fires, minute it resolves) of the pairs of ``breach.alert`` that fire."""
    out = []
    for pair in pairs():
        fire, resolve = pair.fires_after(breach.share), pair.resolves_after(breach.share)
        if pair.alert == breach.alert and fire is not None and resolve is not None:
            out.append((pair, breach.start + fire, breach.start + breach.length + resolve))
    return out


def checks(breach: Breach) -> list[tuple[int, set[str]]]:
    """(minute, long windows expected firing) just before and just after each event. The margins are
    the evaluation's granularity: the burn must exceed the threshold (not reach it), an alert may read
    the burn rates recorded one evaluation earlier, and `for` starts at the evaluation after."""
    early, late = breach.step, 3 * breach.step
    spans = events(breach)
    times: list[int] = []
    for _, fire, resolve in spans:
        for moment in (fire, resolve):
            times += [breach.step * math.floor((moment - early) / breach.step)]
            times += [breach.step * math.ceil((moment + late) / breach.step)]
    out = []
    for time in times:
        # No check may fall within another event's margins, where the state is the engine's call.
        assert not any(
            fire - early < time < fire + late or resolve - early < time < resolve + late
            for _, fire, resolve in spans
        ), (time, spans)
        out.append((time, {pair.long for pair, fire, resolve in spans if fire <= time < resolve}))
    return out


def without_annotations(path: Path, tmp_path: Path) -> Path:
    """The rule file with no annotations: they quote burn rates that move every minute of a breach."""
    document = files.load(path)
    for group in document["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    out = tmp_path / path.name
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    return out


def unit_test(breach: Breach, tmp_path: Path) -> dict[str, Any]:
    labels = {"job": "fluidity-exporter", "target": "llm", "module": "chat", "tier": "medium"}
    alerts = {pair.long: pair for pair in pairs()}
    cases = [
        {
            "eval_time": f"{time}m",
            "alertname": breach.alert,
            "exp_alerts": [
                {"exp_labels": {**labels, **alerts[long].labels()}} for long in sorted(firing, key=minutes)
            ],
        }
        for time, firing in checks(breach)
    ]
    tail = max(resolve for _, _, resolve in events(breach)) - breach.start - breach.length + 60
    rule_files = [str(without_annotations(path, tmp_path)) for path in files.RULE_FILES]
    return {
        "rule_files": rule_files,
        "evaluation_interval": f"{breach.step}m",
        "tests": [
            {
                "interval": f"{breach.step}m",
                "input_series": breach.series(int(tail)),
                "alert_rule_test": cases,
            }
        ],
    }


# The pages every minute after 7 hours of health (more than the 6h window); the tickets every 5 minutes
# after 3 days and an hour (the 3d window), to keep the unit test to seconds.
BREACHES = {
    "a total breach pages": Breach(1.0, 420, 60, 1, "FluidityErrorBudgetFastBurn"),
    "a 10% breach pages through the 6h pair only": Breach(0.1, 420, 300, 1, "FluidityErrorBudgetFastBurn"),
    "a total breach of an hour opens both tickets": Breach(1.0, 4380, 60, 5, "FluidityErrorBudgetSlowBurn"),
    "a 10% breach opens both tickets": Breach(0.1, 4380, 700, 5, "FluidityErrorBudgetSlowBurn"),
}


@needs_promtool
@pytest.mark.parametrize("name", BREACHES)
def test_the_alerts_fire_and_resolve_when_the_design_says(name: str, tmp_path: Path) -> None:
    breach = BREACHES[name]
    assert events(breach), "a breach that fires nothing checks nothing"
    test_file = tmp_path / "timing.test.yml"
    test_file.write_text(yaml.safe_dump(unit_test(breach, tmp_path), sort_keys=False))
    run = promtool("test", "rules", str(test_file))
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_10_percent_breach_never_pages_through_the_1h_pair() -> None:
    (one_hour,) = [pair for pair in pairs() if pair.long == "1h"]
    assert one_hour.fires_after(0.1) is None and one_hour.fires_after(1.0) == pytest.approx(10.64)


def test_the_users_pairs_are_the_probes_so_the_figures_hold_for_both() -> None:
    # At a steady volume of at least 10 completed user requests per long window (their extra floor),
    # the traffic alerts fire and resolve when the probes' do.
    probes = {(p.long, p.short, p.threshold, p.for_, p.severity) for p in pairs()}
    users = {(p.long, p.short, p.threshold, p.for_, p.severity) for p in pairs("FluidityTrafficErrorBudget")}
    assert len(probes) == 4 and users == probes
    named = {p.alert.replace("Traffic", "") for p in pairs("FluidityTrafficErrorBudget")}
    assert named == {p.alert for p in pairs()}


def _figure(value: float | None, *, fires: bool = True) -> str:
    if value is None:
        return "never" if fires else "-"
    return f"{value:.0f} min" if value >= 20 else f"{value:.1f} min"


def test_the_runbook_states_the_figures() -> None:
    rows = {
        tuple(cell.strip() for cell in line.strip("|").split("|"))
        for line in files.RUNBOOK.read_text().splitlines()
        if line.startswith("| Fluidity")
    }
    for pair in pairs():
        total, tenth = 1.0, 0.1
        figures = (
            _figure(pair.fires_after(total)),
            _figure(pair.resolves_after(total), fires=False),
            _figure(pair.fires_after(tenth)),
            _figure(pair.resolves_after(tenth), fires=False),
        )
        row = (pair.alert, f"{pair.long} / {pair.short}", f"{pair.threshold:g}", pair.for_, *figures)
        assert row in rows, row
