"""deploy/systemd: the unit runs `leasewise serve` as the service user with its directories and hardening,
systemd itself accepts it (systemd-analyze verify, where systemd is installed), and the sysusers and
tmpfiles snippets make the user, its groups and /etc/leasewise."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.logs import parse_level

ROOT = Path(__file__).resolve().parents[1]
SYSTEMD = ROOT / "deploy" / "systemd"
UNIT = SYSTEMD / "leasewise.service"


def unit() -> configparser.ConfigParser:
    """The unit file as sections of keys (systemd's syntax is INI; a key given twice keeps the last)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",),
                                       comment_prefixes=("#", ";"))
    parser.optionxform = str   # systemd's keys are case-sensitive
    parser.read_string(UNIT.read_text(), source=str(UNIT))
    return parser


def test_the_unit_runs_serve_as_the_service_user():
    service = unit()["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].startswith("/") and Path(argv[0]).name == "leasewise"
    assert argv[1] == "serve"
    options = dict(zip(argv[2::2], argv[3::2]))
    assert options == {"--config": "/etc/leasewise/config.toml", "--log-level": "info"}
    parse_level(options["--log-level"])   # a level `configure_logging` takes
    assert (service["User"], service["Group"]) == ("leasewise", "leasewise")
    assert "libvirt" in service["SupplementaryGroups"].split()
    assert (service["Restart"], service["RestartSec"]) == ("on-failure", "5")
    assert service["RuntimeDirectory"] == "leasewise"          # /run/leasewise/api.sock
    assert service["StateDirectory"] == "leasewise"
    assert "XDG_DATA_HOME=/var/lib" in shlex.split(service["Environment"])   # the store in the state directory
    assert unit()["Install"]["WantedBy"] == "multi-user.target"


def test_the_unit_is_hardened_without_losing_libvirt_or_ssh():
    service = unit()["Service"]
    assert service["NoNewPrivileges"] == "yes" and service["PrivateTmp"] == "yes"
    assert service["ProtectSystem"] == "strict" and "/var/lib/leasewise" in service["ReadWritePaths"].split()
    families = set(service["RestrictAddressFamilies"].split())
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= families        # libvirtd's socket, qemu+tcp/tls, ssh, SMTP
    assert "PrivateNetwork" not in service and "IPAddressDeny" not in service
    assert service["CapabilityBoundingSet"] == ""                 # a plain user: no capability at all


def test_the_unit_gives_the_server_the_files_its_connections_need():
    """LimitNOFILE holds every connection the default caps let in and the files the server needs besides,
    with room to raise the caps (the server refuses to start if its caps do not fit the limit)."""
    from orchestrator.config import ServeConfig
    from orchestrator.service.connections import FILES_BESIDES_CONNECTIONS

    service = unit()["Service"]
    limit = service["LimitNOFILE"]
    assert limit.isdigit(), limit   # (one number: soft and hard alike)
    defaults = ServeConfig()
    needed = defaults.socket_max_connections + defaults.listen_max_connections + FILES_BESIDES_CONNECTIONS
    assert int(limit) >= 16 * needed


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_accepts_the_unit(tmp_path):
    # verify checks that ExecStart's program exists: point it at this Python's leasewise, all else as shipped
    program = shutil.which("leasewise") or str(Path(sys.executable).with_name("leasewise"))
    program = os.path.realpath(program)
    assert os.access(program, os.X_OK), program
    copy = tmp_path / "leasewise.service"
    copy.write_text(UNIT.read_text().replace("/usr/local/bin/leasewise", program))
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(copy)], capture_output=True, text=True,
                            timeout=120)
    said = [line for line in (result.stdout + result.stderr).splitlines() if "leasewise" in line]
    assert result.returncode == 0 and said == [], result.stdout + result.stderr


def test_sysusers_makes_the_user_in_libvirts_group():
    lines = [l.split() for l in (SYSTEMD / "sysusers.conf").read_text().splitlines() if l and not l.startswith("#")]
    assert ["g", "leasewise", "-"] in lines
    assert ["m", "leasewise", "libvirt"] in lines
    [user] = [l for l in lines if l[0] == "u"]
    assert user[1] == "leasewise" and "/var/lib/leasewise" in user and user[-1] == "/usr/sbin/nologin"


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None or os.geteuid() != 0,
                    reason="needs systemd-sysusers and systemd-tmpfiles, as root")
def test_sysusers_and_tmpfiles_make_the_user_and_the_configuration_directory(tmp_path):
    (tmp_path / "etc").mkdir()
    subprocess.run(["systemd-sysusers", f"--root={tmp_path}", str(SYSTEMD / "sysusers.conf")], check=True,
                   capture_output=True, timeout=60)
    groups = {line.split(":")[0]: line.split(":") for line in (tmp_path / "etc" / "group").read_text().splitlines()}
    assert "leasewise" in groups["libvirt"][3].split(",")
    passwd = {line.split(":")[0]: line.split(":") for line in (tmp_path / "etc" / "passwd").read_text().splitlines()}
    assert passwd["leasewise"][5:] == ["/var/lib/leasewise", "/usr/sbin/nologin"]
    subprocess.run(["systemd-tmpfiles", "--create", f"--root={tmp_path}", str(SYSTEMD / "tmpfiles.conf")],
                   check=True, capture_output=True, timeout=60)
    made = (tmp_path / "etc" / "leasewise").stat()
    assert oct(made.st_mode & 0o777) == "0o750" and made.st_uid == 0
    assert made.st_gid == int(groups["leasewise"][2])
