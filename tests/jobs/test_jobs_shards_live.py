"""Jobs beyond one process, through the daemon's API: local worker processes (``workers``) and the
Kubernetes path (``jobs.shards``) with its pods played by ``fluidity-exporter shard`` processes, which
run exactly what a pod of the Indexed Job runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pytest

from exporter.app import Daemon
from exporter.load.shards.pool import ShardPool
from exporter.load.shards.tasks import TOKEN_ENV
from exporter.settings import load_config_file
from exporter.settings.cpus import available_cpus
from exporter.sim import SimServer
from tests.jobs.live import TOKEN, call, finished, write_config
from tests.support.daemon import serving
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.slow
SMALL_SEARCH = {
    "target": "sim", "start": 8, "max_trials": 1, "requests_per_trial": 20, "warmup_requests": 2,
    "slo": {"prefill_deadline_s": 1.0},
}  # fmt: skip


@contextmanager
def daemon_for(tmp_path: Path, url: str, jobs: str) -> Iterator[Daemon]:
    daemon = Daemon(load_config_file(write_config(tmp_path, url, jobs)), seed=1)
    daemon.job_env.cpus = 2  # the container's CPUs, as the cgroup would say (this VM has two)
    yield daemon


@pytest.fixture
async def with_workers(slow_sim: SimServer, tmp_path: Path) -> AsyncIterator[str]:
    with daemon_for(tmp_path, slow_sim.url, "  workers: 2\n") as daemon:
        async with serving(daemon) as url:
            yield url


async def test_a_capacity_job_over_two_worker_processes(with_workers: str) -> None:
    status, record = await call(
        "POST", f"{with_workers}/api/v1/jobs/capacity", {**SMALL_SEARCH, "workers": 2}
    )
    assert status == 202, record
    done = await finished(with_workers, record["id"])
    assert done["state"] == "succeeded", done
    result = done["result"]
    assert result["workers"] == 2 and done["params"]["workers"] == 2
    trial = result["trials"][0]
    assert trial["requests_sent"] == 22 and trial["figures"]["requests"] == 20
    assert sum(s["results"] for s in trial["figures"]["shards"]["shards"]) == 22


async def test_a_sharded_trial_counts_its_requests_in_progress_as_they_end(with_workers: str) -> None:
    """The shards' results stream back as they end; progress read 0.0 until the whole trial ended."""
    body = {**SMALL_SEARCH, "requests_per_trial": 400, "workers": 2}  # ~50 s at 8 req/s: ample to look
    status, record = await call("POST", f"{with_workers}/api/v1/jobs/capacity", body)
    assert status == 202, record
    seen: list[tuple[float, str]] = []

    async def counted() -> bool:
        _, now = await call("GET", f"{with_workers}/api/v1/jobs/{record['id']}")
        seen.append((now["progress"]["fraction"], now["progress"]["message"]))
        assert now["state"] == "running" and not now["steps"], f"the trial ended first: {seen[-3:]}"
        return bool(now["progress"]["fraction"] > 0.0)

    try:
        await wait_for(counted, timeout=60, what="progress before the first trial ends")
    finally:
        await call("DELETE", f"{with_workers}/api/v1/jobs/{record['id']}")  # the rest is not needed
    assert " done" in seen[-1][1], seen[-1]  # "trial 1/1: 8 req/s, 402 requests: 5/402 done"


async def test_more_workers_than_jobs_workers_is_refused(with_workers: str) -> None:
    status, answer = await call(
        "POST", f"{with_workers}/api/v1/jobs/capacity", {**SMALL_SEARCH, "workers": 3}
    )
    assert status == 400
    assert answer["problems"] == [
        "workers: 3 exceeds jobs.workers (2), the most client processes a job may use (bounded by the CPUs "
        "the exporter's container may use)"
    ]


async def test_a_prefill_profile_over_two_worker_processes(with_workers: str) -> None:
    body = {"target": "sim", "lengths": [256, 1024], "repeats": 2, "apply": False}
    status, record = await call("POST", f"{with_workers}/api/v1/jobs/prefill-profile", body)
    assert status == 202, record
    done = await finished(with_workers, record["id"])
    assert done["state"] == "succeeded", done
    assert done["result"]["workers"] == 2  # jobs.workers when the body says nothing
    assert [s["outcomes"] for s in done["result"]["samples"]] == [{"ok": 2}, {"ok": 2}]


async def test_cancelling_a_sharded_job_stops_its_load(
    with_workers: str,
    slow_sim: SimServer,
) -> None:
    body = {"target": "sim", "start": 20, "requests_per_trial": 1000, "warmup_requests": 0, "max_trials": 2}
    status, record = await call("POST", f"{with_workers}/api/v1/jobs/capacity", {**body, "workers": 2})
    assert status == 202
    engine = slow_sim.engine
    await wait_for(lambda: engine.running or engine.waiting, timeout=30, what="the shards to start and send")
    status, cancelled = await call("DELETE", f"{with_workers}/api/v1/jobs/{record['id']}")
    assert status == 200 and cancelled["state"] == "cancelled"
    # The shards hear "stop" at their next post (50 ms) and cancel.
    await wait_for(lambda: not engine.running and not engine.waiting, timeout=1.5)


@contextmanager
def shard_processes(count: int, port: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """What the Indexed Job's pods run: the shard command, with the index and the jobs token."""
    env = {**os.environ, TOKEN_ENV: TOKEN}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "exporter", "shard", "--coordinator", f"http://127.0.0.1:{port}"],
            env={**env, "JOB_COMPLETION_INDEX": str(index)},
        )
        for index in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def test_a_capacity_search_sharded_over_an_indexed_jobs_pods(
    slow_sim: SimServer,
    tmp_path: Path,
) -> None:
    port = free_port()
    jobs = (
        f"  shards: {{count: 2, listen: '127.0.0.1:{port}', start_delay: 500ms, ready_timeout: 60s,\n"
        f"           target_urls: {{sim: '{slow_sim.url}'}}}}\n"  # the pods' way to the target
    )
    with daemon_for(tmp_path, slow_sim.url, jobs) as daemon:
        async with serving(daemon) as url:
            status, record = await call(
                "POST", f"{url}/api/v1/jobs/capacity", {**SMALL_SEARCH, "max_trials": 2}
            )
            assert status == 202, record
            # The pods start after the job (they retry until the daemon listens), as kubectl create would.
            with shard_processes(2, port) as procs:
                done = await finished(url, record["id"])
    assert [proc.returncode for proc in procs] == [0, 0]  # told to exit when the search ended
    if done["state"] == "failed":
        # On this 2-core VM the simulator, the daemon and two shards may saturate a shard: the search
        # then stops at that trial and the job fails saying so (as the CLI exits 1), with no answer.
        assert done["error"].startswith("shards: ") and "what the trials before it showed" in done["error"]
        return
    assert done["state"] == "succeeded", (done.get("error"), done.get("message"), done)
    result = done["result"]
    assert result["workers"] == 2
    for trial in result["trials"]:
        shards = trial["figures"]["shards"]["shards"]
        assert [s["shard"] for s in shards] == [0, 1] and all(s["done"] for s in shards)
        assert sum(s["results"] for s in shards) == trial["requests_sent"]


def test_jobs_workers_is_bounded_by_the_containers_cpus(tmp_path: Path) -> None:
    config = load_config_file(write_config(tmp_path, "http://127.0.0.1:9", "  workers: 4\n"))
    assert config.jobs.limits.max_workers == 4
    daemon = Daemon(config, seed=1)
    daemon.job_env.cpus = 2  # what the cgroup quota allows
    assert daemon.job_env.job_limits().max_workers == 2
    daemon.job_env.cpus = 8
    assert daemon.job_env.job_limits().max_workers == 4


def test_jobs_workers_auto_is_the_cpus_this_container_may_use(tmp_path: Path) -> None:
    config = load_config_file(write_config(tmp_path, "http://127.0.0.1:9", "  workers: auto\n"))
    assert config.jobs.limits.max_workers == available_cpus()


async def test_a_search_whose_pods_never_come_fails_saying_which(
    slow_sim: SimServer,
    tmp_path: Path,
) -> None:
    port = free_port()
    jobs = f"  shards: {{count: 2, listen: '127.0.0.1:{port}', ready_timeout: 1s}}\n"
    with daemon_for(tmp_path, slow_sim.url, jobs) as daemon:
        async with serving(daemon) as url:
            status, record = await call("POST", f"{url}/api/v1/jobs/capacity", SMALL_SEARCH)
            assert status == 202
            done = await finished(url, record["id"])
    assert done["state"] == "failed"
    assert done["error"] == (
        f"shards [0, 1] of 2 did not reach the coordinator at http://127.0.0.1:{port} within 1 s"
    )


async def test_a_search_whose_shard_port_is_taken_fails_saying_so(
    slow_sim: SimServer,
    tmp_path: Path,
) -> None:
    other = ShardPool(1, "x")  # another sharded search holds the port
    port = int((await other.start("127.0.0.1", 0)).rpartition(":")[2])
    try:
        jobs = f"  shards: {{count: 2, listen: '127.0.0.1:{port}', ready_timeout: 1s}}\n"
        with daemon_for(tmp_path, slow_sim.url, jobs) as daemon:
            async with serving(daemon) as url:
                status, record = await call("POST", f"{url}/api/v1/jobs/capacity", SMALL_SEARCH)
                assert status == 202
                done = await finished(url, record["id"])
    finally:
        await other.close()
    assert done["state"] == "failed"
    assert done["error"].startswith(f"cannot listen for shards on 127.0.0.1:{port}: "), done["error"]


async def test_the_shards_own_token_opens_the_shard_port_and_the_jobs_token_does_not(
    slow_sim: SimServer,
    tmp_path: Path,
) -> None:
    """``jobs.shards.token``: a shard pod holds a credential that opens the shard port only, so it
    cannot start a search with it; the jobs token, which can, no longer opens the shard port."""
    port = free_port()
    (tmp_path / "shard-token").write_text("shard-only\n")
    jobs = (
        f"  shards: {{count: 2, listen: '127.0.0.1:{port}', ready_timeout: 3s,\n"
        f"           token: {{file: {tmp_path / 'shard-token'}}}}}\n"
    )
    with daemon_for(tmp_path, slow_sim.url, jobs) as daemon:
        async with serving(daemon) as url:
            status, record = await call("POST", f"{url}/api/v1/jobs/capacity", SMALL_SEARCH)
            assert status == 202
            task = f"http://127.0.0.1:{port}/shards/v1/0/task?wait=0"

            async def listening_with_the_shard_token() -> bool:
                return await shard_status(task, "shard-only") in {200, 204}

            await wait_for(listening_with_the_shard_token, timeout=10)
            assert await shard_status(task, TOKEN) == 401
            status, _ = await call(
                "POST", f"{url}/api/v1/jobs/capacity", SMALL_SEARCH, {"Authorization": "Bearer shard-only"}
            )
            assert status == 401
            await finished(url, record["id"])


async def shard_status(url: str, token: str) -> int:
    """The coordinator's answer to a shard's poll presenting ``token`` (0: nothing listens yet)."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, headers={"Authorization": f"Bearer {token}"}) as response,
        ):
            return response.status
    except aiohttp.ClientConnectionError:
        return 0
