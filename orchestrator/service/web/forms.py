"""What the pages' forms send, read and checked where it enters the server.

A form is `application/x-www-form-urlencoded`, of bounded size, each field at most once. The submit form has
the fields of `leasewise lease submit` (its keys as a lease file names them), made into the API's
submission and checked by the use case as every client's request is (`LeaseService.submit`), its errors
naming the form's field; public keys and cloud-config are pasted as text, since the server reads no file for a visitor.
Its placement fields are the submission's too: `where` (constraints, one a line), `spread`, `pack` and
`exclusive` (yes/no), `start` = `earliest` with `not_before`/`not_after`; the same fields ask for the free
windows (`free_query`: the API's `FreeQuery`, as `plan --free` asks).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from urllib.parse import parse_qsl

from fastapi import Request

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.timeutil import end_of, iso, parse_duration, parse_time
from orchestrator.service.models import FreeQuery, LeaseSubmission, model_of, submission_of

#: a form's largest body: a #cloud-config of 64 KiB and a few keys, URL-encoded
MAX_FORM_BYTES = 256 * 1024
MAX_FIELDS = 64

#: the submit form's text fields (the lease file's keys; `image_path` is an admin's `image` given as a path)
SUBMIT_TEXT = ("nodes", "cpus", "memory", "duration", "start", "not_before", "not_after", "image", "kernel", "initrd",
               "cmdline", "name", "user", "dirty_rate", "disk_size", "hostname_prefix", "ssh_key", "user_data")
#: its yes/no fields; unset, the CLI's defaults hold
SUBMIT_CHOICES = ("preemptible", "network", "keep_disks", "spread", "pack", "exclusive")
#: the fields a free-window query takes from the submit form (`plan --free`'s options)
FREE_KEYS = ("nodes", "cpus", "memory", "duration", "not_before", "not_after", "where", "spread", "pack", "exclusive")


async def read_form(request: Request) -> dict[str, str]:
    """The form's fields (one line naming `form` or the field when it is malformed)."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if not kind and request.headers.get("content-length", "0") == "0":
        return {}   # (a form of no fields: a button alone)
    if kind != "application/x-www-form-urlencoded":
        raise InvalidRequest("form", f"must be sent as application/x-www-form-urlencoded (got {kind or 'nothing'})")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise InvalidRequest("form", f"is larger than {MAX_FORM_BYTES // 1024} KiB")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
                          max_num_fields=MAX_FIELDS, errors="strict")
    except UnicodeDecodeError:
        raise InvalidRequest("form", "is not UTF-8") from None
    except ValueError:
        raise InvalidRequest("form", f"has more than {MAX_FIELDS} fields") from None
    fields: dict[str, str] = {}
    for key, value in pairs:
        if key in fields:
            raise InvalidRequest(key, "is given twice: give each field once")
        fields[key] = value
    return fields


def submit_values(form: Mapping[str, str]) -> dict[str, object]:
    """The submit form's values as `request_from_fields` takes them: an empty field is not given; a
    yes/no field is `yes`, `no` or empty (the default)."""
    values: dict[str, object] = {}
    path = form.get("image_path", "").strip()   # (admins: a disk on the hosts, instead of a catalogued image)
    if path and form.get("image", "").strip():
        raise InvalidRequest("image", "give a catalogued image or an image path, not both")
    for key in SUBMIT_TEXT:
        text = form.get(key, "")
        if text.strip():
            values[key] = text if key in ("ssh_key", "user_data") else text.strip()
    if path:
        values["image"] = path
    where = [line.strip() for line in form.get("where", "").splitlines() if line.strip()]
    if where:
        values["where"] = where
    for key in SUBMIT_CHOICES:
        choice = form.get(key, "").strip().lower()
        if choice not in ("", "yes", "no"):
            raise InvalidRequest(key, f"must be yes or no (got {choice!r})")
        if choice:
            values[key] = choice == "yes"
    return values


def lease_submission(form: Mapping[str, str]) -> LeaseSubmission:
    """The submission the submit form asks for, as the API takes it (the pasted keys one per line), for the
    use case to check as it checks every client's (`LeaseService.submit`)."""
    values = submit_values(form)
    if isinstance(values.get("ssh_key"), str):
        values["ssh_key"] = [line.strip() for line in str(values["ssh_key"]).splitlines() if line.strip()] or None
    return submission_of(values)


def free_query(form: Mapping[str, str]) -> FreeQuery:
    """The free-window query the submit form's size, duration and placement ask (`plan --free`), checked by
    the API's model (`FreeQuery`), its errors naming the form's field."""
    values = submit_values(form)
    return model_of(FreeQuery, {key: values[key] for key in FREE_KEYS if key in values})


def extension(form: Mapping[str, str]) -> timedelta:
    """`lease extend --by`: a duration greater than zero."""
    text = form.get("by", "").strip()
    if not text:
        raise InvalidRequest("by", "is required (e.g. 30m)")
    amount = parse_duration(text, "by")
    if amount.total_seconds() <= 0:
        raise InvalidRequest("by", f"must be greater than zero (got {text!r})")
    return amount


def drain_deadline(form: Mapping[str, str], now: datetime) -> datetime:
    """`host drain --by`: `now` (also when empty), `+DURATION` or an ISO 8601 time, not in the past."""
    text = form.get("by", "").strip()
    if not text or text.lower() == "now":
        return now
    if text.startswith("+"):
        return end_of(now, parse_duration(text[1:], "by"), "by")
    deadline = parse_time(text, "by")
    if deadline < now:
        raise InvalidRequest("by", f"{iso(deadline)} is in the past (now {iso(now)})")
    return deadline
