"""Policy registries: creation by name, helpful errors for unknown names, and the admission policies."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from orchestrator.model.errors import ConfigError, InvalidRequest
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import UTC
from orchestrator.planning.policies import (
    ADMISSION,
    HOST_SELECTION,
    PREEMPTION,
    Registry,
)
from orchestrator.planning.policies.admission import AcceptAll, NoAdvanceReservations
from orchestrator.planning.policies.host_selection import Greedy, Pack, Spread
from orchestrator.planning.policies.preemption import ARPreemptsBE, NoPreemption

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def lease(lease_id: int, type: LeaseType, submit_minutes: float = 0, preemptible: bool = True) -> Lease:
    start = EPOCH + timedelta(hours=1) if type is LeaseType.ADVANCE_RESERVATION else None
    return Lease(lease_id, LeaseRequest(type=type, nodes=(Resources.of(1, 512),), duration=timedelta(hours=1),
                                        submit_time=EPOCH + timedelta(minutes=submit_minutes), start=start,
                                        preemptible=preemptible))


@pytest.mark.parametrize("registry,name,cls", [
    (ADMISSION, "accept-all", AcceptAll),
    (ADMISSION, "no-ars", NoAdvanceReservations),
    (HOST_SELECTION, "greedy", Greedy),
    (HOST_SELECTION, "pack", Pack),
    (HOST_SELECTION, "spread", Spread),
    (PREEMPTION, "no-preemption", NoPreemption),
    (PREEMPTION, "ar-preempts-be", ARPreemptsBE),
])
def test_registries_create_by_name(registry, name, cls):
    policy = registry.create(name)
    assert type(policy) is cls
    assert policy.name == name
    assert registry.create(name) is not policy   # a fresh instance each time


def test_registry_names():
    assert ADMISSION.names() == ["accept-all", "no-ars"]
    assert HOST_SELECTION.names() == ["greedy", "pack", "spread"]
    assert PREEMPTION.names() == ["ar-preempts-be", "no-preemption"]


@pytest.mark.parametrize("registry,key,known", [
    (ADMISSION, "scheduling.policy_admission", "accept-all, no-ars"),
    (HOST_SELECTION, "scheduling.policy_host_selection", "greedy, pack, spread"),
    (PREEMPTION, "scheduling.policy_preemption", "ar-preempts-be, no-preemption"),
])
def test_unknown_name_is_a_config_error_naming_the_key_and_the_known_names(registry, key, known):
    with pytest.raises(ConfigError) as exc:
        registry.create("bogus")
    assert isinstance(exc.value, InvalidRequest)
    assert exc.value.field == key
    message = str(exc.value)
    assert message.startswith(f"{key}: ")
    assert "'bogus'" in message
    assert f"(known: {known})" in message
    assert "\n" not in message


def test_registering_a_name_twice_is_refused():
    reg: Registry[object] = Registry("thing", "scheduling.policy_thing")

    @reg.register("one")
    class One:
        pass

    with pytest.raises(ValueError, match="'one' registered twice"):
        @reg.register("one")
        class Other:
            pass

    assert reg.names() == ["one"] and type(reg.create("one")) is One and One.name == "one"


def test_host_selection_packs_flags():
    assert HOST_SELECTION.create("greedy").packs is True
    assert HOST_SELECTION.create("pack").packs is True
    assert HOST_SELECTION.create("spread").packs is False


# -- admission ------------------------------------------------------------------------------------------------------------

def test_accept_all_accepts_everything():
    policy = ADMISSION.create("accept-all")
    for t in LeaseType:
        assert policy.reject_reason(lease(1, t)) is None


def test_no_ars_rejects_advance_reservations_with_a_reason():
    policy = ADMISSION.create("no-ars")
    assert policy.reject_reason(lease(1, LeaseType.ADVANCE_RESERVATION)) == \
        "advance reservations are not accepted (policy_admission = no-ars)"
    assert policy.reject_reason(lease(2, LeaseType.BEST_EFFORT)) is None
    assert policy.reject_reason(lease(3, LeaseType.IMMEDIATE)) is None


# -- preemption scores ----------------------------------------------------------------------------------------------------------

def test_ar_preempts_be_scores_the_most_recent_submission_highest():
    policy = PREEMPTION.create("ar-preempts-be")
    ar = lease(10, LeaseType.ADVANCE_RESERVATION)
    older, newer = lease(1, LeaseType.BEST_EFFORT, -120), lease(2, LeaseType.BEST_EFFORT, -5)
    assert policy.score(ar, newer, EPOCH) > policy.score(ar, older, EPOCH)
    assert policy.score(ar, older, EPOCH) == (EPOCH - timedelta(minutes=120)).timestamp()
    assert policy.score(ar, lease(3, LeaseType.BEST_EFFORT, preemptible=False), EPOCH) is None
    assert policy.score(ar, lease(4, LeaseType.ADVANCE_RESERVATION), EPOCH) is None
    assert policy.score(ar, lease(5, LeaseType.IMMEDIATE), EPOCH) is None
    assert policy.score(lease(6, LeaseType.BEST_EFFORT), older, EPOCH) is None
    assert policy.score(ar, ar, EPOCH) is None


def test_no_preemption_scores_nothing():
    policy = PREEMPTION.create("no-preemption")
    assert policy.score(lease(10, LeaseType.ADVANCE_RESERVATION), lease(1, LeaseType.BEST_EFFORT), EPOCH) is None
