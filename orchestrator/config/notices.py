"""[notify], [notify.email] and [notify.command]: end-of-lease notices, when they are due and how each
notifier sends them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from orchestrator.config.values import (
    read_bool,
    read_choice,
    read_duration,
    read_integer,
    read_name,
    read_path,
    read_timeout,
    set_field,
    value_kind,
)
from orchestrator.model.errors import ConfigError

#: the notifiers `[notify] notifiers` may name (orchestrator.runtime.notifiers has one of each)
NOTIFIER_NAMES = ("email", "command")
#: a reminder further ahead than this is a typo (and would be due for nearly every lease)
MAX_NOTICE_OFFSET = timedelta(days=30)


def offset_label(offset: timedelta) -> str:
    """A reminder offset as its notice key writes it: 1h, 10m, 1h30m, 45s (whole seconds)."""
    seconds = int(offset.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return "".join(parts) or "0s"




@dataclass(frozen=True)
class EmailConfig:
    """How the `email` notifier reaches its SMTP server. The password stays in its file (read at each
    send), so the configuration never holds a secret and may be shown or logged."""

    smtp_host: str = "localhost"
    smtp_port: int = 25
    sender: str = "leasewise@localhost"
    starttls: bool = False
    username: str | None = None
    password_file: str | None = None
    domain: str | None = None                # a user's address is user@domain; None: the sender's domain
    timeout: timedelta = timedelta(seconds=10)

    def __post_init__(self) -> None:
        p = "notify.email."
        set_field(self, "smtp_host", read_name(p + "smtp_host", self.smtp_host))
        set_field(self, "smtp_port", read_integer(p + "smtp_port", self.smtp_port, minimum=1))
        if self.smtp_port > 65535:
            raise ConfigError(p + "smtp_port", f"must be a TCP port, 1 to 65535 (got {self.smtp_port})")
        sender = read_name(p + "sender", self.sender)
        if sender.count("@") != 1 or not all(sender.split("@")) or any(c.isspace() for c in sender):
            raise ConfigError(p + "sender", f"must be an address such as leasewise@example.org (got {sender!r})")
        set_field(self, "sender", sender)
        set_field(self, "starttls", read_bool(p + "starttls", self.starttls))
        if self.username is not None:
            set_field(self, "username", read_name(p + "username", self.username))
        if self.password_file is not None:
            set_field(self, "password_file", read_path(p + "password_file", self.password_file))
        if (self.username is None) != (self.password_file is None):
            missing = "password_file" if self.password_file is None else "username"
            raise ConfigError(p + missing, "is needed too: SMTP authentication takes a username and a password_file")
        if self.domain is not None:
            domain = read_name(p + "domain", self.domain)
            if "@" in domain or any(c.isspace() for c in domain):
                raise ConfigError(p + "domain", f"must be a mail domain such as example.org (got {domain!r})")
            set_field(self, "domain", domain)
        set_field(self, "timeout", read_timeout(p + "timeout", self.timeout))

    def address_of(self, user: str) -> str | None:
        """The mail address of a lease's owner (None for a lease that names no user)."""
        user = user.strip()
        if not user:
            return None
        return f"{user}@{self.domain or self.sender.split('@')[1]}"


@dataclass(frozen=True)
class CommandConfig:
    """The program the `command` notifier runs, with a notice and its lease as JSON on stdin."""

    argv: tuple[str, ...] = ("/usr/local/bin/notify-lease",)
    timeout: timedelta = timedelta(seconds=30)

    def __post_init__(self) -> None:
        p = "notify.command."
        argv = self.argv
        if isinstance(argv, str) or not isinstance(argv, (list, tuple)) or not argv:
            raise ConfigError(p + "argv", f"must be a non-empty array of strings (got {value_kind(argv)})")
        if not all(isinstance(a, str) and a for a in argv):
            raise ConfigError(p + "argv", "must hold non-empty strings only")
        read_path(p + "argv", argv[0])   # a service's PATH is not the user's shell's: name the program fully
        set_field(self, "argv", tuple(argv))
        set_field(self, "timeout", read_timeout(p + "timeout", self.timeout))


@dataclass(frozen=True)
class NotifyConfig:
    """End-of-lease notices: when they are due and which notifiers send them (none by default)."""

    before_end: tuple[timedelta, ...] = (timedelta(hours=1), timedelta(minutes=10))
    at_end: bool = True
    notifiers: tuple[str, ...] = ()
    email: EmailConfig = field(default_factory=EmailConfig)
    command: CommandConfig = field(default_factory=CommandConfig)

    def __post_init__(self) -> None:
        p = "notify."
        offsets = self.before_end
        if isinstance(offsets, str) or not isinstance(offsets, (list, tuple)):
            raise ConfigError(p + "before_end", f'must be an array of durations such as ["1h", "10m"] '
                                                f"(got {value_kind(offsets)})")
        parsed: dict[str, timedelta] = {}
        for value in offsets:
            offset = read_duration(p + "before_end", value)
            if offset.total_seconds() < 1 or offset.total_seconds() != int(offset.total_seconds()):
                raise ConfigError(p + "before_end", f"must be whole seconds, at least 1 s (got {value!r})")
            if offset > MAX_NOTICE_OFFSET:
                raise ConfigError(p + "before_end", f"is too far ahead (got {value!r}; at most 30 days)")
            label = offset_label(offset)
            if label in parsed:
                raise ConfigError(p + "before_end", f"gives {label} twice")
            parsed[label] = offset
        set_field(self, "before_end", tuple(sorted(parsed.values(), reverse=True)))
        set_field(self, "at_end", read_bool(p + "at_end", self.at_end))
        names = self.notifiers
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise ConfigError(p + "notifiers", f'must be an array of names such as ["email"] (got {value_kind(names)})')
        for name in names:
            read_choice(p + "notifiers", name, NOTIFIER_NAMES)
        if len(set(names)) != len(names):
            raise ConfigError(p + "notifiers", "names a notifier twice")
        set_field(self, "notifiers", tuple(names))
        if not isinstance(self.email, EmailConfig):
            raise ConfigError(p + "email", f"must be a table, written [notify.email] (got {value_kind(self.email)})")
        if not isinstance(self.command, CommandConfig):
            raise ConfigError(p + "command",
                              f"must be a table, written [notify.command] (got {value_kind(self.command)})")

    @property
    def enabled(self) -> bool:
        return bool(self.notifiers)
