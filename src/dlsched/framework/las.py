"""Least-attained-service queues in one place: Tiresias' queue thresholds and which queue a job's
attained service puts it in.

Why here and not in `policies.tiresias`: the Tiresias family of policies orders by these queues,
and the Dual-Agent-style model reads a job's queue as a feature (`models.dual_agent_features`);
the model package must not import policies, so both import this.
"""

from __future__ import annotations

#: Tiresias' queue thresholds in attained GPU-seconds (Q0 below 3250, ...): every policy ordered
#: by Tiresias, and the Dual-Agent-style ordering teacher, use these.
THRESHOLDS: tuple[float, ...] = (3250.0, 7200.0, 18000.0)

SVC_TOL = 1e-3  # GPU-seconds: a crossing this close counts as done (float-safe wake times)


def queue_of(thresholds: tuple[float, ...], service: float, q: int = 0) -> int:
    """The queue of a job with `service` attained GPU-seconds, looking from queue `q` down."""
    while q < len(thresholds) and service + SVC_TOL >= thresholds[q]:
        q += 1
    return q
