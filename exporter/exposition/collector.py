"""The Prometheus collector of probe, engine and gateway metrics, built afresh from the store on every scrape.

``FluidityCollector`` is a plain prometheus_client custom collector: ``collect()`` takes a snapshot of
the ``ResultStore`` and builds new ``*MetricFamily`` objects from it; nothing global is mutated.
The families it fills are ``families.py``'s; ``/probe``'s registry is ``probe_registry.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import (
    Metric,
)
from prometheus_client.registry import Collector

from exporter.engine.catalogue import Signal
from exporter.engine.derive import (
    BucketQuantile,
    WindowFigures,
    client_minus_server_mean_ttft,
    client_minus_server_ttft,
)
from exporter.exposition import names, render
from exporter.exposition.families import Families, new_family
from exporter.exposition.names import MetricSpec
from exporter.exposition.result_store import Clock, ResultStore
from exporter.exposition.views import EngineView, SeriesView
from exporter.exposition.window import PUBLISHED_QUANTILES, ProbeWindow, PublishedQuantiles

_HISTOGRAM_SPECS: Mapping[str, MetricSpec] = {
    "ttft": names.PROBE_TTFT,
    "tbt": names.PROBE_TBT,
    "tpot": names.PROBE_TPOT,
    "e2e": names.PROBE_E2E,
    "normalized_latency": names.PROBE_NORMALIZED_LATENCY,
}


@dataclass(frozen=True)
class _Plane:
    """How one scraped component (the engine, or the gateway in front of it) is re-exported."""

    name: str  # the store's key for it, and the cache's
    success: MetricSpec
    duration: MetricSpec
    info: MetricSpec  # labels (target, kind)
    values: Mapping[Signal, MetricSpec]
    # signal -> (its percentile gauge, the gauge of the bound where the buckets give only that)
    window_quantiles: Mapping[Signal, tuple[MetricSpec, MetricSpec]]


ENGINE_PLANE = _Plane(
    "engine",
    names.ENGINE_SCRAPE_SUCCESS,
    names.ENGINE_SCRAPE_DURATION,
    names.ENGINE_INFO,
    {
        Signal.QUEUE_DEPTH: names.ENGINE_QUEUE_DEPTH,
        Signal.RUNNING_REQUESTS: names.ENGINE_RUNNING,
        Signal.KV_CACHE_USAGE: names.ENGINE_KV_CACHE_USAGE,
        Signal.PREEMPTIONS_TOTAL: names.ENGINE_PREEMPTIONS,
        Signal.PROMPT_TOKENS_TOTAL: names.ENGINE_PROMPT_TOKENS,
        Signal.PREFIX_CACHE_QUERIES_TOTAL: names.ENGINE_PREFIX_CACHE_QUERIES,
        Signal.PREFIX_CACHE_HITS_TOTAL: names.ENGINE_PREFIX_CACHE_HITS,
        Signal.GENERATION_TOKENS_TOTAL: names.ENGINE_GENERATION_TOKENS,
        Signal.REQUEST_SUCCESS_TOTAL: names.ENGINE_REQUEST_SUCCESS,
    },
    {
        Signal.SERVER_TTFT_SECONDS: (names.ENGINE_WINDOW_TTFT, names.ENGINE_WINDOW_TTFT_BOUND),
        Signal.SERVER_ITL_SECONDS: (names.ENGINE_WINDOW_ITL, names.ENGINE_WINDOW_ITL_BOUND),
        Signal.SERVER_E2E_SECONDS: (names.ENGINE_WINDOW_E2E, names.ENGINE_WINDOW_E2E_BOUND),
        Signal.SERVER_QUEUE_SECONDS: (names.ENGINE_WINDOW_QUEUE, names.ENGINE_WINDOW_QUEUE_BOUND),
        Signal.SERVER_TPOT_SECONDS: (names.ENGINE_WINDOW_TPOT, names.ENGINE_WINDOW_TPOT_BOUND),
    },
)
GATEWAY_PLANE = _Plane(
    "gateway",
    names.GATEWAY_SCRAPE_SUCCESS,
    names.GATEWAY_SCRAPE_DURATION,
    names.GATEWAY_INFO,
    {
        Signal.RUNNING_REQUESTS: names.GATEWAY_RUNNING,
        Signal.REQUESTS_TOTAL: names.GATEWAY_REQUESTS,
        Signal.REQUEST_ERRORS_TOTAL: names.GATEWAY_REQUEST_ERRORS,
        Signal.SLO_VIOLATIONS_TOTAL: names.GATEWAY_SLO_VIOLATIONS,
    },
    {
        Signal.SERVER_TTFT_SECONDS: (names.GATEWAY_WINDOW_TTFT, names.GATEWAY_WINDOW_TTFT_BOUND),
        Signal.SERVER_ITL_SECONDS: (names.GATEWAY_WINDOW_ITL, names.GATEWAY_WINDOW_ITL_BOUND),
        Signal.SERVER_TPOT_SECONDS: (names.GATEWAY_WINDOW_TPOT, names.GATEWAY_WINDOW_TPOT_BOUND),
        Signal.SERVER_E2E_SECONDS: (names.GATEWAY_WINDOW_E2E, names.GATEWAY_WINDOW_E2E_BOUND),
    },
)
PLANES: tuple[_Plane, ...] = (ENGINE_PLANE, GATEWAY_PLANE)
PlaneKey = tuple[str, str]  # (plane name, target)


def _family_texts(out: Families) -> dict[str, tuple[str, str]]:
    """Each family's header and sample lines, by exposed name."""
    return {render.family_name(f): (render.header(f), render.sample_lines(f)) for f in out}


class _TextParts:
    """Sample lines gathered per family from many sources, joined under one header per family."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.lines: dict[str, list[str]] = {}

    def add_text(self, texts: Mapping[str, tuple[str, str]]) -> None:
        for name, (head, samples) in texts.items():
            self.headers[name] = head
            self.lines.setdefault(name, []).append(samples)

    def text(self) -> str:
        order = {spec.name: index for index, spec in enumerate(names.ALL)}
        ordered = sorted(self.headers, key=order.__getitem__)
        return "".join(self.headers[name] + "".join(self.lines[name]) for name in ordered)


class _EngineWindows:
    """The window figures of every scraped component by (plane, target), computed once per snapshot:
    its (newest snapshot time, snapshot count) -> figures per window label."""

    def __init__(self, windows: Mapping[str, float]) -> None:
        self.windows = windows
        self._cache: dict[PlaneKey, tuple[tuple[float, int], dict[str, WindowFigures]]] = {}

    def state(
        self, store: ResultStore
    ) -> tuple[dict[PlaneKey, EngineView], dict[PlaneKey, dict[str, WindowFigures]]]:
        """Every scraped component by (plane, target), engines first, with its window figures."""
        engines = {(ENGINE_PLANE.name, view.target): view for view in store.engines()}
        engines.update({(GATEWAY_PLANE.name, view.target): view for view in store.gateways()})
        figures = {key: self._figures(key, view) for key, view in engines.items()}
        self._cache = {k: c for k, c in self._cache.items() if k in engines}
        return engines, figures

    def _figures(self, key: PlaneKey, view: EngineView) -> dict[str, WindowFigures]:
        latest = view.window.latest
        if view.last is None or not view.last.ok or latest is None:
            return {}
        version = (latest.at, len(view.window))
        cached = self._cache.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        figures = {label: view.window.figures(seconds) for label, seconds in self.windows.items()}
        kept = {label: f for label, f in figures.items() if f is not None}
        self._cache[key] = (version, kept)
        return kept


class FluidityCollector(Collector):
    """Probe histograms and counters, window gauges and engine signals of every series in ``store``.

    ``windows`` maps a window label (e.g. "5m") to its length in seconds; each must be at most the
    store's ``max_age_s``. ``clock`` gives the scrape's "now" in the store's time base (unix seconds).
    """

    def __init__(
        self,
        store: ResultStore,
        windows: Mapping[str, float],
        clock: Clock = time.time,
        quantiles: PublishedQuantiles = PUBLISHED_QUANTILES,
    ) -> None:
        _check_windows(windows, store.limits.max_age_s)
        self.store = store
        self.windows = dict(windows)
        self.clock = clock
        self.quantiles = quantiles
        self._engine_windows = _EngineWindows(self.windows)
        # Rendered cumulative samples by series: (version, {family name: (header, sample lines)}).
        self._text_cache: dict[tuple[str, str], tuple[object, dict[str, tuple[str, str]]]] = {}
        self._engine_text_cache: dict[PlaneKey, tuple[object, object, dict[str, tuple[str, str]]]] = {}
        self._window_text_cache: dict[
            tuple[str, str, str], tuple[ProbeWindow, WindowFigures | None, dict[str, tuple[str, str]]]
        ] = {}

    def describe(self) -> Iterator[Metric]:
        """Every family this collector may yield, empty (so registering never runs a full collect)."""
        for spec in names.COLLECTED:
            yield new_family(spec)

    def collect(self) -> Iterator[Metric]:
        yield from self._build(self.clock())

    def render_text(self) -> str:
        """The text exposition of ``collect()``, fast: each series' cumulative samples (histograms and
        counters, which change only when a run is stored) and each window's samples (which change only
        when its rows do) are formatted once and reused until they change."""
        now = self.clock()
        engines, engine_figures = self._engine_windows.state(self.store)
        parts = _TextParts()
        cumulative_keys, window_keys = set(), set()
        for key, version in self.store.versions():
            cumulative_keys.add(key)
            parts.add_text(self._cumulative_text(key, version, now))
            for label, seconds in self.windows.items():
                window = self._window(key, seconds, now)
                if window is None:
                    continue
                labels = (*key, label)
                window_keys.add(labels)
                figures = engine_figures.get((ENGINE_PLANE.name, key[0]), {}).get(label)
                parts.add_text(self._window_text(labels, window, figures))
        for plane_key, view in engines.items():
            parts.add_text(self._engine_text(plane_key, view, engine_figures[plane_key]))
        self._text_cache = {k: v for k, v in self._text_cache.items() if k in cumulative_keys}
        self._window_text_cache = {k: v for k, v in self._window_text_cache.items() if k in window_keys}
        self._engine_text_cache = {k: v for k, v in self._engine_text_cache.items() if k in engines}
        return parts.text()

    def _cumulative_text(self, key: tuple[str, str], version: int, now: float) -> dict[str, tuple[str, str]]:
        cached = self._text_cache.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        out = Families()
        _add_cumulative(out, self.store.view(key, now))
        text = _family_texts(out)
        self._text_cache[key] = (version, text)
        return text

    def _window_text(
        self, labels: tuple[str, str, str], window: ProbeWindow, figures: WindowFigures | None
    ) -> dict[str, tuple[str, str]]:
        # The store hands out the same ProbeWindow object until the window's rows change, and the
        # engine cache the same figures until a new snapshot arrives: identity is the version.
        cached = self._window_text_cache.get(labels)
        if cached is not None and cached[0] is window and cached[1] is figures:
            return cached[2]
        out = Families()
        add_window(out, labels, window)
        _add_client_minus_server(out, labels, window, figures, self.quantiles.client_ttft)
        text = _family_texts(out)
        self._window_text_cache[labels] = (window, figures, text)
        return text

    def _engine_text(
        self, key: PlaneKey, view: EngineView, figures: dict[str, WindowFigures]
    ) -> dict[str, tuple[str, str]]:
        # A scrape result and the figures derived from the window change together, on a new scrape.
        cached = self._engine_text_cache.get(key)
        if cached is not None and cached[0] is view.last and cached[1] is figures:
            return cached[2]
        out = Families()
        _add_engine(out, _plane(key), view, figures, self.quantiles.engine)
        text = _family_texts(out)
        self._engine_text_cache[key] = (view.last, figures, text)
        return text

    def _window(self, key: tuple[str, str], seconds: float, now: float) -> ProbeWindow | None:
        return self.store.window(*key, seconds, now, self.quantiles)

    def _build(self, now: float) -> Families:
        out = Families()
        engines, engine_figures = self._engine_windows.state(self.store)
        for series in self.store.series(now):
            _add_cumulative(out, series)
            for label, seconds in self.windows.items():
                window = self._window((series.target, series.module), seconds, now)
                if window is not None:
                    labels = (series.target, series.module, label)
                    add_window(out, labels, window)
                    figures = engine_figures.get((ENGINE_PLANE.name, series.target), {}).get(label)
                    _add_client_minus_server(out, labels, window, figures, self.quantiles.client_ttft)
        for key, view in engines.items():
            _add_engine(out, _plane(key), view, engine_figures[key], self.quantiles.engine)
        return out


def _add_engine(
    out: Families,
    plane: _Plane,
    view: EngineView,
    figures: Mapping[str, WindowFigures],
    quantiles: Sequence[float],
) -> None:
    """A scraped component's status, its signals and its window percentiles (at ``quantiles``)."""
    last = view.last
    if last is None:
        return
    out.add(plane.success, (view.target,), 1.0 if last.ok else 0.0)
    out.add(plane.duration, (view.target,), last.duration_s)
    if last.snapshot is None:
        return
    out.add(plane.info, (view.target, last.snapshot.kind), 1.0)
    for signal, spec in plane.values.items():
        value = last.snapshot.value(signal)
        if value is not None:
            out.add(spec, (view.target,), value)
    for label, window in figures.items():
        for signal, specs in plane.window_quantiles.items():
            for q in quantiles:
                _add_window_quantile(
                    out, specs, (view.target, label, quantile_label(q)), window.quantile(signal, q)
                )


def _add_client_minus_server(
    out: Families, labels: tuple[str, str, str], window: ProbeWindow, figures: WindowFigures | None, q: float
) -> None:
    """How much later the probes' first tokens came than the engine's own TTFT says (at quantile ``q``
    and on average), where the engine's window has a TTFT histogram."""
    server = figures.histograms.get(Signal.SERVER_TTFT_SECONDS) if figures is not None else None
    if server is None or not len(window.client_ttfts):
        return
    gap = client_minus_server_ttft(window.client_ttfts.tolist(), server, q)
    if gap is not None:
        out.add(names.WINDOW_CLIENT_MINUS_SERVER_TTFT, (*labels, quantile_label(q)), gap)
    mean_gap = client_minus_server_mean_ttft(window.client_ttfts.tolist(), server)
    if mean_gap is not None:
        out.add(names.WINDOW_CLIENT_MINUS_SERVER_MEAN_TTFT, labels, mean_gap)


def _add_window_quantile(
    out: Families, specs: tuple[MetricSpec, MetricSpec], labels: tuple[str, ...], found: BucketQuantile | None
) -> None:
    """A percentile where the buckets measure it; else only the bound they give, in the bound family,
    so that no dashboard or rule reads "at most 0.3 s" as a measured 0.15 s."""
    if found is None:
        return
    value_spec, bound_spec = specs
    if found.measured is not None:
        out.add(value_spec, labels, found.measured)
    else:
        out.add(bound_spec, (*labels, found.resolution.value), found.bound)


def _plane(key: PlaneKey) -> _Plane:
    return next(plane for plane in PLANES if plane.name == key[0])


def _add_cumulative(out: Families, series: SeriesView) -> None:
    labels = (series.target, series.module)
    for kind, spec in _HISTOGRAM_SPECS.items():
        out.histogram(spec, labels, series.histograms[kind])
    for tier, counts in series.fluidity.items():
        out.histogram(names.PROBE_FLUIDITY, (*labels, tier), counts)
    for outcome, count in series.requests.items():
        out.add(names.PROBE_REQUESTS, (*labels, outcome.value), count)
    out.add(names.PROBE_RETRIES, labels, series.retries)
    out.add(names.PROBE_UNRELIABLE, labels, series.unreliable)
    out.add(names.PROBE_OUTPUT_TOKENS, labels, series.output_tokens)
    for tier, total in series.deadlines.items():
        out.add(names.PROBE_DEADLINES, (*labels, tier), total)
        out.add(names.PROBE_DEADLINES_MISSED, (*labels, tier), series.deadlines_missed[tier])
    if series.good_requests is not None:
        out.add(names.PROBE_GOOD_REQUESTS, labels, series.good_requests)
    if series.last_success is not None:
        out.add(names.PROBE_LAST_SUCCESS, labels, series.last_success)
    if series.last_run_ok is not None:
        out.add(names.PROBE_LAST_RUN_OK, labels, series.last_run_ok)
    for kind, turn in series.turns.items():
        out.histogram(names.PROBE_TURN_TTFT, (*labels, kind), turn.ttft)
        out.add(names.PROBE_PROMPT_TOKENS, (*labels, kind), turn.prompt_tokens)
        out.add(names.PROBE_PROMPT_CACHED_TOKENS, (*labels, kind), turn.cached_tokens)


@dataclass(frozen=True)
class WindowFamilies:
    """The families a rolling window's figures go to: the probes' (``fluidity_window_*``), or the
    traffic observer's (``fluidity_traffic_window_*``, which has no prober lateness nor fluid rate)."""

    requests: MetricSpec
    fluidity: MetricSpec
    service_level: MetricSpec
    slo_met: MetricSpec
    goodput: MetricSpec
    fluid_rate: MetricSpec | None = None
    lateness: MetricSpec | None = None


PROBE_WINDOW_FAMILIES = WindowFamilies(
    names.WINDOW_REQUESTS,
    names.WINDOW_FLUIDITY,
    names.WINDOW_SERVICE_LEVEL,
    names.WINDOW_SLO_MET,
    names.WINDOW_GOODPUT,
    names.WINDOW_FLUID_RATE,
    names.WINDOW_LATENESS,
)


def add_window(
    out: Families,
    labels: tuple[str, ...],
    window: ProbeWindow,
    specs: WindowFamilies = PROBE_WINDOW_FAMILIES,
) -> None:
    """A window's figures as samples of ``specs``' families, ``labels`` their series and window."""
    for outcome, count in window.requests.items():
        out.add(specs.requests, (*labels, outcome.value), count)
    for tier, quantiles in window.fluidity.items():
        for q, value in quantiles.items():
            out.add(specs.fluidity, (*labels, tier, quantile_label(q)), value)
    for tier, level in window.service_level.items():
        out.add(specs.service_level, (*labels, tier), level)
    if specs.fluid_rate is not None and window.fluid_token_rate is not None:
        out.add(specs.fluid_rate, labels, window.fluid_token_rate)
    for result in window.slos:
        out.add(specs.slo_met, (*labels, str(result.objective)), 1.0 if result.met else 0.0)
    if window.goodput_ratio is not None:
        out.add(specs.goodput, labels, window.goodput_ratio)
    if specs.lateness is not None:
        for q, seconds in window.lateness.items():
            out.add(specs.lateness, (*labels, quantile_label(q)), seconds)


def quantile_label(q: float) -> str:
    """The ``percentile`` label of quantile ``q``: 0.01 -> "1", 0.5 -> "50", 0.999 -> "99.9"."""
    return f"{round(q * 100.0, 6):g}"


def _check_windows(windows: Mapping[str, float], max_age_s: float) -> None:
    for label, seconds in windows.items():
        if not 0 < seconds <= max_age_s:
            raise ValueError(
                f'window "{label}": {seconds} s must be > 0 and at most the store\'s max_age_s ({max_age_s} s)'
            )
