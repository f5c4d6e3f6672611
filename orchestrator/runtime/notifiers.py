"""Notifiers: what sends an end-of-lease notice to a lease's owner, by name (`[notify] notifiers`).

`email` writes a plain-text mail through an SMTP server (smtplib); `command` runs a program with the
notice and its lease as one JSON document on stdin. Each `send` either returns (sent) or raises
`NotifyFailed` with a one-line reason; it never raises anything else for a failure of the outside world,
so the sender can record it and go on with the other notifiers and leases.

What a notice says is written here once (`notice_text`, `notice_document`) so the mail and the command's
JSON say the same thing.
"""

from __future__ import annotations

import json
import os
import signal
import smtplib
import ssl
import subprocess
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from orchestrator.config import CommandConfig, EmailConfig, NotifyConfig
from drivers.files import UserFileError, read_user_file
from orchestrator.model.lease import Lease
from orchestrator.model.text import printable
from orchestrator.model.timeutil import iso
from orchestrator.planning.notices import ENDED, Notice

#: the most of a failing command's stderr kept in its outcome
_STDERR_KEPT = 300


class NotifyFailed(Exception):
    """A notice could not be sent; the message is the one-line reason recorded as its outcome."""


class Notifier(Protocol):
    name: str

    def send(self, notice: Notice, lease: Lease, recipient: str | None, now: datetime) -> None:
        """Send `notice` about `lease` to its owner (`recipient`: the owner's address, if any), or raise
        `NotifyFailed`."""


# -- what a notice says -------------------------------------------------------------------------------------
def in_words(span: timedelta) -> str:
    """`10 minutes`, `1 hour`, `1 hour 30 minutes`, `45 seconds`: whole minutes from two minutes on."""
    seconds = max(0, round(span.total_seconds()))
    if seconds < 120:
        return f"{seconds} second{'s' * (seconds != 1)}"
    hours, minutes = divmod(round(seconds / 60), 60)
    parts = [f"{hours} hour{'s' * (hours != 1)}"] if hours else []
    parts += [f"{minutes} minute{'s' * (minutes != 1)}"] if minutes else []
    return " ".join(parts)


def _hosts(lease: Lease) -> list[str]:
    vm = lease.last_vm
    return sorted(set(vm.nodes.values())) if vm is not None else []


def _title(lease: Lease) -> str:
    return f"lease {lease.id}" + (f" ({printable(lease.request.name)})" if lease.request.name else "")


def notice_text(notice: Notice, lease: Lease, now: datetime) -> tuple[str, str]:
    """The subject and the plain-text body of a notice sent at `now` (the time left is measured then,
    so a reminder sent late says how long is really left)."""
    # (what a user gave, shown as `printable` makes it: a mail client or a command's terminal obeys no code
    # of theirs)
    hosts = printable(", ".join(_hosts(lease)) or "none")
    owner = f" of {printable(lease.request.user)}" if lease.request.user else ""
    if notice.key == ENDED:
        subject = f"leasewise: {_title(lease)} ended ({lease.state.value})"
        lines = [f"{_title(lease).capitalize()}{owner} ended at {iso(notice.end)}: {printable(notice.reason)}.",
                 f"Hosts: {hosts}",
                 "Its VMs are stopped; anything not kept on shared storage is gone."]
    else:
        left = in_words(notice.end - now)
        subject = f"leasewise: {_title(lease)} ends in {left}"
        lines = [f"{_title(lease).capitalize()}{owner} ends at {iso(notice.end)}, in {left}.",
                 f"Hosts: {hosts}",
                 "Its VMs are stopped then. To keep it longer, if the hosts are free after it:",
                 f"    leasewise lease extend {lease.id} --by 1h"]
    lines += ["", f"(notice {notice.key} from leasewise)"]
    return subject, "\n".join(lines) + "\n"


def notice_document(notice: Notice, lease: Lease, recipient: str | None, now: datetime) -> dict[str, Any]:
    """The notice as plain JSON data: what it says, to whom, and the lease it is about."""
    subject, text = notice_text(notice, lease, now)
    return {
        "notice": {"key": notice.key, "kind": notice.kind, "due_at": iso(notice.due_at), "sent_at": iso(now),
                   "end": iso(notice.end), "reason": notice.reason or None, "subject": subject, "text": text},
        "recipient": recipient,
        "lease": {"id": lease.id, "name": lease.request.name, "user": lease.request.user,
                  "type": lease.type.value, "state": lease.state.value, "hosts": _hosts(lease),
                  "vms": lease.numnodes, "start_time": iso(lease.start_time), "end_time": iso(lease.end_time),
                  "extend": f"leasewise lease extend {lease.id} --by 1h"},
    }


# -- email --------------------------------------------------------------------------------------------------
class EmailNotifier:
    """A plain-text mail to the owner's address through the configured SMTP server, one connection per
    notice (notices are few; a connection kept open would time out between them)."""

    name = "email"

    def __init__(self, config: EmailConfig):
        self.config = config

    def send(self, notice: Notice, lease: Lease, recipient: str | None, now: datetime) -> None:
        c = self.config
        if not recipient:
            raise NotifyFailed(f"lease {lease.id} names no user to write to")
        subject, text = notice_text(notice, lease, now)
        message = EmailMessage()
        message["From"] = c.sender
        message["To"] = recipient
        message["Subject"] = subject
        message["Date"] = formatdate(usegmt=True)
        message["Message-ID"] = make_msgid(domain=c.sender.split("@")[1])
        message["Auto-Submitted"] = "auto-generated"   # RFC 3834: no vacation replies to it
        message.set_content(text)
        password = self._password()
        try:
            with smtplib.SMTP(c.smtp_host, c.smtp_port, timeout=c.timeout.total_seconds()) as smtp:
                if c.starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if c.username is not None:
                    smtp.login(c.username, password)
                smtp.send_message(message)
        except (OSError, smtplib.SMTPException) as exc:
            raise NotifyFailed(f"SMTP {c.smtp_host}:{c.smtp_port}: {_one_line(exc)}") from None

    def _password(self) -> str:
        """Read at each send, so a rotated password needs no restart and none sits in the configuration."""
        if self.config.password_file is None:
            return ""
        try:
            return read_user_file(Path(self.config.password_file), 4096).decode("utf-8").rstrip("\r\n")
        except UserFileError as exc:
            raise NotifyFailed(f"cannot read {self.config.password_file}: {exc.problem}") from None
        except UnicodeDecodeError:
            raise NotifyFailed(f"cannot read {self.config.password_file}: not UTF-8 text") from None


# -- command ------------------------------------------------------------------------------------------------
class CommandNotifier:
    """Runs the configured program with the notice as JSON on stdin; a non-zero exit or a timeout fails.

    The program runs in a session of its own, so a timeout kills it and whatever it started."""

    name = "command"

    def __init__(self, config: CommandConfig):
        self.config = config

    def send(self, notice: Notice, lease: Lease, recipient: str | None, now: datetime) -> None:
        argv = list(self.config.argv)
        data = json.dumps(notice_document(notice, lease, recipient, now)).encode() + b"\n"
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as exc:
            raise NotifyFailed(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
        timeout = self.config.timeout.total_seconds()
        try:
            _, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise NotifyFailed(f"{argv[0]} took longer than {timeout:g} s: killed") from None
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] if err else []
            said = f": {tail[0][:_STDERR_KEPT]}" if tail else ""
            raise NotifyFailed(f"{argv[0]} exited with {_exit(proc.returncode)}{said}")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def _exit(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"code {code}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


# -- the registry -------------------------------------------------------------------------------------------
#: notifier name -> how it is made from `[notify]` (read-only; its names are config.NOTIFIER_NAMES)
NOTIFIERS: Mapping[str, Callable[[NotifyConfig], Notifier]] = MappingProxyType({
    "email": lambda notify: EmailNotifier(notify.email),
    "command": lambda notify: CommandNotifier(notify.command),
})


def make_notifiers(notify: NotifyConfig) -> Sequence[Notifier]:
    """The notifiers `[notify] notifiers` names, in its order."""
    return tuple(NOTIFIERS[name](notify) for name in notify.notifiers)
