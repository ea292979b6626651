"""SRTF, DRF, Tiresias and default-Kubernetes baselines on small hand-made clusters and workloads."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.core import Cluster, JobSpec, Plan, Policy
from dlsched.core.policy import Wrapper
from dlsched.core.snapshot import Snapshot
from dlsched.policies.drf import drf
from dlsched.policies.fifo import fifo
from dlsched.policies.kube_default import kube_default
from dlsched.policies.phases.ordering import ShortestRemainingTime
from dlsched.policies.phases.placement import Pack
from dlsched.policies.phases.realise import realise
from dlsched.policies.registry import make_policy
from dlsched.policies.srtf import srtf
from dlsched.policies.tiresias import tiresias
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.duration_only import DurationOnly

MODEL = DurationOnly()


def job(name: str, submit: float, seconds: float, gpus: int = 1, **kw) -> JobSpec:
    arch = kw.pop("arch", "single" if gpus == 1 else "allreduce")
    return JobSpec(job_id=name, submit_time=submit, iterations=seconds, duration=seconds,
                   num_workers=gpus, arch=arch, **kw)


def node(n: int = 1, gpus: int = 4, cpus: float = 64, mem: float = 512) -> Cluster:
    return Cluster.homogeneous("t", nodes=n, gpus=gpus, cpus=cpus, mem=mem)


def random_rigid(seed: int, n: int, gap: float, mu: float, sigma: float, sizes: list[int]) -> list[JobSpec]:
    """n rigid jobs: Poisson arrivals (mean gap `gap` s, times rounded to 0.1 s), log-normal
    durations (mu, sigma of the log), GPU counts drawn from `sizes`; the same seed, the same jobs."""
    rng = np.random.default_rng(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += float(rng.exponential(gap))
        jobs.append(job(f"r{i}", round(t, 1), float(np.exp(rng.normal(mu, sigma))), int(rng.choice(sizes))))
    return jobs


class Recorder(Wrapper):
    """Wraps a policy and keeps (time, allocations, held) of every plan it returns."""

    def __init__(self, inner: Policy):
        super().__init__(inner)
        self.log: list[tuple[float, dict, dict]] = []

    def reset(self, cluster, seed):
        self.inner.reset(cluster, seed)
        self.log = []

    def schedule(self, snap: Snapshot) -> Plan:
        plan = self.inner.schedule(snap)
        self.log.append((snap.now, plan.running_after(snap.running), dict(plan.held)))
        return plan

    def first_run_after(self, job_id: str, t: float) -> float:
        return next(now for now, allocs, _ in self.log if now > t and job_id in allocs)


def run(jobs, cluster, policy, **cfg):
    return simulate(jobs, cluster, policy, MODEL, SimConfig(**cfg))


def rows(result):
    return result.jobs.set_index("job_id")


def heavy_tailed(n: int, seed: int, gpus_per_node: int = 8, nodes: int = 4, load: float = 0.9):
    """Poisson arrivals, mostly small jobs, log-normal durations (a few jobs dominate the work)."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 1, 1, 1, 2, 4, 8], size=n)
    dur = np.exp(rng.normal(6.5, 1.6, size=n)).clip(10, 2e5)
    mean_work = float((sizes * dur).mean())
    gap = mean_work / (load * gpus_per_node * nodes)
    t = np.cumsum(rng.exponential(gap, size=n))
    return [job(f"h{i}", float(t[i]), float(dur[i]), int(sizes[i])) for i in range(n)]


# ------------------------------------------------------------------------------------ SRTF


def test_srtf_runs_a_later_short_job_first_by_preempting_the_long_one():
    jobs = [job("long", 0, 1000, 4), job("short", 10, 100, 4)]
    r = rows(run(jobs, node(), srtf()))
    assert r.loc["short", "end"] == pytest.approx(110)  # started at arrival, preempting "long"
    assert r.loc["long", "preemptions"] == 1
    assert r.loc["long", "end"] == pytest.approx(110 + 10 + 990)  # resumes after a 10 s restart
    f = rows(run(jobs, node(), fifo()))
    assert f.loc["short", "end"] == pytest.approx(1100)
    assert r["jct"].mean() < f["jct"].mean()


def test_srtf_does_not_preempt_for_an_equally_short_job():
    jobs = [job("a", 0, 1000, 4), job("b", 500, 500, 4)]  # b arrives with exactly a's remaining time
    r = rows(run(jobs, node(), srtf()))
    assert r.loc["a", "preemptions"] == 0
    assert r.loc["b", "start"] == pytest.approx(1000)


def test_srtf_preempts_only_what_the_newcomer_needs_and_lowest_priority_first():
    # Two 2-GPU jobs run; a 2-GPU newcomer shorter than both takes the place of the longest only.
    jobs = [job("mid", 0, 500, 2), job("longest", 0, 900, 2), job("new", 10, 50, 2)]
    r = rows(run(jobs, node(), srtf()))
    assert r.loc["mid", "preemptions"] == 0
    assert r.loc["longest", "preemptions"] == 1
    assert r.loc["new", "start"] == pytest.approx(10)


def test_srtf_fast_order_equals_sorting_by_the_documented_key():
    order = ShortestRemainingTime()

    class Check(Policy):
        name, oracle = "srtf", True

        def __init__(self):
            self.inner, self.rounds = srtf(), 0

        def schedule(self, snap):
            jobs = snap.running + snap.pending
            assert order.order(snap, jobs) == sorted(jobs, key=lambda j: order.key(snap, j))
            self.rounds += 1
            return self.inner.schedule(snap)

    check = Check()
    run(heavy_tailed(120, seed=3, nodes=2), node(n=2, gpus=8), check)
    assert check.rounds > 100


def test_srtf_elastic_gives_jobs_up_to_their_maximum_in_order():
    jobs = [job("a", 0, 1000, 2, min_workers=1, max_workers=4), job("b", 0, 300, 2, min_workers=1, max_workers=4)]
    rec = Recorder(srtf(elastic=True))
    run(jobs, node(gpus=6), rec)
    _, first, _ = rec.log[0]
    assert first["b"].num_workers == 4 and first["a"].num_workers == 2  # shortest first, to its max


# ------------------------------------------------------------------------------------ Tiresias


def test_tiresias_demotes_after_3250_gpu_seconds_and_a_new_job_preempts():
    # 4 GPUs reach 3250 GPU-s at t = 812.5; a job arriving at t = 1000 is in Q0, above it.
    jobs = [job("long", 0, 5000, 4), job("new", 1000, 100, 4)]
    pol = tiresias()
    r = rows(run(jobs, node(), pol))
    assert pol.demotions >= 1
    assert r.loc["new", "start"] == pytest.approx(1000)
    assert r.loc["long", "preemptions"] == 1
    assert r.loc["long", "end"] == pytest.approx(1100 + 10 + 4000)


def test_tiresias_does_not_preempt_within_q0():
    # At t = 500 the running job has 2000 GPU-s: still Q0, and running jobs lead their queue, so
    # the newcomer waits; it takes over only when "long" drops to Q1 at 3250 / 4 = 812.5.
    jobs = [job("long", 0, 5000, 4), job("new", 500, 100, 4)]
    r = rows(run(jobs, node(), tiresias()))
    assert r.loc["new", "start"] == pytest.approx(812.5)
    assert r.loc["long", "preemptions"] == 1


def test_tiresias_demotion_is_woken_exactly_at_the_threshold_without_a_tick():
    jobs = [job("long", 0, 5000, 4), job("new", 500, 100, 4)]
    rec = Recorder(tiresias())
    run(jobs, node(), rec)
    assert rec.inner.interval is None
    times = [t for t, _, _ in rec.log]
    assert 812.5 in times  # 3250 / 4 GPUs: the wake-up it asked for
    # at 812.5 "long" drops to Q1 behind the waiting Q0 job, which therefore preempts it
    t, allocs, _ = next(x for x in rec.log if x[0] == 812.5)
    assert set(allocs) == {"new"}


def test_tiresias_never_preempts_when_the_cluster_has_room():
    # "long" (8 GPUs) sinks to Q2; an 8-GPU Q0 newcomer fits on the free node: nobody is preempted.
    jobs = [job("long", 0, 5000, 8), job("new", 1000, 100, 8)]
    r = rows(run(jobs, node(n=2, gpus=8), tiresias()))
    assert r["preemptions"].sum() == 0
    assert r.loc["new", "start"] == pytest.approx(1000)


def test_tiresias_promotes_a_starved_job_back_to_q0():
    # "a" (8 GPUs) reaches Q2 (7200 GPU-s) at t = 900 and is preempted at t = 1000 by "b" (Q0).
    # Without promotion it waits until "b" also sinks to Q2 (t = 1000 + 900 = 1900). With
    # knob 0.3 it is promoted at 0 + 1.3 x 1000 = 1300, behind the running "b" in Q0, and takes
    # over when "b" drops to Q1 at 1000 + 3250 / 8 = 1406.25.
    jobs = [job("a", 0, 5000, 8), job("b", 1000, 3000, 8)]
    off = Recorder(tiresias(promote_knob=0))
    run(jobs, node(gpus=8), off)
    assert off.inner.promotions == 0
    assert off.first_run_after("a", 1000) == pytest.approx(1900)
    on = Recorder(tiresias(promote_knob=0.3))
    run(jobs, node(gpus=8), on)
    assert on.inner.promotions >= 1
    assert 1300 in [t for t, _, _ in on.log]  # woken for the promotion itself
    assert on.first_run_after("a", 1000) == pytest.approx(1406.25)


class SimpleTiresias(Policy):
    """The same rules written the obvious way (lists rebuilt every round): a reference to diff against.

    Queues are plain lists; each round: drop finished jobs, append arrivals to Q0, demote running
    jobs past their threshold to the end of the next queue, promote starved waiting jobs to the
    end of Q0, realise the walk with `realise` (minimal preemption), then move waiting jobs behind running
    ones in every queue (stable). Wake-up = earliest threshold crossing or promotion.
    """

    name = "tiresias-simple"

    def __init__(self, thresholds=(3250.0, 7200.0, 18000.0), knob=8.0):
        self.T, self.knob = thresholds, knob

    def reset(self, cluster, seed):
        self.queues = [[] for _ in range(len(self.T) + 1)]
        self.info = {}

    def _queue_of(self, svc, q):
        while q < len(self.T) and svc + 1e-3 >= self.T[q]:
            q += 1
        return q

    def schedule(self, snap):
        now, T, info = snap.now, self.T, self.info
        alive = {j.index: j for j in snap.running + snap.pending}
        for queue in self.queues:
            queue[:] = [i for i in queue if i in alive]
        for j in sorted((j for j in snap.pending if j.index not in info), key=lambda j: (j.spec.submit_time, j.index)):
            info[j.index] = {"q": 0, "bs": j.attained_service, "br": j.run_time, "fr": None}
            self.queues[0].append(j.index)
        crossing = []
        for j in snap.running:
            e = info[j.index]
            svc = j.attained_service - e["bs"]
            q = self._queue_of(svc, e["q"])
            if q != e["q"]:
                rate = j.spec.num_workers * j.spec.worker_demand[0]
                crossing.append((now - (svc - T[e["q"]]) / rate, j.index, q))
        for _, idx, q in sorted(crossing):
            self.queues[info[idx]["q"]].remove(idx)
            info[idx]["q"] = q
            self.queues[q].append(idx)
        promote = []
        for q in range(1, len(self.queues)):
            for idx in self.queues[q]:
                j, e = alive[idx], info[idx]
                if j.allocation is None and e["fr"] is not None and self.knob > 0:
                    t = max(e["fr"] + (1 + self.knob) * (j.run_time - e["br"]), j.last_stop + 1e-3)
                    if t <= now:
                        promote.append((t, idx))
        for _, idx in sorted(promote):
            j, e = alive[idx], info[idx]
            self.queues[e["q"]].remove(idx)
            e.update(q=0, bs=j.attained_service, br=j.run_time, fr=None)
            self.queues[0].append(idx)
        order = [alive[i] for queue in self.queues for i in queue]
        allocations = realise(snap, [(j, j.spec.num_workers, j.spec.num_ps) for j in order], Pack())
        wake = []
        for queue in self.queues:
            queue.sort(key=lambda i: alive[i].job_id not in allocations)  # stable: running first
            for i in queue:
                j, e = alive[i], info[i]
                if alive[i].job_id in allocations:
                    e["fr"] = now if e["fr"] is None else e["fr"]
                    if e["q"] < len(T):
                        rate = j.spec.num_workers * j.spec.worker_demand[0]
                        wake.append(now + max(0.0, T[e["q"]] - (j.attained_service - e["bs"])) / rate)
                elif e["q"] > 0 and e["fr"] is not None and self.knob > 0:
                    stop = now if j.allocation is not None else j.last_stop
                    wake.append(max(e["fr"] + (1 + self.knob) * (j.run_time - e["br"]), stop + 1e-3))
        return Plan(allocations=allocations, wake_at=min(wake) if wake else None)


@pytest.mark.parametrize("seed,knob", [(0, 8.0), (1, 1.0), (2, 0.0)])
def test_incremental_tiresias_matches_the_simple_version(seed, knob):
    rng = np.random.default_rng(seed)
    jobs = []
    t = 0.0
    for i in range(120):
        t += float(rng.exponential(40))
        g = int(rng.choice([1, 1, 2, 4, 8]))
        jobs.append(job(f"r{i}", round(t, 1), float(np.exp(rng.normal(6.5, 1.5))), g))
    cluster = node(n=3, gpus=8)
    fast = run(jobs, cluster, tiresias(promote_knob=knob)).jobs.set_index("job_id")
    slow = run(jobs, cluster, SimpleTiresias(knob=knob)).jobs.set_index("job_id")
    assert (fast["status"] == "done").all()
    assert fast["preemptions"].sum() > 0  # the workload does exercise preemption
    np.testing.assert_array_equal(fast["preemptions"].to_numpy(), slow["preemptions"].to_numpy())
    np.testing.assert_allclose(fast["end"].to_numpy(), slow["end"].to_numpy(), rtol=1e-9, atol=1e-6)


def test_tiresias_and_kube_follow_a_snapshot_they_did_not_produce():
    # A live controller may hand a policy a job it never started, or drop a waiting job: the
    # cheap bookkeeping notices the mismatch and reconciles job by job.
    from dlsched.core import Allocation, Clock, JobState, JobStatus

    cluster = node(n=2, gpus=4)
    clock = Clock(100.0)
    old = JobState(spec=job("old", 0, 9000, 4), index=0, clock=clock, status=JobStatus.RUNNING,
                   allocation=Allocation.single_node(1, 4), alloc_gpus=4.0, _attained=1000.0,
                   last_update=100.0, last_start=0.0)
    new = JobState(spec=job("new", 50, 100, 4), index=1, clock=clock, status=JobStatus.PENDING)
    gone = JobState(spec=job("gone", 60, 100, 4), index=2, clock=clock, status=JobStatus.PENDING)

    def snap(running, pending):
        free = cluster.capacity.copy()
        for j in running:
            free[list(j.allocation.nodes)] -= j.allocation.usage(np.asarray(j.spec.worker_demand), np.asarray(j.spec.ps_demand))
        return Snapshot(now=clock.now, cluster=cluster, free=free, pending=pending, running=running, restart_overhead=10.0)

    pol = tiresias()
    plan = pol.schedule(snap([old], [new, gone]))
    # "old" is adopted in place: 1000 GPU-s is Q0, where running jobs lead, so "gone" waits
    after = plan.running_after([old])
    assert after["old"] is old.allocation and not plan.preempt
    assert set(after) == {"old", "new"} and after["new"].nodes == (0,)
    # "new" ran elsewhere meanwhile; "gone" was cancelled; the policy must not plan either wrongly
    new.status, new.allocation, new.alloc_gpus = JobStatus.RUNNING, after["new"], 4.0
    plan2 = pol.schedule(snap([old, new], []))
    assert plan2.running_after([old, new]) == {"old": old.allocation, "new": new.allocation}

    kube = kube_default()
    kplan = kube.schedule(snap([old], [new, gone]))
    assert set(kplan.running_after([old])) == {"old", "new"} and not kplan.held and not kplan.preempt
    kplan2 = kube.schedule(snap([old, new], []))  # "gone" vanished without being bound
    assert kplan2.running_after([old, new]) == {"old": old.allocation, "new": new.allocation}
    assert not kplan2.held and not kplan2.allocations  # nothing new to bind


# ------------------------------------------------------------------------------------ DRF


def test_drf_gives_equal_demand_jobs_equal_shares():
    elastic = dict(min_workers=1, max_workers=8, arch="allreduce")
    jobs = [job("a", 0, 1000, 4, **elastic), job("b", 0, 1000, 4, **elastic), job("c", 50, 1000, 4, **elastic)]
    rec = Recorder(drf())
    run(jobs, node(gpus=8), rec)
    _, first, _ = rec.log[0]
    assert {k: a.num_workers for k, a in first.items()} == {"a": 4, "b": 4}
    _, second, _ = rec.log[1]  # c arrives: 8 GPUs over three jobs
    assert sorted(a.num_workers for a in second.values()) == [2, 3, 3]


def test_drf_grows_ps_jobs_in_worker_plus_ps_bundles_on_their_dominant_resource():
    # A bundle (1 GPU + 2 CPU worker, 2 CPU PS) takes 1/8 of the GPUs but 1/4 of the CPUs: CPU is
    # dominant, so the two jobs get two bundles each, not the four workers GPUs alone would allow.
    ps = dict(arch="ps", num_ps=1, min_workers=1, max_workers=4, worker_demand=(1, 2, 8), ps_demand=(0, 2, 8))
    jobs = [job("a", 0, 1000, 1, **ps), job("b", 0, 1000, 1, **ps)]
    rec = Recorder(drf())
    run(jobs, node(gpus=8, cpus=16), rec)
    _, first, _ = rec.log[0]
    for alloc in first.values():
        assert alloc.num_workers == 2 and alloc.num_ps == 2


def test_drf_by_user_shares_between_users_not_jobs():
    jobs = [job("x1", 0, 1000, 4, user="x"), job("x2", 0, 1000, 4, user="x"), job("y1", 1, 1000, 4, user="y")]
    by_job = rows(run(jobs, node(gpus=8), drf()))
    assert by_job["preemptions"].sum() == 0 and by_job.loc["y1", "start"] == pytest.approx(1000)
    by_user = rows(run(jobs, node(gpus=8), drf(share_by="user")))
    assert by_user.loc["x2", "preemptions"] == 1
    assert by_user.loc["y1", "start"] == pytest.approx(1)


@pytest.mark.parametrize("stop", [False, True])
def test_drf_per_job_fast_path_matches_the_general_entity_filling(stop):
    # One queue per job makes share_by="queue" the same fairness as share_by="job", computed by
    # the general entity code instead of the per-job fast path: the runs must be identical.
    jobs = mixed_workload(6)[1:]
    alone = [JobSpec(**{**{f: getattr(j, f) for f in j.__dataclass_fields__}, "queue": j.job_id}) for j in jobs]
    cluster = Cluster.homogeneous("mix", nodes=4, gpus=8, cpus=48, mem=512)
    fast = rows(run(alone, cluster, drf(stop_at_first_failure=stop)))
    general = rows(run(alone, cluster, drf(share_by="queue", stop_at_first_failure=stop)))
    assert fast["preemptions"].sum() > 0 and fast["restarts"].sum() > 0  # shares did move
    for col in ("end", "start", "preemptions", "restarts"):
        np.testing.assert_array_equal(fast[col].to_numpy(), general[col].to_numpy())


def test_drf_keeps_running_jobs_in_place_when_their_share_is_unchanged():
    jobs = [job(f"j{i}", 10.0 * i, 5000, 2) for i in range(4)]  # 8 GPUs: everyone fits
    r = rows(run(jobs, node(n=2, gpus=4), drf()))
    assert r["restarts"].sum() == 0 and r["preemptions"].sum() == 0


# ------------------------------------------------------------------------------------ kube-default


def test_kube_default_holds_partial_jobs_where_gang_fifo_holds_nothing():
    # "a" takes 6 of 8 GPUs; "b" needs 4: kube binds 2 of its pods, which sit idle until "a" ends.
    jobs = [job("a", 0, 1000, 6), job("b", 10, 500, 4)]
    cluster = node(n=2, gpus=4)
    k = run(jobs, cluster, kube_default())
    kr = rows(k)
    assert kr.loc["b", "held_gpu_seconds"] == pytest.approx(2 * 990)
    assert k.summary["held_gpu_hours"] > 0
    assert kr.loc["b", "start"] == pytest.approx(1000)
    g = run(jobs, cluster, fifo())
    assert g.summary["held_gpu_hours"] == 0
    assert (rows(g)["held_gpu_seconds"] == 0).all()


def test_kube_default_spreads_pods_and_never_moves_them():
    jobs = [job("a", 0, 1000, 4), job("b", 10, 1000, 4)]
    rec = Recorder(kube_default())
    r = rows(run(jobs, node(n=4, gpus=4), rec))
    _, first, _ = rec.log[0]
    assert first["a"].num_nodes == 4  # one pod per node: LeastAllocated spreads
    assert r["restarts"].sum() == 0 and r["preemptions"].sum() == 0
    for _, allocs, _ in rec.log[1:]:
        assert "a" not in allocs or allocs["a"] == first["a"]


def test_kube_default_does_not_block_the_queue_on_a_pod_that_does_not_fit():
    # "a" spreads 2 + 1 pods over the two 4-GPU nodes. "big" has two 3-GPU pods: one binds on
    # node 1, the other fits nowhere and waits, holding the first. The later 1-GPU job is still
    # bound at once on node 0; "big" runs only when "a" ends.
    jobs = [job("a", 0, 1000, 3), job("big", 5, 100, 2, worker_demand=(3, 4, 16)), job("small", 6, 100, 1)]
    r = rows(run(jobs, node(n=2, gpus=4), kube_default()))
    assert r.loc["small", "start"] == pytest.approx(6)
    assert r.loc["big", "start"] == pytest.approx(1000)
    assert r.loc["big", "held_gpu_seconds"] == pytest.approx(3 * 995)


def test_kube_default_can_deadlock_on_partial_jobs_and_the_run_says_so():
    # node 0 (type x) has 2 GPUs, node 1 (type y) 4. Two 1-GPU jobs pinned to y run there until
    # t = 100 and 200. "a" (two 2-GPU pods, type y) binds one pod on node 1's last 2 GPUs. "b"
    # (five 1-GPU pods) binds two on node 0. Each freed GPU on node 1 is too small for a's pod
    # but fits one of b's, so b takes both: then nothing runs, a holds 2 GPUs, b holds 4 and
    # needs 5. Gang FIFO runs the same jobs to completion.
    cluster = Cluster(
        name="xy", capacity=np.array([[2, 64, 512], [4, 64, 512]], dtype=float),
        gpu_type=np.array(["x", "y"], dtype=object), rack=np.array([0, 0]), speed=np.ones(2),
        node_names=("n0", "n1"),
    )
    jobs = [job("y1", 0, 100, 1, gpu_type="y"), job("y2", 0, 200, 1, gpu_type="y"),
            job("a", 1, 50, 2, gpu_type="y", worker_demand=(2, 4, 16)), job("b", 2, 50, 5)]
    k = run(jobs, cluster, kube_default())
    kr = rows(k)
    assert list(kr.loc[["a", "b"], "status"]) == ["unfinished", "unfinished"]
    assert "deadlock" in kr.loc["a", "reason"]
    assert kr.loc["a", "held_gpu_seconds"] == pytest.approx(2 * 199)
    assert k.timeline["held_gpus"].iloc[-1] == 6
    assert run(jobs, cluster, fifo(backfill=True)).summary["finished"] == 4


# ------------------------------------------------------------------------------------ all of them


BASELINES = ["srtf", "drf", "tiresias", "kube-default"]


@pytest.mark.parametrize("name", BASELINES)
def test_registry_builds_each_baseline_by_name(name):
    assert make_policy(name).name == name


def mixed_workload(seed: int) -> list[JobSpec]:
    """Rigid, elastic and PS jobs of several sizes, and one job that can never fit."""
    rng = np.random.default_rng(seed)
    jobs = [job("too-big", 0, 10, 64)]
    t = 0.0
    for i in range(150):
        t += float(rng.exponential(30))
        g = int(rng.choice([1, 1, 2, 4, 8]))
        d = float(np.exp(rng.normal(6, 1.3)))
        kind = i % 4
        if kind == 0:
            jobs.append(job(f"m{i}", t, d, g, arch="ps", num_ps=max(1, g // 2)))
        elif kind == 1:
            jobs.append(job(f"m{i}", t, d, g, arch="allreduce", min_workers=1, max_workers=2 * g))
        else:
            jobs.append(job(f"m{i}", t, d, g))
    return jobs


@pytest.mark.parametrize("name", ["fifo"] + BASELINES)
@pytest.mark.parametrize("seed", [3, 4])
def test_every_baseline_makes_valid_plans_and_finishes_feasible_jobs(name, seed):
    jobs = mixed_workload(seed)
    cluster = Cluster.homogeneous("mix", nodes=4, gpus=8, cpus=48, mem=512, nodes_per_rack=2)
    result = run(jobs, cluster, make_policy(name))  # any invalid plan raises PlanError
    r = rows(result)
    assert r.loc["too-big", "status"] == "rejected"
    feasible = r.drop(index="too-big")
    if name == "kube-default" and (feasible["status"] != "done").any():
        # PS and worker pods of different shapes can deadlock without gangs: that must be the reason
        assert "deadlock" in feasible.loc[feasible["status"] != "done", "reason"].iloc[0]
    else:
        assert (feasible["status"] == "done").all()


def test_kube_default_finishes_every_job_when_all_pods_have_one_shape():
    # One pod shape: the oldest waiting job takes every freed slot first, so no deadlock.
    jobs = heavy_tailed(150, seed=5)
    r = run(jobs, node(n=4, gpus=8), kube_default())
    assert r.summary["finished"] == 150


def test_srtf_and_tiresias_beat_fifo_on_a_heavy_tailed_workload():
    jobs = heavy_tailed(400, seed=7)
    cluster = node(n=4, gpus=8)
    jct = {n: run(jobs, cluster, make_policy(n)).summary["mean_jct"] for n in ["fifo", "srtf", "tiresias"]}
    assert jct["srtf"] < jct["fifo"]
    assert jct["tiresias"] < jct["fifo"]
    assert jct["srtf"] < jct["tiresias"]  # the oracle knows more than attained service
