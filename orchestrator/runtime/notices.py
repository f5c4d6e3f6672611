"""The notice sender: at every daemon step, sends the end-of-lease notices that are due, each once.

At most once, never twice: a notice is *claimed* in the store (a row in `notices`, unique per lease, key
and notifier) before it is sent, and its outcome is written after. A crash between the claim and the send
loses that notice (its row says "claimed" for good) rather than sending it again at the restart: a
missing reminder is a nuisance, a mail sent twice after every restart teaches people to ignore them. A
notice that fails (SMTP down, the command exits non-zero) is recorded as failed and not tried again, for
the same reason. Sending happens outside the store's write transaction (the claim and the outcome are
two short transactions of their own), so a slow SMTP server holds up the daemon but never the store.

Which leases get an `ended` notice: those that end while notices are on. The first step that has a
notifier records its time (store meta `notices_since`, kept across restarts); a lease that ended by then
(even in that very step: an instant's edge, traded for never announcing a lease that ended under the
previous daemon's last step at the same time) is not announced late. Leases that ended since then and
have no `ended` notice claimed yet are looked up in the store at each step, so a lease cancelled by
another process, or ended just before a crash, still gets its notice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from orchestrator.config import NotifyConfig
from orchestrator.model.lease import Lease
from orchestrator.model.timeutil import as_utc, iso, parse_time
from orchestrator.planning.notices import ENDED_STATES, Notice, due_notices, next_notice_time
from orchestrator.runtime.notifiers import Notifier, NotifyFailed
from orchestrator.state.store import Store

log = logging.getLogger(__name__)

#: store meta key: when this store first sent notices (leases that ended before are not announced)
SINCE_KEY = "notices_since"


class NoticeSender:
    def __init__(self, store: Store, config: NotifyConfig, notifiers: Sequence[Notifier],
                 owner_address: Callable[[str], str | None]):
        """`owner_address`: a lease's user -> the address its notices go to (None: it has none)."""
        self.store = store
        self.config = config
        self.notifiers = tuple(notifiers)
        self.owner_address = owner_address
        self._since: datetime | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.notifiers)

    def step(self, now: datetime, leases: Iterable[Lease]) -> datetime | None:
        """Send what is due at `now` for `leases` (the step's: live ones and those that ended in it) and
        for the leases that ended since notices began without being announced; returns when the next
        reminder of these leases is due (None: none planned), for a clock that jumps to it."""
        if not self.notifiers:
            return None
        now = as_utc(now, "now")
        since = self._started(now)
        watched = {lease.id: lease for lease in leases}
        if self.config.at_end:
            for lease in self.store.unannounced_ended_leases(since, ENDED_STATES):
                watched.setdefault(lease.id, lease)
        offsets = self.config.before_end
        due = [notice for lease in watched.values()
               for notice in due_notices(lease, now, offsets, at_end=self.config.at_end, ended_after=since)]
        if due:
            self._send(now, due, watched)
        return min((t for lease in watched.values() if (t := next_notice_time(lease, now, offsets)) is not None),
                   default=None)

    def _started(self, now: datetime) -> datetime:
        """When this store's notices began: recorded by the first step that had a notifier."""
        if self._since is None:
            saved = self.store.get_meta(SINCE_KEY)
            if saved is None:
                self.store.set_meta(SINCE_KEY, iso(now))
                saved = iso(now)
            self._since = parse_time(saved, SINCE_KEY)
        return self._since

    def _send(self, now: datetime, due: list[Notice], leases: dict[int, Lease]) -> None:
        done = self.store.claimed_notices({n.lease_id for n in due})
        by_row = {(n.lease_id, n.key, notifier.name): (n, notifier) for n in due for notifier in self.notifiers}
        wanted = [row for row in by_row if row not in done]
        if not wanted:
            return
        claimed = self.store.claim_notices(wanted, now)
        outcomes: dict[tuple[int, str, str], str] = {}
        for row in claimed:
            notice, notifier = by_row[row]
            lease = leases[notice.lease_id]
            extra = {"lease": lease.id, "notice": notice.key, "notifier": notifier.name}
            try:
                notifier.send(notice, lease, self.owner_address(lease.request.user), now)
            except NotifyFailed as exc:
                outcomes[row] = f"failed: {exc}"
                log.warning("notice %s of lease %d by %s failed: %s", notice.key, lease.id, notifier.name, exc,
                            extra=extra)
            except Exception as exc:   # a notifier's own bug must not stop the others or the daemon
                outcomes[row] = f"failed: {type(exc).__name__}: {exc}"
                log.warning("notice %s of lease %d by %s failed unexpectedly: %r", notice.key, lease.id,
                            notifier.name, exc, extra=extra)
            else:
                outcomes[row] = "sent"
                log.info("notice %s of lease %d sent by %s", notice.key, lease.id, notifier.name, extra=extra)
        self.store.record_notice_outcomes(outcomes)
