"""The API's OpenAPI schema against the running server, with schemathesis's generators (hypothesis): for
every operation, requests the schema allows and requests it forbids, sent on the Unix socket.

Nothing a client sends is a 5xx; whatever the schema forbids is refused with a 4xx (the schema's
constraints are what the service checks: no bound is looser in the service than in the schema); and a
request the schema allows is never refused as malformed by FastAPI itself (422): the service answers it,
or refuses it in one line of its own (a start in the past, a lease that does not exist). The runs are
bounded (`EXAMPLES` per operation and mode) so the whole takes well under a minute.
"""

from __future__ import annotations

import json

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.service.conftest import start_server

EXAMPLES = 12
#: operations that would reach hosts named by the request (libvirt URIs, ssh): sent only when the schema
#: forbids them (refused before any host is asked); the test sends nothing off this machine
REACHES_HOSTS = {("POST", "/v1/hosts"), ("POST", "/v1/hosts/import"), ("POST", "/v1/images"),
                 ("POST", "/v1/vms/{vm}/migrate"), ("GET", "/v1/hosts/{host}/check")}


@pytest.fixture(scope="module")
def server(tmp_path_factory, unix_users):
    running = start_server(tmp_path_factory.mktemp("fuzz"))
    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(running.socket)), base_url="http://leasewise",
                          timeout=30)
    try:
        yield running, client, client.get("/openapi.json").json()
    finally:
        client.close()
        running.stop()


def _operations(schema: dict) -> list[tuple[str, str]]:
    return [(method.upper(), path) for path, item in schema["paths"].items() for method in item]


def test_the_schema_describes_every_request_field(server):
    """No request body is "any object": each is a model of named, typed fields."""
    _, _, schema = server
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body is None:
                continue
            ref = body.get("$ref") or next((b.get("$ref") for b in body.get("anyOf", []) if "$ref" in b), None)
            assert ref is not None, (method, path, body)
            model = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
            assert model.get("properties") and model.get("additionalProperties") is False, (method, path)
    submission = schema["components"]["schemas"]["LeaseSubmission"]["properties"]
    assert submission["name"]["maxLength"] == 255 and "pattern" in submission["name"]
    assert submission["cpus"]["minimum"] == 1 and submission["nodes"]["maximum"] == 2**31 - 1


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["allowed", "forbidden"])
def test_generated_requests_get_no_5xx_and_forbidden_ones_a_4xx(server, mode):
    running, client, raw = server
    schema = schemathesis.openapi.from_dict(raw)
    failures: list[str] = []
    sent = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        key = (operation.method.upper(), operation.path)
        if mode is GenerationMode.POSITIVE and key in REACHES_HOSTS:
            continue

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(operation.as_strategy(generation_mode=mode))
        def check(case) -> None:
            nonlocal sent
            try:
                if case.body is not None and not isinstance(case.body, (dict, list, str, int, float, bool, bytes)) \
                        and type(case.body).__name__ != "NotSet":
                    return   # (a value JSON has no word for)
                body = case.body if isinstance(case.body, (dict, list, str, int, float, bool, bytes)) else None
                content = body if isinstance(body, bytes) or body is None else \
                    json.dumps(body).encode("utf-8", "surrogatepass")
                request = client.build_request(case.method, case.formatted_path, params=case.query or None,
                                               headers={k: str(v) for k, v in (case.headers or {}).items()},
                                               content=content)
                if content is not None:
                    request.headers["content-type"] = "application/json"
            except (UnicodeEncodeError, httpx.InvalidURL, ValueError, TypeError):
                return   # (no HTTP client can send it)
            response = client.send(request)
            sent += 1
            # (what the case is: schemathesis makes a valid one where it finds nothing to get wrong)
            made = getattr(getattr(getattr(case, "meta", None), "generation", None), "mode", mode)
            where = f"{case.method} {case.formatted_path} {case.query} {case.headers} {str(case.body)[:200]}"
            if response.status_code >= 500:
                failures.append(f"{response.status_code} {where}: {response.text[:200]}")
            elif made is GenerationMode.NEGATIVE and response.status_code < 400:
                failures.append(f"accepted what the schema forbids ({response.status_code}) {where}")
            elif made is GenerationMode.POSITIVE and response.status_code == 422:
                failures.append(f"422 for what the schema allows: {where}: {response.text[:200]}")
            elif response.status_code >= 400 and response.headers.get("content-type") == "application/json":
                message = response.json()["error"]["message"]
                if "\n" in message:
                    failures.append(f"an error of several lines: {where}")

        try:
            check()
        except Unsatisfiable:   # (an operation with nothing to get wrong: no parameters)
            continue
    assert sent > 100
    assert not failures, "\n".join(failures[:20])
