"""DRAGON: gang with task dependencies, locality, load-aware scaling, and the policy built from them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.core import Cluster, JobSpec, Plan, Policy
from dlsched.core.allocation import Allocation
from dlsched.core.snapshot import Snapshot
from dlsched.paths import traces_dir
from dlsched.policies.dragon import dragon
from dlsched.policies.kube_default import kube_default
from dlsched.policies.phases.gang import Gang, bind_pods, holds_partial_gang
from dlsched.policies.phases.locality import Locality, grow_order, shrink_order
from dlsched.policies.phases.placement import Spread
from dlsched.policies.phases.scaling import scale_down_until, scale_up
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.parameter_server import ParameterServerModel

PS_EXTRA = {"compute_s": 0.3, "model_size_mb": 200.0}


def ps_job(i: int, submit: float, iters: float, w: int = 2, lo: int = 1, hi: int = 4, ps: int = 1) -> JobSpec:
    return JobSpec(job_id=f"j{i}", submit_time=submit, iterations=iters, num_workers=w, min_workers=lo,
                   max_workers=hi, arch="ps", model="ps:test", num_ps=ps, min_ps=ps, max_ps=ps,
                   worker_demand=(1.0, 2.0, 8.0), ps_demand=(0.0, 2.0, 8.0), extra=dict(PS_EXTRA))


def cluster(nodes: int = 4, gpus: int = 4) -> Cluster:
    return Cluster.homogeneous("t", nodes=nodes, gpus=gpus, cpus=16, mem=64)


class Recorder(Policy):
    """Runs a policy and keeps every plan it returned, with the jobs' specs."""

    def __init__(self, inner: Policy):
        self.inner, self.name, self.on_events, self.interval = inner, inner.name, inner.on_events, inner.interval
        self.plans: list[tuple[float, Plan, dict[str, JobSpec]]] = []

    def reset(self, cluster, seed):
        self.inner.reset(cluster, seed)
        self.plans.clear()

    def schedule(self, snap: Snapshot) -> Plan:
        plan = self.inner.schedule(snap)
        self.plans.append((snap.now, plan, {j.job_id: j.spec for j in snap.jobs()}))
        return plan


# --------------------------------------------------------------------------- phases


def test_gang_places_every_ps_and_at_least_the_minimum_or_nothing():
    c = cluster(2, 4)
    spec = ps_job(0, 0, 10, w=6, lo=3, hi=8, ps=2)
    free = c.capacity.copy()
    a = Gang(Locality()).place(c, free, spec, 6, 2)
    assert a.num_ps == 2 and a.num_workers == 6
    free[:, 0] = [2, 0]  # only 2 GPUs left: below the minimum of 3 workers
    assert Gang(Locality()).place(c, free, spec, 6, 2) is None
    free[:, 0] = [2, 1]  # 3 GPUs: the minimum fits, and is what it gets
    a = Gang(Locality()).place(c, free, spec, 6, 2)
    assert (a.num_workers, a.num_ps) == (3, 2)


@settings(max_examples=60, deadline=None)
@given(gpus=st.lists(st.integers(0, 4), min_size=3, max_size=3), cpus=st.lists(st.integers(0, 16), min_size=3, max_size=3),
       w=st.integers(1, 8), lo=st.integers(1, 8), ps=st.integers(1, 3))
def test_gang_never_returns_a_partial_gang_or_overcommits(gpus, cpus, w, lo, ps):
    lo = min(lo, w)
    c = cluster(3, 4)
    spec = ps_job(0, 0, 10, w=w, lo=lo, hi=w, ps=ps)
    free = c.capacity.copy()
    free[:, 0], free[:, 1] = gpus, cpus
    for placement in (Locality(), Spread()):
        a = Gang(placement).place(c, free, spec, w, ps)
        if a is None:
            continue
        assert not holds_partial_gang(spec, a) and a.num_ps == ps and a.num_workers <= w
        use = a.usage(np.asarray(spec.worker_demand), np.asarray(spec.ps_demand))
        assert (free[list(a.nodes)] + 1e-9 >= use).all()


def test_bind_pods_binds_what_fits_psc_first_and_says_when_complete():
    c = cluster(2, 2)
    spec = ps_job(0, 0, 10, w=4, lo=4, hi=4, ps=1)
    free = c.capacity.copy()
    free[1, 0] = 0  # node 1 has no GPU: 2 workers fit on node 0 only
    bound, complete = bind_pods(c, free, spec, None, 4, 1)
    assert not complete and bound.num_ps == 1 and bound.num_workers == 2
    rest = free.copy()
    np.subtract.at(rest, list(bound.nodes), bound.usage(np.asarray(spec.worker_demand), np.asarray(spec.ps_demand)))
    rest[1, 0] = 2  # GPUs free up on node 1
    bound2, complete2 = bind_pods(c, rest, spec, bound, 4, 1)
    assert complete2 and bound2.num_workers == 4 and bound2.num_ps == 1


def test_shrink_order_removes_lonely_workers_first_and_the_ps_node_last():
    a = Allocation.of({0: (3, 1), 1: (1, 0), 2: (2, 0)})
    assert shrink_order(a) == [1, 2, 0]


def test_grow_order_prefers_the_ps_node_then_the_jobs_own_nodes():
    c = cluster(4, 4)
    spec = ps_job(0, 0, 10)
    a = Allocation.of({2: (1, 1), 3: (1, 0)})
    free = c.capacity.copy()
    np.subtract.at(free, list(a.nodes), a.usage(np.asarray(spec.worker_demand), np.asarray(spec.ps_demand)))
    assert grow_order(c, free, spec, a)[:2] == [2, 3]


def test_scale_down_stops_at_the_minimum_never_touches_a_ps_and_changes_nothing_when_hopeless():
    c = cluster(1, 4)
    running = [ps_job(0, 0, 10, w=4, lo=2, hi=4)]

    class J:  # the JobState fields the scaling phase reads
        def __init__(self, spec):
            self.spec, self.job_id = spec, spec.job_id

    jobs = [J(s) for s in running]
    allocs = {"j0": Allocation.of({0: (4, 1)})}
    free = c.capacity - allocs["j0"].usage(np.asarray(running[0].worker_demand), np.asarray(running[0].ps_demand))
    # asking for 3 free GPUs is hopeless: j0 can give only 2
    before = free.copy()
    assert scale_down_until(jobs, allocs, free, lambda f: f[0, 0] >= 3) is None
    assert (free == before).all()
    got = scale_down_until(jobs, allocs, free, lambda f: f[0, 0] >= 2)
    assert got["j0"].num_workers == 2 and got["j0"].num_ps == 1
    assert free[0, 0] == 2


def test_scale_up_respects_max_workers_and_capacity():
    c = cluster(2, 4)
    specs = [ps_job(0, 0, 10, w=1, lo=1, hi=3), ps_job(1, 0, 10, w=1, lo=1, hi=8)]

    class J:
        def __init__(self, spec):
            self.spec, self.job_id = spec, spec.job_id

    allocs = {"j0": Allocation.of({0: (1, 1)}), "j1": Allocation.of({1: (1, 1)})}
    free = c.capacity.copy()
    for s in specs:
        a = allocs[s.job_id]
        np.subtract.at(free, list(a.nodes), a.usage(np.asarray(s.worker_demand), np.asarray(s.ps_demand)))
    for local in (True, False):
        f = free.copy()
        grown = scale_up(c, [J(s) for s in specs], allocs, f, local_first=local)
        assert grown["j0"].num_workers == 3  # its maximum
        assert grown["j1"].num_workers == 5  # what is left of 8 GPUs
        assert (f >= -1e-9).all()
    assert scale_up(c, [J(specs[0])], allocs, free.copy())["j0"].nodes == (0,)  # grew on its own node


# --------------------------------------------------------------------------- the policy


def run(jobs, policy, c=None, **cfg):
    return simulate(jobs, c or cluster(), policy, ParameterServerModel(), SimConfig(**cfg))


def test_a_starving_job_gets_room_by_shrinking_running_jobs_after_the_threshold():
    c = cluster(1, 4)
    jobs = [ps_job(0, 0, 5000, w=4, lo=1, hi=4), ps_job(1, 100, 50, w=2, lo=2, hi=2)]
    r = run(jobs, dragon(starvation_s=30), c).jobs.set_index("job_id")
    assert r.loc["j1", "start"] == pytest.approx(130.0)  # waited exactly the starvation threshold
    assert r.loc["j0", "restarts"] >= 1  # shrunk (and later grown back)
    assert (r.status == "done").all()
    r0 = run(jobs, dragon(scaling=False), c).jobs.set_index("job_id")
    assert r0.loc["j1", "start"] > r0.loc["j0", "end"] - 1e-6  # without scaling it waits for j0


def test_idle_cluster_grows_running_jobs_after_the_quiet_period():
    c = cluster(1, 4)
    jobs = [ps_job(0, 0, 20000, w=1, lo=1, hi=4)]
    rec = Recorder(dragon(idle_s=60))
    r = run(jobs, rec, c)
    sizes = [(t, p.allocations["j0"].num_workers) for t, p, _ in rec.plans if "j0" in p.allocations]
    assert sizes[0] == (0.0, 1)
    grown_at = next(t for t, w in sizes if w == 4)
    assert grown_at == pytest.approx(60.0)
    assert r.jobs.restarts.iloc[0] == 1  # one resize, paid as a restart


def test_borrowed_workers_go_back_to_a_newcomer_at_its_requested_size():
    """j0 (asks 1, may grow to 4) grows while alone; j1 (asks 3) arrives: j0 gives back its
    borrowed workers at once, down to its own requested size, and j1 starts at 3, not 1."""
    c = cluster(1, 4)
    jobs = [ps_job(0, 0, 20000, w=1, lo=1, hi=4), ps_job(1, 500, 3000, w=3, lo=1, hi=3)]
    rec = Recorder(dragon(idle_s=60))
    run(jobs, rec, c)
    t, plan, _ = next((t, p, s) for t, p, s in rec.plans if "j1" in p.allocations)
    assert t == pytest.approx(500.0)  # no starvation wait: the room was only lent
    assert plan.allocations["j1"].num_workers == 3
    assert plan.allocations["j0"].num_workers == 1  # back to what it asked for, not below


def test_growth_stays_in_the_racks_a_job_uses():
    c = Cluster.homogeneous("t", nodes=4, gpus=2, cpus=16, mem=64, nodes_per_rack=2)  # racks {0,1} and {2,3}
    spec = ps_job(0, 0, 10, w=2, lo=1, hi=8)

    class J:
        def __init__(self, spec):
            self.spec, self.job_id = spec, spec.job_id

    allocs = {"j0": Allocation.of({0: (2, 1)})}
    free = c.capacity.copy()
    np.subtract.at(free, [0], allocs["j0"].usage(np.asarray(spec.worker_demand), np.asarray(spec.ps_demand)))
    grown = scale_up(c, [J(spec)], allocs, free.copy(), local_first=True)["j0"]
    assert set(grown.nodes) == {0, 1} and grown.num_workers == 4  # rack 0 only, though rack 1 has room
    assert grow_order(c, free, spec, allocs["j0"], new_racks=False) == [1]
    assert set(grow_order(c, free, spec, allocs["j0"])) == {1, 2, 3}
    spread = scale_up(c, [J(spec)], allocs, free.copy(), local_first=False)["j0"]
    assert spread.num_workers == 8  # the released controller's order (locality off) still fills every node


def test_scale_up_restores_shrunk_jobs_before_growing_others():
    """j1 was shrunk below its request for a starving j2; when j2 ends and the cluster is idle,
    j1 is restored to its requested size before j0 (which started first) grows past its own."""
    c = cluster(1, 4)
    jobs = [ps_job(0, 0, 40000, w=1, lo=1, hi=4), ps_job(1, 10, 40000, w=3, lo=1, hi=3),
            ps_job(2, 20, 200, w=2, lo=2, hi=2)]
    rec = Recorder(dragon(idle_s=60))
    r = run(jobs, rec, c).jobs.set_index("job_id")
    j2_end = r.loc["j2", "end"]
    t, plan = next((t, p) for t, p, _ in rec.plans if t > j2_end and p.allocations)  # the first growth
    assert t == pytest.approx(j2_end + 60)
    assert plan.allocations["j1"].num_workers == 3
    assert "j0" not in plan.allocations  # nothing left for j0 to grow into


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 12), gang=st.booleans())
def test_no_partial_gang_ever_holds_resources_under_dragon(seed, n, gang):
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n):
        w = int(rng.integers(1, 7))
        jobs.append(ps_job(i, float(rng.integers(0, 600)), float(rng.integers(50, 3000)), w=w,
                           lo=int(rng.integers(1, w + 1)), hi=w + int(rng.integers(0, 4)), ps=int(rng.integers(1, 3))))
    rec = Recorder(dragon(gang=gang))
    result = run(jobs, rec, cluster(3, 4))
    for _, plan, specs in rec.plans:
        for jid, alloc in plan.allocations.items():
            assert not holds_partial_gang(specs[jid], alloc)
            assert alloc.num_workers <= specs[jid].max_workers
        if gang:
            assert not plan.held
    if gang:
        assert result.summary["held_gpu_hours"] == 0.0
    assert (result.jobs.status == "done").all()


def test_kube_default_wastes_gpu_time_on_partial_jobs_that_dragon_does_not():
    c = cluster(2, 4)
    jobs = [ps_job(i, i * 1.0, 3000, w=3, lo=3, hi=3) for i in range(4)]
    kube = run(jobs, kube_default(), c).summary
    dr = run(jobs, dragon(), c).summary
    assert kube["held_gpu_hours"] > 0 and dr["held_gpu_hours"] == 0
    assert dr["mean_jct"] < kube["mean_jct"]


@pytest.fixture(scope="module")
def dragon_runs():
    if traces_dir() is None:
        pytest.skip("needs ../shared/traces (DL2 constants)")
    from dlsched.experiments.dragon import POLICIES, run_workload
    from dlsched.presets import load_cluster
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces.dragon_workload import dragon_workload

    tp = default_throughput(traces_dir(), dl2="analytic")
    ps_model = next(m for m in tp.models if isinstance(m, ParameterServerModel))
    names = ("kube-default", "dragon", "dragon-no-locality")
    rows = []
    for seed in range(3):
        wl = dragon_workload(30, seed=seed)
        rows += run_workload(wl.name, wl.jobs, load_cluster("dragon"), tp, {k: POLICIES[k] for k in names}, seed, ps_model)
    import pandas as pd

    return pd.DataFrame(rows).groupby("policy").mean(numeric_only=True)


def test_dragon_crosses_fewer_node_boundaries_than_kube_default_and_finishes_sooner(dragon_runs):
    d, k = dragon_runs.loc["dragon"], dragon_runs.loc["kube-default"]
    assert d.nodes_spanned < 0.6 * k.nodes_spanned
    assert d.mean_jct_min < 0.6 * k.mean_jct_min
    assert d.gpu_util_compute > k.gpu_util_compute


def test_locality_placement_spans_fewer_nodes_and_the_jct_gain_follows(dragon_runs):
    d, nl = dragon_runs.loc["dragon"], dragon_runs.loc["dragon-no-locality"]
    assert d.nodes_spanned < nl.nodes_spanned
    assert d.mean_jct_min < nl.mean_jct_min


def test_experiment_writes_its_tables_and_plot(tmp_path):
    if traces_dir() is None:
        pytest.skip("needs ../shared/traces (DL2 constants)")
    from dlsched.experiments.dragon import run_dragon_experiment

    rep = run_dragon_experiment(tmp_path, seeds=2, num_jobs=10, real_trace=False)
    assert all(f.exists() and f.stat().st_size > 0 for f in rep.files)
    assert 0 < rep.headline["jct_ratio_vs_kube"] < 5
    assert set(rep.ablation["capability switched off"]) == {"gang", "locality", "scaling"}
    assert "DRAGON / kube-default" in (tmp_path / "RESULTS.md").read_text()


def test_experiment_on_ray_equals_the_experiment_in_process(tmp_path):
    """The DRAGON-like workload and both trace slices, every cell one by one here and as two Ray
    workers: the same runs.csv rows and the same stored rows, cell by cell."""
    if traces_dir() is None:
        pytest.skip("needs ../shared/traces (DL2 constants)")
    import pandas as pd

    from dlsched.experiments.dragon import POLICIES, TRACE_POLICIES, DragonCell, run_dragon_experiment
    from dlsched.sweep.store import ResultsStore
    from tests.sweep_equal import assert_same_cells

    alone = run_dragon_experiment(tmp_path / "alone", seeds=1, num_jobs=8)
    on_ray = run_dragon_experiment(tmp_path / "ray", seeds=1, num_jobs=8, workers=2)
    pd.testing.assert_frame_equal(alone.runs, on_ray.runs)
    cells = [*(DragonCell(0, p, 8, "dragon") for p in POLICIES),
             *(DragonCell(0, p, trace=True, elastic=e) for e in (False, True) for p in TRACE_POLICIES)]
    assert_same_cells(cells, ResultsStore(tmp_path / "alone" / "cells"), ResultsStore(tmp_path / "ray" / "cells"))
