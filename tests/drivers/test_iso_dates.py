"""drivers/iso_dates.py: every date pycdlib writes, found and set to one instant; nothing else touched."""

import io
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pycdlib
import pytest

from drivers.iso_dates import pin_iso_dates

ROOT = Path(__file__).resolve().parents[2]
WHEN = datetime(2001, 2, 3, 4, 5, 6, tzinfo=timezone.utc)

# Builds a small image with pycdlib (a subdirectory, Rock Ridge, Joliet) and writes it, raw, to stdout.
BUILD = """
import io, sys, pycdlib
iso = pycdlib.PyCdlib()
iso.new(interchange_level=1, vol_ident="TEST", joliet=3, rock_ridge="1.09")
iso.add_directory("/SUB", rr_name="sub", joliet_path="/sub")
for path, name in (("/A.;1", "a"), ("/SUB/B.;1", "sub/b")):
    data = name.encode() * 3
    iso.add_fp(io.BytesIO(data), len(data), iso_path=path, rr_name=name.split("/")[-1], joliet_path="/" + name)
out = io.BytesIO()
iso.write_fp(out)
iso.close()
sys.stdout.buffer.write(out.getvalue())
"""


def build_raw(tz: str = "UTC") -> bytes:
    """pycdlib's own image, dated now in time zone `tz` (a process of its own, so TZ takes effect)."""
    env = {**os.environ, "TZ": tz, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", BUILD], env=env, capture_output=True, check=True).stdout


def dates_in(image: bytes) -> set[tuple]:
    """Every date pycdlib reads back: descriptors', directory records' (ISO and Joliet) and Rock Ridge TF."""
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(image))
    try:
        found = set()
        for vd in [iso.pvd, iso.joliet_vd]:
            for date in (vd.volume_creation_date, vd.volume_effective_date):
                found.add(("vd", date.year, date.month, date.dayofmonth, date.hour, date.minute, date.second,
                           date.gmtoffset))
        records = []
        for kind in ("iso_path", "joliet_path"):
            for path in ("/", "/SUB" if kind == "iso_path" else "/sub"):
                records.extend(iso.list_children(**{kind: path}))
        assert len(records) >= 10
        for rec in records:
            d = rec.date
            found.add(("dr", d.years_since_1900 + 1900, d.month, d.day_of_month, d.hour, d.minute, d.second,
                       d.gmtoffset))
            if rec.rock_ridge is not None:
                tf = rec.rock_ridge.dr_entries.tf_record
                for stamp in (tf.access_time, tf.modification_time, tf.attribute_change_time):
                    found.add(("tf", stamp.years_since_1900 + 1900, stamp.month, stamp.day_of_month, stamp.hour,
                               stamp.minute, stamp.second, stamp.gmtoffset))
        return found
    finally:
        iso.close()


def test_every_date_becomes_the_pinned_instant():
    pinned = pin_iso_dates(build_raw(), WHEN)
    moment = (2001, 2, 3, 4, 5, 6, 0)
    assert dates_in(pinned) == {(kind, *moment) for kind in ("vd", "dr", "tf")}


def test_the_same_content_built_in_another_time_zone_gives_the_same_bytes():
    # Every date pycdlib writes carries the local offset from UTC, so one missed date would differ here
    # (Chatham is UTC+12:45 or +13:45).
    here, there = build_raw("UTC"), build_raw("Pacific/Chatham")
    assert here != there
    assert pin_iso_dates(here, WHEN) == pin_iso_dates(there, WHEN)


def test_only_dates_change_and_the_files_read_back_the_same():
    raw = build_raw()
    pinned = pin_iso_dates(raw, WHEN)
    assert len(pinned) == len(raw)
    changed = sum(a != b for a, b in zip(raw, pinned))
    assert 0 < changed < 400        # a handful of 7- and 17-byte dates, not the data
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(pinned))
    try:
        out = io.BytesIO()
        iso.get_file_from_iso_fp(out, rr_path="/sub/b")
        assert out.getvalue() == b"sub/b" * 3
    finally:
        iso.close()


def test_an_aware_instant_in_any_zone_is_written_as_utc():
    east = WHEN.astimezone(timezone(timedelta(hours=5, minutes=30)))
    raw = build_raw()
    assert pin_iso_dates(raw, east) == pin_iso_dates(raw, WHEN)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="when: must be timezone-aware"):
        pin_iso_dates(build_raw(), datetime(2001, 2, 3))
    with pytest.raises(ValueError, match="not an ISO 9660 image"):
        pin_iso_dates(b"\0" * 40000, WHEN)
