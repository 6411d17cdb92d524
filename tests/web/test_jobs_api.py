"""The jobs API over loopback: tokens, validation, one job per target, cancel, and the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import fields
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from exporter.jobs.capacity_search import State
from exporter.jobs.job_records import JOB_STATES, JobStore
from exporter.jobs.manager import JobContext, JobManager
from exporter.settings.job_params import CapacityParams, JobLimits, JobParams, ProfileParams
from exporter.settings.job_parse import params_to_dict, parse_params
from exporter.settings.slo import SloSpec
from exporter.stats.objectives import GoodputBounds, parse_objective
from exporter.web.jobs_api import PREFIX, add_job_routes
from exporter.web.openapi import committed_document, document_for
from tests.web.service import AUTH, TOKEN, Service

Client = TestClient[web.Request, web.Application]


class Load:
    """A runner standing in for a real job: a step, then load until ``release`` (or cancellation)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.running = asyncio.Event()
        self.cancelled: list[str] = []

    async def __call__(self, params: JobParams, context: JobContext) -> dict[str, Any]:
        context.progress(0.25, "trial 1 at 2 req/s")
        context.add_step({"load": 2.0, "passed": True})
        self.running.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(context.job_id)
            raise
        return {"target": params.target}


@pytest.fixture
def load() -> Load:
    return Load()


@pytest.fixture
async def service(load: Load) -> AsyncIterator[Service]:
    manager = JobManager(JobStore(None), {"capacity": load, "prefill-profile": load})
    yield Service(manager)
    await manager.shutdown()


@pytest.fixture
async def client(aiohttp_client: Callable[[web.Application], Awaitable[Client]], service: Service) -> Client:
    app = web.Application()
    add_job_routes(app, service)
    return await aiohttp_client(app)


async def start(client: Client, kind: str, body: object, **headers: str) -> tuple[int, Any]:
    response = await client.post(f"{PREFIX}/jobs/{kind}", json=body, headers={**AUTH, **headers})
    return response.status, await response.json()


# -- access ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", TOKEN],
    ids=["missing", "wrong", "other-scheme", "longer", "no-scheme"],
)
@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/jobs"), ("POST", "/jobs/capacity"), ("DELETE", "/jobs/x")]
)
async def test_without_the_token_every_route_answers_401(
    client: Client, header: str | None, method: str, path: str
) -> None:
    headers = {"Authorization": header} if header else {}
    response = await client.request(method, PREFIX + path, headers=headers, json={"target": "a"})
    assert response.status == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
    body = await response.json()
    assert "jobs.api_token" in body["error"] and TOKEN not in json.dumps(body)


async def test_the_scheme_is_case_insensitive(client: Client) -> None:
    response = await client.get(f"{PREFIX}/jobs", headers={"Authorization": f"bearer {TOKEN}"})
    assert response.status == 200


async def test_without_a_configured_token_the_api_is_off_and_says_how_to_turn_it_on(
    client: Client, service: Service
) -> None:
    service.token = None
    response = await client.get(f"{PREFIX}/jobs", headers=AUTH)
    assert response.status == 404
    assert "set jobs.api_token ({env: NAME} or {file: PATH})" in (await response.json())["error"]
    assert (await client.get(f"{PREFIX}/openapi.json")).status == 200  # the document needs no token


# -- starting jobs -----------------------------------------------------------------------------------


async def test_a_job_starts_with_202_and_its_location(client: Client, load: Load) -> None:
    response = await client.post(
        f"{PREFIX}/jobs/capacity",
        json={"target": "a", "module": "code", "slo": {"objectives": ["ttft:p99<=2"]}},
        headers=AUTH,
    )
    record = await response.json()
    assert response.status == 202 and response.headers["Location"] == f"{PREFIX}/jobs/{record['id']}"
    assert (record["kind"], record["target"], record["module"], record["trigger"]) == (
        "capacity",
        "a",
        "code",
        "api",
    )
    assert record["state"] == "running" and record["params"]["slo"]["objectives"] == ["ttft:p99<=2"]
    assert record["params"]["tolerance"] == 0.05  # defaults filled in
    await load.running.wait()
    load.release.set()
    status, done = await _poll(client, record["id"], lambda r: r["state"] != "running")
    assert status == 200 and done["state"] == "succeeded" and done["result"] == {"target": "a"}
    assert done["steps"] == [{"load": 2.0, "passed": True}] and done["progress"]["fraction"] == 0.25


@pytest.mark.parametrize(
    "raw",
    [b"", b"{not json", b"\xff\xfe", b"[1, 2]", b'"target"'],
    ids=["empty", "broken", "bytes", "list", "str"],
)
async def test_a_body_that_is_not_a_json_object_is_400(client: Client, raw: bytes) -> None:
    response = await client.post(f"{PREFIX}/jobs/capacity", data=raw, headers=AUTH)
    assert response.status == 400
    assert (await response.json())["error"].startswith("request body must be a JSON object")


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"null", "null"),
        (b"[1, 2]", "an array"),
        (b'"target"', "a string"),
        (b"3.5", "a number"),
        (b"7", "a number"),
        (b"true", "a boolean"),
    ],
)
async def test_a_body_of_another_json_type_is_named_as_json_names_it(
    client: Client, raw: bytes, said: str
) -> None:
    """It said "got a JSON NoneType" for null: Python's name, not the one the client wrote."""
    response = await client.post(f"{PREFIX}/jobs/capacity", data=raw, headers=AUTH)
    assert response.status == 400
    assert (await response.json())["error"] == f"request body must be a JSON object, got {said}"


@pytest.mark.parametrize(
    ("kind", "body", "problem"),
    [
        ("capacity", {"target": "a", "tolerance": 2}, "tolerance"),
        ("capacity", {"target": "a", "colour": "red"}, "colour"),
        ("capacity", {"module": "chat"}, "target"),
        ("capacity", {"target": "a", "max_load": 50}, "jobs.limits.max_rate (10)"),
        ("capacity", {"target": "a", "slo": {"objectives": ["ttft:p99<2"]}}, "slo.objectives"),
        ("prefill-profile", {"target": "a", "lengths": [128, 100000]}, "jobs.limits.max_prompt_tokens"),
    ],
)
async def test_bad_parameters_are_400_with_every_problem(
    client: Client, kind: str, body: dict[str, Any], problem: str
) -> None:
    status, answer = await start(client, kind, body)
    assert status == 400 and answer["error"] == "invalid job parameters"
    assert any(problem in line for line in answer["problems"]), answer["problems"]


@pytest.mark.parametrize(
    ("kind", "body", "problem"),
    [
        (  # two ways to give one deadline: the tier was taken, then ignored without a word
            "capacity",
            {"target": "a", "slo": {"decode_tier": "strict", "decode_deadline_s": "40ms"}},
            "slo.decode_tier: give either decode_tier (a tier: strict, medium, relaxed) or decode_deadline_s "
            "(a deadline of its own), not both",
        ),
        (  # a length twice was profiled twice, and weighed twice in the fit
            "prefill-profile",
            {"target": "a", "lengths": [512, 128, 128, 512, 64]},
            "lengths: 128, 512 given more than once; list each length once",
        ),
    ],
    ids=["decode-tier-and-deadline", "lengths-twice"],
)
async def test_what_the_cli_refuses_the_api_refuses_in_its_words(
    client: Client, kind: str, body: dict[str, Any], problem: str
) -> None:
    status, answer = await start(client, kind, body)
    assert (status, answer) == (400, {"error": "invalid job parameters", "problems": [problem]})


async def test_a_deadline_of_null_leaves_the_tier_alone(client: Client, load: Load) -> None:
    status, record = await start(
        client, "capacity", {"target": "a", "slo": {"decode_tier": "strict", "decode_deadline_s": None}}
    )
    assert status == 202 and record["params"]["slo"]["decode_tier"] == "strict"
    load.release.set()


@pytest.mark.parametrize(
    ("body", "message", "valid"),
    [
        ({"target": "c"}, 'unknown target "c"; valid: a, b', ["a", "b"]),
        ({"target": "b", "module": "code"}, 'unknown module "code" for target "b"; valid: chat', ["chat"]),
    ],
)
async def test_an_unknown_target_or_module_is_400_listing_the_valid_ones(
    client: Client, body: dict[str, Any], message: str, valid: list[str]
) -> None:
    status, answer = await start(client, "capacity", body)
    assert (status, answer) == (400, {"error": message, "valid": valid})


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ({"target": "c"}, 'target: unknown target "c"; valid: a, b'),
        ({"target": "b", "module": "code"}, 'module: unknown module "code" for target "b"; valid: chat'),
    ],
)
async def test_an_unknown_name_is_listed_with_the_other_problems(
    client: Client, body: dict[str, Any], line: str
) -> None:
    """One answer lists every problem: the unknown name came alone, in a second round, once."""
    status, answer = await start(client, "capacity", body | {"slo": {"objectives": ["ttft:p99<2"]}})
    assert status == 400 and answer["error"] == "invalid job parameters"
    assert line in answer["problems"] and len(answer["problems"]) == 2


async def test_one_job_per_target_at_a_time(client: Client, load: Load) -> None:
    status, first = await start(client, "capacity", {"target": "a"})
    assert status == 202
    status, conflict = await start(client, "prefill-profile", {"target": "a"})
    assert status == 409 and conflict["job"] == first["id"] and first["id"] in conflict["error"]
    status, other = await start(client, "prefill-profile", {"target": "b", "lengths": [128]})
    assert status == 202 and other["kind"] == "prefill-profile"


# -- watching and cancelling -------------------------------------------------------------------------


async def test_list_is_newest_first_and_filters(client: Client, load: Load) -> None:
    _, first = await start(client, "capacity", {"target": "a"})
    _, second = await start(client, "capacity", {"target": "b"})
    await client.delete(f"{PREFIX}/jobs/{first['id']}", headers=AUTH)

    async def ids(query: str) -> list[str]:
        response = await client.get(f"{PREFIX}/jobs{query}", headers=AUTH)
        return [job["id"] for job in (await response.json())["jobs"]]

    assert await ids("") == [second["id"], first["id"]]
    assert await ids("?target=a") == [first["id"]]
    assert await ids("?state=running") == [second["id"]]
    assert await ids("?limit=1") == [second["id"]]
    for query, message in (
        ("?state=paused", "valid: running"),
        ("?limit=0", "whole number"),
        ("?limit=x", "limit"),
    ):
        response = await client.get(f"{PREFIX}/jobs{query}", headers=AUTH)
        assert response.status == 400 and message in (await response.json())["error"]


async def test_an_unknown_job_is_404(client: Client) -> None:
    for method in ("GET", "DELETE"):
        response = await client.request(method, f"{PREFIX}/jobs/nope", headers=AUTH)
        assert response.status == 404 and (await response.json()) == {"error": 'unknown job "nope"'}


async def test_delete_stops_the_load_within_a_second(client: Client, load: Load) -> None:
    _, record = await start(client, "capacity", {"target": "a"})
    await load.running.wait()
    started = time.perf_counter()
    response = await client.delete(f"{PREFIX}/jobs/{record['id']}", headers=AUTH)
    assert time.perf_counter() - started < 1.0
    cancelled = await response.json()
    assert response.status == 200 and cancelled["state"] == "cancelled" and load.cancelled == [record["id"]]
    again = await client.delete(f"{PREFIX}/jobs/{record['id']}", headers=AUTH)  # finished: unchanged
    assert again.status == 200 and (await again.json())["finished_at"] == cancelled["finished_at"]
    status, _ = await start(client, "capacity", {"target": "a"})  # the target is free again
    assert status == 202


async def _poll(client: Client, job_id: str, done: Callable[[dict[str, Any]], bool]) -> tuple[int, Any]:
    for _ in range(200):
        response = await client.get(f"{PREFIX}/jobs/{job_id}", headers=AUTH)
        record = await response.json()
        if response.status != 200 or done(record):
            return response.status, record
        await asyncio.sleep(0.01)
    raise AssertionError(f"job {job_id} did not finish: {record}")


# -- the OpenAPI document -----------------------------------------------------------------------------


def test_the_openapi_document_is_valid() -> None:
    validate(json.loads(committed_document()))


def test_the_openapi_document_describes_exactly_the_routes() -> None:
    app = web.Application()
    add_job_routes(app, Service(JobManager(JobStore(None), {})))
    routes = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None and route.resource.canonical.startswith(PREFIX)
    }
    paths = json.loads(committed_document())["paths"]
    documented = {(method, path) for path, item in paths.items() for method in item if method != "parameters"}
    assert documented == routes


async def test_the_served_document_is_the_committed_one_made_exact(client: Client) -> None:
    response = await client.get(f"{PREFIX}/openapi.json")
    served, committed = await response.json(), json.loads(committed_document())
    assert response.content_type == "application/json" and served["paths"] == committed["paths"]
    assert served["components"]["schemas"].keys() == committed["components"]["schemas"].keys()


def _schema(name: str) -> dict[str, Any]:
    """A component schema with its ``$ref``s to other components inlined, for jsonschema."""
    components = json.loads(committed_document())["components"]["schemas"]

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            return (
                inline(components[ref.rsplit("/", 1)[1]]) if ref else {k: inline(v) for k, v in node.items()}
            )
        return [inline(item) for item in node] if isinstance(node, list) else node

    schema: dict[str, Any] = inline(components[name])
    return schema


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("CapacityParams", CapacityParams),
        ("SloSpec", SloSpec),
        ("GoodputBounds", GoodputBounds),
        ("ProfileParams", ProfileParams),
    ],
)
def test_the_documented_fields_are_the_dataclass_fields(name: str, cls: type[Any]) -> None:
    assert set(_schema(name)["properties"]) == {f.name for f in fields(cls)}


@pytest.mark.parametrize(
    "params",
    [
        CapacityParams(target="a"),
        CapacityParams(
            target="a",
            module="chat",
            trial_duration_s=30.0,
            slo=SloSpec(
                objectives=(parse_objective("ttft:p99<=2"),),
                goodput=GoodputBounds(ttft=1.0),
                min_goodput_ratio=0.9,
            ),
        ),
        ProfileParams(target="a"),
    ],
)
def test_the_json_form_of_parameters_fits_the_documented_schema(params: JobParams) -> None:
    data = params_to_dict(params)
    kind = "capacity" if isinstance(params, CapacityParams) else "prefill-profile"
    Draft202012Validator(_schema(type(params).__name__)).validate(data)
    assert parse_params(kind, data, JobLimits()) == params
    Draft202012Validator(_schema("JobRecord")).validate(
        {
            "id": "abc",
            "kind": kind,
            "target": "a",
            "module": None,
            "trigger": "api",
            "state": "running",
            "created_at": 1.0,
            "finished_at": None,
            "progress": {"fraction": 0, "message": ""},
            "params": data,
            "steps": [],
            "result": None,
            "error": None,
        }
    )


@pytest.mark.parametrize(
    "limits",
    [JobLimits(), JobLimits(max_trials=4, max_requests_per_trial=100), JobLimits(max_requests_per_trial=30)],
)
def test_the_documented_defaults_are_the_ones_applied_within_the_limits(limits: JobLimits) -> None:
    """Once "default": 8 beside "maximum": 4, and 200 requests where 180 were applied."""
    props = document_for({"a": ("m",)}, limits)["components"]["schemas"]["CapacityParams"]["properties"]
    applied = parse_params("capacity", {"target": "a"}, limits)
    assert isinstance(applied, CapacityParams)
    for key in ("max_trials", "warmup_requests", "requests_per_trial"):
        assert props[key]["default"] == getattr(applied, key), key
        assert props[key]["default"] <= props[key].get("maximum", props[key]["default"])


async def test_the_served_document_is_exact_for_the_config(client: Client, service: Service) -> None:
    import jsonschema

    document = await (await client.get(f"{PREFIX}/openapi.json")).json()
    validate(document)
    schemas = document["components"]["schemas"]
    capacity = schemas["CapacityParams"]
    assert capacity["properties"]["target"]["enum"] == ["a", "b"]
    assert capacity["properties"]["max_trials"]["maximum"] == service.limits.max_trials
    resolver_free = {
        **capacity,
        "properties": {k: v for k, v in capacity["properties"].items() if k != "slo"},
    }
    checker = jsonschema.Draft202012Validator(resolver_free)
    assert not checker.is_valid({"target": ""})  # the API refuses it: so must the document
    assert not checker.is_valid({"target": "b", "module": "code"})  # not one of b's modules
    assert not checker.is_valid({"target": "a", "max_load": 10.5})  # over jobs.limits.max_rate
    assert checker.is_valid({"target": "a", "load": "concurrency", "max_load": 64})
    assert not checker.is_valid({"target": "a", "load": "concurrency", "max_load": 2.5})
    for body in ({"target": "a", "max_load": 10}, {"target": "b", "module": "chat", "seed": 3.0}):
        status, _ = await start(client, "capacity", body)
        assert status == 202, body
        record = (await (await client.get(f"{PREFIX}/jobs", headers=AUTH)).json())["jobs"][0]
        await client.delete(f"{PREFIX}/jobs/{record['id']}", headers=AUTH)


async def test_a_decode_deadline_as_a_duration_string_is_served_as_valid_and_taken(
    client: Client, load: Load
) -> None:
    """The description says "seconds, or a duration string such as 30s or 500ms": the type says so too."""
    import jsonschema

    schemas = (await (await client.get(f"{PREFIX}/openapi.json")).json())["components"]["schemas"]
    deadline = schemas["SloSpec"]["properties"]["decode_deadline_s"]
    assert "string" in deadline["type"] and "duration string" in deadline["description"]
    slo = jsonschema.Draft202012Validator(schemas["SloSpec"])
    for valid in ("40ms", "0.5s", "2m", 0.04, None):
        assert slo.is_valid({"decode_deadline_s": valid}), valid
    for invalid in ("0s", "soon", "40", "400d", 0, True):  # each of them the API refuses too
        assert not slo.is_valid({"decode_deadline_s": invalid}), invalid
    status, record = await start(client, "capacity", {"target": "a", "slo": {"decode_deadline_s": "40ms"}})
    assert status == 202 and record["params"]["slo"]["decode_deadline_s"] == pytest.approx(0.04)
    load.release.set()


async def test_the_served_document_refuses_what_the_api_refuses(client: Client) -> None:
    """The pair of decode deadlines and a length given twice, as the API answers them (400 above)."""
    import jsonschema

    schemas = (await (await client.get(f"{PREFIX}/openapi.json")).json())["components"]["schemas"]
    slo = jsonschema.Draft202012Validator(schemas["SloSpec"])
    assert not slo.is_valid({"decode_tier": "strict", "decode_deadline_s": 0.04})
    assert not slo.is_valid({"decode_tier": "strict", "decode_deadline_s": "40ms"})
    for one in (
        {"decode_tier": "strict"},
        {"decode_deadline_s": 0.04},
        {"decode_tier": "strict", "decode_deadline_s": None},
    ):
        assert slo.is_valid(one), one
    lengths = jsonschema.Draft202012Validator(schemas["ProfileParams"]["properties"]["lengths"])
    assert not lengths.is_valid([128, 128]) and lengths.is_valid([128, 256])


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/jobs/capacity", "POST"),
        ("PUT", "/jobs/prefill-profile", "POST"),
        # Not a job named "capacity" (GET and DELETE /jobs/{id} match the path too): a 404 once.
        ("GET", "/jobs/capacity", "POST"),
        ("DELETE", "/jobs/prefill-profile", "POST"),
        ("PATCH", "/jobs", "GET"),
        ("POST", "/openapi.json", "GET"),
        ("POST", "/jobs/x", "DELETE,GET"),
    ],
)
async def test_a_405_allows_the_paths_own_methods(
    client: Client, method: str, path: str, allowed: str
) -> None:
    response = await client.request(method, PREFIX + path, headers=AUTH)
    assert response.status == 405
    assert response.headers["Allow"] == allowed
    assert "is not allowed" in (await response.json())["error"]


@pytest.mark.parametrize("path", ["/jobs/benchmark", "/jobs"])
async def test_a_post_to_no_kind_names_the_kinds(client: Client, path: str) -> None:
    """A mistyped kind once got only "allowed: DELETE, GET"."""
    response = await client.post(PREFIX + path, headers=AUTH, json={"target": "a"})
    assert response.status == 405
    error = (await response.json())["error"]
    assert error.endswith(f"a job starts with POST {PREFIX}/jobs/<kind>, kinds: capacity, prefill-profile")


async def test_the_list_names_every_problem_of_its_query(client: Client) -> None:
    response = await client.get(f"{PREFIX}/jobs?state=bogus&limit=-1&tagret=a", headers=AUTH)
    body = await response.json()
    assert response.status == 400 and body["error"] == body["problems"][0]
    assert body["problems"] == [
        'unknown query parameter "tagret"; valid: limit, state, target',
        'state "bogus" is not a job state; valid: ' + ", ".join(JOB_STATES),
        'limit "-1": expected a whole number >= 1',
    ]


async def test_the_list_refuses_what_its_document_does_not_allow(client: Client) -> None:
    for query, message in (
        ("?tagret=a", 'unknown query parameter "tagret"; valid: limit, state, target'),
        ("?target=", "target: give a target name, or leave the parameter out"),
    ):
        response = await client.get(f"{PREFIX}/jobs{query}", headers=AUTH)
        assert response.status == 400 and (await response.json())["error"] == message


def test_no_field_of_a_pair_given_one_or_the_other_has_a_schema_default() -> None:
    # A client that fills in the schema's defaults (many generated ones do) would send both fields of
    # a pair the schema refuses together, and get a 400 for a body it never wrote.
    schemas = document_for({"a": ("m",)}, JobLimits())["components"]["schemas"]
    pairs = [(name, s) for name, s in schemas.items() if "required" in s.get("not", {})]
    assert pairs
    for name, schema in pairs:
        for field in schema["not"]["required"]:
            assert "default" not in schema["properties"][field], (name, field)


def test_the_openapi_document_names_every_state_a_capacity_search_ends_in() -> None:
    """``interrupted`` (a cancelled or interrupted search's result) among them."""
    schemas = json.loads(committed_document())["components"]["schemas"]
    described = next(
        schema["properties"]["result"]["description"]
        for schema in schemas.values()
        if "result" in schema.get("properties", {})
    )
    assert [state for state in State if f"{state} (" not in described] == []
