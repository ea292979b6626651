"""The live controller against a fake backend and clock: the policy's plan becomes start, resize,
preempt and restart actions, the store records every job's life, nothing is lost on a restart."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.core import Cluster
from dlsched.core.allocation import Allocation
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.live.controller import Controller
from dlsched.live.controller.retry import RetryConfig
from dlsched.live.spec import TrainJob
from dlsched.live.store import Store
from dlsched.policies.registry import make_policy
from dlsched.live.backends.dry import DryBackend, FakeClock


def _setup(tmp_path, policy, nodes=1, gpus=2, retry=None, **backend_kw):
    clock = FakeClock()
    cluster = Cluster.homogeneous("live", nodes=nodes, gpus=gpus, cpus=8, mem=32)
    backend = DryBackend(cluster, clock, **backend_kw)
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    ctl = Controller(store, backend, policy, work_dir=tmp_path, tick=1.0, clock=clock, retry=retry)
    return clock, backend, store, ctl


def _drive(ctl, clock, seconds, dt=1.0):
    for _ in range(int(seconds / dt)):
        clock.advance(dt)
        ctl.step()
        if ctl.idle():
            return


def test_fifo_runs_jobs_in_order_to_their_full_steps(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=1)
    a = store.add(TrainJob(model="mlp", steps=50), now=clock())
    clock.advance(1)
    b = store.add(TrainJob(model="mlp", steps=30), now=clock())
    ctl.step()
    assert store.get(a.id).status == "running" and store.get(b.id).status == "queued"
    _drive(ctl, clock, 60)
    va, vb = store.get(a.id), store.get(b.id)
    assert va.status == vb.status == "done"
    assert (va.steps_done, vb.steps_done) == (50, 30)
    assert vb.started_at >= va.finished_at  # one GPU slot: strictly one after the other
    assert [launch.job_id for launch in backend.launches] == [a.id, b.id]


def test_elastic_policy_resizes_a_running_job_when_another_arrives(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("drf"), gpus=2)
    a = store.add(TrainJob(model="mlp", steps=400, workers=1, min_workers=1, max_workers=2), now=clock())
    _drive(ctl, clock, 5)
    assert backend.launches[-1].allocation.num_workers == 2  # DRF fills the cluster
    b = store.add(TrainJob(model="cnn", steps=100, workers=1, min_workers=1, max_workers=2), now=clock())
    _drive(ctl, clock, 200)
    assert store.get(a.id).status == store.get(b.id).status == "done"
    sizes_a = [launch.allocation.num_workers for launch in backend.launches if launch.job_id == a.id]
    assert 2 in sizes_a and 1 in sizes_a  # shrunk to make room, and back
    kinds = [e.kind for e in store.events(a.id)]
    assert "resized" in kinds and kinds[-1] == "done"
    assert store.get(a.id).steps_done == 400
    assert ctl.pauses and all(p >= 0 for p in ctl.pauses)  # each resize's pause was measured


def test_crashed_run_resumes_from_its_checkpoint_and_finishes(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=1)
    a = store.add(TrainJob(model="mlp", steps=100), now=clock())
    _drive(ctl, clock, 4)
    backend.crash(a.id)
    _drive(ctl, clock, 60)
    view = store.get(a.id)
    assert view.status == "done" and view.steps_done == 100
    assert view.restarts >= 1
    assert "failed-run" in [e.kind for e in store.events(a.id)]


TRACEBACK = """rank 0 (worker on live0, pid 4242) exited with code 1 without done.json
--- tail of run0-rank0.log ---
Traceback (most recent call last):
  File "trainer.py", line 1, in <module>
_pickle.UnpicklingError: invalid load key, '\\x00'."""


def test_a_job_failing_every_run_backs_off_longer_each_time_then_fails_with_a_one_line_reason(tmp_path):
    retry = RetryConfig(attempts=4, backoff_initial=5, backoff_factor=2, backoff_max=15)
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=1, rate_per_worker=0.0001, retry=retry)
    a = store.add(TrainJob(model="mlp", steps=100), now=clock())
    starts, notes = [], []
    for _ in range(200):
        clock.advance(1)
        ctl.step()
        run = backend.runs.get(a.id)
        if run is not None and not run.failed and run.started not in starts:
            starts.append(run.started)
            backend.crash(a.id, TRACEBACK)
        elif store.get(a.id).status == "queued" and ctl.waiting_note(a.id):
            notes.append(ctl.waiting_note(a.id))
            assert store.get(a.id).waiting_reason == notes[-1]  # what the API, page and `status` show
        if store.get(a.id).status == "failed":
            break
    view = store.get(a.id)
    assert view.status == "failed" and len(starts) == 4  # the first run and three retries
    gaps = [b - s for s, b in zip(starts, starts[1:])]
    assert gaps[0] >= 5 and gaps[1] >= 10 and gaps[2] >= 15 and gaps == sorted(gaps)  # never re-placed early
    assert [e.data["delay_s"] for e in store.events(a.id) if e.kind == "backoff"] == [5, 10, 15]
    assert "retrying in 5 s (attempt 2/4)" in notes and "retrying in 1 s (attempt 4/4)" in notes
    assert "\n" not in view.reason and "UnpicklingError: invalid load key" in view.reason
    assert view.reason.startswith("4 runs failed in a row")
    assert any("Traceback" in e.message for e in store.events(a.id) if e.kind == "failed-run")  # full text kept
    assert ctl.idle() and ctl.waiting_note(a.id) == ""


def test_a_backing_off_job_waits_out_its_backoff_across_a_service_restart(tmp_path):
    retry = RetryConfig(attempts=5, backoff_initial=30, backoff_max=30)
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=1, retry=retry)
    a = store.add(TrainJob(model="mlp", steps=100), now=clock())
    _drive(ctl, clock, 3)
    backend.crash(a.id)
    _drive(ctl, clock, 2)
    launches = len(backend.launches)
    ctl2 = Controller(store, backend, make_policy("fifo"), work_dir=tmp_path, clock=clock, retry=retry)
    assert ctl2.waiting_note(a.id).startswith("retrying in 2")
    _drive(ctl2, clock, 20)
    assert len(backend.launches) == launches  # still backing off
    _drive(ctl2, clock, 200)
    assert store.get(a.id).status == "done"


def test_a_missing_checkpoint_of_a_job_with_progress_is_an_event_with_a_reason(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=1)
    a = store.add(TrainJob(model="mlp", steps=400), now=clock())
    _drive(ctl, clock, 6)
    ctl.shutdown(stop_jobs=True)  # checkpointed at its step
    steps = store.get(a.id).steps_done
    assert steps > 0
    backend.lose_checkpoint(a.id)
    ctl2 = Controller(store, backend, make_policy("fifo"), work_dir=tmp_path, clock=clock)
    _drive(ctl2, clock, 3)
    missing = [e for e in store.events(a.id) if e.kind == "checkpoint-missing"]
    assert len(missing) == 1
    assert missing[0].message == f"checkpoint missing: restarting from step 0, {steps} steps lost"
    assert missing[0].data["lost_steps"] == steps


def test_cancel_waiting_and_running_jobs(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=1)
    a = store.add(TrainJob(model="mlp", steps=1000), now=clock())
    b = store.add(TrainJob(model="mlp", steps=1000), now=clock())
    _drive(ctl, clock, 3)
    store.request_cancel(b.id)
    store.request_cancel(a.id)
    _drive(ctl, clock, 3)
    assert store.get(a.id).status == store.get(b.id).status == "cancelled"
    assert backend.runs.get(a.id) is None or backend.runs[a.id].stopped
    assert ctl.idle()


def test_restarted_controller_resumes_waiting_and_running_jobs_without_losing_any(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=1)
    a = store.add(TrainJob(model="mlp", steps=100), now=clock())
    b = store.add(TrainJob(model="mlp", steps=20), now=clock())
    _drive(ctl, clock, 4)
    ctl.shutdown(stop_jobs=True)
    assert store.get(a.id).status == "queued" and store.get(a.id).steps_done > 0
    assert store.events(a.id)[-1].kind == "suspended"
    ctl2 = Controller(store, backend, make_policy("fifo"), work_dir=tmp_path, clock=clock)
    _drive(ctl2, clock, 60)
    assert store.get(a.id).status == store.get(b.id).status == "done"
    assert backend.completions == {a.id: 1, b.id: 1}  # each ran to completion exactly once


def test_job_that_can_never_fit_is_rejected_with_a_reason(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=1)
    a = store.add(TrainJob(model="mlp", steps=10, workers=4), now=clock())
    ctl.step()
    view = store.get(a.id)
    assert view.status == "rejected" and view.reason


class _Greedy(Policy):
    """A buggy policy: puts every job on node 0 whatever its capacity."""

    name = "greedy-bug"

    def schedule(self, snap):
        plan = Plan()
        for js in snap.jobs():
            plan.assign(js.job_id, Allocation.single_node(0, js.spec.num_workers))
        return plan


def test_an_invalid_plan_changes_nothing_and_is_reported(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, _Greedy(), gpus=1)
    store.add(TrainJob(model="mlp", steps=10), now=clock())
    store.add(TrainJob(model="mlp", steps=10), now=clock())
    ctl.step()
    assert backend.launches == []
    assert "over-allocates" in ctl.last_error


@pytest.mark.parametrize("name", ["optimus", "tiresias", "dragon", "qos"])
def test_other_policies_drive_the_live_loop_to_completion(tmp_path, name):
    options = {"optimus": {"interval": 10.0}, "qos": {"interval": 10.0}}.get(name, {})
    clock, backend, store, ctl = _setup(tmp_path, make_policy(name, **options), nodes=2, gpus=2)
    ids = [store.add(TrainJob(model=m, steps=s, workers=1, min_workers=1, max_workers=2), now=clock()).id
           for m, s in (("mlp", 60), ("cnn", 90), ("transformer", 40))]
    _drive(ctl, clock, 300)
    assert [store.get(i).status for i in ids] == ["done"] * 3


def test_dl2_fine_tunes_online_from_measured_progress_in_the_live_loop(tmp_path):
    import torch

    from dlsched.policies.dl2 import SHIPPED_MODEL, DL2Policy
    from dlsched.models.dl2_update import RLConfig
    from dlsched.models.model_io import load_model

    policy = DL2Policy(load_model(SHIPPED_MODEL)[0], slot_seconds=10.0, online=True, rl=RLConfig(batch=8))
    before = [p.detach().clone() for p in policy.net.parameters()]
    clock, backend, store, ctl = _setup(tmp_path, policy, nodes=2, gpus=2)
    ids = [store.add(TrainJob(model=m, steps=s, workers=1, min_workers=1, max_workers=2), now=clock()).id
           for m, s in (("mlp", 2000), ("cnn", 3000), ("transformer", 1500))]
    _drive(ctl, clock, 1500)
    assert [store.get(i).status for i in ids] == ["done"] * 3
    assert policy.updates > 0
    after = list(policy.net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before))  # it learned from the live rewards


# --------------------------------------------------------------------------- issue 17: admission, waiting


def _cpu_bound_setup(tmp_path, policy):
    """Two nodes of 2 GPU slots and 1 CPU each: what a 2-core machine gives the local backend."""
    clock = FakeClock()
    cluster = Cluster(name="two-core", capacity=np.array([[2.0, 1.0, 8.0], [2.0, 1.0, 8.0]]),
                      gpu_type=np.array(["cpu-slot"] * 2, dtype=object), rack=np.zeros(2, dtype=int),
                      speed=np.ones(2), node_names=("n0", "n1"))
    backend = DryBackend(cluster, clock)
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    return clock, backend, store, Controller(store, backend, policy, work_dir=tmp_path, tick=1.0, clock=clock)


def test_stored_jobs_whose_workers_take_nothing_are_rejected_not_run(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), nodes=2, gpus=4)
    free = TrainJob(model="mlp", steps=10_000, gpus_per_worker=0, cpus_per_worker=0, mem_gb_per_worker=0)
    ids = [store.add(free, now=clock()).id for _ in range(30)]  # as a client that skipped the API's check
    ctl.step()
    assert backend.launches == []  # 30 of them once ran at once on 8 slots
    for jid in ids:
        view = store.get(jid)
        assert view.status == "rejected" and "at least 1 GPU slot or 1 CPU" in view.reason


def test_the_api_and_the_controller_share_one_admission_check(tmp_path):
    _, _, _, ctl = _setup(tmp_path, make_policy("fifo"), nodes=2, gpus=2)
    assert ctl.admission_problems(TrainJob(model="mlp", steps=5, workers=4)) == []
    [(key, why)] = ctl.admission_problems(TrainJob(model="mlp", steps=5, workers=5))
    assert key == "workers" and "needs 5 gpu at its minimum size" in why
    [(key, _)] = ctl.admission_problems(TrainJob(model="mlp", steps=5, gpus_per_worker=0, cpus_per_worker=0.5))
    assert key == "gpus_per_worker"


def test_a_queued_job_says_which_resource_keeps_it_waiting(tmp_path):
    clock, backend, store, ctl = _cpu_bound_setup(tmp_path, make_policy("fifo"))
    a = store.add(TrainJob(model="mlp", steps=10_000), now=clock())
    b = store.add(TrainJob(model="mlp", steps=10_000), now=clock())
    c = store.add(TrainJob(model="mlp", steps=10_000), now=clock())
    ctl.step()
    assert store.get(a.id).status == store.get(b.id).status == "running"
    view = store.get(c.id)  # two GPU slots are still free, but no CPU is
    assert view.status == "queued"
    assert view.waiting_reason == "needs 1 CPU per worker, the largest free node has 0"
    assert store.get(a.id).waiting_reason == ""
    d = store.add(TrainJob(model="mlp", steps=10, workers=2, gpus_per_worker=0), now=clock())
    clock.advance(1)
    ctl.step()
    assert store.get(d.id).waiting_reason == "needs 1 CPU per worker, the largest free node has 0"
    store.request_cancel(a.id)
    clock.advance(1)
    ctl.step()  # a's CPU is free: FIFO starts c, and d waits for the CPUs its two workers need
    assert store.get(c.id).status == "running" and store.get(c.id).waiting_reason == ""
    assert store.get(d.id).waiting_reason == "needs 1 CPU per worker, the largest free node has 0"


def test_a_job_that_fits_but_was_not_picked_says_so(tmp_path):
    class Idle(Policy):
        """Starts nothing; explains one job itself."""

        name = "idle"

        def schedule(self, snap):
            return Plan()

        def waiting_reasons(self, snap, plan):
            return {js.job_id: "behind the quota of user bob" for js in snap.pending if js.job_id.endswith("1")}

    clock, backend, store, ctl = _setup(tmp_path, Idle(), nodes=1, gpus=4)
    a = store.add(TrainJob(model="mlp", steps=10), now=clock())
    b = store.add(TrainJob(model="mlp", steps=10), now=clock())
    ctl.step()
    assert store.get(a.id).waiting_reason == "behind the quota of user bob"  # the policy's own word
    assert store.get(b.id).waiting_reason == "fits now, but the policy (idle) did not start it at its last decision"
    ctl.waiting_notes[b.id] = "backing off after a failure: next try in 8 s"  # any part of the controller
    ctl.step()
    assert store.get(b.id).waiting_reason == "backing off after a failure: next try in 8 s"


def test_a_retried_job_is_taken_in_again_and_resumes_from_its_checkpoint(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=1)
    a = store.add(TrainJob(model="mlp", steps=100), now=clock())
    _drive(ctl, clock, 4)
    store.request_cancel(a.id)
    _drive(ctl, clock, 2)
    cancelled = store.get(a.id)
    assert cancelled.status == "cancelled" and 0 < cancelled.steps_done < 100
    store.retry(a.id)
    _drive(ctl, clock, 60)
    view = store.get(a.id)
    assert view.status == "done" and view.steps_done == 100
    assert backend.launches[-1].job_id == a.id and len(backend.launches) == 2
    kinds = [e.kind for e in store.events(a.id)]
    assert kinds[kinds.index("retried"):] == ["retried", "queued", "started", "first-step", "done"], kinds


def test_strict_fifo_says_which_job_a_waiting_job_is_behind(tmp_path):
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), nodes=1, gpus=2)
    a = store.add(TrainJob(model="mlp", steps=10_000), now=clock())
    ctl.step()
    b = store.add(TrainJob(model="mlp", steps=10, workers=2), now=clock())
    c = store.add(TrainJob(model="mlp", steps=10), now=clock())  # would fit the free slot
    clock.advance(1)
    ctl.step()
    assert store.get(a.id).status == "running" and store.get(c.id).status == "queued"
    assert store.get(b.id).waiting_reason == "needs 2 GPUs at its smallest size (2 workers), 1 free"
    assert store.get(c.id).waiting_reason == (f"behind {b.id} in fifo's order: no job starts past one that "
                                              "does not fit (no backfilling)")


def test_the_service_config_retry_section_reaches_the_controller(tmp_path):
    from dlsched.core.errors import ConfigError
    from dlsched.live.service import Service, load_service_config

    path = tmp_path / "service.yaml"
    path.write_text(f"work_dir: {tmp_path / 'work'}\nbackend: dry\npolicy: fifo\n"
                    "retry: {attempts: 2, backoff_initial: 1, backoff_max: 60}\n")
    svc = Service(load_service_config(path))
    try:
        assert svc.controller.retry == RetryConfig(attempts=2, backoff_initial=1, backoff_max=60)
    finally:
        svc.stop()
    path.write_text("retry: {backoff_initial: 10, backoff_max: 5}\n")
    with pytest.raises(ConfigError, match="backoff_max"):
        load_service_config(path)


def test_what_others_use_on_a_node_is_not_offered_and_running_jobs_keep_their_place(tmp_path):
    """A backend's foreign usage (another scheduler's pods on a shared node) shrinks what the
    policy may place, never below what the controller's own jobs use."""
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), gpus=2)
    others = np.zeros_like(backend.cluster().capacity)
    backend.foreign_usage = lambda: others
    a = store.add(TrainJob(model="mlp", steps=10_000, workers=1), now=clock())
    _drive(ctl, clock, 2)
    assert store.get(a.id).status == "running"
    others[0, 0] = 2.0  # someone takes both GPUs' worth: a keeps its one, nothing more is offered
    b = store.add(TrainJob(model="mlp", steps=20, workers=1), now=clock())
    _drive(ctl, clock, 5)
    assert store.get(a.id).status == "running" and store.get(b.id).status == "queued"
    assert ctl.cluster_view()["nodes"][0]["used_gpus"] == 1.0
    others[0, 0] = 1.0  # one GPU back, still none free beside a's
    _drive(ctl, clock, 3)
    assert store.get(b.id).status == "queued"
    others[0, 0] = 0.0
    _drive(ctl, clock, 10)
    assert store.get(b.id).status == "done"


def test_a_node_the_backend_reports_failed_stops_its_jobs_which_the_policy_places_again(tmp_path):
    """A node event from the backend reaches the core: the job on the failed node waits again
    (not a failed run), is placed elsewhere, and the node offers nothing until it is back."""
    clock, backend, store, ctl = _setup(tmp_path, make_policy("fifo"), nodes=2, gpus=1)
    a = store.add(TrainJob(model="mlp", steps=200), now=clock())
    b = store.add(TrainJob(model="mlp", steps=200), now=clock())
    _drive(ctl, clock, 3)
    on = {j: backend.launches[i].allocation.nodes[0] for i, j in enumerate([a.id, b.id])}
    backend.fail_node(on[a.id])
    _drive(ctl, clock, 2)
    kinds = [e.kind for e in store.events(a.id)]
    assert "node-failed" in kinds and "failed-run" not in kinds
    assert store.get(a.id).status == "queued"  # the other node is b's
    assert [n["up"] for n in ctl.cluster_view()["nodes"]] == [i != on[a.id] for i in range(2)]
    backend.join_node(on[a.id])
    _drive(ctl, clock, 60)
    assert store.get(a.id).status == store.get(b.id).status == "done"
    assert all(n["up"] for n in ctl.cluster_view()["nodes"])
