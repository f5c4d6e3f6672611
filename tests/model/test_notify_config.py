"""[notify], [notify.email] and [notify.command]: defaults, accepted forms, and rejections naming the key."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.config import (
    CommandConfig,
    EmailConfig,
    NotifyConfig,
    config_from_dict,
    load_config,
    offset_label,
)
from orchestrator.model.errors import ConfigError


def error_of(data: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    return info.value


def test_defaults_send_nothing_until_a_notifier_is_named():
    notify = load_config(None).notify
    assert notify.before_end == (timedelta(hours=1), timedelta(minutes=10))
    assert notify.at_end is True and notify.notifiers == () and not notify.enabled
    email = notify.email
    assert (email.smtp_host, email.smtp_port, email.sender, email.starttls) == ("localhost", 25, "leasewise@localhost", False)
    assert (email.username, email.password_file, email.domain, email.timeout) == (None, None, None, timedelta(seconds=10))
    assert notify.command.argv == ("/usr/local/bin/notify-lease",) and notify.command.timeout == timedelta(seconds=30)


def test_a_full_file_is_read_into_the_nested_tables(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[notify]\nbefore_end = ["10m", "2h", 90]\nat_end = false\nnotifiers = ["email", "command"]\n'
                    '[notify.email]\nsmtp_host = "mail.example.org"\nsmtp_port = 587\nstarttls = true\n'
                    'sender = "lw@example.org"\nusername = "lw"\npassword_file = "/etc/leasewise/smtp"\n'
                    'domain = "users.example.org"\ntimeout = "5s"\n'
                    '[notify.command]\nargv = ["/bin/logger", "-t", "leasewise"]\ntimeout = 00:01:00\n')
    notify = load_config(path).notify
    assert notify.before_end == (timedelta(hours=2), timedelta(minutes=10), timedelta(seconds=90))   # latest first
    assert notify.at_end is False and notify.notifiers == ("email", "command") and notify.enabled
    assert notify.email == EmailConfig(smtp_host="mail.example.org", smtp_port=587, sender="lw@example.org",
                                       starttls=True, username="lw", password_file="/etc/leasewise/smtp",
                                       domain="users.example.org", timeout=timedelta(seconds=5))
    assert notify.command == CommandConfig(argv=("/bin/logger", "-t", "leasewise"), timeout=timedelta(minutes=1))


def test_a_users_address_is_at_the_domain_else_the_senders():
    assert EmailConfig(sender="lw@lab.example.org").address_of("alice") == "alice@lab.example.org"
    assert EmailConfig(sender="lw@lab.example.org", domain="example.org").address_of("bob") == "bob@example.org"
    assert EmailConfig().address_of("") is None


@pytest.mark.parametrize("offset, label", [(timedelta(hours=1), "1h"), (timedelta(minutes=10), "10m"),
                                           (timedelta(minutes=90), "1h30m"), (timedelta(seconds=45), "45s"),
                                           (timedelta(days=2, seconds=1), "48h1s")])
def test_offset_labels_are_the_notice_keys(offset, label):
    assert offset_label(offset) == label


@pytest.mark.parametrize("data, key, words", [
    ({"notify": {"notifiers": ["mail"]}}, "notify.notifiers", ['"email", "command"', "did you mean 'email'"]),
    ({"notify": {"notifiers": "email"}}, "notify.notifiers", ["array of names"]),
    ({"notify": {"notifiers": ["email", "email"]}}, "notify.notifiers", ["twice"]),
    ({"notify": {"before_end": ["1h", "60m"]}}, "notify.before_end", ["1h twice"]),
    ({"notify": {"before_end": ["0s"]}}, "notify.before_end", ["at least 1 s"]),
    ({"notify": {"before_end": ["1.5s"]}}, "notify.before_end", ["whole seconds"]),
    ({"notify": {"before_end": ["-5m"]}}, "notify.before_end", ["negative"]),
    ({"notify": {"before_end": ["31d"]}}, "notify.before_end", ["30 days"]),
    ({"notify": {"before_end": "1h"}}, "notify.before_end", ["array of durations"]),
    ({"notify": {"at_end": "yes"}}, "notify.at_end", ["true or false"]),
    ({"notify": {"email": 3}}, "notify.email", ["[notify.email]"]),
    ({"notify": {"email": {"smpt_host": "x"}}}, "notify.email.smpt_host", ["did you mean smtp_host"]),
    ({"notify": {"email": {"smtp_port": 70000}}}, "notify.email.smtp_port", ["65535"]),
    ({"notify": {"email": {"sender": "leasewise"}}}, "notify.email.sender", ["address"]),
    ({"notify": {"email": {"username": "lw"}}}, "notify.email.password_file", ["is needed too"]),
    ({"notify": {"email": {"password_file": "/etc/pw"}}}, "notify.email.username", ["is needed too"]),
    ({"notify": {"email": {"username": "lw", "password_file": "pw"}}}, "notify.email.password_file", ["absolute"]),
    ({"notify": {"email": {"domain": "a@b"}}}, "notify.email.domain", ["mail domain"]),
    ({"notify": {"email": {"timeout": "0s"}}}, "notify.email.timeout", ["more than 0 s"]),
    ({"notify": {"command": {"argv": []}}}, "notify.command.argv", ["non-empty array"]),
    ({"notify": {"command": {"argv": "/bin/true"}}}, "notify.command.argv", ["non-empty array"]),
    ({"notify": {"command": {"argv": ["notify-lease"]}}}, "notify.command.argv", ["absolute path"]),
    ({"notify": {"command": {"argv": ["/bin/x", ""]}}}, "notify.command.argv", ["non-empty strings"]),
    ({"notify": {"command": {"timeout": "1h"}}}, "notify.command.timeout", ["10 minutes"]),
    ({"notify": {"sendmail": {}}}, "notify.sendmail", ["unknown key"]),
])
def test_bad_values_name_their_dotted_key(data, key, words):
    error = error_of(data)
    assert error.field == key, str(error)
    for word in words:
        assert word in str(error)


def test_the_dataclasses_check_themselves_as_the_file_does():
    with pytest.raises(ConfigError, match="notify.notifiers"):
        NotifyConfig(notifiers=("pager",))
    with pytest.raises(ConfigError, match="notify.email"):
        NotifyConfig(email={"smtp_host": "x"})
