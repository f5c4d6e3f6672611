"""The simulated hosts' state remembers what an operation changed, key by key: checked against a plain copy of
the whole state taken before the operation and compared after it (what the driver did before)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drivers.base import VMSpec
from drivers.simulated.state_file import KINDS, HostsState, SaveImage, SimulatedVM

HOSTS = ("h1", "h2", "h3")
NAMES = ("a", "b", "c", "d")
SPECS = {name: VMSpec(name=name, vcpus=1, memory_mib=64) for name in NAMES}


def _plain(state: HostsState) -> dict[str, dict]:
    return {kind: dict(getattr(state, kind)) for kind in KINDS}


def _diff(before: dict, after: dict) -> dict:
    """The oracle: every key whose entry is new or another object in `after` (-> it), or gone (-> None)."""
    missing = object()
    changed = {key: value for key, value in after.items() if before.get(key, missing) is not value}
    changed.update((key, None) for key in before if key not in after)
    return changed


def _vm(state: str, name: str, host: str) -> SimulatedVM:
    return SimulatedVM(SPECS[name], host, state)  # type: ignore[arg-type]


#: one change: (kind, action, key, value)
_keys = {
    "vms": st.sampled_from(NAMES),
    "disks": st.sampled_from(NAMES),
    "images": st.tuples(st.sampled_from((None, *HOSTS)), st.sampled_from(("/s/1", "/s/2"))),
    "left": st.tuples(st.sampled_from(HOSTS), st.sampled_from(NAMES)),
    "base_copies": st.tuples(st.sampled_from(HOSTS), st.sampled_from(("/i/1", "/i/2"))),
}


@st.composite
def _change(draw):
    kind = draw(st.sampled_from(KINDS))
    key = draw(_keys[kind])
    action = draw(st.sampled_from(("set", "set", "del", "pop")))
    if kind == "vms":
        value = _vm(draw(st.sampled_from(("running", "saved", "shutoff"))), key, draw(st.sampled_from(HOSTS)))
    elif kind == "left":
        value = _vm(draw(st.sampled_from(("running", "shutoff"))), key[1], key[0])
    elif kind == "disks":
        value = draw(st.booleans())
    elif kind == "images":
        value = SaveImage(SPECS[draw(st.sampled_from(NAMES))], draw(st.integers(0, 3)))
    else:
        value = draw(st.sampled_from(("aa", "bb")))
    return kind, action, key, value


def _apply(state: HostsState, change) -> None:
    kind, action, key, value = change
    part = getattr(state, kind)
    if action == "set":
        part[key] = value
    elif action == "del":
        if key in part:
            del part[key]
    else:
        part.pop(key, None)


def _on_host_oracle(state: HostsState, host: str) -> list[str]:
    return sorted([vm.spec.name for vm in state.vms.values() if vm.host == host]
                  + [vm.spec.name for (where, _), vm in state.left.items() if where == host])


@settings(max_examples=300, deadline=None)
@given(st.lists(_change(), max_size=8), st.lists(_change(), max_size=8), st.booleans())
def test_an_operations_changes_and_its_undo_match_a_copy_of_the_whole_state(setup, operation, keep):
    state = HostsState()
    for change in setup:
        _apply(state, change)
    before = _plain(state)
    state.begin()
    assert state.changing
    for change in operation:
        _apply(state, change)
    after = _plain(state)
    assert state.changes() == {kind: _diff(before[kind], after[kind]) for kind in KINDS}
    if keep:
        state.keep()
        assert _plain(state) == after
    else:
        state.undo()
        assert _plain(state) == before
    assert not state.changing
    for host in HOSTS:   # (the index of each host's VMs follows every change and every undo)
        assert sorted(vm.spec.name for vm in state.on_host(host)) == _on_host_oracle(state, host)


def test_a_state_read_from_a_file_is_indexed_by_host_and_outside_a_change_remembers_nothing():
    state = HostsState(vms={"a": _vm("running", "a", "h1")}, left={("h2", "a"): _vm("shutoff", "a", "h2")})
    assert [vm.host for vm in state.on_host("h1")] == ["h1"] and [vm.state for vm in state.on_host("h2")] == ["shutoff"]
    state.vms["b"] = _vm("running", "b", "h2")
    assert not state.changing and state.changes() == {kind: {} for kind in KINDS}


def test_a_change_of_many_keys_at_once_is_refused():
    state = HostsState()
    with pytest.raises(TypeError, match="one key at a time"):
        state.vms.update({"a": _vm("running", "a", "h1")})
