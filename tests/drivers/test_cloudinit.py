"""drivers/cloudinit.py: the NoCloud seed reads back, from pycdlib and from Linux's own tools, as what
cloud-init looks for; the same spec gives the same bytes; every bad field is refused by name."""

import base64
import io
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pycdlib
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers.cloudinit import (
    KEY_TYPES,
    SeedSpec,
    build_seed_iso,
    overlay_volume_name,
    parse_user_data,
    read_ssh_public_key,
    seed_volume_name,
)

ROOT = Path(__file__).resolve().parents[2]
USER_DATA = "#cloud-config\npackages: [htop]\nruncmd:\n  - [touch, /tmp/ready]\n"


def ssh_blob(*fields: bytes) -> str:
    """An OpenSSH public key body: the fields in SSH wire format (length-prefixed), base64."""
    return base64.b64encode(b"".join(struct.pack(">I", len(f)) + f for f in fields)).decode()


def sk_keys() -> dict[str, str]:
    """Security-key public keys (ssh-keygen needs the hardware token to make them), built field by field."""
    return {
        "sk-ssh-ed25519@openssh.com": "sk-ssh-ed25519@openssh.com "
        + ssh_blob(b"sk-ssh-ed25519@openssh.com", bytes(range(32)), b"ssh:") + " token",
        "sk-ecdsa-sha2-nistp256@openssh.com": "sk-ecdsa-sha2-nistp256@openssh.com "
        + ssh_blob(b"sk-ecdsa-sha2-nistp256@openssh.com", b"nistp256", b"\x04" + bytes(64), b"ssh:") + " token",
    }


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, str]:
    """A public key of every accepted type (ssh-keygen makes the ones it can), and one private key."""
    ssh_keygen = shutil.which("ssh-keygen")
    assert ssh_keygen, "ssh-keygen (openssh-client, see deploy/install.sh) is needed to make the test keys"
    folder = tmp_path_factory.mktemp("keys")
    made = {}
    for key_type, args in (("ssh-ed25519", ["-t", "ed25519"]), ("ssh-rsa", ["-t", "rsa", "-b", "2048"]),
                           ("ecdsa-sha2-nistp256", ["-t", "ecdsa", "-b", "256"]),
                           ("ecdsa-sha2-nistp384", ["-t", "ecdsa", "-b", "384"]),
                           ("ecdsa-sha2-nistp521", ["-t", "ecdsa", "-b", "521"])):
        path = folder / key_type
        subprocess.run([ssh_keygen, "-q", "-N", "", "-C", f"me@{key_type}", "-f", str(path), *args], check=True)
        made[key_type] = path.with_suffix(".pub").read_text()
        made["private"] = path.read_text()
    return {**made, **sk_keys()}


def read_iso(image: bytes) -> dict:
    """What pycdlib reads back: the volume label, and each file by its Rock Ridge and its Joliet name."""
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(image))
    try:
        found = {"label": iso.pvd.volume_identifier.decode().rstrip(), "rr": {}, "joliet": {}}
        for view, path_kind in (("rr", "rr_path"), ("joliet", "joliet_path")):
            for child in iso.list_children(**{path_kind: "/"}):
                if child.is_dot() or child.is_dotdot():
                    continue
                name = child.rock_ridge.name().decode() if view == "rr" else child.file_identifier().decode("utf-16_be")
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, **{path_kind: f"/{name}"})
                found[view][name] = out.getvalue()
        return found
    finally:
        iso.close()


def spec(**changes) -> SeedSpec:
    return SeedSpec(**{"instance_id": "lease-42", "hostname": "vm-42.lab", **changes})


# --- the image ------------------------------------------------------------------------------------------

def test_the_seed_is_labelled_cidata_and_holds_meta_data_and_user_data(keys):
    image = build_seed_iso(spec(ssh_keys=(keys["ssh-ed25519"], keys["ssh-rsa"]), user_data=USER_DATA))
    found = read_iso(image)
    assert found["label"] == "cidata"
    assert set(found["rr"]) == set(found["joliet"]) == {"meta-data", "user-data"}
    assert found["rr"] == found["joliet"]
    assert found["rr"]["user-data"] == USER_DATA.encode()
    assert yaml.safe_load(found["rr"]["meta-data"]) == {
        "instance-id": "lease-42", "local-hostname": "vm-42.lab",
        "public-keys": [keys["ssh-ed25519"].strip(), keys["ssh-rsa"].strip()]}


def linux_reads(image_path: Path, tmp_path: Path) -> tuple[str, dict[str, bytes]]:
    """The file names and contents Linux shows: mounted (loop, read-only) where the kernel can, else as
    isoinfo (genisoimage) reads the Rock Ridge names. Fails, never skips, when neither works."""
    mount_error = "not root"
    if os.geteuid() == 0:
        mountpoint = tmp_path / "mnt"
        mountpoint.mkdir()
        mounted = subprocess.run(["mount", "-o", "loop,ro", str(image_path), str(mountpoint)],
                                 capture_output=True, text=True)
        if mounted.returncode == 0:
            try:
                return "mount", {p.name: p.read_bytes() for p in mountpoint.iterdir()}
            finally:
                subprocess.run(["umount", str(mountpoint)], check=True)
        mount_error = mounted.stderr.strip()
    isoinfo = shutil.which("isoinfo")
    assert isoinfo, f"no reader for the ISO: mount failed ({mount_error}) and isoinfo (genisoimage) is missing"
    listing = subprocess.run([isoinfo, "-R", "-f", "-i", str(image_path)], capture_output=True, text=True,
                             check=True).stdout.split()
    return "isoinfo", {name.lstrip("/"): subprocess.run([isoinfo, "-R", "-x", name, "-i", str(image_path)],
                                                        capture_output=True, check=True).stdout
                       for name in listing}


def test_linux_sees_the_lower_case_names_cloud_init_reads(tmp_path, keys):
    path = tmp_path / seed_volume_name("vm-42")
    path.write_bytes(build_seed_iso(spec(ssh_keys=(keys["ssh-ed25519"],))))
    reader, files = linux_reads(path, tmp_path)
    assert set(files) == {"meta-data", "user-data"}, reader
    assert yaml.safe_load(files["meta-data"])["public-keys"] == [keys["ssh-ed25519"].strip()], reader
    assert files["user-data"].startswith(b"#cloud-config\n"), reader


def test_blkid_finds_the_label_and_type_cloud_init_looks_for(tmp_path):
    # NoCloud lists devices with blkid: TYPE=iso9660 (or vfat) and LABEL=cidata (or CIDATA).
    blkid = shutil.which("blkid") or "/usr/sbin/blkid"
    assert Path(blkid).exists(), "blkid (util-linux) is needed"
    path = tmp_path / "seed.iso"
    path.write_bytes(build_seed_iso(spec()))
    probe = subprocess.run([blkid, "-p", "-o", "export", str(path)], capture_output=True, text=True, check=True)
    fields = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    assert (fields["TYPE"], fields["LABEL"]) == ("iso9660", "cidata")


def test_without_keys_meta_data_names_the_instance_and_host_only():
    meta = yaml.safe_load(read_iso(build_seed_iso(spec()))["rr"]["meta-data"])
    assert meta == {"instance-id": "lease-42", "local-hostname": "vm-42.lab"}


def test_an_instance_id_that_looks_like_a_number_stays_text():
    meta = yaml.safe_load(read_iso(build_seed_iso(spec(instance_id="0042")))["rr"]["meta-data"])
    assert meta["instance-id"] == "0042"


def test_the_default_user_data_is_cloud_config_that_sets_nothing():
    text = read_iso(build_seed_iso(spec()))["rr"]["user-data"].decode()
    assert parse_user_data(text) == text
    assert yaml.safe_load(text) is None


def test_login_user_renames_the_default_user():
    text = read_iso(build_seed_iso(spec(login_user="alice")))["rr"]["user-data"].decode()
    assert parse_user_data(text) == text
    assert yaml.safe_load(text) == {"user": {"name": "alice"}}


def test_the_persons_user_data_passes_through_byte_for_byte():
    text = "\ufeff#cloud-config  \r\n# a comment\r\nwrite_files:\r\n- path: /etc/motd\r\n  content: hé\r\n"
    assert read_iso(build_seed_iso(spec(user_data=text)))["rr"]["user-data"] == text.encode()


def test_the_same_spec_gives_the_same_bytes_at_any_time_in_any_time_zone(keys):
    the_spec = spec(ssh_keys=(keys["ssh-ed25519"],), user_data=USER_DATA)
    image = build_seed_iso(the_spec)
    assert build_seed_iso(the_spec) == image
    # Every date an unpinned image holds carries the local offset from UTC: another zone would show it.
    program = ("import sys; from drivers.cloudinit import SeedSpec, build_seed_iso; "
               "spec = SeedSpec('lease-42', 'vm-42.lab', (sys.argv[1],), sys.argv[2]); "
               "sys.stdout.buffer.write(build_seed_iso(spec))")
    elsewhere = subprocess.run([sys.executable, "-c", program, keys["ssh-ed25519"], USER_DATA], capture_output=True,
                               check=True, env={**os.environ, "TZ": "Pacific/Chatham", "PYTHONPATH": str(ROOT)}).stdout
    assert elsewhere == image
    assert build_seed_iso(spec(ssh_keys=(keys["ssh-ed25519"],), user_data=USER_DATA, hostname="vm-43")) != image


def test_volume_names():
    assert seed_volume_name("vm-42") == "vm-42-seed.iso"
    assert overlay_volume_name("vm-42") == "vm-42.qcow2"


# --- ssh keys -------------------------------------------------------------------------------------------

def test_every_accepted_key_type_is_read_and_normalised(keys):
    assert set(KEY_TYPES) <= set(keys)
    for key_type in KEY_TYPES:
        key_type_, body, comment = keys[key_type].split(None, 2)
        messy = f"  {key_type_}\t{body}   {comment.strip()}\r\n\n"
        assert read_ssh_public_key(messy, "k") == f"{key_type_} {body} {comment.strip()}"
    assert read_ssh_public_key(keys["ssh-ed25519"].split()[0] + " " + keys["ssh-ed25519"].split()[1], "k") \
        == " ".join(keys["ssh-ed25519"].split()[:2])


def test_a_comment_with_spaces_is_kept():
    line = "ssh-ed25519 " + ssh_blob(b"ssh-ed25519", bytes(32)) + " Ada Lovelace (laptop)"
    assert read_ssh_public_key(line, "k") == line


@pytest.mark.parametrize("make_text, message", [
    (lambda k: k["private"], "~/.ssh/id: this is a private key"),
    (lambda k: k["ssh-ed25519"] + k["ssh-rsa"], "expected one public key line (found 2)"),
    (lambda k: "", "expected one public key line (found 0)"),
    (lambda k: "ssh-dss " + ssh_blob(b"ssh-dss", b"p", b"q", b"g", b"y"), "unknown key type 'ssh-dss'"),
    (lambda k: 'from="10.0.0.1" ' + k["ssh-ed25519"], "unknown key type"),
    (lambda k: "ssh-ed25519", "no base64 body"),
    (lambda k: k["ssh-ed25519"].replace("AAAA", "AA*A", 1), "not valid base64"),
    (lambda k: k["ssh-ed25519"].split()[0] + " " + k["ssh-ed25519"].split()[1][:-3], "not valid base64"),
    (lambda k: "ssh-rsa " + k["ssh-ed25519"].split()[1],
     "the key says 'ssh-rsa' but its body holds a 'ssh-ed25519' key"),
    (lambda k: "ssh-ed25519 " + ssh_blob(b"ssh-ed25519", bytes(31)), "an ed25519 public key is 32 bytes (got 31)"),
    (lambda k: "ssh-ed25519 " + ssh_blob(b"ssh-ed25519"), "holds 2 fields (type, public key); this one has 1"),
    (lambda k: "ssh-rsa " + base64.b64encode(base64.b64decode(k["ssh-rsa"].split()[1])[:-20]).decode(), "truncated"),
    (lambda k: "ecdsa-sha2-nistp384 " + ssh_blob(b"ecdsa-sha2-nistp384", b"nistp256", b"\x04" + bytes(64)),
     "is on curve nistp384"),
    (lambda k: k["ssh-ed25519"].strip() + " bell\x07", "control characters"),
    (lambda k: None, "must be a public key line"),
])
def test_bad_keys_are_refused_naming_the_source(keys, make_text, message):
    with pytest.raises(ValueError) as caught:
        read_ssh_public_key(make_text(keys), "~/.ssh/id")
    assert str(caught.value).startswith("~/.ssh/id: ")
    assert message in str(caught.value)


# --- user-data ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "#cloud-config\n",
    "#cloud-config",
    "\ufeff#cloud-config \t\nhostname: x\n",
    "#cloud-config\r\nhostname: x\r\n",
    "#cloud-config\nbase: &b {a: 1}\nmore:\n  <<: *b\n  a: 2\n",      # a merge may be overridden
    "#cloud-config\nusers:\n  - name: a\n  - name: a\n",              # the same value twice in a list is fine
])
def test_cloud_config_is_accepted_as_given(text):
    assert parse_user_data(text) == text


@pytest.mark.parametrize("text, message", [
    ("#!/bin/sh\necho hi\n", "the first line must be '#cloud-config'; leasewise takes cloud-config only"),
    ("## template: jinja\n#cloud-config\n", "the first line must be '#cloud-config'"),
    ("#cloud-config-archive\n- a\n", "the first line must be '#cloud-config'"),
    (" #cloud-config\n", "the first line must be '#cloud-config'"),
    ("hostname: x\n", "the first line must be '#cloud-config'"),
    ("#cloud-config\nhostname: x\nruncmd: [a, b\npackages: []\n", "line 4: "),
    ("#cloud-config\nhostname: x\n  bad: indent\n", "line 3: mapping values are not allowed here"),
    ("#cloud-config\nhostname: a\npackages: []\nhostname: b\n",
     "line 4: duplicate key 'hostname' (first given on line 2)"),
    ("#cloud-config\nuser:\n  name: a\n  name: b\n", "line 4: duplicate key 'name' (first given on line 3)"),
    ("#cloud-config\n- packages\n", "must be a mapping of cloud-config keys (got a YAML list)"),
    ("#cloud-config\njust text\n", "got a YAML string"),
    ("#cloud-config\n!!python/object:os.system {}\n", "line 2: "),
])
def test_bad_user_data_is_refused_naming_the_problem(text, message):
    with pytest.raises(ValueError) as caught:
        parse_user_data(text)
    assert str(caught.value).startswith("user-data: ")
    assert message in str(caught.value)


def test_the_duplicate_key_check_leaves_pyyaml_itself_alone():
    with pytest.raises(ValueError, match="duplicate key"):
        parse_user_data("#cloud-config\na: 1\na: 2\n")
    assert yaml.safe_load("a: 1\na: 2\n") == {"a": 2}


# --- the spec -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, message", [
    ({"hostname": "web_1"}, "hostname: the label 'web_1' may hold only letters, digits and hyphens"),
    ({"hostname": "-web"}, "must not start or end with a hyphen"),
    ({"hostname": "web-.lab"}, "must not start or end with a hyphen"),
    ({"hostname": "a" * 64}, "hostname: the label 'aaaaaaaaaaaaaaaaaaaa'... is 64 characters (at most 63)"),
    ({"hostname": ".".join(["a" * 63] * 4)}, "hostname: at most 253 characters (got 255)"),
    ({"hostname": "vm.lab."}, "hostname: 'vm.lab.' has an empty label"),
    ({"hostname": ""}, "hostname: must be a non-empty string"),
    ({"hostname": "10.0.0.1"}, "ends in an all-digit label"),
    ({"hostname": "vm 1"}, "may hold only letters"),
    ({"instance_id": ""}, "instance_id: must be a non-empty string"),
    ({"instance_id": "lease\n42"}, "instance_id: must be one line without control characters"),
    ({"instance_id": "lease\u202842"}, "instance_id: must be one line without control characters"),
    ({"instance_id": 42}, "instance_id: must be a non-empty string"),
    ({"ssh_keys": "ssh-ed25519 AAAA"}, "ssh_keys: must be a list of public key lines, not one string"),
    ({"ssh_keys": ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n",)},
     "ssh_keys[0]: this is a private key"),
    ({"ssh_keys": ("ssh-ed25519 " + ssh_blob(b"ssh-ed25519", bytes(32)), "ssh-ed25519 AAAA!")},
     "ssh_keys[1]: the key body is not valid base64"),
    ({"ssh_keys": ("ssh-rsa " + ssh_blob(b"ssh-ed25519", bytes(32)),)}, "ssh_keys[0]: the key says 'ssh-rsa'"),
    ({"user_data": "packages: [htop]\n"}, "user_data: the first line must be '#cloud-config'"),
    ({"user_data": "#cloud-config\na: 1\na: 2\n"}, "user_data: line 3: duplicate key 'a'"),
    ({"user_data": "#cloud-config\n- a\n"}, "user_data: must be a mapping"),
    ({"login_user": "root"}, "login_user: root cannot be the login user"),
    ({"login_user": "Alice"}, "login_user: 'Alice' is not a user name"),
    ({"login_user": "a" * 33}, "is not a user name"),
    ({"login_user": "alice", "user_data": "#cloud-config\n"}, "login_user: cannot be combined with user_data"),
])
def test_each_bad_field_is_refused_by_name(changes, message):
    with pytest.raises(ValueError) as caught:
        spec(**changes)
    assert message in str(caught.value)


def test_keys_are_kept_normalised_and_a_list_becomes_a_tuple(keys):
    the_spec = spec(ssh_keys=[keys["ssh-ed25519"] + "\n"])
    assert the_spec.ssh_keys == (keys["ssh-ed25519"].strip(),)
    assert hash(the_spec) == hash(spec(ssh_keys=(keys["ssh-ed25519"].strip(),)))


# --- any valid spec round-trips -------------------------------------------------------------------------

labels = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", fullmatch=True)
hostnames = st.lists(labels, min_size=1, max_size=4).map(".".join).filter(
    lambda name: len(name) <= 253 and not name.rsplit(".", 1)[-1].isdigit())
# a comment may hold spaces; a line or paragraph separator would make the key two lines, and a format
# character (a bidi override) is refused as a control character is
comments = st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), max_size=20).map(str.strip)


def key_line(key_type: str, fields: tuple[bytes, ...], comment: str) -> str:
    return f"{key_type} {ssh_blob(key_type.encode(), *fields)} {comment}".strip()


def public_line(private, comment: str) -> str:
    """A real public key's OpenSSH line (its numbers are a key: the loader checks them), with `comment`."""
    from cryptography.hazmat.primitives import serialization

    text = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{text.decode()} {comment}".strip()


def _rsa_keys():
    from cryptography.hazmat.primitives.asymmetric import rsa

    return [rsa.generate_private_key(public_exponent=65537, key_size=1024) for _ in range(2)]


def _ed25519(seed: bytes):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(seed)


def _p384(scalar: int):
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.derive_private_key(scalar, ec.SECP384R1())


ssh_keys = st.one_of(
    st.builds(lambda seed, c: public_line(_ed25519(seed), c), st.binary(min_size=32, max_size=32), comments),
    st.builds(public_line, st.sampled_from(_rsa_keys()), comments),
    st.builds(lambda k, c: public_line(_p384(k), c), st.integers(min_value=1, max_value=2**383), comments),
)
scalars = st.one_of(st.text(max_size=30), st.integers(), st.booleans(), st.none())
configs = st.dictionaries(st.text(min_size=1, max_size=12), st.one_of(scalars, st.lists(scalars, max_size=4)),
                          max_size=6)
instance_ids = st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostname=hostnames, instance_id=instance_ids, keys=st.lists(ssh_keys, max_size=3),
       config=st.one_of(st.none(), configs))
def test_any_valid_spec_round_trips_through_the_image(hostname, instance_id, keys, config):
    user_data = None if config is None else "#cloud-config\n" + yaml.safe_dump(config, allow_unicode=True)
    found = read_iso(build_seed_iso(SeedSpec(instance_id, hostname, tuple(keys), user_data)))
    assert found["rr"] == found["joliet"]
    meta = yaml.safe_load(found["rr"]["meta-data"])
    assert meta.pop("instance-id") == instance_id
    assert meta.pop("local-hostname") == hostname
    assert meta.pop("public-keys", []) == keys
    assert meta == {}
    user = found["rr"]["user-data"].decode()
    assert parse_user_data(user) == user
    if user_data is not None:   # byte for byte: PyYAML's own dump and load do not round-trip every text (U+0085)
        assert user == user_data
