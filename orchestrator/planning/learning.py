"""The model's rates learned from the operations the daemon enacts: the update policy as pure functions, and
the rates the planner looks up (per ordered host pair for live migrations and memory-image moves, per host
for saves and restores).

Why an update per observation rather than a fit: a fresh install plans with configured rates that may be
wrong by a factor of 30 (12.5 MB/s assumed, hundreds measured), and a `calibrate` campaign is a deliberate
step many sites never take. Each enacted operation is one measurement of what the model's rate would have
had to be for the prediction to hold (`equivalent_rate`); `observe` folds it into the pair's estimate.

The update (`observe`), and why it is shaped so:

* in log space (rates are wrong by factors, not by MiB/s): log r <- log r + w * (log observed - log r);
* the weight `w` is 1/(n+1) for the first n observations it settled on (a running mean: a wrong prior is
  forgotten fast), never below `LearningPolicy.weight` (an exponentially weighted mean after that, so the
  estimate follows a link that changes);
* one observation never moves an estimate by more than `max_step` (a factor either way): a single bad
  measurement cannot wreck a plan, and a wrong prior is still left within a few operations (x2 per step
  goes from 12.5 to 400 MiB/s in five);
* once an estimate rests on `warmup` observations, one that differs from it by more than `outlier` (a
  factor) is ignored: a migration slowed by a host under load, or one that moved an idle guest of zero
  pages in no time. The next far one is taken (clipped), and every far one after it, until one is near
  again: the link itself changed.

The rates are the model's effective ones, not raw link speeds: a migration of a guest whose memory is
mostly zero pages moves "faster" than the wire, and that is what the planner must predict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

#: the kinds of operation learned: live migration and memory-image moves per ordered pair, saves and
#: restores per host
LIVE_MIGRATE = "live-migrate"
MOVE = "move"
SUSPEND = "suspend"
RESUME = "resume"
PAIR_KINDS = (LIVE_MIGRATE, MOVE)
HOST_KINDS = (SUSPEND, RESUME)
KINDS = PAIR_KINDS + HOST_KINDS


@dataclass(frozen=True)
class LearningPolicy:
    """How far one observation may move an estimate; see the module docstring."""

    weight: float = 0.3          # the smallest weight an observation gets (the EWMA's, after the first ones)
    max_step: float = 2.0        # one observation moves an estimate by at most this factor
    outlier: float = 8.0         # an observation this far off an established estimate is ignored
    warmup: int = 3              # observations before outliers are ignored

    def __post_init__(self) -> None:
        if not 0 < self.weight <= 1:
            raise ValueError(f"weight must be in (0, 1] (got {self.weight})")
        if not self.max_step > 1 or not self.outlier > 1:
            raise ValueError("max_step and outlier must be factors above 1")
        if self.warmup < 0:
            raise ValueError(f"warmup must not be negative (got {self.warmup})")


DEFAULT_POLICY = LearningPolicy()


@dataclass(frozen=True)
class RateEstimate:
    """One learned rate (MiB/s of the model's quantity): how many observations it settled on (one whose step
    was clipped did not reach it and is not counted), and whether the last one was far from it (1: ignored as an outlier, or followed as a changed link; 0: near)."""

    rate_mib_s: float
    samples: int = 0
    rejected: int = 0

    def to_json(self) -> dict[str, float | int]:
        return {"rate_mib_s": self.rate_mib_s, "samples": self.samples, "rejected": self.rejected}


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number greater than 0 (got {value!r})")
    return float(value)


def observe(estimate: RateEstimate | None, prior_mib_s: float, observed_mib_s: float,
            policy: LearningPolicy = DEFAULT_POLICY) -> RateEstimate:
    """The estimate after one observation (`estimate` None: none yet, start from `prior_mib_s`, the rate
    the planner used so far: configured or calibrated)."""
    observed = _positive("observed rate", observed_mib_s)
    if estimate is None:
        estimate = RateEstimate(_positive("prior rate", prior_mib_s))
    current = estimate.rate_mib_s
    distance = math.log(observed / current)
    far = estimate.samples >= policy.warmup and abs(distance) > math.log(policy.outlier)
    if far and estimate.rejected == 0:
        return RateEstimate(current, estimate.samples, 1)
    weight = max(1.0 / (estimate.samples + 1), policy.weight)
    bound = math.log(policy.max_step)
    wanted = weight * distance
    step = max(-bound, min(bound, wanted))
    # (a clipped step has not reached the observation: it does not count towards the running mean, so a
    # wrong prior is left at the full step; while observations stay far, the link changed: they are all
    # followed until one is near again)
    settled = estimate.samples + (1 if abs(wanted) <= bound * (1 + 1e-12) else 0)
    return RateEstimate(current * math.exp(step), settled, 1 if far else 0)


def equivalent_rate(rate_used_mib_s: float, predicted_s: float, measured_s: float, fixed_s: float = 0.0
                    ) -> float | None:
    """The rate at which the model would have predicted what was measured: the rate it used scaled by
    predicted over measured time, the fixed cost left out of both (exact for a transfer of known size at a
    constant rate; for a pre-copy migration its fixed point is the rate at which prediction and
    measurement agree). None when the times say nothing (the measured time within the fixed cost)."""
    used = _positive("rate used", rate_used_mib_s)
    variable_predicted = predicted_s - fixed_s
    variable_measured = measured_s - fixed_s
    if not (math.isfinite(variable_predicted) and math.isfinite(variable_measured)):
        return None
    if variable_predicted <= 0 or variable_measured <= 0:
        return None
    return used * variable_predicted / variable_measured


def pair_key(source: str, destination: str) -> str:
    """How an ordered pair is named where rates are stored (host names hold no '>')."""
    return f"{source}>{destination}"


@dataclass(frozen=True)
class LearnedRates:
    """What the planner reads: kind -> key (a `pair_key` or a host) -> learned rate."""

    rates: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, estimates: Mapping[str, Mapping[str, RateEstimate]]) -> "LearnedRates":
        return cls({kind: {key: e.rate_mib_s for key, e in by_key.items()} for kind, by_key in estimates.items()})

    def knows(self, kind: str) -> bool:
        """Whether any rate of `kind` is learned."""
        return bool(self.rates.get(kind))

    def _get(self, kind: str, key: str, default: float) -> float:
        return self.rates.get(kind, {}).get(key, default)

    def live(self, source: str, destination: str, default: float) -> float:
        """MiB/s learned for live migrations from `source` to `destination` (else `default`)."""
        return self._get(LIVE_MIGRATE, pair_key(source, destination), default)

    def move(self, source: str, destination: str, default: float) -> float:
        return self._get(MOVE, pair_key(source, destination), default)

    def host(self, kind: str, host: str | None, default: float) -> float:
        """A save's (`SUSPEND`) or a restore's (`RESUME`) rate on `host`; with no host (an estimate of a
        lease not yet placed), the slowest learned one, and `default` if that is slower."""
        by_host = self.rates.get(kind, {})
        if host is not None:
            return by_host.get(host, default)
        return min(default, min(by_host.values(), default=default))


NO_LEARNED_RATES = LearnedRates()
