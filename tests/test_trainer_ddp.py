"""The data-parallel trainer is torch's DistributedDataParallel and trains exactly what one process
trains on the same global batch; a job's sockets listen on the node's own address only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from dlsched.trainer import rendezvous
from dlsched.trainer.ddp import pick_backend
from dlsched.trainer.protocol import is_done
from tests.live_service import free_port
from tests.test_trainer import TIMEOUT, env_for, newest, records, trainer_argv, wait_all, wait_for_step


def run_logged(job: Path, world: int, argv: list[str]) -> list[str]:
    """Run a job of `world` ranks to completion; each rank's output."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "dlsched.trainer", *argv], env=env_for(r, world, port, "d"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    try:
        outs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
    finally:
        wait_all(procs)  # kills what is left, by handle
    assert [p.returncode for p in procs] == [0] * world, outs
    assert is_done(job)
    return outs


def step_losses(job: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records(job) if r["event"] in ("start", "progress")}


def test_ddp_is_what_trains_and_matches_one_process(tmp_path: Path) -> None:
    """Per-step global losses of 2 ranks (DDP) and of 3 ranks where one has an empty share of the
    batch (4 samples: 2 + 2 + 0) equal those of one process on the same global batch."""
    runs = {}
    for world in (1, 2, 3):
        job = tmp_path / f"w{world}"
        outs = run_logged(job, world, trainer_argv(job, steps=25, batch=4, extra=("--report-every", "1e-9")))
        if world > 1:
            assert f"DistributedDataParallel over gloo on cpu, {world} ranks" in outs[0]
        runs[world] = step_losses(job)
    assert sorted(runs[1]) == list(range(1, 26))
    for world in (2, 3):
        assert sorted(runs[world]) == sorted(runs[1])
        for step, loss in runs[1].items():
            assert runs[world][step] == pytest.approx(loss, abs=1e-5), (world, step)
    ckpt = newest(tmp_path / "w2")
    assert not any(name.startswith("module.") for name in ckpt["params"])  # format unchanged
    assert set(ckpt["params"]) == set(ckpt["opt"])


def listening(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every LISTEN inet socket of these processes and their children."""
    out = []
    for pid in pids:
        proc = psutil.Process(pid)
        for p in [proc, *proc.children(recursive=True)]:
            out += [(p.pid, c.laddr.ip, c.laddr.port) for c in p.net_connections("inet")
                    if c.status == psutil.CONN_LISTEN]
    return out


@pytest.mark.parametrize("mode,num_ps", [("ddp", 0), ("ps", 1)])
def test_every_listening_socket_is_on_the_node_address(tmp_path: Path, mode: str, num_ps: int) -> None:
    """The rendezvous store (rank 0), gloo's and TensorPipe's listeners: all on 127.0.0.1, none on
    a wildcard address (torch's own TCPStore binds `::`)."""
    port = free_port()
    argv = trainer_argv(tmp_path, mode=mode, num_ps=num_ps, steps=100_000)
    logs = [tmp_path / f"rank{r}.log" for r in range(2)]  # kept: a failed stop shows why
    with logs[0].open("w") as out0, logs[1].open("w") as out1:
        procs = [subprocess.Popen([sys.executable, "-m", "dlsched.trainer", *argv], env=env_for(r, 2, port, "l"),
                                  stdout=out, stderr=subprocess.STDOUT) for r, out in enumerate((out0, out1))]
        try:
            wait_for_step(tmp_path, 2, procs)
            socks = listening([p.pid for p in procs])
            for p in procs:
                p.send_signal(signal.SIGTERM)
            codes = wait_all(procs)
        finally:
            wait_all(procs)
    assert codes == [0, 0], "\n".join(f"rank {r}: ...{log.read_text()[-2000:]}" for r, log in enumerate(logs))
    assert any(port_ == port for _, _, port_ in socks), "the rendezvous store was not seen listening"
    assert socks and all(ip == "127.0.0.1" for _, ip, _ in socks), socks


def test_a_worker_whose_rendezvous_store_is_gone_at_shutdown_exits_cleanly(monkeypatch, capsys) -> None:
    """The store's host (parameter server 0) may exit while a worker's graceful shutdown reads
    it one last time: that error alone ends the stop cleanly, any other still fails the rank."""
    import torch.distributed as dist

    from dlsched.trainer import ps

    def gone(graceful: bool) -> None:
        raise dist.DistNetworkError("Connection reset by peer")

    monkeypatch.setattr(ps.rpc, "shutdown", gone)
    ps._leave()
    assert "nothing was lost" in capsys.readouterr().out

    def broken(graceful: bool) -> None:
        raise RuntimeError("an RPC failed")

    monkeypatch.setattr(ps.rpc, "shutdown", broken)
    with pytest.raises(RuntimeError, match="an RPC failed"):
        ps._leave()


@pytest.mark.parametrize("cuda,local_rank,local_world,want", [
    (0, 0, 1, ("gloo", "cpu")),
    (2, 1, 2, ("nccl", "cuda:1")),
    (1, 0, 2, ("gloo", "cpu")),  # two ranks cannot share one GPU under NCCL
    (1, 0, 1, ("nccl", "cuda:0")),  # e.g. Ray gave this rank its own GPU
])
def test_backend_follows_the_devices(cuda: int, local_rank: int, local_world: int, want: tuple[str, str]) -> None:
    got = pick_backend(cuda, local_rank, local_world)
    assert (got.backend, str(got.device)) == want


def test_node_address_defaults_to_the_route_to_the_master() -> None:
    assert rendezvous.node_address("127.0.0.1") == "127.0.0.1"
    assert rendezvous.node_address("localhost") in ("127.0.0.1", "::1")
    assert rendezvous.node_address("10.1.2.3", given="127.0.0.1") == "127.0.0.1"
    assert rendezvous.interface_of("127.0.0.1")


def test_store_url_round_trips_through_the_rendezvous_handler() -> None:
    rendezvous.register()
    rendezvous.register()  # idempotent
    import torch.distributed as dist

    port = free_port()
    store, rank, world = next(dist.rendezvous(rendezvous.store_url("127.0.0.1", port), rank=0, world_size=1))
    store.set("k", "v")
    assert (store.get("k"), rank, world) == (b"v", 0, 1)
    mine = [c for c in psutil.Process().net_connections("inet") if c.status == psutil.CONN_LISTEN
            and c.laddr.port == port]
    assert [c.laddr.ip for c in mine] == ["127.0.0.1"]
    del store


@pytest.mark.parametrize("env,needle", [
    ({"DLSCHED_NODE_ADDR": "203.0.113.7"}, "cannot listen on this node's address"),
    ({"MASTER_ADDR": "203.0.113.7"}, "cannot listen on this node's address"),
    ({"LOCAL_RANK": "x"}, "bad environment"),
    ({"LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE >= 1"),
])
def test_bad_node_environment_is_a_one_line_error(tmp_path: Path, env: dict[str, str], needle: str) -> None:
    out = subprocess.run([sys.executable, "-m", "dlsched.trainer", *trainer_argv(tmp_path, steps=5)],
                         capture_output=True, text=True, timeout=TIMEOUT,
                         env={**env_for(0, 2, free_port(), "e"), **env})
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr
