"""When a policy is asked: one rule for the simulator and the live controller.

- on events (arrival, completion, a failed run, a node joining), when the policy wants them;
- on a grid t0 + k·interval when it has an interval (slots: DL2, Optimus); the grid is anchored
  at the first time the driver saw, so a decision is never pushed later by a slow one;
- at the wake time its last plan asked for (a Tiresias threshold crossing, a DRAGON timer).
"""

from __future__ import annotations

import math

from dlsched.core.errors import ConfigError

#: Happenings that ask a policy that decides on events. A node's speed changing is not one: it
#: frees nothing, and a policy that cares sees it in measured rates at its next decision.
EVENT_KINDS = frozenset({"arrival", "completion", "failure", "node"})
_REASONS: dict[frozenset[str], tuple[str, ...]] = {}  # a set of reasons -> its sorted tuple


class Triggers:
    def __init__(self, on_events: bool, interval: float | None, t0: float, name: str = "policy"):
        if interval is not None and interval <= 0:
            raise ConfigError(f"policy {name!r}: interval must be > 0")
        self.on_events = on_events
        self.interval = interval
        self.t0 = t0
        self.next_tick = t0 if interval else math.inf
        self.wake = math.inf

    def next_time(self) -> float:
        """The next time a timer (tick or wake) is due; inf when none is."""
        return min(self.next_tick, self.wake)

    def due(self, now: float, happened: set[str]) -> tuple[str, ...] | None:
        """The reasons to ask the policy at `now`, or None when it is not to be asked."""
        timer = False
        if self.next_tick <= now:
            happened = happened | {"tick"}
            self.next_tick = self._grid_after(now)
            timer = True
        if self.wake <= now:
            happened = happened | {"wake"}
            self.wake = math.inf
            timer = True
        if not (timer or (self.on_events and not EVENT_KINDS.isdisjoint(happened))):
            return None
        key = frozenset(happened)
        reasons = _REASONS.get(key)
        if reasons is None:  # a handful of combinations occur: each sorted once
            reasons = _REASONS[key] = tuple(sorted(key))
        return reasons

    def wake_at(self, when: float | None, now: float) -> None:
        """Remember the plan's wake-up time (it replaces the previous one)."""
        if when is not None and when > now:
            self.wake = when

    def skip_to(self, t: float) -> None:
        """Nothing can happen before `t`: move the next tick to the first grid point at or after it."""
        if self.interval:
            self.next_tick = max(self.next_tick, self.t0 + math.ceil((t - self.t0) / self.interval) * self.interval)

    def _grid_after(self, now: float) -> float:
        nxt = self.t0 + (math.floor((now - self.t0) / self.interval) + 1) * self.interval
        return nxt + self.interval if nxt <= now else nxt  # (now - t0)/interval just below a whole number
