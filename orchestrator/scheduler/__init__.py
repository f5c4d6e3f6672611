"""The lease scheduler: when and where each lease runs, with its overheads planned as reservations."""

from .enactment import EnactmentError, Enactor, NullEnactor
from .lease_scheduler import LeaseScheduler

__all__ = ["EnactmentError", "Enactor", "LeaseScheduler", "NullEnactor"]
