"""The cloud-init NoCloud seed that makes a VM someone can log in to: its name, the person's ssh keys and
their own #cloud-config, on a small ISO the guest reads at first boot.

NoCloud takes `meta-data` and `user-data` from a filesystem labelled `cidata`. The image is built in
Python (pycdlib), so hosts need no genisoimage or cloud-localds, and every date in it is fixed, so a
retried start writes the very same volume. Bad input is refused here, one error naming the field, before
anything reaches a host.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone

import pycdlib
import yaml
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from .iso_dates import pin_iso_dates

SEED_LABEL = "cidata"
#: the date every timestamp in a seed image carries (any fixed instant would do)
SEED_DATE = datetime(2000, 1, 1, tzinfo=timezone.utc)
CLOUD_CONFIG_HEADER = "#cloud-config"

#: accepted key types, and the fields (after the type) each one's base64 body holds in SSH wire format
_KEY_FIELDS = {
    "ssh-ed25519": ("public key",),
    "ssh-rsa": ("exponent", "modulus"),
    "ecdsa-sha2-nistp256": ("curve", "point"),
    "ecdsa-sha2-nistp384": ("curve", "point"),
    "ecdsa-sha2-nistp521": ("curve", "point"),
    "sk-ssh-ed25519@openssh.com": ("public key", "application"),
    "sk-ecdsa-sha2-nistp256@openssh.com": ("curve", "point", "application"),
}
KEY_TYPES = tuple(_KEY_FIELDS)

_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")   # what Debian's adduser accepts, without the trailing $


@dataclass(frozen=True)
class SeedSpec:
    """What one VM's seed says: who it is, who may log in, and the person's own cloud-config.

    `ssh_keys` are stored normalised (see `read_ssh_public_key`). `login_user` renames the image's default
    user (the one the keys go to); with your own `user_data`, name the user there instead.
    """

    instance_id: str
    hostname: str
    ssh_keys: tuple[str, ...] = ()
    user_data: str | None = None
    login_user: str | None = None

    def __post_init__(self) -> None:
        _check_instance_id(self.instance_id)
        _check_hostname(self.hostname)
        if isinstance(self.ssh_keys, str):
            raise ValueError("ssh_keys: must be a list of public key lines, not one string")
        if not isinstance(self.ssh_keys, (tuple, list)):
            raise ValueError(f"ssh_keys: must be a list of public key lines (got {type(self.ssh_keys).__name__})")
        keys = tuple(read_ssh_public_key(key, f"ssh_keys[{i}]") for i, key in enumerate(self.ssh_keys))
        object.__setattr__(self, "ssh_keys", keys)
        if self.user_data is not None:
            parse_user_data(self.user_data, source="user_data")
        if self.login_user is not None:
            _check_login_user(self.login_user)
            if self.user_data is not None:
                raise ValueError("login_user: cannot be combined with user_data (name the user in your "
                                 "#cloud-config, e.g. `user: {name: ...}`)")


def build_seed_iso(spec: SeedSpec) -> bytes:
    """The NoCloud seed image for `spec`: ISO 9660 labelled `cidata`, with Rock Ridge and Joliet so Linux
    shows the lower-case names `meta-data` and `user-data`. Same spec, same bytes."""
    files = (("meta-data", "METADATA.;1", _meta_data(spec)), ("user-data", "USERDATA.;1", _user_data(spec)))
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=1, vol_ident=SEED_LABEL, joliet=3, rock_ridge="1.09")
    out = io.BytesIO()
    try:
        for name, iso_name, text in files:
            data = text.encode("utf-8")
            iso.add_fp(io.BytesIO(data), len(data), iso_path=f"/{iso_name}", rr_name=name, joliet_path=f"/{name}")
        iso.write_fp(out)
    finally:
        iso.close()
    return pin_iso_dates(out.getvalue(), SEED_DATE)


def _meta_data(spec: SeedSpec) -> str:
    """meta-data: the instance id (a new one makes cloud-init run its once-per-instance modules again), the
    hostname, and the ssh keys as `public-keys`.

    Not also user-data's `ssh_authorized_keys`: cloud-init's cc_ssh module (cloudinit/config/cc_ssh.py)
    already gives the default user the datasource's public keys -- `DataSource.get_public_ssh_keys` in
    cloudinit/sources/__init__.py reads meta-data `public-keys`, and NoCloud does not override it -- unless
    the cloud-config says `allow_public_ssh_keys: false` (there since 2019, so in Debian 12's 22.4). So the
    person's user-data passes through untouched and keeps the last word, and no key is listed twice.
    """
    meta: dict[str, object] = {"instance-id": spec.instance_id, "local-hostname": spec.hostname}
    if spec.ssh_keys:
        meta["public-keys"] = list(spec.ssh_keys)
    return yaml.safe_dump(meta, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 30)


def _user_data(spec: SeedSpec) -> str:
    """The person's user-data as given; else a cloud-config that only renames the default user when asked
    (`user:` sets the name and keeps the image's groups, sudo and shell for it)."""
    if spec.user_data is not None:
        return spec.user_data
    text = f"{CLOUD_CONFIG_HEADER}\n# leasewise: the ssh keys are in meta-data (public-keys)\n"
    if spec.login_user is not None:
        text += yaml.safe_dump({"user": {"name": spec.login_user}}, default_flow_style=False)
    return text


class DuplicateKey(yaml.constructor.ConstructorError):
    """A key given twice in one YAML mapping: `key`, and the lines (1-based) of its first and second use."""

    def __init__(self, key: object, first_line: int, mark: yaml.Mark):
        self.key = key
        self.first_line = first_line
        self.line = mark.line + 1
        super().__init__(None, None, f"duplicate key {key!r} (first given on line {first_line})", mark)


class NoDuplicateKeysLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error (`DuplicateKey`;
    PyYAML keeps the last silently, cloud-init too, so a second `packages:` would quietly drop the first).
    The lease file reader uses it too."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[object, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":   # `<<:` merges may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:                                 # unhashable: the base class reports it
                    continue
                if first is not key_node.start_mark:
                    raise DuplicateKey(key, first.line + 1, key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def parse_user_data(text: str, source: str = "user-data") -> str:
    """`text` if it is a #cloud-config document cloud-init will take as meant: the header line, then YAML
    (safe, no duplicate keys) that is a mapping or empty. Raises ValueError("<source>: ...")."""
    if not isinstance(text, str):
        raise ValueError(f"{source}: must be text (got {type(text).__name__})")
    body = text.removeprefix("\ufeff")
    first = body.split("\n", 1)[0].rstrip(" \t\r")
    if first != CLOUD_CONFIG_HEADER:   # (what the line holds is not quoted: the file may be anyone's secret)
        raise ValueError(f"{source}: the first line must be {CLOUD_CONFIG_HEADER!r}; leasewise takes cloud-config "
                         "only")
    try:
        document = yaml.load(body, Loader=NoDuplicateKeysLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        context = f" ({exc.context})" if exc.context else ""
        raise ValueError(f"{source}: {where}{exc.problem}{context}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not valid YAML: {exc}") from None
    if document is not None and not isinstance(document, dict):
        raise ValueError(f"{source}: must be a mapping of cloud-config keys (got a YAML "
                         f"{_yaml_kind(document)})")
    return text


def _yaml_kind(value: object) -> str:
    """What a YAML reader would call `value`'s type, for an error message."""
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__)


def read_ssh_public_key(text: str, source: str) -> str:
    """One OpenSSH public key line (`type base64 [comment]`), checked down to the fields its body holds,
    returned as `type base64 comment` with single spaces. A private key is refused by name."""
    if not isinstance(text, str):
        raise ValueError(f"{source}: must be a public key line (got {type(text).__name__})")
    if "PRIVATE KEY" in text:
        raise ValueError(f"{source}: this is a private key; give the public one (the .pub file next to it)")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise ValueError(f"{source}: expected one public key line (found {len(lines)})")
    parts = lines[0].split(None, 2)
    key_type = parts[0]
    if key_type not in _KEY_FIELDS:
        raise ValueError(f"{source}: unknown key type {key_type[:40]!r} (accepted: {', '.join(KEY_TYPES)})")
    if len(parts) < 2:
        raise ValueError(f"{source}: the key has a type but no base64 body")
    body = parts[1]
    try:
        blob = base64.b64decode(body, validate=True)
    except binascii.Error:
        raise ValueError(f"{source}: the key body is not valid base64") from None
    if base64.b64encode(blob).decode("ascii") != body:
        raise ValueError(f"{source}: the key body is not valid base64 (not in canonical form)")
    problem = _key_blob_problem(key_type, blob) or _key_value_problem(key_type, body)
    if problem:
        raise ValueError(f"{source}: {problem}")
    comment = parts[2] if len(parts) == 3 else ""
    if not _one_line(comment):
        raise ValueError(f"{source}: the key comment holds control characters")
    return " ".join(part for part in (key_type, body, comment) if part)


def _key_blob_problem(key_type: str, blob: bytes) -> str | None:
    """Why `blob` is not a `key_type` public key in SSH wire format, or None."""
    fields: list[bytes] = []
    at = 0
    while at < len(blob):
        if at + 4 > len(blob):
            return "the key body is truncated (a field length is cut short)"
        (length,) = struct.unpack_from(">I", blob, at)
        if at + 4 + length > len(blob):
            return "the key body is truncated (a field is shorter than its length says)"
        fields.append(blob[at + 4:at + 4 + length])
        at += 4 + length
    if not fields:
        return "the key body is empty"
    embedded = fields[0].decode("ascii", "replace")
    if embedded != key_type:
        return f"the key says {key_type!r} but its body holds a {embedded[:40]!r} key"
    expected = _KEY_FIELDS[key_type]
    if len(fields) - 1 != len(expected):
        return (f"a {key_type} key body holds {len(expected) + 1} fields (type, {', '.join(expected)}); "
                f"this one has {len(fields)}")
    named = dict(zip(expected, fields[1:]))
    if "public key" in named and len(named["public key"]) != 32:
        return f"an ed25519 public key is 32 bytes (got {len(named['public key'])})"
    if "curve" in named:
        curve = key_type.removeprefix("sk-").split("@")[0].rsplit("-", 1)[1]
        if named["curve"] != curve.encode():
            return f"a {key_type} key is on curve {curve} (its body says {named['curve'][:20]!r})"
    return None


def _key_value_problem(key_type: str, body: str) -> str | None:
    """Why the key's numbers are no public key (an RSA modulus too small, an ECDSA point off its curve),
    as cryptography's OpenSSH key loader finds them; None for a key it loads, or a security key's (`sk-`),
    which it does not read."""
    if key_type.startswith("sk-"):
        return None
    try:
        load_ssh_public_key(f"{key_type} {body}".encode("ascii"))
    except (ValueError, UnsupportedAlgorithm) as exc:
        return f"not a valid {key_type} public key ({str(exc).rstrip('.') or type(exc).__name__})"
    return None


def seed_volume_name(vm: str) -> str:
    """The libvirt volume holding `vm`'s cloud-init seed."""
    return f"{vm}-seed.iso"


def overlay_volume_name(vm: str) -> str:
    """The libvirt volume holding `vm`'s disk: a qcow2 overlay on the base image."""
    return f"{vm}.qcow2"


def _check_instance_id(value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError("instance_id: must be a non-empty string")
    if not _one_line(value):
        raise ValueError(f"instance_id: must be one line without control characters (got {value[:40]!r})")


def _one_line(text: str) -> bool:
    """No control characters, no line or paragraph separators (which Python and YAML take as line breaks),
    no format characters (bidi overrides) and no lone surrogates."""
    return text.isprintable() or not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in text)


def _check_hostname(value: object) -> None:
    """RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens, 1-63 characters each,
    253 in all; the last label not all digits (cloud-init would take 10.0.0.1 for an address)."""
    if not isinstance(value, str) or not value:
        raise ValueError("hostname: must be a non-empty string")
    if len(value) > 253:
        raise ValueError(f"hostname: at most 253 characters (got {len(value)})")
    labels = value.split(".")
    for label in labels:
        if not label:
            raise ValueError(f"hostname: {value!r} has an empty label (a leading, trailing or double dot)")
        if len(label) > 63:
            raise ValueError(f"hostname: the label {label[:20]!r}... is {len(label)} characters (at most 63)")
        if not _LABEL.fullmatch(label):
            raise ValueError(f"hostname: the label {label!r} may hold only letters, digits and hyphens, "
                             "and must not start or end with a hyphen")
    if labels[-1].isdigit():
        raise ValueError(f"hostname: {value!r} ends in an all-digit label (it reads as an IP address)")


def _check_login_user(value: object) -> None:
    if not isinstance(value, str) or not _USER_NAME.fullmatch(value):
        raise ValueError(f"login_user: {value!r} is not a user name (lower-case letters, digits, '_' and '-', "
                         "starting with a letter or '_', at most 32)")
    if value == "root":
        raise ValueError("login_user: root cannot be the login user (cloud-init turns away ssh logins as root)")
