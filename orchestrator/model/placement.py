"""Where a lease may run: host properties, the constraints a lease puts on them, and how its VMs share hosts.

A host carries properties, short `key = value` names an admin gives it (`gpu = a100`, `rack = r1`), as
Blazar's host capabilities or Slurm's node features. A lease's constraints (`--where`) are tests on them,
all of which must hold on every host the lease uses:

    KEY=VALUE   the host has KEY with that value     KEY    the host has KEY (any value)
    KEY!=VALUE  the host lacks KEY or has another    !KEY   the host does not have KEY

`affinity` says how the lease's VMs share hosts: `spread` (each on a different host: anti-affinity, so a host
failure takes one), `pack` (as few hosts as possible) or None (the site's host-selection policy decides).
`exclusive`: each VM has a host to itself for the lease's whole time (Slurm's `--exclusive`, Blazar's
physical-host reservation); it implies spread. `Placement` is None on a lease that asks for none of this,
so the planner's usual path costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.model.errors import InvalidRequest, shown
from orchestrator.model.resources import Resources

#: a property's key: a short name, as a label's (letters, digits, '_', '-', '.'), starting with a letter
PROPERTY_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
#: a property's value: a short name (letters, digits, '_', '-', '.', ':', '+'), e.g. a100, r1, x86_64
PROPERTY_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,62}")
#: the most properties a host may have, and constraints a lease may give
MAX_PROPERTIES = 64
AFFINITIES = ("spread", "pack")
#: a request's keys that make its placement (a lease file's, the API's, an LWF lease's attributes)
PLACEMENT_KEYS = ("where", "spread", "pack", "exclusive")

Properties = tuple[tuple[str, str], ...]


def check_property_key(key: object, field: str) -> str:
    if not isinstance(key, str) or not PROPERTY_KEY.fullmatch(key):
        raise InvalidRequest(field, f"{shown(key)} is not a property name (a letter, then letters, digits, "
                                    "'_', '-' or '.'; at most 63)")
    return key


def check_property_value(value: object, field: str) -> str:
    if not isinstance(value, str) or not PROPERTY_VALUE.fullmatch(value):
        raise InvalidRequest(field, f"{shown(value)} is not a property value (letters, digits, '_', '-', '.', "
                                    "':' or '+'; at most 63)")
    return value


def properties_of(values: Mapping[Any, object] | Iterable[tuple[object, object]], field: str) -> Properties:
    """Checked properties, sorted by key (the form a host keeps them in)."""
    if isinstance(values, Mapping):
        pairs = list(values.items())
    elif isinstance(values, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in values):
        pairs = list(values)
    else:
        raise InvalidRequest(field, f"must be a table of names, e.g. {{gpu: a100}} (got {shown(values)})")
    if len(pairs) > MAX_PROPERTIES:
        raise InvalidRequest(field, f"at most {MAX_PROPERTIES} properties per host (got {len(pairs)})")
    out: dict[str, str] = {}
    for key, value in pairs:
        check_property_key(key, field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)   # (an inventory's `cores = 64`)
        try:
            out[str(key)] = check_property_value(value, field)
        except InvalidRequest as exc:
            raise InvalidRequest(field, f"{key}: {exc.problem}") from None
    return tuple(sorted(out.items()))


def parse_assignment(text: object, field: str) -> tuple[str, str]:
    """`KEY=VALUE` (`host add/set --property`) -> (key, value)."""
    if not isinstance(text, str) or "=" not in text:
        raise InvalidRequest(field, f"must be KEY=VALUE, e.g. gpu=a100 (got {shown(text)})")
    key, _, value = text.partition("=")
    return check_property_key(key.strip(), field), check_property_value(value.strip(), field)


@dataclass(frozen=True, slots=True)
class Constraint:
    """One test on a host's properties. `value` None: whether the host has the key at all."""

    key: str
    value: str | None = None
    negated: bool = False

    def holds(self, properties: Mapping[str, str]) -> bool:
        have = properties.get(self.key)
        hit = have is not None if self.value is None else have == self.value
        return hit != self.negated

    def __str__(self) -> str:
        if self.value is None:
            return ("!" if self.negated else "") + self.key
        return f"{self.key}{'!=' if self.negated else '='}{self.value}"


def parse_constraint(text: object, field: str) -> Constraint:
    """`KEY=VALUE`, `KEY!=VALUE`, `KEY` or `!KEY`; anything else is one line naming `field`."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest(field, f"must be KEY=VALUE, KEY!=VALUE, KEY or !KEY (got {shown(text)})")
    text = text.strip()
    if "!=" in text:
        key, _, value = text.partition("!=")
        return Constraint(_key(key, text, field), _value(value, text, field), negated=True)
    if "=" in text:
        key, _, value = text.partition("=")
        return Constraint(_key(key, text, field), _value(value, text, field))
    if text.startswith("!"):
        return Constraint(_key(text[1:], text, field), negated=True)
    return Constraint(_key(text, text, field))


def _key(key: str, text: str, field: str) -> str:
    if not PROPERTY_KEY.fullmatch(key.strip()):
        raise InvalidRequest(field, f"{shown(text)}: {shown(key.strip())} is not a property name "
                                    "(KEY=VALUE, KEY!=VALUE, KEY or !KEY)")
    return key.strip()


def _value(value: str, text: str, field: str) -> str:
    if not PROPERTY_VALUE.fullmatch(value.strip()):
        raise InvalidRequest(field, f"{shown(text)}: {shown(value.strip())} is not a property value")
    return value.strip()


@dataclass(frozen=True, slots=True)
class Placement:
    """A lease's constraints on hosts and how its VMs share them (see the module's docstring)."""

    where: tuple[Constraint, ...] = ()
    affinity: str | None = None      # spread | pack | None
    exclusive: bool = False

    def __post_init__(self) -> None:
        if self.affinity is not None and self.affinity not in AFFINITIES:
            raise InvalidRequest("affinity", f"must be spread or pack (got {shown(self.affinity)})")
        if self.exclusive and self.affinity == "pack":
            raise InvalidRequest("exclusive", "an exclusive lease's VMs each take a host: it cannot be packed")

    @property
    def spread(self) -> bool:
        """Each VM on a host of its own (exclusive VMs too)."""
        return self.affinity == "spread" or self.exclusive

    def admits(self, properties: Mapping[str, str]) -> bool:
        """Whether a host with these properties meets every constraint."""
        return all(c.holds(properties) for c in self.where)

    def to_json(self) -> dict:
        return {"where": [str(c) for c in self.where], "affinity": self.affinity, "exclusive": self.exclusive}

    @classmethod
    def from_json(cls, data: Mapping) -> Placement:
        return cls(where=tuple(parse_constraint(c, "where") for c in data.get("where", ())),
                   affinity=data.get("affinity"), exclusive=bool(data.get("exclusive", False)))

    def describe(self) -> str:
        """One line for tables: `gpu=a100, !old; spread; exclusive`."""
        parts = [", ".join(map(str, self.where))] if self.where else []
        parts += [self.affinity] if self.affinity and not (self.exclusive and self.affinity == "spread") else []
        parts += ["exclusive"] if self.exclusive else []
        return "; ".join(parts)


def placement_of(where: Iterable[object] | None, spread: bool | None, pack: bool | None, exclusive: bool | None,
                 label=str) -> Placement | None:
    """The placement a request's fields ask for, or None when they ask for nothing (the usual case).
    Errors name `label(key)`: the flag (`--where`) or the lease file's key (`where`)."""
    constraints: list[Constraint] = []
    if where is not None:
        if isinstance(where, str):
            where = [where]
        items = list(where)
        if len(items) > MAX_PROPERTIES:
            raise InvalidRequest(label("where"), f"at most {MAX_PROPERTIES} constraints (got {len(items)})")
        constraints = [parse_constraint(item, label("where")) for item in items]
    if spread and pack:
        raise InvalidRequest(label("pack"), "spread and pack exclude each other: give one")
    if exclusive and pack:
        raise InvalidRequest(label("pack"), "an exclusive lease's VMs each take a host of their own: it cannot be packed")
    affinity = "spread" if spread else "pack" if pack else None
    if not constraints and affinity is None and not exclusive:
        return None
    return Placement(where=tuple(dict.fromkeys(constraints)), affinity=affinity, exclusive=bool(exclusive))


def refusal(placement: Placement, nodes: Sequence[Resources], hosts: Mapping[str, Mapping[str, str]],
            capacity: Mapping[str, Resources]) -> str | None:
    """Why the hosts (name -> properties, name -> capacity) could never hold the lease's `nodes`, even
    empty, or None. An unknown key is the caller's to refuse as bad input (`unknown_keys`). Nodes of
    different sizes are counted as the smallest of them (never a refusal that is not certain)."""
    eligible = [name for name, props in hosts.items() if placement.admits(props)]
    meets = "meet the constraints" if placement.where else "exist"
    if not eligible:
        return f"no host meets {', '.join(map(str, placement.where))}"
    numnodes = len(nodes)
    if placement.spread and numnodes > len(eligible):
        how = "exclusive" if placement.exclusive else "spread"
        meets = meets if len(eligible) > 1 else meets.replace("meet ", "meets ").replace("exist", "exists")
        return f"{numnodes} VMs {how} need {numnodes} hosts, and only {len(eligible)} {meets}"
    least = Resources(*(min(n[i] for n in nodes) for i in range(len(Resources._fields))))
    room = 0
    for name in eligible:
        cap = capacity[name]
        most = min(int(cap[i] // least[i]) if least[i] > 0 else numnodes for i in range(len(Resources._fields)))
        room += min(most, 1) if placement.spread else most
    if room < numnodes:
        n = len(eligible)
        which = (f"the {n} host{'s' if n > 1 else ''} that meet{'' if n > 1 else 's'} the constraints"
                 if placement.where else "the hosts")
        return f"{which} can hold {room} of its {numnodes} VMs, even empty"
    return None


def unknown_keys(placement: Placement, hosts: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The constraint keys no host has (a typo, most likely)."""
    known = {k for props in hosts.values() for k in props}
    return sorted({c.key for c in placement.where if c.key not in known})
