"""Hetero scenarios (dlsched.hetero.scenarios): the ladder of clusters builds as named, the
PAI 2020 preset matches its machine list, Gavel workloads offer the asked load, and a scenario runs
end to end in the simulator with its speed events changing job completion times."""

from __future__ import annotations

import csv
from collections import Counter

import numpy as np
import pytest

from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError
from dlsched.hetero.prices import node_prices
from dlsched.hetero.scenarios import SCENARIOS, build, scenario, workload
from dlsched.paths import traces_dir
from dlsched.policies.registry import make_policy
from dlsched.presets import load_cluster
from dlsched.sim.engine import simulate

DAY = 86_400.0


def _gavel_root():
    root = traces_dir()
    if root is None or not (root / "gavel-philly-derived" / "seed0").is_dir():
        pytest.skip("Gavel's Philly-derived traces are not available (../shared/traces)")
    return root


def test_scenarios_build_their_clusters() -> None:
    assert list(SCENARIOS) == ["homogeneous-steady", "types", "static", "fluctuating", "strong"]
    for name, sc in SCENARIOS.items():
        c, ev = build(name, seed=3, horizon_s=DAY)
        assert c.num_nodes == 32 and c.total_gpus == 128, name
        assert c.gpu_types == (("V100",) if name == "homogeneous-steady" else ("K80", "P100", "V100"))
        assert len(set(c.rack.tolist())) == 8
        if name in ("homogeneous-steady", "types"):
            assert (c.speed == 1.0).all() and ev == []
        else:
            assert not (c.speed == 1.0).all() and (c.speed > 0).all()
            assert bool(ev) == (name in ("fluctuating", "strong"))
        assert np.array_equal(c.price, node_prices(c)) and (c.price > 0).all()
    # the preset's cached cluster is untouched
    assert (load_cluster("hetero-small").speed == 1.0).all()
    with pytest.raises(ConfigError, match="fluctuating"):
        scenario("fluctuatin")


def test_build_is_seeded() -> None:
    a, ea = build("strong", 1, DAY)
    b, eb = build("strong", 1, DAY)
    c, ec = build("strong", 2, DAY)
    assert np.array_equal(a.speed, b.speed) and ea == eb
    assert not np.array_equal(a.speed, c.speed) and ea != ec
    assert len(eb) > len(build("fluctuating", 1, DAY)[1])  # strong changes more often


def test_hetero_small_has_the_stated_mix() -> None:
    c = load_cluster("hetero-small")
    gpus = {t: int(c.capacity[c.gpu_type == t, GPU].sum()) for t in c.gpu_types}
    assert gpus == {"V100": 48, "P100": 32, "K80": 48}
    assert Counter(c.rack.tolist()) == {r: 4 for r in range(8)}
    assert all(len(set(c.gpu_type[c.rack == r])) == 1 for r in range(8))  # a rack is one type


def test_pai2020_preset_matches_the_machine_list() -> None:
    root = traces_dir()
    f = root / "alibaba-pai-2020" / "pai_machine_spec.csv" if root else None
    if f is None or not f.is_file():
        pytest.skip("PAI 2020 machine spec not available")
    with open(f) as fh:
        rows = [r for r in csv.reader(fh) if r and int(r[4]) > 0]  # GPU machines
    c = load_cluster("pai2020")
    assert c.num_nodes == len(rows) == 1814
    want = Counter()
    for r in rows:
        want[r[1]] += int(r[4])
    assert {t: int(c.capacity[c.gpu_type == t, GPU].sum()) for t in c.gpu_types} == dict(want)
    assert c.total[1] == sum(int(r[2]) for r in rows)


def test_workload_offers_the_asked_load() -> None:
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces.load import offered_load

    root = _gavel_root()
    c, _ = build("static", 0, DAY)
    jobs = workload("static", c, seed=0, jobs=120, load=0.6)
    assert len(jobs) == 120 and jobs[0].submit_time == 0.0
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)
    assert all(j.model.startswith("gavel:") for j in jobs)
    assert max(j.num_workers for j in jobs) <= c.total_gpus
    assert offered_load(jobs, c, default_throughput(root)).load == pytest.approx(0.6, rel=1e-6)
    again = workload("static", c, seed=0, jobs=120, load=0.6)
    assert [(j.job_id, j.submit_time) for j in again] == [(j.job_id, j.submit_time) for j in jobs]
    other = workload("static", c, seed=1, jobs=120, load=0.6)
    assert [j.job_id for j in other] != [j.job_id for j in jobs]
    held = workload("static", c, seed=0, jobs=50, vc="ee9e8c")
    assert all(j.job_id.startswith("ee9e8c-") for j in held)
    with pytest.raises(ConfigError, match="VC"):
        workload("static", c, seed=0, vc="nope")


def test_workers_capped_to_the_cluster() -> None:
    _gavel_root()
    small = Cluster.homogeneous("tiny", nodes=2, gpus=4, cpus=48, mem=256, gpu_type="V100")
    jobs = workload("types", small, seed=0, jobs=400, vc="ee9e8c")  # has 8-, 16- and 32-GPU jobs
    assert max(j.num_workers for j in jobs) == 8
    capped = [j for j in jobs if "workers_capped_from" in j.extra]
    assert capped and all(j.extra["workers_capped_from"] > 8 for j in capped)


def test_missing_traces_is_a_config_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DLSCHED_TRACES", str(tmp_path / "absent"))
    c, _ = build("types", 0, DAY)
    with pytest.raises(ConfigError, match="Gavel"):
        workload("types", c, seed=0)


def test_end_to_end_fluctuation_slows_jobs() -> None:
    """FIFO on the same jobs and static factors, with and without the fluctuation events: the
    events change completion times, and stragglers/contention on balance slow the jobs down."""
    from dlsched.throughput.registry import default_throughput

    root = _gavel_root()
    throughput = default_throughput(root)
    c, events = build("strong", 4, 7 * DAY)
    jobs = workload("strong", c, seed=4, jobs=150)
    with_ev = simulate(jobs, c, make_policy("fifo"), throughput, node_events=events)
    without = simulate(jobs, c, make_policy("fifo"), throughput)
    s1, s0 = with_ev.summary, without.summary
    print(f"strong, 150 jobs, {len(events)} events: mean JCT {s1['mean_jct'] / 3600:.2f} h with, "
          f"{s0['mean_jct'] / 3600:.2f} h without; fee {s1['total_fee']:.0f} vs {s0['total_fee']:.0f} USD")
    assert s1["finished"] == s0["finished"] == 150
    assert s1["mean_jct"] != s0["mean_jct"]
    assert s1["mean_jct"] > s0["mean_jct"]
    # fees: GPU-hours x the node prices build set; the same jobs on slower machines cost more
    assert 0 < s0["total_fee"] < s1["total_fee"]
