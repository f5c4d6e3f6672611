"""The drivers' exception hierarchy: callers catch these, never libvirt's own errors."""

from __future__ import annotations


class DriverError(Exception):
    """Base of every error a driver raises."""


class DriverUnavailable(DriverError):
    """The driver cannot be used on this machine (e.g. libvirt-python is not installed); says what to install."""


class HostUnreachable(DriverError):
    """The host cannot be contacted (connection refused, timed out, dropped and not re-opened)."""


class UnknownHost(DriverError):
    """The driver was asked about a host it does not manage."""


class VMNotFound(DriverError):
    """No such VM (domain) on the host."""


class VMAlreadyExists(DriverError):
    """A VM with that name is already defined or running."""


class OperationFailed(DriverError):
    """A VM operation (start, stop, save, restore, transfer) failed for a permanent reason."""


class MigrationFailed(DriverError):
    """A live migration did not complete; the VM is still running on the source (the report says more)."""

    def __init__(self, message: str, report: object | None = None):
        super().__init__(message)
        self.report = report


class DriverConfigError(DriverError, ValueError):
    """A driver's configuration (an inventory entry, a driver name) is bad; names the field, like every
    input error leasewise reports."""

    def __init__(self, field: str, problem: str, *, where: str | None = None):
        self.field = field
        self.problem = problem
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{field}: {problem}")
