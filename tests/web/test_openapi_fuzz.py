"""The jobs API against the document it serves, fuzzed by schemathesis (bounded, loopback only): no
server error, every status and body as documented, the requests the document calls valid accepted and
those it calls invalid refused (405s and their ``Allow``: tests/web/test_jobs_api.py). The daemon side is the real routes over a real socket;
the jobs end at once (their runner sends no load)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation

from exporter.jobs.job_records import JobStore
from exporter.jobs.manager import JobContext, JobManager
from exporter.settings.job_params import JobLimits, JobParams, concurrency_ceiling
from exporter.web.jobs_api import add_job_routes
from tests.web.service import AUTH, Service

FUZZ_EXAMPLES = 15  # per operation and mode (valid, invalid): 150 cases, 15-40 s on the 2-core VM


async def instant(params: JobParams, context: JobContext) -> dict[str, Any]:
    return {"target": params.target}


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    """The jobs API on 127.0.0.1 in a thread of its own (schemathesis calls it synchronously)."""
    started: list[str] = []
    ready, stop = threading.Event(), threading.Event()

    async def serve() -> None:
        manager = JobManager(JobStore(None), {"capacity": instant, "prefill-profile": instant})
        app = web.Application()
        add_job_routes(app, Service(manager, limits=JobLimits(max_rate=10.0, max_trials=6)))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        started.append(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")  # type: ignore[union-attr]
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await manager.shutdown()
        await runner.cleanup()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield started[0]
    stop.set()
    thread.join(10)


def within_cross_field_rules(body: Any) -> bool:
    """The rules JSON Schema cannot state (each said in its field's description of the document):
    ``min_load <= start <= max_load``, ``requests_per_trial + warmup_requests <= max_requests_per_trial``, a
    concurrency within half of that sum, and a ladder's ``low <= high``. The API refuses a body that breaks one, naming it, as it should."""
    if not isinstance(body, dict):
        return True
    start, max_load = body.get("start"), body.get("max_load")
    if isinstance(start, int | float) and isinstance(max_load, int | float) and start > max_load:
        return False
    min_load = body.get("min_load")
    for above in (start, max_load):
        if isinstance(min_load, int | float) and isinstance(above, int | float) and min_load > above:
            return False
    ceiling = JobLimits().max_requests_per_trial  # as the parser fills in what is left out
    warmup = body.get("warmup_requests", 20)
    requests = body.get(
        "requests_per_trial", max(10, min(200, ceiling - warmup)) if isinstance(warmup, int) else 0
    )
    if isinstance(requests, int | float) and isinstance(warmup, int | float) and requests + warmup > ceiling:
        return False
    # JSON Schema's integers include 0.0 and 10.0, which the API reads as the integers they are.
    if body.get("load") == "concurrency" and all(_whole(v) for v in (requests, warmup)):
        loads, ceiling = (start, max_load, min_load), concurrency_ceiling(int(warmup), int(requests))
        if any(isinstance(v, int | float) and v > ceiling for v in loads):
            return False
    ladder = body.get("lengths")
    if isinstance(ladder, dict):
        low, high = ladder.get("low", 128), ladder.get("high", 16384)
        if isinstance(low, int | float) and isinstance(high, int | float) and low > high:
            return False
    return True


def _whole(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()


def credentials(case: Any) -> dict[str, str]:
    """The test's token, unless the case's headers are its negative part: a removed or mangled
    ``Authorization`` must be refused, and putting the token back would make the request a valid one."""
    header = case.meta.components.get(ParameterLocation.HEADER) if case.meta is not None else None
    return {} if header is not None and header.mode is GenerationMode.NEGATIVE else AUTH


@pytest.mark.timeout(300)
def test_the_api_is_what_its_served_document_says(api_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{api_url}/api/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 5  # the document itself is not documented as an operation
    for operation in operations:
        valid = operation.as_strategy().filter(lambda case: within_cross_field_rules(case.body))
        invalid = operation.as_strategy(GenerationMode.NEGATIVE)  # must be refused, never accepted
        for strategy in (valid, invalid):

            @given(case=strategy)
            @settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
            def call(case: Any) -> None:
                case.call_and_validate(base_url=api_url, headers=credentials(case), timeout=10)

            call()
