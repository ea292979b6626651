"""What the live controller tells others (part of `Controller`).

Why each queued job waits (written to the store every round, so the API, the status page and
`dlsched status` show it), and what the API, the service and batch runs ask the controller: the
cluster view, health, whether it is idle, whether a job may be admitted, where a job's files are.
Apart from `loop.py` because none of it changes what the controller does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlsched.core.snapshot import JobStatus
from dlsched.live.controller.admission import admission_problems
from dlsched.live.controller.waiting import waiting_reasons
from dlsched.live.spec import TrainJob


@dataclass(frozen=True)
class ClusterView:
    """What a round leaves for readers on other threads: the /cluster document and whether the
    controller had nothing to do."""

    cluster: dict
    idle: bool


class ControllerReports:
    """The reporting side of `Controller` (a mixin: it reads the controller's state, policy and
    cluster and writes the waiting reasons to its store, all set up in `Controller.__init__`)."""

    def _publish_waiting(self) -> None:
        """Write why each queued job waits (changed ones only) and clear it for jobs that left the queue."""
        queued = {jid: js for jid, js in self.state.jobs.items() if js.status is JobStatus.PENDING}
        notes = {**self.waiting_notes, **{jid: self.waiting_note(jid) for jid in self.backing_off}}
        now = waiting_reasons(queued, self.state.free, self.cluster, notes=notes,
                              policy_said=self._policy_said, policy=self.policy.name,
                              last_decision=self._last_decision)
        changed = {jid: {"waiting_reason": r} for jid, r in now.items() if self._waiting.get(jid) != r}
        changed.update({jid: {"waiting_reason": ""} for jid in self._waiting if jid not in now})
        self.store.update_many(changed)
        self._waiting = now
        for jid in [j for j in self.waiting_notes if j not in queued]:
            del self.waiting_notes[jid]  # a note is about one wait: it ends when the job leaves the queue

    # ------------------------------------------------------------------ API helpers
    def _publish_view(self) -> None:
        """End of a round: what the API may read until the next one (a new object each time, so a
        reader on another thread always sees one whole round)."""
        used, down, nodes = self.state.used, self.state.down, []
        on_node: dict[int, list[str]] = {}  # one pass over the jobs, not one per node: this runs every round
        for jid, js in self.state.running.items():
            for i in js.allocation.nodes:
                on_node.setdefault(i, []).append(jid)
        for jid, js in self.state.holding.items():
            for i in js.held.nodes:
                on_node.setdefault(i, []).append(f"{jid} (held)")
        for i, name in enumerate(self.cluster.node_names):
            cap = self.cluster.capacity[i]
            jobs = on_node.get(i, [])
            nodes.append({"name": name, "gpus": float(cap[0]), "cpus": float(cap[1]), "mem_gb": float(cap[2]),
                          "used_gpus": float(used[i, 0]), "used_cpus": float(used[i, 1]),
                          "used_mem_gb": float(used[i, 2]), "up": i not in down,
                          "jobs": jobs})
        self.view = ClusterView(
            cluster={"nodes": nodes, "policy": self.policy.name, "backend": self.backend.name,
                     "decisions": self.decisions, "last_error": self.last_error},
            idle=not (self.state.pending or self.state.running or self.backing_off))

    def cluster_view(self) -> dict:
        """The nodes, their use and the policy as of the last round (never waits for one)."""
        return self.view.cluster

    def admission_problems(self, job: TrainJob) -> list[tuple[str, str]]:
        """Why `job` may not be admitted to this cluster ([] when it may): asked by the API at submit."""
        return admission_problems(job, self.cluster)

    def job_dir(self, job_id: str) -> Path:
        """Where the job's checkpoints and progress live (what `DELETE /jobs/{id}?purge=true` removes)."""
        return self.record.job_dir(job_id)

    def health(self) -> str:
        """"" when the last decision succeeded, else why it failed."""
        return self.last_error

    def idle(self) -> bool:
        """No job waiting or running as of the last round (what a batch run waits for)."""
        return self.view.idle
