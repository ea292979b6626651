"""Each adapter on the real shared traces: counts and fields against the traces' READMEs."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from dlsched.paths import traces_dir
from dlsched.traces import detect_format, load_trace, trace_info, validate_trace

pytestmark = pytest.mark.slow
T = traces_dir()


@pytest.fixture(autouse=True)
def _need_traces():
    if T is None:
        pytest.skip("shared traces not available")


@pytest.fixture(scope="module")
def philly():
    if T is None:
        pytest.skip("shared traces not available")
    return load_trace(T / "philly-pollux" / "philly.csv")


def test_philly_full_file(philly):
    w = philly
    assert (w.name, w.cluster) == ("philly", "philly")
    assert len(w.jobs) == 82_247
    info = trace_info(w)
    # GPU mix straight from the philly-pollux README
    assert info["gpus_histogram"] == {
        "1": 76_627, "2": 1_818, "4": 1_870, "8": 1_643, "12": 7, "16": 199, "24": 7, "32": 67, "64": 6, "128": 3,
    }  # fmt: skip
    assert info["arch"] == {"single": 76_627, "allreduce": 82_247 - 76_627}
    assert info["queues"] == 15
    assert w.jobs[0].submit_time == 0.0
    assert all(a.submit_time <= b.submit_time for a, b in zip(w.jobs, w.jobs[1:]))
    j = next(j for j in w.jobs if j.job_id == "philly-2")  # first data row: 2017-10-09 07:01:55, 66 s, VC 11cb48
    assert (j.iterations, j.duration, j.num_workers, j.queue, j.model) == (66.0, 66.0, 1, "11cb48", "duration-only")
    assert j.worker_demand == (1.0, 4.0, 16.0)
    assert not j.work_known


def test_philly_limit_and_elastic():
    w = load_trace(T / "philly-pollux" / "philly.csv", limit=500, elastic=True)
    assert len(w.jobs) == 500
    assert all(j.arch.value == "allreduce" and j.min_workers == 1 and j.max_workers == 2 * j.num_workers for j in w.jobs)


def test_itp_raw_cluster04():
    p = T / "elasticflow-itp" / "raw" / "cluster04.csv"
    assert detect_format(p) == "itp"
    w = load_trace(p)
    assert (w.name, w.cluster, len(w.jobs)) == ("itp-cluster04", "itp-cluster04", 15_802)
    assert trace_info(w)["gpus_histogram"] == {"1": 11_924, "2": 125, "4": 532, "8": 2_779, "16": 182, "32": 254, "64": 6}
    first = w.jobs[0]
    assert (first.job_id, first.submit_time, first.duration, first.num_workers) == (
        "c9c620ea-4336-c1a9-8abe-e26bd13076b8", 5810.0, 288476.0, 16,
    )  # fmt: skip
    assert all(j.deadline is None for j in w.jobs)


def test_itp_deadline_carries_generated_columns():
    p = T / "elasticflow-itp" / "elasticflow" / "cluster04.csv"
    assert detect_format(p) == "itp-deadline"
    w = load_trace(p)
    assert len(w.jobs) == 15_802 and trace_info(w)["deadlines"] == 15_802
    j = w.jobs[0]
    assert j.deadline == 314_395.0 and j.iterations == j.duration == 288_476.0  # duration-only work
    assert j.extra == {"model_name": "inception3", "num_iteration": 3_950_230, "batch_size": 64,
                       "profile": "inception3@64 A100, from the trace"}
    assert (j.model, j.batch_size, j.num_workers, j.min_workers, j.max_workers) == (
        "elasticflow:inception3", 64, 16, 1, 16)  # its measured curve stops improving at 16
    off = load_trace(p, profiles="off", limit=1).jobs[0]
    assert (off.model, off.elastic) == ("duration-only", False) and "profile" not in off.extra
    assert {x.extra["model_name"] for x in w.jobs} == {"bert", "deepspeech2", "gpt2", "inception3", "resnet50", "vgg16"}


def test_alibaba2023_pods():
    p = T / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    assert detect_format(p) == "alibaba2023"
    w = load_trace(p)
    raw = pd.read_csv(p)
    # README: 1,088 cpu-only pods; pending pods never got a scheduled_time
    assert w.dropped["cpu_only"] == 1_088
    assert w.dropped["never_scheduled"] == int(((raw.num_gpu >= 1) & raw.scheduled_time.isna()).sum())
    assert len(w.jobs) + sum(w.dropped.values()) == 8_152
    j = next(j for j in w.jobs if j.job_id == "openb-pod-0001")  # 6000 mCPU, 12288 MiB, 1 GPU at 460 milli
    assert j.worker_demand == (0.46, 6.0, 12.0)
    assert (j.submit_time, j.duration, j.arch.value) == (427_061.0, 12_902_960.0 - 427_061.0, "single")
    assert trace_info(w)["fractional_gpu_jobs"] > 1_000
    assert any("still Running" in n for n in w.notes)


def test_gavel_vc():
    p = T / "gavel-philly-derived" / "seed0" / "6214e9.csv"
    assert detect_format(p) == "gavel"
    w = load_trace(p)
    with open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(w.jobs) == len(rows) == 2_000
    first = next(j for j in w.jobs if j.job_id == "6214e9-2")
    assert first.model == "gavel:" + rows[0]["job_type"]
    assert first.iterations == float(rows[0]["total_steps"]) and first.num_workers == int(rows[0]["scale_factor"])
    assert not any(j.work_known for j in w.jobs)
    resnet = [j for j in w.jobs if j.model == "gavel:ResNet-50 (batch size 64)"]
    assert resnet and all(j.batch_size == 64 for j in resnet)
    el = load_trace(p, elastic=True)
    assert all(j.min_workers == 1 and j.max_workers == max(j.num_workers, min(2 * j.num_workers, 8)) for j in el.jobs)
    assert {j.max_workers for j in el.jobs if j.num_workers == 4} == {8}


def test_pollux_iterations_from_profiles():
    p = T / "pollux-profiles" / "workloads" / "workload-1.csv"
    assert detect_format(p) == "pollux"
    w = load_trace(p, elastic=True)
    assert (len(w.jobs), w.cluster) == (160, "pollux")
    j = next(j for j in w.jobs if j.job_id == "cifar10-0")  # batch 2048, 6 replicas
    val = pd.read_csv(T / "pollux-profiles" / "traces" / "cifar10" / "validation-2048.csv")
    assert j.iterations == float(val["iteration"].iloc[-1])
    assert (j.model, j.batch_size, j.num_workers, j.min_workers) == ("pollux:cifar10", 2048, 6, 1)
    assert all(x.max_workers == 1 for x in w.jobs if x.model == "pollux:ncf")


def test_dl2_raw_csv_folder():
    p = T / "dl2" / "ali-v2"
    assert detect_format(p) == "dl2-csv"
    w = load_trace(p)
    assert w.dropped["no_end_time"] == 1_410  # README: 1,410 rows without an end time
    assert len(w.jobs) == 15_094  # rows with a ClusterInfo JSON and an end time
    assert {j.arch.value for j in w.jobs} == {"ps", "allreduce", "single"}


def test_pollux_interpolates_unprofiled_batch_sizes_and_rejects_others(tmp_path):
    # a user workload outside the pollux folder: profiles come from the shared traces
    p = tmp_path / "mine.csv"
    p.write_text("name,time,application,num_replicas,batch_size\nj1,0,cifar10,2,3072\nj2,5,cifar10,1,99999\nj3,9,nope,1,64\n")
    (p1, p2) = [f"{p}:3: batch_size: 99999 is outside cifar10's profiled range 128..4096", f"{p}:4: application: no profile for 'nope'"]
    probs = validate_trace(p, "pollux")
    assert probs[0] == p1 and probs[1].startswith(p2)
    p.write_text("name,time,application,num_replicas,batch_size\nj1,0,cifar10,2,3072\n")
    it = {b: float(pd.read_csv(T / "pollux-profiles" / "traces" / "cifar10" / f"validation-{b}.csv")["iteration"].iloc[-1]) for b in (2048, 4096)}
    (j,) = load_trace(p, "pollux").jobs
    assert j.iterations == pytest.approx((it[2048] + it[4096]) / 2)  # 3072 is halfway
