"""The on-demand jobs API: start, watch, list and cancel capacity searches and prefill profiles over HTTP.

* ``POST /api/v1/jobs/capacity``, ``POST /api/v1/jobs/prefill-profile``: start a job (202, ``Location``).
* ``GET /api/v1/jobs[?target=&state=&limit=]``, ``GET /api/v1/jobs/{id}``: records, newest first.
* ``DELETE /api/v1/jobs/{id}``: cancel; answers once the job's load has stopped.
* ``GET /api/v1/openapi.json``: the OpenAPI document describing all of these (``openapi.json`` beside
  this file, made exact for the running config by ``exporter.web.openapi``: its targets, modules and
  ``jobs.limits``), served without a token: it holds no secrets.

Jobs send load to production systems, so every other route needs ``Authorization: Bearer <token>``
(``jobs.api_token``); with no token configured the API is off and answers 404 saying how to turn it on.
Every error body is JSON: ``{"error": "...", ...}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, NoReturn, Protocol

from aiohttp import web

from exporter.jobs.job_records import JOB_STATES, JobRecord
from exporter.jobs.manager import JobConflictError, JobManager, UnknownJobError
from exporter.settings.job_params import JOB_KINDS, CapacityParams, JobKind, JobLimits, JobParams
from exporter.settings.job_parse import params_to_dict, parse_params
from exporter.settings.problems import SettingsError
from exporter.streams.request import Secret
from exporter.web.openapi import document_for

PREFIX: Final = "/api/v1"
LIST_PARAMETERS: Final = ("limit", "state", "target")
DISABLED: Final = (
    "the jobs API is disabled: set jobs.api_token ({env: NAME} or {file: PATH}) in the config, "
    "then send it as Authorization: Bearer <token>"
)


class JobService(Protocol):
    """What the handlers need from the daemon (its ``daemon.job_host.DaemonJobEnvironment``), asked
    at request time because a reload can change it."""

    def jobs_token(self) -> Secret | None: ...

    def job_limits(self) -> JobLimits: ...

    def job_targets(self) -> Mapping[str, tuple[str, ...]]:
        """Target name -> the names of its modules."""
        ...

    @property
    def job_manager(self) -> JobManager: ...


JOB_SERVICE: Final = web.AppKey[JobService]("job_service")


def add_job_routes(app: web.Application, service: JobService) -> None:
    """Serve the jobs API of ``service`` under ``/api/v1`` on ``app``."""
    app[JOB_SERVICE] = service
    app.middlewares.append(_method_not_allowed)
    router = app.router
    router.add_post(f"{PREFIX}/jobs/capacity", start_capacity)
    router.add_post(f"{PREFIX}/jobs/prefill-profile", start_prefill_profile)
    router.add_get(f"{PREFIX}/jobs", list_jobs, allow_head=False)
    router.add_get(f"{PREFIX}/jobs/{{id}}", get_job, allow_head=False)
    router.add_delete(f"{PREFIX}/jobs/{{id}}", cancel_job)
    router.add_get(f"{PREFIX}/openapi.json", openapi, allow_head=False)


# -- handlers ----------------------------------------------------------------------------------------


async def openapi(request: web.Request) -> web.Response:
    service = request.app[JOB_SERVICE]  # asked now: a reload may have changed targets or limits
    document = document_for(service.job_targets(), service.job_limits())
    return web.json_response(document)


async def start_capacity(request: web.Request) -> web.Response:
    return await _start(request, "capacity")


async def start_prefill_profile(request: web.Request) -> web.Response:
    return await _start(request, "prefill-profile")


async def list_jobs(request: web.Request) -> web.Response:
    manager = _authorize(request).job_manager
    problems = _list_problems(request.query)
    if problems:  # the first is the error, as everywhere in the API; every one is listed
        _fail(web.HTTPBadRequest, problems[0], problems=problems)
    target, state, limit = request.query.get("target"), request.query.get("state"), request.query.get("limit")
    records = [r for r in manager.list() if target in (None, r.target) and state in (None, r.state)]
    return web.json_response({"jobs": [r.to_dict() for r in records[: int(limit) if limit else None]]})


def _list_problems(query: Mapping[str, str]) -> list[str]:
    """What is wrong with a list's query parameters, every problem (empty when nothing is)."""
    problems = [
        f'unknown query parameter "{name}"; valid: {", ".join(LIST_PARAMETERS)}'
        for name in sorted(set(query) - set(LIST_PARAMETERS))
    ]
    if query.get("target") == "":
        problems.append("target: give a target name, or leave the parameter out")
    state = query.get("state")
    if state is not None and state not in JOB_STATES:
        problems.append(f'state "{state}" is not a job state; valid: {", ".join(JOB_STATES)}')
    limit = query.get("limit")
    if limit is not None and (not (limit.isascii() and limit.isdigit()) or int(limit) < 1):
        problems.append(f'limit "{limit}": expected a whole number >= 1')
    return problems


async def get_job(request: web.Request) -> web.Response:
    record = _authorize(request).job_manager.get(request.match_info["id"])
    if record is None:
        _fail(web.HTTPNotFound, f'unknown job "{request.match_info["id"]}"')
    return web.json_response(record.to_dict())


async def cancel_job(request: web.Request) -> web.Response:
    manager = _authorize(request).job_manager
    try:
        record = await manager.cancel(request.match_info["id"])
    except UnknownJobError as exc:
        _fail(web.HTTPNotFound, str(exc))
    return web.json_response(record.to_dict())


# -- the parts -----------------------------------------------------------------------------------------

# The methods of each fixed path. aiohttp's 405 lists every method of every route matching the path, so
# PUT /jobs/capacity said "Allow: DELETE,GET,POST" (GET and DELETE are /jobs/{id}'s, with id "capacity").
STATIC_METHODS: Final = {
    f"{PREFIX}/jobs/capacity": ("POST",),
    f"{PREFIX}/jobs/prefill-profile": ("POST",),
    f"{PREFIX}/jobs": ("GET",),
    f"{PREFIX}/openapi.json": ("GET",),
}


@web.middleware
async def _method_not_allowed(request: web.Request, handler: Any) -> web.StreamResponse:
    """A 405 under the API: ``Allow`` lists the path's own methods, and the body is JSON like every
    other error of the API."""
    own = STATIC_METHODS.get(request.path)
    try:
        if own is not None and request.method not in own:  # else GET /jobs/capacity asks for a job "capacity"
            raise web.HTTPMethodNotAllowed(request.method, own)
        response: web.StreamResponse = await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        if not request.path.startswith(PREFIX):
            raise
        allowed = STATIC_METHODS.get(request.path, tuple(sorted(exc.allowed_methods)))
        message = f"{request.method} is not allowed on {request.path}; allowed: {', '.join(allowed)}"
        if request.method == "POST" and request.path.startswith(
            f"{PREFIX}/jobs"
        ):  # a kind mistyped or left out
            message += f"; a job starts with POST {PREFIX}/jobs/<kind>, kinds: {', '.join(JOB_KINDS)}"
        raise web.HTTPMethodNotAllowed(
            request.method, allowed, text=json.dumps({"error": message}), content_type="application/json"
        ) from None
    return response


async def _start(request: web.Request, kind: JobKind) -> web.Response:
    service = _authorize(request)
    body = await _json_object(request)
    try:
        params = parse_params(kind, body, service.job_limits())
    except SettingsError as exc:  # an unknown target or module too, so one answer lists every problem
        problems = exc.problems + _name_problems(body, service.job_targets())
        _fail(web.HTTPBadRequest, "invalid job parameters", problems=problems)
    _check_names(params, service.job_targets())
    try:
        record = service.job_manager.submit(kind, params, params_to_dict(params), "api")
    except JobConflictError as exc:
        _fail(web.HTTPConflict, str(exc), job=exc.running.id)
    return _accepted(record)


def _accepted(record: JobRecord) -> web.Response:
    location = f"{PREFIX}/jobs/{record.id}"
    return web.json_response(record.to_dict(), status=202, headers={"Location": location})


def _authorize(request: web.Request) -> JobService:
    """The service, once the request carries its token; 404 while the API is off, 401 without it."""
    service = request.app[JOB_SERVICE]
    token = service.jobs_token()
    if token is None:
        _fail(web.HTTPNotFound, DISABLED)
    if not token.matches_bearer(request.headers.get("Authorization")):
        _fail(
            web.HTTPUnauthorized,
            "this API needs Authorization: Bearer <jobs.api_token>",
            headers={"WWW-Authenticate": 'Bearer realm="jobs"'},
        )
    return service


async def _json_object(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
        reason = "got an empty body" if not raw.strip() else f"not JSON ({exc})"
        _fail(web.HTTPBadRequest, f'request body must be a JSON object, e.g. {{"target": "NAME"}}: {reason}')
    if not isinstance(body, dict):
        _fail(web.HTTPBadRequest, f"request body must be a JSON object, got {_json_type(body)}")
    return {key: _whole_numbers(value) for key, value in body.items()}


def _json_type(value: Any) -> str:
    """A decoded JSON value's type as JSON names it (Python's names, ``NoneType`` or ``dict``, are not
    what a client sent)."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int, of which it is a subclass
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _whole_numbers(node: Any) -> Any:
    """``5.0`` read as ``5``: JSON Schema's ``integer`` accepts a number with a zero fraction, and a
    client (or a fuzzer) that writes one meant the whole number; every number field takes ints too."""
    if isinstance(node, dict):
        return {key: _whole_numbers(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_whole_numbers(value) for value in node]
    if isinstance(node, float) and node.is_integer() and abs(node) < 2**53:
        return int(node)
    return node


def _name_problems(body: Mapping[str, Any], targets: Mapping[str, tuple[str, ...]]) -> list[str]:
    """``_check_names`` of a body whose other parameters have problems, as lines among them."""
    target, module = body.get("target"), body.get("module")
    if not isinstance(target, str):
        return []  # missing or not a name: among the other problems already
    if target not in targets:
        return [f'target: unknown target "{target}"; valid: {", ".join(sorted(targets))}']
    if isinstance(module, str) and module not in targets[target]:
        return [
            f'module: unknown module "{module}" for target "{target}"; valid: {", ".join(targets[target])}'
        ]
    return []


def _check_names(params: JobParams, targets: Mapping[str, tuple[str, ...]]) -> None:
    """400 for a target or module the config does not define, listing the valid ones."""
    modules = targets.get(params.target)
    if modules is None:
        valid = sorted(targets)
        _fail(web.HTTPBadRequest, f'unknown target "{params.target}"; valid: {", ".join(valid)}', valid=valid)
    module = params.module if isinstance(params, CapacityParams) else None
    if module is not None and module not in modules:
        _fail(
            web.HTTPBadRequest,
            f'unknown module "{module}" for target "{params.target}"; valid: {", ".join(modules)}',
            valid=list(modules),
        )


def _fail(
    error: type[web.HTTPError], message: str, *, headers: Mapping[str, str] | None = None, **extra: Any
) -> NoReturn:
    """Answer with ``error`` and a JSON body ``{"error": message, **extra}``."""
    raise error(
        text=json.dumps({"error": message, **extra}), content_type="application/json", headers=headers
    )
