"""Bad trace files give `file:row: column: problem` lines, never a stack trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlsched.core.errors import ConfigError, TraceError
from dlsched.traces import FORMATS, detect_format, load_trace, validate_trace

ITP_HEADER = "job_id,submission_time,duration,num_gpu\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_itp_bad_rows_are_each_reported_with_their_line(tmp_path):
    p = write(
        tmp_path,
        "c.csv",
        ITP_HEADER
        + "a,10,100,1\n"  # 2 fine
        + "b,x,100,2\n"  # 3 not a number
        + "\n"  # 4 blank: skipped, but still counted as a line
        + "c,20,-5,1\n"  # 5 negative duration
        + "a,30,100,1.5\n"  # 6 duplicate id, fractional GPU count
        + "d,40,100,1,9\n"  # 7 extra field
        + "e,50,,1\n",  # 8 missing duration
    )
    f = str(p)
    assert validate_trace(p) == [
        f"{f}:3: submission_time: not a number: 'x'",
        f"{f}:5: duration: must be >= 0, got -5",
        f"{f}:6: job_id: duplicate job id 'a' (first on row 2)",
        f"{f}:6: num_gpu: must be a whole number, got 1.5",
        f"{f}:7: -: row has 5 fields, the header has 4",
        f"{f}:8: duration: missing value",
    ]
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert e.value.problems == validate_trace(p)
    assert "6 problems" in str(e.value)


def test_clean_file_validates_empty_and_zero_gpu_rows_are_dropped_not_errors(tmp_path):
    p = write(tmp_path, "c.csv", ITP_HEADER + "a,10,100,1\nb,20,100,0\nc,30,0,2\n")
    assert validate_trace(p) == []
    w = load_trace(p)
    assert [j.job_id for j in w.jobs] == ["a"]
    assert w.dropped == {"zero_gpus": 1, "zero_duration": 1}


def test_all_rows_filtered_is_a_problem(tmp_path):
    p = write(tmp_path, "c.csv", ITP_HEADER + "a,10,100,0\n")
    (msg,) = validate_trace(p)
    assert msg.startswith(f"{p}:1: -: no jobs left") and "zero_gpus 1" in msg


def test_missing_column_is_one_problem(tmp_path):
    p = write(tmp_path, "c.csv", "job_id,submission_time,duration\na,1,2\nb,2,3\n")
    assert validate_trace(p, "itp") == [
        f"{p}:1: num_gpu: missing required column (the header has: job_id, submission_time, duration)"
    ]


def test_philly_unparseable_timestamps(tmp_path):
    p = write(
        tmp_path,
        "philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,66.0,1,66.0,vc\n"
        "2017-13-09 07:01:55,66.0,1,66.0,vc\n"
        "2017-10-09 08:00:00,nan,-2,1,vc\n",
    )
    assert validate_trace(p) == [
        f"{p}:3: timestamp: not a date-time (expected %Y-%m-%d %H:%M:%S): '2017-13-09 07:01:55'",
        f"{p}:4: duration: missing value",
        f"{p}:4: num_gpus: must be >= 0, got -2",
    ]


def test_deadline_before_submit(tmp_path):
    p = write(
        tmp_path,
        "d.csv",
        "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
        "a,100,5,bert,500,32,1,10\n"
        "b,100,5,bert,50,32,1,10\n",
    )
    assert detect_format(p) == "itp-deadline"
    assert validate_trace(p) == [f"{p}:3: deadline: deadline 50 is before the submit time 100"]


def test_problem_list_is_capped(tmp_path):
    rows = "".join(f"j{i},{i},-1,1\n" for i in range(120))
    p = write(tmp_path, "c.csv", ITP_HEADER + rows)
    probs = validate_trace(p)
    assert len(probs) == 51
    assert probs[0] == f"{p}:2: duration: must be >= 0, got -1"
    assert probs[49].startswith(f"{p}:51:")
    assert probs[-1] == "... and 70 more"


def test_empty_and_header_only_files(tmp_path):
    empty = write(tmp_path, "e.csv", "")
    assert validate_trace(empty, "itp") == [f"{empty}:1: -: file is empty (no header)"]
    header = write(tmp_path, "h.csv", ITP_HEADER)
    assert validate_trace(header) == [f"{header}:1: -: the file has a header but no rows"]


def test_unknown_format_lists_the_known_ones(tmp_path):
    p = write(tmp_path, "x.csv", "foo,bar\n1,2\n")
    with pytest.raises(TraceError) as e:
        detect_format(p)
    assert len(e.value.problems) == len(FORMATS)
    assert any(line.startswith("philly:") for line in e.value.problems)
    with pytest.raises(ConfigError, match="unknown trace format 'nope'"):
        load_trace(p, "nope")


def test_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "absent.csv")


def test_detect_format_from_headers(tmp_path):
    cases = {
        "philly": "timestamp,duration,num_gpus,gpu_time,cluster\n",
        "itp": ITP_HEADER,
        "alibaba2023": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n",
        "gavel": "job_type,num_steps_arg,needs_data_dir,total_steps,arrival_time,scale_factor\n",
        "pollux": "name,time,application,num_replicas,batch_size\n",
        "dlsched": "job_id,submit_time,iterations\n",
    }
    for fmt, header in cases.items():
        assert detect_format(write(tmp_path, f"{fmt}.csv", header + "\n")) == fmt
    line = '20180820120249885a3928_b3d4_4221_8706_30d335133539,b1fec2ef06f7e7b84dcfdcc21b73bbbb,1534737769,1534781052,"ClusterInfo": ""\n'
    assert detect_format(write(tmp_path, "job_trace_20180820.csv", line)) == "dl2-csv"


def test_alibaba_gpu_milli_and_ordering_checks(tmp_path):
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    p = write(
        tmp_path,
        "pods.csv",
        head
        + "p0,1000,1024,1,500,,LS,Running,0,100,10\n"
        + "p1,1000,1024,1,1500,,LS,Running,0,100,10\n"  # > one GPU
        + "p2,1000,1024,1,500,,LS,Running,50,100,10\n"  # scheduled before created
        + "p3,1000,1024,1,500,,LS,Running,0,5,10\n"  # deleted before scheduled
        + "p4,1000,1024,0,0,,LS,Running,0,100,10\n"  # cpu-only: dropped
        + "p5,1000,1024,1,500,,LS,Pending,0,100,\n",  # never scheduled: dropped
    )
    assert validate_trace(p) == [
        f"{p}:3: gpu_milli: must be <= 1000 (one GPU), got 1500",
        f"{p}:4: scheduled_time: before creation_time (10 < 50)",
        f"{p}:5: deletion_time: before scheduled_time (5 < 10)",
    ]


def test_dl2_csv_bad_lines(tmp_path):
    good = 'j1,{h},100,200,"ClusterInfo": "{{""worker"":{{""count"":2,""gpu"":50}}}}"\n'.replace('""', '"')
    p = write(
        tmp_path,
        "job_trace_20180101.csv",
        good.format(h="a" * 32)
        + "j2,hash,abc,200,\n"
        + 'j3,hash,100,50,"ClusterInfo": ""\n'
        + 'j4,hash,100,200,"ClusterInfo": "{not json}"\n'
        + "j5,hash,100,0,\n",
    )
    assert validate_trace(p, "dl2-csv") == [
        f"{p}:2: start: not a Unix time: 'abc'",
        f"{p}:3: end: before start (50 < 100)",
        f"{p}:4: ClusterInfo: bad resource request (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
    ]


def test_alibaba_gpu_spec_checked_against_the_node_list(tmp_path):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,393216,8,G2\n")
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    p = write(
        tmp_path,
        "openb_pod_list_x.csv",
        head
        + "p0,1000,1024,1,1000,P100,LS,Running,0,100,10\n"
        + "p1,1000,1024,1,1000,H100,LS,Running,0,100,10\n"
        + "p2,1000,1024,2,1000,P100|G2,LS,Running,0,100,10\n",
    )
    assert validate_trace(p) == [f"{p}:3: gpu_spec: unknown GPU model 'H100' (node list has: G2, P100)"]
    p.write_text(head + "p0,1000,1024,1,1000,P100,LS,Running,0,100,10\np2,1000,1024,2,1000,P100|G2,LS,Running,0,100,10\n")
    w = load_trace(p)
    assert [j.gpu_type for j in w.jobs] == ["P100", None]
    assert w.jobs[1].extra["gpu_spec"] == "P100|G2" and w.jobs[1].worker_demand[0] == 2.0
    assert any("several GPU models" in n for n in w.notes)
