"""Every timestamp in an ISO 9660 image set to one instant, so the same content gives the same bytes.

pycdlib stamps the current local time into each date it writes (some only while writing), with no way to
pass one in. Rather than patch `time` (process-global), we rewrite the finished image: the volume
descriptors' dates, every directory record's date and the Rock Ridge TF timestamps, found by walking the
image as ECMA-119 and SUSP/RRIP lay it out.
"""

from __future__ import annotations

import struct
from datetime import datetime, timezone

_FIRST_DESCRIPTOR_SECTOR = 16
_SECTOR = 2048                       # the descriptors' sector size; directories use the volume's block size
_TERMINATOR = 255
_PRIMARY, _SUPPLEMENTARY = 1, 2      # Joliet lives in a supplementary descriptor
_ROOT_RECORD_AT = 156
_DESCRIPTOR_DATES_AT = (813, 830, 847, 864)  # creation, modification, expiration, effective (17 bytes each)
_UNSPECIFIED_DATE = b"0" * 16 + b"\x00"
_RECORD_DATE_AT = 18
_DIRECTORY_FLAG = 0x02
_TF_LONG_FORM = 0x80


def pin_iso_dates(image: bytes, when: datetime) -> bytes:
    """`image` with every date set to `when` (timezone-aware; written as UTC); dates left unspecified
    (all zeros, like an expiration date nobody set) stay so."""
    if when.tzinfo is None:
        raise ValueError("when: must be timezone-aware (the image records the offset from UTC)")
    when = when.astimezone(timezone.utc)
    short = bytes((when.year - 1900, when.month, when.day, when.hour, when.minute, when.second, 0))
    long = when.strftime("%Y%m%d%H%M%S00").encode("ascii") + b"\x00"
    out = bytearray(image)
    visited: set[int] = set()
    sector = _FIRST_DESCRIPTOR_SECTOR
    while True:
        at = sector * _SECTOR
        if at + _SECTOR > len(out) or out[at + 1:at + 6] != b"CD001":
            raise ValueError(f"not an ISO 9660 image: no volume descriptor at sector {sector}")
        kind = out[at]
        if kind == _TERMINATOR:
            return bytes(out)
        if kind in (_PRIMARY, _SUPPLEMENTARY):
            for offset in _DESCRIPTOR_DATES_AT:
                if out[at + offset:at + offset + 17] != _UNSPECIFIED_DATE:
                    out[at + offset:at + offset + 17] = long
            block = struct.unpack_from("<H", out, at + 128)[0]
            root = at + _ROOT_RECORD_AT
            out[root + _RECORD_DATE_AT:root + _RECORD_DATE_AT + 7] = short
            _pin_directory(out, root, block, short, long, visited)
        sector += 1


def _pin_directory(out: bytearray, record: int, block: int, short: bytes, long: bytes, visited: set[int]) -> None:
    """Pin the dates of every record in the directory `record` points at, and below it."""
    extent, length = struct.unpack_from("<I", out, record + 2)[0], struct.unpack_from("<I", out, record + 10)[0]
    if extent in visited:
        return
    visited.add(extent)
    start = extent * block
    at = start
    skip = 0                          # SUSP's SP entry may say how many bytes start each system use area
    while at < start + length:
        size = out[at]
        if size == 0:                 # records never straddle a block: the rest of this one is padding
            at = start + ((at - start) // block + 1) * block
            continue
        out[at + _RECORD_DATE_AT:at + _RECORD_DATE_AT + 7] = short
        name_length = out[at + 32]
        name = bytes(out[at + 33:at + 33 + name_length])
        system_use = at + 33 + name_length + (1 - name_length % 2)
        if name == b"\x00" and out[system_use:system_use + 2] == b"SP":
            skip = out[system_use + 6]
        _pin_system_use(out, system_use + skip, at + size, block, short, long)
        if out[at + 25] & _DIRECTORY_FLAG and name not in (b"\x00", b"\x01"):
            _pin_directory(out, at, block, short, long, visited)
        at += size


def _pin_system_use(out: bytearray, at: int, end: int, block: int, short: bytes, long: bytes) -> None:
    """Pin the Rock Ridge TF timestamps among the SUSP entries in out[at:end], following CE continuations."""
    while at + 4 <= end:
        signature, size = bytes(out[at:at + 2]), out[at + 2]
        if size < 4 or signature == b"ST":
            return
        if signature == b"TF":
            flags = out[at + 4]
            stamp = long if flags & _TF_LONG_FORM else short
            count = bin(flags & 0x7F).count("1")
            for i in range(count):
                offset = at + 5 + i * len(stamp)
                out[offset:offset + len(stamp)] = stamp
        elif signature == b"CE":
            area_block, area_offset, area_length = (struct.unpack_from("<I", out, at + i)[0] for i in (4, 12, 20))
            area = area_block * block + area_offset
            _pin_system_use(out, area, area + area_length, block, short, long)
        at += size
