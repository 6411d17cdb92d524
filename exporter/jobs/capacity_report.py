"""A capacity search as a person reads it: while it runs, progress by requests across the search's
expected total and a line per trial (load, pass fraction with its interval, verdict, tokens)
(``SearchProgress``); after it, the answer said exactly as found (``result_line``), a table of trials
with the cost figures (``capacity_table``), and ``capacity.json``. Formatting only: the runner feeds it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporter.jobs.capacity_result import CapacityResult, load_unit, stop_kind
from exporter.jobs.trial import TrialPlan
from exporter.jobs.trial_verdict import NO_DATA_REASON, TrialReport
from exporter.settings.job_params import CapacityParams
from exporter.stats.binomial import fewest_to_confirm
from exporter.streams.result import ProbeResult

EXPECTED_TRIALS = 6  # for progress: a search's typical trials (the bench's mean is 5.4)
# For the expected duration: the trials after the first run at about this multiple of its load (they
# go where the capacity is; from a first look's start on the simulator's 8B model, ~2.5x).
EXPECTED_GROWTH = 2.5


def figure(value: float | None) -> str:
    """A load, a rate or a price as a person reads it: four significant digits, never an exponent
    (12,345 tokens/s was printed as ``1.235e+04``); ``-`` for none."""
    if value is None:
        return "-"
    size = abs(value)
    if size >= 9999.5:  # .4g of 9999.5 is 1e+04
        return f"{value:.0f}"
    if 0.0 < size < 1e-4:  # .4g of 0.00001234 is 1.234e-05
        return f"{value:.{3 - math.floor(math.log10(size))}f}".rstrip("0")
    return f"{value:.4g}"


class SearchProgress:
    """Requests done across the search's expected total (``EXPECTED_TRIALS`` trials, or as many as
    started), told to ``report(fraction, message)`` as requests finish: a line per trial, and 1.0 with
    the answer at the end. The fraction never goes back: a trial past the expected ones holds it where
    it was (a fraction of the expected trials would fall from 0.99 to 0.86 as a seventh trial starts)."""

    def __init__(self, params: CapacityParams, report: Callable[[float, str], None]) -> None:
        self.params, self.report = params, report
        self.expected = min(EXPECTED_TRIALS, params.max_trials)
        self.index, self.planned, self.done = 0, 1, 0
        self.shown = 0.0  # the largest fraction told so far
        self.line = ""

    def begin(self, start: float, budget_s: float | None, tail_s: float = 0.0) -> None:
        """Said before the first trial: where the search starts, how long it should take (``tail_s``:
        the seconds a trial's last requests take after its last send), and the wall-clock budget
        that ends it at the latest."""
        expected = expected_duration_s(self.params, start, tail_s)
        about = (
            f", about {expected:.0f} s expected over ~{self.expected} trials" if expected is not None else ""
        )
        most = f", at most {budget_s:.0f} s (time budget)" if budget_s is not None else ""
        self.report(0.0, f"search from {figure(start)} {load_unit(self.params.load)}{about}{most}")

    def started(self, index: int, load: float, plan: TrialPlan) -> None:
        self.index, self.planned, self.done = index, max(len(plan.specs), 1), 0
        limit = f", at most {plan.time_limit_s:.0f} s" if plan.time_limit_s is not None else ""
        self.line = (
            f"trial {index}/{self.params.max_trials}: {figure(load)} {load_unit(self.params.load)}, "
            f"{len(plan.specs)} requests{limit}"
        )
        self.report(self.fraction(), self.line)

    def request_done(self, result: ProbeResult) -> None:
        self.done += 1
        self.report(self.fraction(), f"{self.line}: {self.done}/{self.planned} done")

    def fraction(self) -> float:
        """The share of the expected requests done, below 1.0 until the answer, never less than told."""
        trials = max(self.expected, self.index)
        done = min((self.index - 1 + min(self.done / self.planned, 1.0)) / trials, 0.99)
        self.shown = max(self.shown, done)
        return self.shown

    def trial_done(self, trial: TrialReport) -> None:
        self.done = self.planned
        self.report(self.fraction(), trial_line(trial, self.params.load))

    def finished(self, result: CapacityResult) -> None:
        self.report(1.0, result_line(result))


def expected_duration_s(params: CapacityParams, start: float, tail_s: float = 0.0) -> float | None:
    """Seconds a rate search from ``start`` should take: its first trial's send span, then
    ``EXPECTED_TRIALS - 1`` more at ``EXPECTED_GROWTH`` times its load, each with ``tail_s`` for its
    last requests (None for a concurrency search, whose trials last as long as the target takes)."""
    if params.load != "rate":
        return None
    first = (params.warmup_requests + params.requests_per_trial) / start
    if params.trial_duration_s is not None:
        first = min(first, params.trial_duration_s)
    trials = min(EXPECTED_TRIALS, params.max_trials)
    return first + tail_s + (trials - 1) * (first / EXPECTED_GROWTH + tail_s)


def trial_line(trial: TrialReport, load_kind: str) -> str:
    """One trial as an operator reads it: load, pass fraction with its interval, verdict, the requests
    the client timed unreliably (if any), tokens, and why the search set it aside (if it did)."""
    verdict = verdict_text(trial)
    ended = {
        "early_stop": ", stopped early", "cannot_settle": ", stopped: cannot settle a pass",
        "time_limit": ", time limit", "duration": ", trial duration reached",
    }.get(trial.ended_by, "")  # fmt: skip
    flagged = trial.figures.get("unreliable")
    shaky = f", {flagged} timed unreliably" if isinstance(flagged, int) and flagged else ""
    aside = f"; set aside: {trial.set_aside}" if trial.set_aside is not None else ""
    return (
        f"trial {trial.index}: {figure(trial.load)} {load_unit(load_kind)}, pass fraction {pass_fraction(trial)}, "
        f"{verdict}{shaky}, "
        f"{trial.tokens} tokens, {trial.duration_s:.1f} s{ended}{aside}"
    )


def verdict_text(trial: TrialReport) -> str:
    """A trial's verdict with why it failed; ``no data`` for one that measured nothing, which is no
    failure of the target (the search stops there, ``no_data``)."""
    if trial.reason == NO_DATA_REASON:
        return "no data"
    return trial.verdict if trial.passed or trial.verdict != "fail" else f"fail ({trial.reason})"


def pass_fraction(trial: TrialReport) -> str:
    """A trial's share of fluid requests with its interval, ``99.5% [97.2%, 99.9%]`` ("-" without)."""
    share, bounds = trial.figures.get("fluid_share"), trial.figures.get("pass_interval")
    if not isinstance(share, float):
        return "-"
    return f"{share:.1%} [{bounds[0]:.1%}, {bounds[1]:.1%}]" if bounds else f"{share:.1%}"


def result_line(result: CapacityResult) -> str:
    """The answer in one line, said exactly as found (and whether its timings were trusted)."""
    distrusted = result.unreliable_timings() is not None
    if distrusted and result.state != "found":  # a found one says it in place of "capacity"
        return _answer(result, distrusted) + "; its timings unreliable (unreliable_timings)"
    return _answer(result, distrusted)


def _answer(result: CapacityResult, distrusted: bool) -> str:
    unit = load_unit(result.load_kind)
    low, high = result.lower_bound, result.upper_bound
    if result.state is None:
        # Trials may have run (their rows are shown), but none gave a verdict to go by.
        return f"no capacity: no trial's result could be judged (stopped by {result.stopped_by})"
    if result.state == "found":
        # The daemon exports no capacity for one on distrusted timings: nor is one stated here.
        shaky = (
            " on timings the client distrusts: not a measurement (unreliable_timings)" if distrusted else ""
        )
        return f"capacity {figure(low)} {unit} (fails at {figure(high)}){shaky}; {result.stopped_by}"
    if result.state == "lower_bound":
        # Stopped before the bracket closed, it may have a failure above: the capacity lies between.
        fails = f"; fails at {figure(high)} {unit}, not within the tolerance" if high is not None else ""
        return (
            f"capacity at least {figure(low)} {unit}{_unsure(result)}{fails} (stopped by {result.stopped_by})"
        )
    if result.state == "interrupted":  # stopped from outside: the bracket so far, no answer
        passes = f"passed at {figure(low)} {unit}" if low is not None else "no load passed"
        fails = f", failed at {figure(high)} {unit}" if high is not None else ""
        return f"no answer: interrupted before the search ended ({passes}{fails})"
    if result.state == "inconclusive":
        return (
            f"capacity inconclusive: between {figure(low)} and {figure(high)} {unit}, an end straddles the "
            f"objective{_inconclusive_why(result)}"
        )
    if stop_kind(result.stopped_by) == "floor":  # the only not_met that says the SLO is met at no load
        return f"capacity none: the SLO is not met at any load we can offer (stopped by {result.stopped_by})"
    return f"capacity none: the SLO is not met at any load tried (stopped by {result.stopped_by})"


def _inconclusive_why(result: CapacityResult) -> str:
    """What each end of an inconclusive bracket saw, and what a user can do about it: plan below the
    lower end, or ask for an answer the trials can vouch for (more requests a trial, a lower
    percentile). A newcomer's default search at p99 ends here nearly always."""
    loads = {"lower_bound": result.lower_bound, "upper_bound": result.upper_bound}
    ends = [
        f"{end['successes']} of {end['requests']} fluid at {figure(load)} ({end['verdict']})"
        for name, load in loads.items()
        if (end := result.intervals.get(name)) is not None and load is not None
    ]
    percentile, confidence = result.slo.get("percentile"), result.slo.get("confidence")
    if not isinstance(percentile, int | float) or not isinstance(confidence, int | float) or not ends:
        return ""
    needed = fewest_to_confirm(percentile / 100.0, confidence)
    return (
        f": {', '.join(ends)}. A pass at p{percentile:g} takes {needed} fluid requests in a row at "
        f"{confidence:g} confidence. Plan below {figure(result.lower_bound)}, or for an answer the "
        f"trials can vouch for send more requests per trial or judge a lower percentile"
    )


def _unsure(result: CapacityResult) -> str:
    """Why a lower bound is not a confident pass, when it is not: its load passed on the point verdict
    (what steers the search), but its pass fraction's interval reaches below the objective."""
    end = result.intervals.get("lower_bound")
    if end is None or end["verdict"] == "pass":
        return ""
    low, high = end["low"], end["high"]
    return (
        f", not confidently: {end['successes']} of {end['requests']} requests fluid there, interval "
        f"[{low:.1%}, {high:.1%}] straddles the objective"
    )


# -- after the search -------------------------------------------------------------------------------


def capacity_table(result: CapacityResult) -> str:
    """The trials, the answer and what it costs, one line each."""
    lines = [
        f"{'load':>10} {'verdict':>14} {'headroom':>9} {'pass fraction [95% interval]':>29} {'tokens':>10} "
        f"{'seconds':>8}"
    ]
    for trial in result.trials:
        headroom = f"{trial.headroom:>9.3f}" if math.isfinite(trial.headroom) else f"{'-':>9}"
        lines.append(
            f"{figure(trial.load):>10} {verdict_text(trial):>14} {headroom} {pass_fraction(trial):>29} "
            f"{trial.tokens:>10} {trial.duration_s:>8.1f}"
        )
    lines += [f"trial {t.index} set aside: {t.set_aside}" for t in result.trials if t.set_aside is not None]
    lines.append(f"answer ({result.state or 'none'}): {result_line(result)}")
    if result.prediction is not None:
        lines.append(prediction_line(result.prediction))
    if result.context is not None:
        lines.append(result.context.describe())
    burst = burst_line(result)
    if burst is not None:
        lines.append(burst)
    if result.lower_bound is not None:
        rate, good = result.figure("fluid_token_rate"), result.figure("goodput_rate")
        lines.append(
            f"at {figure(result.lower_bound)}: fluid token rate {figure(rate)} tokens/s; goodput {figure(good)} "
            "req/s (requests meeting the SLO per second of offered load)"
        )
    if result.state is not None:  # else no trial was judged: its figures are no finding to price
        measured = result.measured_capacity is not None
        lines += [_cost_line(at, point, measured) for at, point in result.costs().items()]
    trials, aside = len(result.trials), len(result.trials) - len(result.judged)
    set_aside = f" ({aside} set aside)" if aside else ""
    lines.append(
        f"{trials} trial{'' if trials == 1 else 's'}{set_aside}, {result.tokens} tokens, {result.duration_s:.1f} s"
    )
    return "\n".join(lines)


def burst_line(result: CapacityResult) -> str | None:
    """What the lower bound holds for: bursts as long as its trial. An engine near its knee fills its
    queue slowly, so a load that passed a trial of 20 s may queue when kept up for hours (measured on
    the simulator: 10.3 req/s passed trials of 200 requests and failed trials of 400; docs/capacity.md).
    None without a lower bound."""
    trial = result.at_capacity
    if trial is None or result.state is None:
        return None
    return (
        f"holds for bursts like its trials: {trial.planned} requests in {trial.duration_s:.0f} s at "
        f"{figure(trial.load)}; a load kept up for hours can queue below it (leave headroom, or search "
        "with longer trials)"
    )


def prediction_line(prediction: dict[str, Any]) -> str:
    """The engine model's prediction beside the measured answer, and each trial that contradicted it."""
    error = prediction.get("error")
    off = f", {error:+.1%} from the lower bound" if isinstance(error, float) else ""
    line = prediction["decode_line"]
    text = (
        f"predicted (engine model, information only, not the answer): {figure(prediction['load'])} "
        f"[{figure(prediction['low'])}, {figure(prediction['high'])}]{off}; decode gap "
        f"{line['fixed_s'] * 1e3:.2f} ms + {line['per_running_s'] * 1e3:.3f} ms x running requests"
    )
    against = prediction.get("contradicted") or []
    if against:
        seen = "; ".join(
            f"trial {c['trial']} at {figure(c['load'])} {c['measured']}ed (predicted {figure(c['predicted'])})"
            for c in against
        )
        text += f"; contradicted, interval widened: {seen}"
    return text


def _cost_line(at: str, point: dict[str, float | None], found: bool) -> str:
    where = "at the highest load tried"
    if at == "capacity":
        where = "at capacity" if found else "at the lower bound"
    text = f"{where} ({figure(point['load'])}): fluid goodput {figure(point['fluid_goodput_tokens_per_s'])} tokens/s"
    if point["fluid_tokens_per_gpu_second"] is not None:
        text += f", {figure(point['fluid_tokens_per_gpu_second'])} fluid tokens per GPU-second"
    if point["cost_per_million_fluid_tokens"] is not None:
        text += f", {figure(point['cost_per_million_fluid_tokens'])} per million fluid tokens"
    return text


def write_capacity_json(directory: Path, result: CapacityResult) -> Path:
    """``directory/capacity.json``: the result as the jobs API shows it (less the target, module and
    workers the daemon's job adds)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "capacity.json"
    path.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    return path
