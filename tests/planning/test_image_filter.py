"""The image filter (`planning/image_filter.py`): a lease booting an image copied to hosts' own storage goes
only where a copy is; an image every host of the site holds restricts nothing, so the mapper's filter step
costs such a lease what it costs a lease with no image (the hosts are not listed for it)."""

from __future__ import annotations

from datetime import timedelta

from orchestrator.model.lease import Lease, LeaseRequest, LeaseType, VMImage
from orchestrator.model.resources import Resources
from orchestrator.planning.image_filter import ImageHolders
from orchestrator.planning.mapper import Mapper
from orchestrator.planning.policies import HOST_SELECTION, PREEMPTION
from orchestrator.planning.slottable.table import SlotTable
from tests.support.times import T0

SITE = ("h1", "h2", "h3")


def booting(image: str) -> Lease:
    return Lease(1, LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 1024),),
                                 duration=timedelta(hours=1), submit_time=T0,
                                 image=VMImage(disk=f"/img/{image}.qcow2", name=image)))


def test_an_image_on_every_host_restricts_nothing_and_one_on_some_restricts_to_them():
    holders = ImageHolders({"everywhere": set(SITE), "some": {"h1", "h3"}}, SITE)
    assert holders.hosts_for(booting("everywhere")) is None
    assert holders.restrict(booting("everywhere"), None) is None
    assert holders.hosts_for(booting("some")) == {"h1", "h3"}
    # without the site, an image's holders are taken as they are
    assert ImageHolders({"everywhere": set(SITE)}).hosts_for(booting("everywhere")) == set(SITE)
    # a site that grew past the holders: the image restricts again
    assert ImageHolders({"everywhere": set(SITE)}, (*SITE, "h4")).hosts_for(booting("everywhere")) == set(SITE)


def test_the_mapper_places_a_lease_booting_an_image_every_host_holds_as_one_with_none():
    table = SlotTable({h: Resources.of(4, 8192) for h in SITE})
    mapper = Mapper(table, HOST_SELECTION.create("greedy"), PREEMPTION.create("ar-preempts-be"),
                    images=ImageHolders({"everywhere": set(SITE), "some": {"h3"}}, SITE))
    assert mapper.allowed_hosts(booting("everywhere")) is None
    assert mapper.allowed_hosts(booting("some")) == {"h3"}
    placed = mapper.map(booting("some"), T0, T0 + timedelta(hours=1))
    assert placed is not None and set(placed.nodes.values()) == {"h3"}
