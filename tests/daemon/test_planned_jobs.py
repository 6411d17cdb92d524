"""Which jobs a config puts on the scheduler, when they run, and which a reload leaves alone (pure)."""

from __future__ import annotations

from exporter.daemon.planned_jobs import PlannedJob, ProbeWork, ScheduledWork, ScrapeWork, planned_jobs
from exporter.daemon.scheduler import Schedule
from exporter.settings import Config, load_config

CONFIG = """
targets:
  - name: a
    url: http://127.0.0.1:9/v1
    engine_metrics: {{url: "http://127.0.0.1:9/metrics", kind: vllm, interval: 2s}}
    gateway_metrics: {{url: "http://127.0.0.1:8/metrics", interval: 4s}}
modules:
  m:
    workload: {{prompt_tokens: "fixed:64", output_tokens: "fixed:8"}}
    schedule: {{interval: {interval}, jitter: 1s}}
slos:
  default:
    prefill: {{deadline: 5s}}
jobs:
  schedules:
    - name: nightly
      kind: prefill-profile
      cron: "0 3 * * *"
      params: {{target: a, lengths: [128], repeats: 1}}
"""


def config(interval: str = "30s") -> Config:
    return load_config(CONFIG.format(interval=interval))


def test_a_config_plans_a_probe_a_scrape_per_source_and_its_scheduled_jobs() -> None:
    first = config()
    assert planned_jobs(first, first, scheduled=()) == [
        PlannedJob(ProbeWork("a", "m"), Schedule(30.0, 1.0), run_now=True),
        PlannedJob(ScrapeWork("a"), Schedule(2.0), run_now=True),
        PlannedJob(ScrapeWork("a", gateway=True), Schedule(4.0), run_now=True),
        PlannedJob(ScheduledWork("nightly"), Schedule(cron="0 3 * * *")),
    ]


def test_job_ids_name_the_work() -> None:
    works = [ProbeWork("a", "m"), ScrapeWork("a"), ScrapeWork("a", gateway=True), ScheduledWork("nightly")]
    assert [work.job_id for work in works] == ["probe:a:m", "engine:a", "gateway:a", "job:nightly"]


def test_a_reload_puts_a_probe_again_only_when_it_changed_or_is_not_scheduled() -> None:
    old, same, changed = config(), config(), config(interval="1m")

    def put(new: Config, scheduled: tuple[str, ...]) -> bool:
        (probe,) = [job for job in planned_jobs(old, new, scheduled) if isinstance(job.work, ProbeWork)]
        return probe.put

    assert not put(same, scheduled=("probe:a:m",))  # its timing is kept
    assert put(same, scheduled=())
    assert put(changed, scheduled=("probe:a:m",))
    assert all(job.put for job in planned_jobs(old, same, ("probe:a:m",)) if job.work != ProbeWork("a", "m"))
