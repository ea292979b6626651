"""Cluster presets: every YAML loads with its stated size; bad names and bad files are clear errors."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from dlsched.core.cluster import GPU
from dlsched.core.errors import ConfigError
from dlsched.paths import traces_dir
from dlsched.presets import PRESET_DIR, PRESETS, load_cluster

GPUS = {"dl2": 192, "dl2-large": 1000, "optimus": 12, "philly": 640, "itp": 768, "itp-small": 128,
        "alibaba2023": 6212, "gavel": 108, "pollux": 64, "dragon": 32,
        # per-trace ITP presets, sized by benchmarks/size_itp_presets.py (tests/test_load.py checks their load)
        "itp-cluster01": 64, "itp-cluster02": 112, "itp-cluster03": 176, "itp-cluster04": 616, "itp-cluster05": 16,
        "itp-cluster09": 40, "itp-cluster10": 16,
        # heterogeneous-cluster scenarios (dlsched.hetero, docs/HETERO.md)
        "pai2020": 6742, "hetero-small": 128, "hetero-homogeneous": 128}


def test_every_preset_loads_with_its_gpu_count() -> None:
    assert set(PRESETS) == set(GPUS) == {p.stem for p in PRESET_DIR.glob("*.yaml")}
    for name, gpus in GPUS.items():
        c = load_cluster(name)
        assert c.name == name and c.total_gpus == gpus, name
        assert PRESETS[name]


def test_preset_shapes() -> None:
    philly = load_cluster("philly")
    assert philly.num_nodes == 80 and Counter(philly.rack.tolist()) == {0: 20, 1: 20, 2: 20, 3: 20}
    itp = load_cluster("itp")
    assert len(set(itp.rack.tolist())) == 6
    gavel = load_cluster("gavel")
    assert {t: int(gavel.capacity[gavel.gpu_type == t, GPU].sum()) for t in gavel.gpu_types} == {"V100": 36, "P100": 36, "K80": 36}
    opt = load_cluster("optimus")
    assert opt.num_nodes == 13 and (opt.capacity[:, GPU] == 0).sum() == 7 and set(opt.rack.tolist()) == {0}
    assert opt.gpu_types == ("generic",)
    dl2 = load_cluster("dl2")
    assert dl2.num_nodes == 96 and (dl2.capacity == [2, 8, 64]).all()
    pollux = load_cluster("pollux")
    assert pollux.network.inter_node_gbps == 6.25 and pollux.gpu_types == ("T4",)


def test_alibaba_preset_matches_the_node_list() -> None:
    root = traces_dir()
    f = root / "alibaba-gpu-v2023" / "openb_node_list_gpu_node.csv" if root else None
    if f is None or not f.is_file():
        pytest.skip("Alibaba node list not available")
    with open(f) as fh:
        rows = list(csv.DictReader(fh))
    c = load_cluster("alibaba2023")
    assert c.num_nodes == len(rows) == 1213
    want = Counter()
    for r in rows:
        want[r["model"]] += int(r["gpu"])
    have = {t: int(c.capacity[c.gpu_type == t, GPU].sum()) for t in c.gpu_types}
    assert have == dict(want)
    assert c.total[1] == pytest.approx(sum(int(r["cpu_milli"]) for r in rows) / 1000)
    assert c.total[2] == pytest.approx(sum(int(r["memory_mib"]) for r in rows) / 1024)


def test_unknown_name_suggests_and_lists() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'philly'") as err:
        load_cluster("phily")
    assert "itp-small" in str(err.value)
    with pytest.raises(ConfigError, match="unknown cluster preset"):
        load_cluster("zzz")


def test_yaml_path_works(tmp_path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\nnode_groups:\n  - {count: 3, gpus: 4, cpus: 16, mem: 64, gpu_type: A100, nodes_per_rack: 2}\n"
                 "  - {count: 1, gpus: 0, cpus: 64, mem: 256, rack: 1}\nnetwork: {inter_node_gbps: 25}\n")
    c = load_cluster(str(f))
    assert c.total_gpus == 12 and c.rack.tolist() == [0, 0, 1, 1] and c.gpu_type.tolist() == ["A100"] * 3 + [""]
    assert c.network.inter_node_gbps == 25 and c.network.intra_node_gbps == 50


def test_bad_yaml_names_the_key(tmp_path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: x\nnode_groups:\n  - {count: 2, gpus: 4, cpus: 8, mem: 32, gpu_typ: V100}\n")
    with pytest.raises(ConfigError, match=r"node_groups\.0\.gpu_typ: unknown key"):
        load_cluster(str(typo))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnode_groups:\n  - {count: -1, gpus: 4, cpus: 8, mem: 32}\n")
    with pytest.raises(ConfigError, match=r"node_groups\.0\.count"):
        load_cluster(str(bad))
    top = tmp_path / "top.yaml"
    top.write_text("name: x\nnodes: 3\nnode_groups:\n  - {count: 1, gpus: 1, cpus: 1, mem: 1}\n")
    with pytest.raises(ConfigError, match=r"nodes: unknown key"):
        load_cluster(str(top))
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_cluster(str(lst))
    with pytest.raises(ConfigError, match="does not exist"):
        load_cluster(str(tmp_path / "missing.yaml"))
