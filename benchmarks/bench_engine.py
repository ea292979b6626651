"""Speed benchmark of the simulator and the heuristic policies (the one-core renovation's goals).

Every measurement runs in a fresh subprocess (peak RSS of that process via wait4, a per-run
timeout reported as "> T s" instead of hanging). Parts (--part, repeatable; default: all):

  full-trace  full Philly (82,247 jobs, `philly` preset, 640 GPUs), one run per policy.
              Goal: <= 20 s for fifo, srtf, drf, tiresias, optimus, kube-default; <= 60 s for
              dragon, edf, qos (judged on the simulate() wall time; "proc s" is the whole process
              including imports and trace loading).
  round       one scheduling round on 10,000 GPUs (1,250 x 8): every policy.schedule() call is
              timed inside a real simulation of 4,000 jobs of 1-32 GPUs (2,200 at t=0, then one
              every 2 s, first 3,000 simulated seconds); p50/p99/max over the rounds that saw
              >= 1,800 jobs running or waiting. Goal: p99 <= 20 ms for every heuristic.
  doubling    the first 10k/20k/40k Philly jobs (--doubling-sizes) per policy (--doubling-policies,
              default fifo,tiresias). Goal: <= 2.2x simulate() time per doubling.
  pai         the PAI simulator's setup (../shared/traces/pai-sim-input: 20,000 Philly jobs on one
              6,500-GPU node): dlsched fifo+backfill vs PAI FIFO and dlsched srtf vs PAI SJF, run
              alternately. Needs --pai-sim DIR (the folder cluster-trace-gpu-v2020/simulator of
              github.com/alibaba/clusterdata; not shipped, not built here); skipped when absent.
              The Philly input in PAI format is put next to a temporary copy of DIR when DIR lacks
              it. Goal: PAI process time / dlsched process time >= 10, same mean JCT (FIFO pair).
  million     synthetic 1,000,000 jobs on 100,000 GPUs (12,500 x 8): (GPU count, duration) pairs
              drawn with replacement from the Philly trace (seeded), Poisson arrivals at an offered
              load of --million-load (default 0.6, Philly's own on the `philly` preset) of the
              cluster. Goal: fifo <= 600 s, bounded memory: peak RSS reported, and with several
              sizes (--million-jobs 100000,200000) the RSS slope in bytes per job between them and
              the peak it implies at 1,000,000 jobs ("load MB" is the peak once the trace is loaded).

Revisions: the working tree (PYTHONPATH=<this repo>/src) is measured as "current". --rev GITREV
also measures GITREV from a `git worktree` under /tmp, alternately with "current" run by run,
and prints the before/after ratio. --rev-only measures only GITREV.

--quick shrinks every part to seconds (a check of the script, not a measurement; on the old code
optimus and qos still take minutes even on 300 jobs: pass --policies fifo,tiresias to skip them).

Examples:
  python benchmarks/bench_engine.py --quick
  python benchmarks/bench_engine.py --part full-trace --policies fifo,tiresias --out bench-out
  python benchmarks/bench_engine.py --part round --rev 51f7fc1 --out bench-out
  python benchmarks/bench_engine.py --part pai --pai-sim /tmp/pai-sim/simulator --rev 51f7fc1
  nice -n 5 python benchmarks/bench_engine.py --part million --timeout 1800 --rev-only --rev 51f7fc1

Doubling is judged on the simulate() CPU time (wall when absent).
"sim s" is the simulate() wall time, "proc s" the whole process's wall time, "CPU s" its user+system
CPU time (the figure least disturbed when other work shares the cores). Results: a table on
stdout; with --out DIR, DIR/results.json and DIR/results.csv (one row per run; appended to when
DIR already holds results, so parts can be run one by one).

Typical durations on the old code (2 shared cores): round ~12 min for all nine policies;
full-trace 1-2 min per fast policy, many minutes or the timeout for srtf/drf/optimus/qos;
doubling ~5 min; pai ~20 min; million > 10 min (use --timeout 1800 or more to see its end).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
TRACES = Path(os.environ.get("DLSCHED_TRACES", REPO.parent / "shared" / "traces"))
PHILLY = TRACES / "philly-pollux" / "philly.csv"
PAI_IN = TRACES / "pai-sim-input"
CACHE = Path(tempfile.gettempdir()) / "dlsched-bench-cache"

ALL_POLICIES = ["fifo", "srtf", "drf", "tiresias", "optimus", "kube-default", "dragon", "edf", "qos"]
FAST_GOAL = {"fifo", "srtf", "drf", "tiresias", "optimus", "kube-default"}  # <= 20 s; others <= 60 s
PARTS = ["full-trace", "round", "doubling", "pai", "million"]


# =========================================================================== worker side
# Everything that touches dlsched is in this section: one small function per kind of run, so the
# benchmark is easy to adapt when the API changes. The worker imports dlsched only inside them.


def _progress(tag: str, total: int):
    last = [time.monotonic()]
    start = last[0]

    def cb(t: float, ended: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 15:
            last[0] = now
            print(f"    [{tag}] {now - start:6.0f} s: {ended}/{total} jobs ended, sim t={t:,.0f}",
                  file=sys.stderr, flush=True)

    return cb


def _time_schedule(policy, samples: list) -> None:
    """Replace policy.schedule by a timed wrapper: (seconds, running, pending) per call."""
    inner = policy.schedule

    def timed(snap):
        t0 = time.perf_counter()
        plan = inner(snap)
        dt = time.perf_counter() - t0
        samples.append((dt, len(getattr(snap, "running", ())), len(getattr(snap, "pending", ()))))
        return plan

    policy.schedule = timed


def work_dlsched(spec: dict) -> dict:
    """Load a trace and a cluster the way `dlsched compare` does, run one policy, summarise."""
    import dlsched
    from dlsched.policies.registry import make_policy
    from dlsched.presets import load_cluster
    from dlsched.run_config import load_run_config
    from dlsched.sim.config import SimConfig
    from dlsched.sim.engine import simulate
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces import load_trace

    t0 = time.perf_counter()
    cfg = load_run_config(Path(spec["config"])) if spec.get("config") else None
    options = dict((cfg.policy_options if cfg else {}).get(spec["policy"], {}))
    wl = load_trace(spec["trace"], spec.get("trace_format"), limit=spec.get("limit"))
    cluster = load_cluster(spec.get("cluster") or wl.cluster)
    throughput = default_throughput(TRACES)  # the traces root is positional since the renovation
    sim = SimConfig(max_time=spec.get("max_time"))
    policy = make_policy(spec["policy"], **options)
    samples: list = []
    if spec.get("time_rounds"):
        _time_schedule(policy, samples)
    load_s = time.perf_counter() - t0
    load_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the input's share of the peak
    t1, c1 = time.perf_counter(), time.process_time()
    r = simulate(wl.jobs, cluster, policy, throughput, sim,
                 on_progress=_progress(spec["policy"], len(wl.jobs)))
    sim_s, sim_cpu_s = time.perf_counter() - t1, time.process_time() - c1
    s = r.summary
    out = dict(dlsched=str(Path(dlsched.__file__).parent), load_s=load_s, load_rss_mb=load_rss_mb, sim_s=sim_s, sim_cpu_s=sim_cpu_s, jobs=len(wl.jobs),
               gpus=int(cluster.total_gpus), finished=s.get("finished"), mean_jct=s.get("mean_jct"),
               decisions=s.get("policy_calls"))
    if spec.get("time_rounds"):
        need = spec["min_in_system"]
        ms = sorted(1000 * d for d, run, pend in samples if run + pend >= need)
        sel = [(run, pend) for d, run, pend in samples if run + pend >= need]
        out.update(rounds_total=len(samples), rounds=len(ms))
        if ms:
            pct = lambda q: ms[min(len(ms) - 1, int(round(q / 100 * (len(ms) - 1))))]  # noqa: E731
            out.update(p50_ms=pct(50), p99_ms=pct(99), max_ms=ms[-1],
                       mean_running=sum(a for a, _ in sel) / len(sel), mean_pending=sum(b for _, b in sel) / len(sel))
    return out


def work_pai(spec: dict) -> dict:
    """One policy of the PAI simulator with run_simulator.py's settings (one policy per process)."""
    import logging

    sim_dir = Path(spec["pai_dir"])
    sys.path.insert(0, str(sim_dir))
    from simulator import Simulator  # the PAI simulator's module, from --pai-sim

    log = Path(tempfile.gettempdir()) / "dlsched-bench-pai.log"
    logging.basicConfig(level=logging.WARNING, format="%(message)s", filename=log, filemode="a")
    t0 = time.perf_counter()
    n = spec["num_jobs"]
    sim = Simulator(csv_file=sim_dir / "traces/pai/pai_job_duration_estimate_100K.csv",
                    alloc_policy=spec["alloc"], preempt_policy=2, sort_node_policy=3, num_nodes=1,
                    random_seed=42, max_time=int(1e9), num_spare_node=0, pattern=0, hetero=False,
                    num_gpus=6500, num_cpus=round(23.22 * 6500), describe_file=None, log_file=log,
                    export_job_stats=False, export_cluster_util=False, arrival_rate=1000,
                    num_jobs_limit=n, gpu_type_matching=0, verbose=0)
    load_s = time.perf_counter() - t0
    t1, c1 = time.perf_counter(), time.process_time()
    res = sim.simulator_go(repeat=1)  # [(num_jobs_done, avg_jct, avg_wait, makespan)]
    sim_s, sim_cpu_s = time.perf_counter() - t1, time.process_time() - c1
    done, jct, _wait, _mk = res[0]
    return dict(load_s=load_s, sim_s=sim_s, sim_cpu_s=sim_cpu_s, jobs=n, gpus=6500, finished=done, mean_jct=float(jct), decisions=None)


def worker_main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    fn = {"dlsched": work_dlsched, "pai": work_pai}[spec["kind"]]
    Path(out_path).write_text(json.dumps(fn(spec)))


# =========================================================================== driver side


def run_child(spec: dict, pythonpath: str | None, timeout: float, label: str) -> dict:
    """Run one measurement in a fresh process: wall, peak RSS (wait4), result or timeout/error."""
    tmp = Path(tempfile.mkdtemp(prefix="dlsched-bench-"))
    (tmp / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    else:
        env.pop("PYTHONPATH", None)
    cmd = [sys.executable, str(HERE), "_worker", str(tmp / "spec.json"), str(tmp / "out.json")]
    print(f"  -> {label} (timeout {timeout:.0f} s)", file=sys.stderr, flush=True)
    start = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, start_new_session=True, cwd=tmp)
    status, ru, rc = "ok", None, None
    next_note = 60.0
    while True:
        pid, st, ru = os.wait4(p.pid, os.WNOHANG)
        elapsed = time.perf_counter() - start
        if pid:
            rc = os.waitstatus_to_exitcode(st)
            p.returncode = rc
            break
        if elapsed > timeout:
            os.killpg(p.pid, signal.SIGKILL)
            _, st, ru = os.wait4(p.pid, 0)
            p.returncode = -9
            status = "timeout"
            break
        if elapsed > next_note:
            print(f"    [{label}] still running, {elapsed:.0f} s", file=sys.stderr, flush=True)
            next_note += 60.0
        time.sleep(0.2)
    wall = time.perf_counter() - start
    row = dict(proc_s=wall, cpu_s=ru.ru_utime + ru.ru_stime if ru else None,
               rss_mb=ru.ru_maxrss / 1024 if ru else None, status=status, timeout=timeout)
    if status == "ok":
        if rc == 0 and (tmp / "out.json").exists():
            row.update(json.loads((tmp / "out.json").read_text()))
        else:
            row["status"] = f"error (exit {rc})"
    shutil.rmtree(tmp, ignore_errors=True)
    return row


class Targets:
    """The code versions measured: 'current' (this tree) and optionally a git revision."""

    def __init__(self, rev: str | None, rev_only: bool):
        self.worktree: Path | None = None
        self.list: list[tuple[str, str]] = []  # (name, PYTHONPATH)
        if rev:
            sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], check=True,
                                 capture_output=True, text=True).stdout.strip()
            self.worktree = Path(tempfile.gettempdir()) / f"dlsched-bench-{sha}"
            if not (self.worktree / "src" / "dlsched").is_dir():
                subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(self.worktree), sha],
                               check=True, capture_output=True)
                self._created = True
            self.list.append((sha, str(self.worktree / "src")))
        if not (rev and rev_only):
            self.list.append(("current", str(REPO / "src")))

    def close(self, keep: bool) -> None:
        if self.worktree and getattr(self, "_created", False) and not keep:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(self.worktree)],
                           capture_output=True)


# ----------------------------------------------------------------------------- inputs


def write_cluster(path: Path, nodes: int, gpus: int, rack: int, name: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"name: {name}\ndescription: \"bench_engine: {nodes} x {gpus} GPUs\"\n"
                    f"source: \"benchmarks/bench_engine.py\"\nnode_groups:\n"
                    f"  - {{count: {nodes}, gpus: {gpus}, cpus: 64, mem: 512, nodes_per_rack: {rack}}}\n")
    return path


def write_trace(path: Path, name: str, submit, gpus, dur) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write('# dlsched-trace {"name": "%s", "cluster": "", "attribution": "benchmarks/bench_engine.py"}\n' % name)
        f.write("job_id,submit_time,duration,num_workers,arch,worker_gpu,worker_cpu,worker_mem\n")
        for i, (s, g, d) in enumerate(zip(submit, gpus, dur)):
            arch = "single" if g == 1 else "allreduce"
            f.write(f"b{i},{s:.3f},{d:.0f},{g},{arch},1.0,4.0,16.0\n")
    return path


def round_inputs(quick: bool) -> tuple[Path, Path, int]:
    """The run_benchmarks.py round workload as a trace file, and the 10k-GPU cluster."""
    import numpy as np

    n, first, nodes, need = (400, 220, 125, 180) if quick else (4000, 2200, 1250, 1800)
    rng = np.random.default_rng(0)
    sizes = rng.choice([1, 2, 4, 8, 16, 32], size=n, p=[0.3, 0.15, 0.2, 0.2, 0.1, 0.05])
    dur = rng.uniform(600, 7200, size=n)
    submit = [0.0 if i < first else float(i - first) * 2.0 for i in range(n)]
    trace = write_trace(CACHE / f"round-{n}.csv", f"round-{n}", submit, sizes.tolist(), dur.tolist())
    cluster = write_cluster(CACHE / f"round-{nodes * 8}.yaml", nodes, 8, 50, f"bench-{nodes * 8}")
    return trace, cluster, need


def million_inputs(jobs: int, gpus: int, load: float, seed: int) -> tuple[Path, Path]:
    import numpy as np
    import pandas as pd

    trace = CACHE / f"million-{jobs}-{gpus}-{load}-{seed}.csv"
    cluster = write_cluster(CACHE / f"million-{gpus}.yaml", gpus // 8, 8, 20, f"bench-{gpus}")
    if trace.exists():
        return trace, cluster
    print(f"  generating {jobs:,} Philly-shaped jobs -> {trace}", file=sys.stderr, flush=True)
    df = pd.read_csv(PHILLY)
    df = df[(df["duration"] > 0) & (df["num_gpus"] > 0)]
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(df), size=jobs)  # (gpus, duration) pairs: both empirical marginals
    g = df["num_gpus"].to_numpy()[pick].astype(int)
    d = df["duration"].to_numpy()[pick].astype(float)
    rate = load * gpus / float((df["duration"] * df["num_gpus"]).mean())  # jobs/s for the offered load
    submit = np.cumsum(rng.exponential(1.0 / rate, size=jobs))
    submit -= submit[0]
    write_trace(trace.with_suffix(".tmp"), f"philly-shaped-{jobs}", submit.tolist(), g.tolist(), d.tolist())
    trace.with_suffix(".tmp").rename(trace)
    return trace, cluster


# ----------------------------------------------------------------------------- parts
# Each part yields (group, goal-kind, spec, base row). Runs of one spec for every target are
# done back to back (alternating revisions), so before/after see the same machine load.


def part_full_trace(a):
    for p in a.policies:
        goal = 20.0 if p in FAST_GOAL else 60.0
        spec = dict(kind="dlsched", trace=str(PHILLY), cluster="philly", policy=p,
                    limit=300 if a.quick else None)
        yield spec, dict(part="full-trace", policy=p, goal=f"sim <= {goal:g} s", goal_s=goal)


def part_round(a):
    trace, cluster, need = round_inputs(a.quick)
    for p in a.policies:
        spec = dict(kind="dlsched", trace=str(trace), trace_format="dlsched", cluster=str(cluster), policy=p,
                    max_time=1000.0 if a.quick else 3000.0, time_rounds=True, min_in_system=need)
        yield spec, dict(part="round", policy=p, goal="p99 <= 20 ms", goal_ms=20.0)


def part_doubling(a):
    for p in a.doubling_policies:
        for n in a.doubling_sizes:
            spec = dict(kind="dlsched", trace=str(PHILLY), cluster="philly", policy=p, limit=n)
            yield spec, dict(part="doubling", policy=p, goal="<= 2.2x per 2x jobs", size=n)


def part_pai(a):
    if not a.pai_sim:
        print("pai: skipped (no --pai-sim DIR: the folder cluster-trace-gpu-v2020/simulator of "
              "github.com/alibaba/clusterdata)", file=sys.stderr)
        return
    pai_dir = Path(a.pai_sim).resolve()
    if not (pai_dir / "simulator.py").exists():
        print(f"pai: skipped ({pai_dir} has no simulator.py)", file=sys.stderr)
        return
    est = pai_dir / "traces/pai/pai_job_duration_estimate_100K.csv"
    src = PAI_IN / "philly_in_pai_format.csv"
    if not est.exists() or est.stat().st_size != src.stat().st_size:
        copy = Path(tempfile.gettempdir()) / "dlsched-bench-pai-sim"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(pai_dir, copy, ignore=shutil.ignore_patterns("logs", "*.csv"))
        (copy / "traces/pai").mkdir(parents=True, exist_ok=True)
        shutil.copy(src, copy / "traces/pai/pai_job_duration_estimate_100K.csv")
        print(f"pai: using a copy of {pai_dir} at {copy} with the Philly input in PAI format", file=sys.stderr)
        pai_dir = copy
    n = 1000 if a.quick else 20000
    pairs = [("fifo", 8, "FIFO", str(PAI_IN / "fifo-backfill.yaml")), ("srtf", 0, "SJF", None)]
    for ours, alloc, theirs, config in pairs:
        yield (dict(kind="pai", pai_dir=str(pai_dir), alloc=alloc, num_jobs=n),
               dict(part="pai", policy=f"PAI {theirs}", pair=ours, goal="reference", once=True))
        spec = dict(kind="dlsched", trace=str(PAI_IN / "pai20k.dlsched.csv"), cluster=str(PAI_IN / "pai1node.yaml"),
                    policy=ours, config=config, limit=n if a.quick else None)
        yield spec, dict(part="pai", policy=ours + ("+backfill" if config else ""), pair=ours,
                         goal=f">= 10x faster than PAI {theirs}")


def part_million(a):
    sizes, gpus = ([10000, 20000], 2000) if a.quick else (a.million_jobs, a.million_gpus)
    for jobs in sizes:
        trace, cluster = million_inputs(jobs, gpus, a.million_load, 0)
        spec = dict(kind="dlsched", trace=str(trace), trace_format="dlsched", cluster=str(cluster), policy="fifo")
        yield spec, dict(part="million", policy="fifo", goal="sim <= 600 s", goal_s=600.0, size=jobs)


PART_FN = {"full-trace": part_full_trace, "round": part_round, "doubling": part_doubling, "pai": part_pai,
           "million": part_million}


# ----------------------------------------------------------------------------- judging, output


def judge(rows: list[dict]) -> None:
    """Fill 'measured' and 'met' per row (doubling and pai need their neighbours)."""
    for r in rows:
        ok = r["status"] == "ok"
        if not ok:
            r["measured"] = f"> {r['timeout']:.0f} s" if r["status"] == "timeout" else r["status"]
            r["met"] = "no" if r["status"] == "timeout" and not r["policy"].startswith("PAI") else "?"
            continue
        if r["part"] in ("full-trace", "million"):
            r["measured"] = f"{r['sim_s']:.1f} s"
            r["met"] = "yes" if r["sim_s"] <= r["goal_s"] else "no"
        elif r["part"] == "round":
            if r.get("rounds"):
                r["measured"] = f"p99 {r['p99_ms']:.2f} ms (p50 {r['p50_ms']:.2f}, max {r['max_ms']:.1f}; {r['rounds']} rounds)"
                r["met"] = "yes" if r["p99_ms"] <= r["goal_ms"] else "no"
            else:
                r["measured"], r["met"] = f"no round with enough jobs ({r['rounds_total']} rounds)", "?"
    for r in rows:  # million: the peak RSS per job between consecutive sizes, and what it implies at 1M
        if r["part"] != "million" or r["status"] != "ok":
            continue
        prev = [x for x in rows if x["part"] == "million" and x["target"] == r["target"] and x["status"] == "ok"
                and x["size"] < r["size"]]
        if prev and r.get("rss_mb"):
            p = max(prev, key=lambda x: x["size"])
            slope = r["bytes_per_job"] = (r["rss_mb"] - p["rss_mb"]) * 2**20 / (r["size"] - p["size"])
            r["rss_1m_mb"] = r["rss_mb"] + slope * (1_000_000 - r["size"]) / 2**20
            r["measured"] += f"; RSS +{slope:,.0f} B/job over {p['size']:,} (1M jobs: ~{r['rss_1m_mb']:,.0f} MB)"
    for r in rows:  # doubling ratios, per target and policy
        if r["part"] != "doubling" or r["status"] != "ok":
            continue
        prev = [x for x in rows if x["part"] == "doubling" and x["target"] == r["target"] and x["policy"] == r["policy"]
                and x["size"] == r["size"] // 2]
        if not prev:
            r["measured"], r["met"] = f"{r['sim_s']:.1f} s (base)", ""
        elif prev[0]["status"] == "ok":
            q = r["sim_s"] / prev[0]["sim_s"]
            r["ratio"] = q
            r["measured"] = f"wall {q:.2f}x vs {r['size'] // 2}"
            if r.get("sim_cpu_s") and prev[0].get("sim_cpu_s"):  # CPU time: judged on it (less noisy)
                q = r["ratio_cpu"] = r["sim_cpu_s"] / prev[0]["sim_cpu_s"]
                r["measured"] += f", CPU {q:.2f}x"
            r["met"] = "yes" if q <= 2.2 else "no"
        else:
            r["measured"], r["met"] = f"{r['sim_s']:.1f} s", "?"
    for r in rows:  # pai: dlsched vs the PAI run of its pair
        if r["part"] != "pai" or r["policy"].startswith("PAI"):
            if r["part"] == "pai" and r["status"] == "ok":
                r["measured"], r["met"] = f"{r['proc_s']:.1f} s process", ""
            continue
        ref = [x for x in rows if x["part"] == "pai" and x["policy"].startswith("PAI") and x["pair"] == r["pair"]]
        if r["status"] != "ok" or not ref or ref[0]["status"] != "ok":
            continue
        q = ref[0]["proc_s"] / r["proc_s"]
        dj = (r["mean_jct"] - ref[0]["mean_jct"]) / ref[0]["mean_jct"]
        r["speedup_vs_pai"], r["jct_diff"] = q, dj
        r["measured"] = f"PAI/dlsched {q:.2f}x; JCT {r['mean_jct']:.1f} vs {ref[0]['mean_jct']:.1f} ({dj:+.3%})"
        same = abs(dj) <= 1e-4 if r["pair"] == "fifo" else True
        r["met"] = "yes" if q >= 10 and same else "no"


COLS = ["part", "target", "policy", "jobs", "gpus", "sim_s", "proc_s", "cpu_s", "rss_mb", "mean_jct", "decisions", "goal",
        "measured", "met"]


def fmt(v, key=""):
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        if key in ("sim_s", "proc_s", "cpu_s"):
            return f"{v:.1f}"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def print_table(rows: list[dict]) -> None:
    head = ["part", "rev", "policy", "jobs", "GPUs", "sim s", "proc s", "CPU s", "RSS MB", "mean JCT s", "decisions",
            "goal", "measured", "met?"]
    cells = [[fmt(r.get(c), c) for c in COLS] for r in rows]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for c in cells:
        print("| " + " | ".join(c) + " |")
    # before/after ratios when two targets measured the same thing
    targets = list(dict.fromkeys(r["target"] for r in rows if r["target"] != "-"))
    if len(targets) == 2:
        print(f"\nratio {targets[0]} / {targets[1]} (simulate() time; round: p99):")
        keyf = lambda r: (r["part"], r["policy"], r.get("size"))  # noqa: E731
        by = {}
        for r in rows:
            by.setdefault(keyf(r), {})[r["target"]] = r
        for k, d in by.items():
            a, b = d.get(targets[0]), d.get(targets[1])
            if not a or not b:
                continue
            if a["status"] == "ok" and b["status"] == "ok":
                m = "p99_ms" if k[0] == "round" else "sim_s"
                if a.get(m) and b.get(m):
                    rss = f"   peak RSS {a['rss_mb']:,.0f} / {b['rss_mb']:,.0f} MB" if k[0] == "million" else ""
                    print(f"  {k[0]:<10} {k[1]:<16} {'' if k[2] is None else k[2]:>6} {a[m] / b[m]:8.2f}x{rss}")
            else:
                print(f"  {k[0]:<10} {k[1]:<16} {'' if k[2] is None else k[2]:>6}  {a['status']} / {b['status']}")


def save(rows: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    jpath = out / "results.json"
    old = json.loads(jpath.read_text())["runs"] if jpath.exists() else []
    allrows = old + rows
    jpath.write_text(json.dumps({"machine": machine(), "runs": allrows}, indent=1, default=str))
    keys = list(dict.fromkeys(k for r in allrows for k in r))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(allrows)


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}, "
            f"{os.cpu_count()} cores, load {load:.1f}, {time.strftime('%Y-%m-%d %H:%M')}")


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "_worker":
        worker_main(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", action="append", choices=PARTS, help="part to run (repeatable; default: all)")
    ap.add_argument("--policies", default=",".join(ALL_POLICIES), help="policies for full-trace and round")
    ap.add_argument("--doubling-policies", default="fifo,tiresias")
    ap.add_argument("--doubling-sizes", default="10000,20000,40000", help="Philly prefix sizes (each 2x the last)")
    ap.add_argument("--million-jobs", default="1000000",
                    help="job counts of the million part, comma-separated (RSS per job between them)")
    ap.add_argument("--million-gpus", type=int, default=100_000)
    ap.add_argument("--million-load", type=float, default=0.6, help="offered load (GPU-seconds / capacity)")
    ap.add_argument("--pai-sim", help="the PAI simulator folder (cluster-trace-gpu-v2020/simulator); pai is skipped without it")
    ap.add_argument("--rev", help="also measure this git revision (worktree under /tmp), alternately with the working tree")
    ap.add_argument("--rev-only", action="store_true", help="with --rev: measure only that revision")
    ap.add_argument("--keep-worktree", action="store_true", help="do not remove the --rev worktree at the end")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run (default 900); reported as '> T s'")
    ap.add_argument("--quick", action="store_true", help="shrink every part to seconds (checks the script)")
    ap.add_argument("--out", type=Path, help="write results.json and results.csv here (appends)")
    a = ap.parse_args()
    a.policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    a.doubling_policies = [p.strip() for p in a.doubling_policies.split(",") if p.strip()]
    a.doubling_sizes = [int(x) for x in a.doubling_sizes.split(",")]
    a.million_jobs = [int(x) for x in str(a.million_jobs).split(",")]
    if a.quick:
        a.doubling_sizes = [500, 1000, 2000]
        a.timeout = min(a.timeout, 300.0)
    parts = a.part or PARTS
    print(f"machine: {machine()}", file=sys.stderr)
    targets = Targets(a.rev, a.rev_only)
    print("measuring: " + ", ".join(f"{n} (PYTHONPATH={pp})" for n, pp in targets.list), file=sys.stderr)
    rows: list[dict] = []
    try:
        for part in parts:
            print(f"\n== {part}", file=sys.stderr, flush=True)
            for spec, base in PART_FN[part](a):
                for name, pp in (targets.list[:1] if base.get("once") else targets.list):
                    label = f"{part} {base['policy']}{' ' + str(base['size']) if 'size' in base else ''} @ {name}"
                    row = dict(base, target="-" if base.get("once") else name)
                    row.update(run_child(spec, pp, a.timeout, label))
                    print(f"     {row['status']}: sim {fmt(row.get('sim_s'), 'sim_s')} s, process {row['proc_s']:.1f} s, "
                          f"RSS {fmt(row.get('rss_mb'))} MB, mean JCT {fmt(row.get('mean_jct'))}",
                          file=sys.stderr, flush=True)
                    rows.append(row)
    except KeyboardInterrupt:
        print("interrupted: reporting what was measured", file=sys.stderr)
    finally:
        targets.close(a.keep_worktree)
    judge(rows)
    print()
    print_table(rows)
    if a.out:
        save(rows, a.out)
        print(f"\nwrote {a.out / 'results.json'} and {a.out / 'results.csv'}")


if __name__ == "__main__":
    main()
