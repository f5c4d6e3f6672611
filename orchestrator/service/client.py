"""The CLI's side of the API: one call per use case, errors raised as the CLI's own, answers in the shapes
of the local store's (`backend.Backend`).

A server is `unix:/run/leasewise/api.sock` (the caller is who the kernel says) or `https://head:8443`
(the caller presents a token: `[client] token_file`, else $LEASEWISE_TOKEN; the server's certificate is
checked against `[client] ca`, else the system's CAs). A refusal comes back as `RemoteError` carrying the
exit code and the one line the server gave. A refused connection (the server restarting) is tried again for
up to `wait` seconds (`--wait`); still refused, an unknown host or a certificate that fails verification is
exit 1 (`NoServer`: trying again cannot help); a server that does not answer in time is exit 75 (try again).
A submission carries an idempotency key, so one tried again after a lost answer makes no second lease.
"""

from __future__ import annotations

import os
import random
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import timedelta
from urllib.parse import quote
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from drivers.base import MigrationReport
from drivers.files import UserFileError, read_user_file
from drivers.inventory import HostConfig
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.lease import Lease
from orchestrator.runtime.image_copies import CopyProgress
from orchestrator.runtime.vm_access import VMAccess, vm_access_from_json
from orchestrator.service.backend import MAX_PAGE, Access
from orchestrator.state.codec import (
    event_from_json,
    lease_from_json,
    migration_report_from_json,
)
from orchestrator.service.models import EndChange, FreeQuery, LeaseSubmission, Shortening, error_line
from orchestrator.service.models.leases import LeasePage
from orchestrator.service.models import responses as answers
from orchestrator.service.models.responses import conforming, shaped
from orchestrator.state.store import Event

T = TypeVar("T")
TIMEOUT_S = 60.0
EXIT_FAILED, EXIT_BUSY = 1, 75
#: the exit code of an answer that lacks the API's error body (a proxy's, say): "try again" for a request
#: timed out, too many requests, a server unavailable; else bad input
_EXIT_FOR_STATUS = {408: EXIT_BUSY, 429: EXIT_BUSY, 502: EXIT_BUSY, 503: EXIT_BUSY, 504: EXIT_BUSY}


class RemoteError(LeasewiseError):
    """What the server refused, with the exit code the CLI gives it."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code

    def __reduce__(self):
        return RemoteError, (str(self), self.exit_code)


class RemoteInvalid(RemoteError, InvalidRequest):
    """Bad input, as the server said it: the field and the problem apart (exit 2)."""

    def __init__(self, field: str, problem: str):
        InvalidRequest.__init__(self, field, problem)
        self.exit_code = 2

    def __reduce__(self):
        return RemoteInvalid, (self.field, self.problem)


class ServerUnreachable(RemoteError):
    """The server did not answer in time, or went away while answering: try again (exit 75)."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_BUSY)


class NoServer(RemoteError):
    """No server can be reached there, after --wait: a refused connection, an unknown host, a certificate
    that fails verification. Trying again the same way cannot help (exit 1)."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_FAILED)


class Client:
    def __init__(self, server: str, *, token: str | None = None, ca: str | None = None, timeout: float = TIMEOUT_S,
                 wait: float = 0.0):
        """`wait`: for how long a refused or reset connection is tried again (a server restarting)."""
        self.server = server
        self.wait = wait
        self._timeout_s = timeout   # (a call that waits on the hosts adds their time to it)
        #: the server's own time for the last answer, ms (its `Server-Timing` header; None: it gave none)
        self.server_ms: float | None = None
        if server.startswith("unix:"):
            transport = httpx.HTTPTransport(uds=server[len("unix:"):], verify=socket_tls_context())
            self._http = httpx.Client(transport=transport, base_url="http://leasewise", timeout=timeout)
        elif server.startswith(("https://", "http://")):
            if server.startswith("http://") and not server.startswith(("http://127.", "http://localhost")):
                raise RemoteError(f"--server: {server}: tokens only go over https (or to loopback)", 2)
            headers = {"authorization": f"Bearer {token}"} if token else {}
            try:   # (no `ca`: the system's CAs, as OpenSSL finds them, not httpx's own bundle)
                verify = ssl.create_default_context(cafile=ca or None)
            except (OSError, ssl.SSLError) as exc:
                raise RemoteError(f"client.ca: {ca}: cannot be read as certificates ({exc})", 2) from None
            self._http = httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=timeout, verify=verify)
        else:
            raise RemoteError(f"--server: {server!r} is neither unix:PATH nor an https:// URL", 2)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, *, again: bool | None = None, answer: type[BaseModel] | None = None,
              many: bool = False, **kwargs: Any) -> Any:
        """One request, tried again for up to `wait` seconds while no server answers (refused: it is
        restarting) and, when `again` (a read, or a submission with an idempotency key; default: GET), while
        the connection is reset before the answer. `answer`: the model the answer is read through (its JSON
        data given back, `shaped`; with `many`, an answer of many leases or events: checked, and given back
        as it came, `conforming`). Pages of leases and the plan are rebuilt instead (`_rebuilt`)."""
        again = method == "GET" if again is None else again
        self.server_ms = None
        deadline = time.monotonic() + self.wait
        pause = 0.1
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
                break
            except httpx.TransportError as exc:
                kind = _failure(exc)
                if kind == "denied":
                    raise RemoteError(f"server {self.server}: permission denied (only the socket's group may use "
                                      "it)", 4) from None
                if kind in ("certificate", "unknown host"):
                    raise NoServer(f"server {self.server}: {_reason(exc, kind)}") from None
                retried = kind == "refused" or (kind == "reset" and again)
                left = deadline - time.monotonic()
                if retried and left > 0:   # (the last try at the deadline itself)
                    time.sleep(min(pause + random.uniform(0, pause), left))
                    pause = min(pause * 2, 1.0)
                    continue
                if kind == "refused":
                    waited = f" (tried for {self.wait:g} s, --wait)" if self.wait > 0 else ""
                    raise NoServer(f"server {self.server}: no server answers there{waited}") from None
                if kind == "reset" and not again:
                    raise ServerUnreachable(f"server {self.server}: the connection was lost before the answer: "
                                            "it may have been done; look before trying again") from None
                raise ServerUnreachable(f"server {self.server}: {_reason(exc, kind)}: nothing was done, try again") \
                    from None
        self.server_ms = server_ms(response.headers.get("server-timing", ""))
        data = self._answer(response)
        if answer is None:
            return data
        try:
            return conforming(answer, data) if many else shaped(answer, data)
        except ValidationError as exc:
            raise self._not_the_apis(answer, exc) from None

    def _rebuilt(self, answer: type[BaseModel], data: Any, rebuild: Callable[[Any], T]) -> T:
        """`rebuild(data)` of an answer of many leases (a page of leases, the plan), which `_call` gives
        back unread. The rebuild is the check: leases are rebuilt by the store's own reader, which refuses
        what is not one, so reading the answer through its model as well would pay twice for the same
        check, on every page a list asks for. Only when the rebuild fails is the answer read through its
        model, for the line naming the field."""
        try:
            return rebuild(data)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, LeasewiseError) as exc:
            try:
                answer.model_validate(data, strict=True)
            except ValidationError as invalid:
                raise self._not_the_apis(answer, invalid) from None
            raise RemoteError(f"server {self.server}: its answer is not the API's {answer.__name__} ({exc})",
                              EXIT_FAILED) from None

    def _not_the_apis(self, answer: type[BaseModel], exc: ValidationError) -> RemoteError:
        field, problem = error_line(exc.errors())
        return RemoteError(f"server {self.server}: its answer is not the API's {answer.__name__} "
                           f"({field}: {problem})", EXIT_FAILED)

    def _answer(self, response: httpx.Response) -> Any:
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.is_success:
            return data
        error = (data or {}).get("error") if isinstance(data, dict) else None
        if isinstance(error, dict) and isinstance(error.get("field"), str) and isinstance(error.get("problem"), str):
            raise RemoteInvalid(error["field"], error["problem"])
        if isinstance(error, dict) and "message" in error:
            raise RemoteError(str(error["message"]), int(error.get("code", 2)))
        if isinstance(data, dict) and isinstance(data.get("detail"), list):   # FastAPI's own validation
            field, problem = error_line(data["detail"])
            raise RemoteError(f"{field}: {problem}", 2)
        retry = response.headers.get("retry-after", "")
        raise RemoteError(f"server {self.server}: HTTP {response.status_code}"
                          + (f": try again in {retry} s" if retry.isdigit() else ""),
                          _EXIT_FOR_STATUS.get(response.status_code, 2))

    # -- use cases ---------------------------------------------------------------------------------------------
    def whoami(self) -> dict[str, Any]:
        return self._call("GET", "/v1/whoami", answer=answers.Whoami)

    def submit(self, submission: LeaseSubmission, key: str | None = None) -> dict[str, Any]:
        """Submit a lease; tried again while the server restarts, with one idempotency key (made here when
        none is given), so a retry never makes a second lease."""
        key = key or uuid.uuid4().hex
        return self._call("POST", "/v1/leases", json=submission.values(), headers={"Idempotency-Key": key},
                          again=True, answer=answers.SubmitAnswer)

    def lease_page(self, states: list[str] | None = None, user: str | None = None, everyone: bool = False,
                   after: int | None = None, limit: int | None = None) -> tuple[list[Lease], int | None]:
        """One page of leases (the caller's own unless `user` or `everyone`), and the id to ask for the
        next page `after` (None: no more)."""
        params: dict[str, Any] = {"all": everyone}
        if states is not None:
            params["status"] = states
        if user is not None:
            params["user"] = user
        if after is not None:
            params["after"] = after
        if limit is not None:
            params["limit"] = limit
        page = self._call("GET", "/v1/leases", params=params)
        return self._rebuilt(LeasePage, page, lambda page: ([lease_from_json(d) for d in page["leases"]],
                                                            _next_id(page["next"])))

    def leases(self, states: list[str] | None = None, user: str | None = None,
               everyone: bool = False) -> list[Lease]:
        """Every lease asked for (the caller's own unless `user` or `everyone`), page after page."""
        out: list[Lease] = []
        after = None
        while True:
            page, after = self.lease_page(states, user, everyone, after, MAX_PAGE)
            out += page
            if after is None:
                return out

    def lease(self, lease_id: int, vms: bool = True) -> tuple[Lease, list[Event], list[VMAccess] | None]:
        data = self._call("GET", f"/v1/leases/{lease_id}", params={"vms": vms}, answer=answers.LeaseShown,
                          many=True)
        found = None if data["vms"] is None else [vm_access_from_json(v) for v in data["vms"]]
        return lease_from_json(data["lease"]), [event_from_json(e) for e in data["events"]], found

    def cancel(self, lease_id: int) -> dict[str, Any]:
        return self._call("POST", f"/v1/leases/{lease_id}/cancel", answer=answers.Cancelled)

    def extend(self, lease_id: int, by: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/leases/{lease_id}/extend", json={"by": by}, answer=answers.Extended)

    def shorten(self, lease_id: int, change: Shortening) -> dict[str, Any]:
        return self._call("POST", f"/v1/leases/{lease_id}/shorten", json=change.model_dump(exclude_none=True),
                          answer=answers.Reshaped)

    def update(self, lease_id: int, change: EndChange) -> dict[str, Any]:
        return self._call("PATCH", f"/v1/leases/{lease_id}", json=change.model_dump(exclude_none=True),
                          answer=answers.Reshaped)

    def free_windows(self, query: FreeQuery) -> dict[str, Any]:
        return self._call("GET", "/v1/free", params=query.model_dump(exclude_none=True), answer=answers.FreeWindows)

    def access(self, lease_id: int, node: int | None) -> Access:
        data = self._call("GET", f"/v1/leases/{lease_id}/access", params={} if node is None else {"node": node},
                          answer=answers.AccessAnswer)
        return Access(vm_access_from_json(data["vm"]), data["console"], data["console_error"])

    def hosts(self, timeout: float) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/hosts", params={"timeout": timeout}, answer=answers.HostList)["hosts"]

    def drain(self, host: str, by: str | None) -> dict[str, Any]:
        return self._call("POST", f"/v1/hosts/{_segment(host)}/drain", json={"by": by} if by else {},
                          answer=answers.Drained)

    def undrain(self, host: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/hosts/{_segment(host)}/undrain", answer=answers.Undrained)

    def host_add(self, config: HostConfig, cpus: int | None, memory: int | None, timeout: float) -> dict[str, Any]:
        return self._call("POST", "/v1/hosts", json={"config": _host_json(config), "cpus": cpus, "memory": memory,
                                                     "timeout": timeout}, timeout=self._timeout_s + timeout,
                          answer=answers.HostAdded)

    def host_import(self, configs: list[HostConfig], cpus: int | None, memory: int | None, timeout: float,
                    source: str) -> dict[str, Any]:
        return self._call("POST", "/v1/hosts/import", json={"hosts": [_host_json(c) for c in configs], "cpus": cpus,
                                                            "memory": memory, "timeout": timeout, "source": source},
                          timeout=self._timeout_s + timeout, answer=answers.HostsImported)

    def host_set(self, host: str, properties: dict[str, str], unset: list[str]) -> dict[str, Any]:
        return self._call("PATCH", f"/v1/hosts/{_segment(host)}/properties", json={"set": properties, "unset": unset},
                          answer=answers.HostPropertiesSet)

    def host_remove(self, host: str, drain: bool) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/hosts/{_segment(host)}", params={"drain": drain}, answer=answers.HostRemoved)

    def host_check(self, host: str, timeout: float) -> dict[str, Any]:
        # (each contact may take the timeout: the link, connect, ssh, every image; then the pairs, side by side)
        return self._call("GET", f"/v1/hosts/{_segment(host)}/check", params={"timeout": timeout},
                          timeout=self._timeout_s + 16 * timeout, answer=answers.HostChecked)

    def image_add(self, values: Mapping[str, Any], progress: CopyProgress | None = None) -> dict[str, Any]:
        """(The server copies the image to the hosts: no progress reaches this client but the answer.)"""
        return self._call("POST", "/v1/images", json=dict(values), timeout=None, answer=answers.ImageAdded)

    def image_sync(self, name: str, host: str | None = None, progress: CopyProgress | None = None) -> dict[str, Any]:
        return self._call("POST", f"/v1/images/{_segment(name)}/sync", json={"host": host}, timeout=None,
                          answer=answers.ImageSynced)

    def migrate(self, vm: str, to: str, max_downtime_ms: float, bandwidth_mib_s: float | None, timeout_s: float,
                on_timeout: str) -> tuple[MigrationReport, str | None]:
        """The measured report, and the error when the migration did not complete (the VM stays put)."""
        data = self._call("POST", f"/v1/vms/{_segment(vm)}/migrate",
                          json={"to": to, "max_downtime_ms": max_downtime_ms, "bandwidth_mib_s": bandwidth_mib_s,
                                "timeout_s": timeout_s, "on_timeout": on_timeout},
                          timeout=self._timeout_s + timeout_s, answer=answers.Migrated)
        return migration_report_from_json(data["report"]), data["error"]

    def images(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/images", answer=answers.ImageList)["images"]

    def quota_set(self, subject: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        body = {}
        for key, value in changes.items():
            if key in ("max_duration", "max_ahead"):
                body[f"{key}_s"] = None if value is None else value.total_seconds()
            else:
                body[key] = value
        return self._call("PUT", f"/v1/quotas/{_segment(subject)}", json=body, answer=answers.QuotaSet)

    def quota_remove(self, subject: str) -> None:
        self._call("DELETE", f"/v1/quotas/{_segment(subject)}", answer=answers.QuotaRemoved)

    def quota_list(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/quotas", answer=answers.QuotaList)["quotas"]

    def quota_show(self, user: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/quotas/{_segment(user)}", answer=answers.QuotaShown)

    def token_create(self, user: str | None, admin: bool, expires: timedelta | None, note: str) -> dict[str, Any]:
        lifetime = None if expires is None else expires.total_seconds()
        body = {"user": user, "admin": admin, "note": note, "expires_s": lifetime}
        return self._call("POST", "/v1/tokens", json=body, answer=answers.TokenMade)

    def token_list(self, user: str | None) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/tokens", params={} if user is None else {"user": user},
                          answer=answers.TokenList)["tokens"]

    def token_revoke(self, token_id: int) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/tokens/{token_id}", answer=answers.TokenRevoked)

    def image_remove(self, name: str) -> None:
        self._call("DELETE", f"/v1/images/{_segment(name)}", answer=answers.ImageRemoved)

    def events(self, lease_id: int | None) -> list[Event]:
        params = {} if lease_id is None else {"lease": lease_id}
        data = self._call("GET", "/v1/events", params=params, answer=answers.EventList, many=True)
        return [event_from_json(e) for e in data["events"]]

    def plan(self, start: str | None, end: str | None) -> tuple[list, list[str], dict[int, str]]:
        """(lease, reservation) pairs of the plan in [start, end), the hosts, the leases' labels."""
        data = self._call("GET", "/v1/plan", params={k: v for k, v in (("start", start), ("end", end)) if v})

        def rebuild(data: Any) -> tuple[list, list[str], dict[int, str]]:
            leases = {}
            for record in data["leases"]:
                lease = lease_from_json(record)
                leases[lease.id] = lease
            parts = {(one.id, rr.id): rr for one in leases.values() for vm in one.reservations for rr in vm.all_parts()}
            pairs = [(leases[p["lease"]], parts[(p["lease"], p["reservation"])]) for p in data["pairs"]]
            return pairs, _texts(data["hosts"]), {int(k): _text(v) for k, v in data["labels"].items()}

        return self._rebuilt(answers.Plan, data, rebuild)

    def get(self, path: str, **params: Any) -> Any:
        return self._call("GET", path, params=params)

    def post(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        return self._call("POST", path, json=dict(body or {}))

    def delete(self, path: str) -> Any:
        return self._call("DELETE", path)


def socket_tls_context() -> ssl.SSLContext:
    """The TLS context of the Unix socket's transport, which speaks plain HTTP and never uses it: a verifying
    context that trusts no authority, since httpx's default reads and parses a whole CA bundle for every
    client made (each CLI command; each of a load test's clients, all at once)."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _next_id(value: Any) -> int | None:
    """A page's `next`: the id to ask for the next page after, or None."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise TypeError(f"next: not a lease id ({value!r})")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"not text ({value!r})")
    return value


def _texts(values: Any) -> list[str]:
    if not isinstance(values, list):
        raise TypeError(f"not a list ({values!r})")
    return [_text(v) for v in values]


def _segment(text: str) -> str:
    return quote(text, safe="@")


def server_ms(header: str) -> float | None:
    """The `app` duration of a `Server-Timing` header (`app;dur=12.5`), ms, or None."""
    for metric in header.split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        if name == "app":
            for param in params:
                key, _, value = param.partition("=")
                if key == "dur":
                    try:
                        return float(value)
                    except ValueError:
                        return None
    return None


def _failure(exc: httpx.TransportError) -> str:
    """What kind of failure a transport error is: `refused` (nothing listens: not yet, or no longer),
    `reset` (the connection went away), `certificate`, `unknown host`, `denied`, `timeout`, or `other`."""
    causes: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(causes) < 8:
        causes.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(c) for c in causes)
    if any(isinstance(c, ssl.SSLCertVerificationError) for c in causes) or "CERTIFICATE_VERIFY_FAILED" in text:
        return "certificate"
    if any(isinstance(c, socket.gaierror) for c in causes) or "Name or service not known" in text \
            or "nodename nor servname" in text or "Temporary failure in name resolution" in text:
        return "unknown host"
    if "Permission denied" in text:
        return "denied"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError) and ("No such file" in text or "Connection refused" in text):
        return "refused"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ConnectError)) \
            and ("reset" in text.lower() or "disconnected" in text.lower() or "EOF" in text
                 or "closed" in text.lower() or isinstance(exc, httpx.RemoteProtocolError)):
        return "reset"
    return "other"


def _reason(exc: httpx.TransportError, kind: str) -> str:
    if kind == "certificate":
        return "its certificate failed verification (give the CA that signed it: [client] ca)"
    if kind == "unknown host":
        return "unknown host (the name does not resolve)"
    if kind == "timeout":
        return "no answer in time"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def token_for(token_file: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The API token: in `token_file` (its first line), else $LEASEWISE_TOKEN."""
    env = os.environ if env is None else env
    if token_file:
        try:
            return read_user_file(Path(token_file), 4096).decode("utf-8").strip().splitlines()[0].strip()
        except UserFileError as exc:
            raise RemoteError(f"client.token_file: {token_file} cannot be read ({exc.problem})", 2) from None
        except (UnicodeDecodeError, IndexError):
            raise RemoteError(f"client.token_file: {token_file} holds no token (one line of text)", 2) from None
    return env.get("LEASEWISE_TOKEN") or None


def _host_json(config: HostConfig) -> dict[str, Any]:
    """A host's settings as the API takes them (its properties a JSON object)."""
    return {**asdict(config), "properties": dict(config.properties)}
