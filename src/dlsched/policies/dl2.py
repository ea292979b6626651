"""DL2 (Peng et al., IEEE TPDS 2021): a neural network decides every slot how many workers and
PSs each job gets, one task at a time.

Every `slot_seconds` (DL2: 20 minutes) the policy builds the slot from nothing: each job first
gets its minimum gang if it fits (running jobs where they run, then waiting jobs in the order of
DL2's teacher, DRF), then the network is called repeatedly on the 6 × J state and
picks one action — a worker, a PS or a bundle for one of the J window jobs, or "end the slot" —
among the valid ones; each task goes to the least-loaded node. Between slots, an arrival or a
completion starts waiting jobs at their minimum gang in the same order, without the network (DL2
on its cluster leaves them waiting up to a slot; on a trace of rigid jobs that idles GPUs for
nothing, and its teacher DRF reacts at every event). Once a slot or an event is decided, GPUs
still free go to the jobs without PSs that can grow, on nodes they hold (`fill`; a GPU left idle
while jobs could use it made dl2 1.25x DRF on an elastic reading of an ITP trace). It sees only
what a live system sees (progress, and the total work only when the job declared it), so the same
object runs in the live controller. Training is in `dlsched.rl` (`dlsched train dl2`).

Two trained networks ship, one per kind of job (`dl2()` with no model picks at the run's first
decision and says which in `notes`): DL2's own, trained on its synthetic parameter-server jobs
(`data/dl2_model.pt`), for workloads with PS jobs; and one trained by the same recipe on windows
of the ITP deadline traces, all-reduce jobs on measured curves (`data/dl2_itp_model.pt`), for any
other workload. The first one, on all-reduce jobs, is far out of its training distribution: it
grew jobs by PSs and bundles (99.5% of its growth actions on DL2 workloads), which all-reduce
jobs cannot take, so it ends nearly every slot at once and leaves jobs at 1 GPU (docs/DL2.md).

Online fine-tuning (`online=True`, off by default): the policy keeps learning while it schedules,
as DL2 does on its live cluster. At each slot it scores the previous slot's actions with DL2's
reward computed from *measured* progress — Σ over jobs of progress made / total work, the total
being the declared work or, when unknown, the shared estimator's (progress + remaining) — stores
them in a prioritised replay and takes one actor-critic step (`rl.actor_critic.update`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.job import Architecture
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.estimators.progress_predictor import RemainingWork
from dlsched.models.dl2_update import RLConfig, update
from dlsched.models.dl2_network import ActorInference, DL2Net
from dlsched.models.model_io import load_model
from dlsched.models.replay import PrioritizedReplay
from dlsched.models.slot_builder import ROWS, SlotBuilder, action_dim

_DATA = Path(__file__).resolve().parent.parent / "data"
SHIPPED_MODEL = _DATA / "dl2_model.pt"
SHIPPED_TRACE_MODEL = _DATA / "dl2_itp_model.pt"
#: The shipped network for each kind of workload (`workload_kind`), with what it was trained on.
SHIPPED_MODELS: dict[str, tuple[Path, str]] = {
    "ps": (SHIPPED_MODEL, "DL2's parameter-server workloads"),
    "allreduce": (SHIPPED_TRACE_MODEL, "ITP deadline traces on measured curves (all-reduce)"),
}
MAX_ACTIONS_PER_SLOT = 100_000  # a guard: every action adds a task, so capacity ends a slot first


def workload_kind(jobs: list[JobState]) -> str:
    """"ps" when any job has parameter servers (DL2's own kind of job), else "allreduce"."""
    return "ps" if any(j.spec.arch is Architecture.PS for j in jobs) else "allreduce"


def trained_kind(meta: dict) -> str | None:
    """The kind of job a model from `dlsched train dl2` learned on (None: not recorded)."""
    workloads = meta.get("config", {}).get("workloads", "dl2" if "config" in meta else None)
    return {"dl2": "ps", "itp": "allreduce"}.get(workloads) if workloads else None


class DL2Policy(Policy):
    on_events = True  # between slots: start waiting jobs, no network call (`SlotBuilder(between_slots=True)`)

    def __init__(self, net: DL2Net | None, slot_seconds: float = 1200.0, greedy: bool = False, name: str = "dl2",
                 online: bool = False, rl: RLConfig | None = None,
                 choices: dict[str, tuple[Path, str]] | None = None, trained_on: str | None = None,
                 fill: bool = True):
        """`net`: the network to use; None with `choices` (kind -> model file, what it was trained
        on): load the one for the workload's kind at the first decision (`workload_kind`).
        `trained_on`: the kind of job `net` learned on; another kind gets a note in `notes`.
        `fill`: once a slot (or an event between slots) is decided, give the GPUs still free to the jobs
        without PSs that can grow, on nodes they hold (`SlotBuilder.fill_free`)."""
        if net is None and not choices:
            raise ConfigError("dl2: give a network or the models to choose from")
        self.choices = choices
        self.trained_on = trained_on
        self.fill = fill
        self.interval = slot_seconds
        self.slot_seconds = slot_seconds
        self.greedy = greedy
        self.name = name
        self.online = online
        self.rl = rl or RLConfig()
        self.updates = 0
        self.notes: list[str] = []
        self._given = net
        self._seed = 0
        self._use(net)
        self.reset(None, 0)

    def _use(self, net: DL2Net | None) -> None:
        self.net = net.eval() if net is not None else None
        self.window = net.window if net is not None else 0
        self.opt = torch.optim.Adam(net.parameters(), lr=self.rl.lr) if self.online and net is not None else None
        if self.online and net is not None:
            self.replay = PrioritizedReplay(self.rl.replay, (ROWS, self.window), action_dim(self.window), seed=self._seed)

    def reset(self, cluster: Cluster | None, seed: int) -> None:
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._remaining = RemainingWork()
        self._slot: list[tuple[np.ndarray, np.ndarray, int]] = []
        self._before: dict[str, tuple] = {}
        self._first = True
        self._last_slot: float | None = None
        self.notes = []
        if self.choices:  # None again: choose for the next workload at its first decision
            self._use(self._given)
        elif self.online:
            self.replay = PrioritizedReplay(self.rl.replay, (ROWS, self.window), action_dim(self.window), seed=seed)

    def _first_decision(self, jobs: list[JobState]) -> None:
        """Pick the shipped model for the workload's kind, or say when the given one never saw it."""
        kind = workload_kind(jobs)
        if self.net is None:
            path, trained_on = self.choices[kind]  # type: ignore[index]
            self._use(_load(path)[0])
            self.notes = [f"{self.name}: {kind} jobs, so the model trained on {trained_on} ({path.name})"]
        elif self.trained_on is not None and kind != self.trained_on:
            self.notes = [f"{self.name}: its model was trained on {self.trained_on} jobs and these are {kind} jobs: "
                          "outside its training distribution (docs/DL2.md)"]

    @torch.no_grad()
    def schedule(self, snap: Snapshot) -> Plan:
        if self._first:
            self._first = False
            self._first_decision(snap.running + snap.pending)
        self._remaining.observe(snap.running + snap.pending)
        if not self._slot_due(snap):  # an arrival or a completion between slots: no network call
            builder = SlotBuilder(snap, self.window, self.slot_seconds, self._remaining, between_slots=True)
            if self.fill:
                builder.fill_free()
            return builder.plan()
        self._last_slot = snap.now
        if self.online:
            self._learn_from_last_slot()
        builder = SlotBuilder(snap, self.window, self.slot_seconds, self._remaining)
        actor = ActorInference(self.net)  # this slot's weights (online updates change them between slots)
        for _ in range(MAX_ACTIONS_PER_SLOT):
            mask = builder.mask()
            state = builder.state()
            if mask.sum() == 1:  # only "end the slot" is left
                action = len(mask) - 1
            else:
                action = actor.choose(state, mask, self._rng, self.greedy)
            if self.online:
                self._slot.append((state, mask, action))
            if not builder.apply(action):
                break
        if self.fill:
            builder.fill_free()
        if self.online:
            self._before = {j.job_id: (j, j.progress, self._total(j)) for j in builder.jobs}
        return builder.plan()

    def _slot_due(self, snap: Snapshot) -> bool:
        """A slot boundary (the timer, or the first decision of a run), when the network rebuilds
        the slot; any other call only starts waiting jobs on free resources."""
        return "tick" in snap.events or self._last_slot is None or snap.now >= self._last_slot + self.slot_seconds

    # ------------------------------------------------------------------ online fine-tuning
    def _total(self, job) -> float:
        if job.declared_work is not None:
            return job.declared_work
        est = self._remaining.estimate(job)
        return job.progress + est.remaining if np.isfinite(est.remaining) else float("inf")

    def _learn_from_last_slot(self) -> None:
        if not self._slot:
            return
        reward = sum((job.progress - done) / total for job, done, total in self._before.values()
                     if np.isfinite(total) and total > 0)
        for s, m, a in self._slot:
            self.replay.add(s, m, a, reward)
        self._slot = []
        if len(self.replay) >= self.rl.batch:
            with torch.enable_grad():
                update(self.net, self.opt, self.replay, self.rl)
            self.updates += 1


def _load(path: Path) -> tuple[DL2Net, dict]:
    if not path.exists():
        raise ConfigError(
            f"no DL2 model at {path}: train one with `dlsched train dl2` and pass it as policy option model=PATH"
        )
    return load_model(path)


def dl2(model: str | None = None, greedy: bool = False, slot_seconds: float = 1200.0, online: bool = False,
        fill: bool = True) -> DL2Policy:
    """DL2 with a trained model: `model` is a file from `dlsched train dl2`; default: the shipped
    model for the workload's kind of job (`SHIPPED_MODELS`, chosen at the first decision).
    `online=True` keeps fine-tuning it from measured progress while it schedules. `fill=False`:
    GPUs a decision leaves free stay idle until a later one uses them (the policy before issue 29)."""
    if slot_seconds <= 0:
        raise ConfigError("dl2: slot_seconds must be > 0")
    if model:
        net, meta = _load(Path(model))
        return DL2Policy(net, slot_seconds=slot_seconds, greedy=greedy, online=online, trained_on=trained_kind(meta),
                         fill=fill)
    for path, _ in SHIPPED_MODELS.values():
        _load(path)  # a missing or damaged file fails now, not at the first decision
    return DL2Policy(None, slot_seconds=slot_seconds, greedy=greedy, online=online, choices=SHIPPED_MODELS,
                     fill=fill)
