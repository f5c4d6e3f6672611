"""The API's OpenAPI schema against the running server, with schemathesis's generators (hypothesis): for
every operation, requests the schema allows and requests it forbids, sent on the Unix socket.

Nothing a client sends is a 5xx; whatever the schema forbids is refused with a 4xx (the schema's
constraints are what the service checks: no bound is looser in the service than in the schema); and a
request the schema allows is never refused as malformed by FastAPI itself (422): the service answers it,
or refuses it in one line of its own (a start in the past, a lease that does not exist). Every answer,
those and a tour of every route on a server with leases, hosts, images, quotas and tokens, is checked by
schemathesis against the schema (its status code documented, its body of the model the schema gives for
it). The runs are bounded (`EXAMPLES` per operation and mode) so the whole takes well under a minute.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime, timedelta

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.service.conftest import start_server

EXAMPLES = 12
#: what every answer is checked for: no 5xx, a documented status and content type, a body of its model
ANSWER_CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
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


def _nonconforming(case, response: httpx.Response) -> str | None:
    """What schemathesis finds wrong with the answer to `case` (None: it conforms to the schema)."""
    try:
        case.validate_response(response, checks=ANSWER_CHECKS)
    except Exception as exc:   # (schemathesis raises its failures as a group)
        found = getattr(exc, "exceptions", None) or [exc]
        return "; ".join(" ".join(str(f).split())[:300] for f in found)
    return None


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
            wrong = _nonconforming(case, response)
            if wrong is not None:
                failures.append(f"an answer not as the schema says ({response.status_code}) {where}: {wrong}")
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


def test_every_route_answers_as_its_schema_says(tmp_path, unix_users):
    """A tour of every route with requests that succeed, on a server with leases (one running), hosts, an
    image, a quota and a token: each answer is a 2xx whose body conforms to the model the schema declares
    for it (checked by schemathesis), and no answer's schema is "any object"."""
    running = start_server(tmp_path, hosts=2)
    image = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(image), "64M"], check=True)
    http = httpx.Client(transport=httpx.HTTPTransport(uds=str(running.socket)), base_url="http://leasewise",
                        timeout=30)
    try:
        raw = http.get("/openapi.json").json()
        schema = schemathesis.openapi.from_dict(raw)
        checked: dict[tuple[str, str], int] = {}
        failures: list[str] = []

        def call(method: str, path: str, *, path_parameters: dict | None = None, query: dict | None = None,
                 body: dict | None = None) -> httpx.Response:
            given = {"body": body} if body is not None else {}
            case = schema[path][method].Case(path_parameters=path_parameters or {}, query=query, **given)
            response = http.request(method, case.formatted_path, params=query, json=body)
            wrong = _nonconforming(case, response)
            if wrong is not None:
                failures.append(f"{method} {path} ({response.status_code}): {wrong}")
            if not response.is_success:
                failures.append(f"{method} {path}: {response.status_code} {response.text[:300]}")
            checked[(method, path)] = response.status_code
            return response

        call("GET", "/v1/whoami")
        call("GET", "/v1/health")
        now = call("POST", "/v1/leases", body={"cpus": 1, "memory": 512, "duration": "1h", "start": "now",
                                                "name": "tour"}).json()["id"]
        later = call("POST", "/v1/leases", body={"cpus": 2, "memory": 1024, "duration": 600, "nodes": 2}).json()["id"]
        page = call("GET", "/v1/leases", query={"all": "true", "limit": 1}).json()
        assert page["next"] == now and [lease["id"] for lease in page["leases"]] == [now]
        deadline = time.monotonic() + 20   # (the daemon starts the lease at its next step)
        while http.get(f"/v1/leases/{now}/access").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.3)
        shown = call("GET", "/v1/leases/{lease_id}", path_parameters={"lease_id": now}).json()
        assert shown["lease"]["name"] == "tour" and shown["lease"]["nodes"][0]["cpu"] == 100
        call("GET", "/v1/leases/{lease_id}/access", path_parameters={"lease_id": now}, query={"node": 0})
        call("POST", "/v1/leases/{lease_id}/extend", path_parameters={"lease_id": now}, body={"by": "10m"})
        end = call("POST", "/v1/leases/{lease_id}/shorten", path_parameters={"lease_id": now},
                   body={"by": "5m"}).json()["end"]
        earlier = datetime.fromisoformat(end.replace("Z", "+00:00")) - timedelta(minutes=1)
        call("PATCH", "/v1/leases/{lease_id}", path_parameters={"lease_id": now}, body={"end": earlier.isoformat()})
        windows = call("GET", "/v1/free", query={"nodes": 1, "cpus": 1, "memory": 512, "duration": "1h"}).json()
        assert windows["windows"], windows
        call("GET", "/v1/events", query={"lease": now})
        plan = call("GET", "/v1/plan").json()
        assert {p["lease"] for p in plan["pairs"]} == {now, later}
        call("GET", "/v1/hosts", query={"timeout": 1})
        call("GET", "/v1/hosts/{host}/check", path_parameters={"host": "h1"}, query={"timeout": 5})
        call("POST", "/v1/hosts", body={"config": {"name": "h9", "uri": "sim://h9"}, "cpus": 4, "memory": 4096})
        call("POST", "/v1/hosts/import", body={"hosts": [{"name": "h8", "uri": "sim://h8"}], "cpus": 4,
                                               "memory": 4096})
        call("POST", "/v1/hosts/{host}/drain", path_parameters={"host": "h9"}, body={})
        call("POST", "/v1/hosts/{host}/undrain", path_parameters={"host": "h9"})
        call("DELETE", "/v1/hosts/{host}", path_parameters={"host": "h9"}, query={"drain": "true"})
        call("PATCH", "/v1/hosts/{host}/properties", path_parameters={"host": "h8"},
             body={"set": {"gpu": "a100"}, "unset": []})
        call("POST", "/v1/images", body={"name": "tiny", "path": str(image)})
        call("POST", "/v1/images/{name}/sync", path_parameters={"name": "tiny"}, body={})
        call("GET", "/v1/images")
        call("DELETE", "/v1/images/{name}", path_parameters={"name": "tiny"})
        call("PUT", "/v1/quotas/{subject}", path_parameters={"subject": "lwalice"},
             body={"vcpus": 8, "max_duration_s": timedelta(days=1).total_seconds()})
        call("GET", "/v1/quotas")
        call("GET", "/v1/quotas/{user}", path_parameters={"user": "lwalice"})
        call("DELETE", "/v1/quotas/{subject}", path_parameters={"subject": "lwalice"})
        token = call("POST", "/v1/tokens", body={"note": "tour"}).json()["id"]
        call("GET", "/v1/tokens")
        call("DELETE", "/v1/tokens/{token_id}", path_parameters={"token_id": token})
        call("POST", "/v1/leases/{lease_id}/cancel", path_parameters={"lease_id": now})
        assert not failures, "\n".join(failures)
        # every route was toured but `migrate` (it moves a real VM by hand: tests/lab)
        assert set(_operations(raw)) - set(checked) == {("POST", "/v1/vms/{vm}/migrate")}
        for (method, path) in checked:
            answer = raw["paths"][path][method.lower()]["responses"]
            success = next(v for k, v in answer.items() if k.startswith("2"))
            assert success["content"]["application/json"]["schema"].get("$ref"), (method, path)
    finally:
        http.close()
        running.stop()
