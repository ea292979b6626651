"""Where a job's ranks listen, and the rendezvous store they meet at: the node's own address only.

A trainer opens three kinds of listening sockets: the rendezvous store (rank 0 hosts PyTorch's
`TCPStore`), gloo's pair listener (DDP, and the process group inside RPC) and TensorPipe's
listeners (parameter-server mode). Left to PyTorch, the store binds every interface: both of its
server implementations (libuv, the default, and the legacy one) bind the wildcard address (`::`
or `0.0.0.0`), whatever host name the store is given (measured: `[::]:port` for a job whose
MASTER_ADDR was 127.0.0.1). The `TCPStore` constructor's `master_listen_fd` is the one way to choose
its address: rank 0 binds a socket to MASTER_ADDR itself and hands it over. Gloo, NCCL and
TensorPipe take the interface to listen on from `GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME` and
`TP_SOCKET_IFNAME`; `pin_interfaces` sets all three to the interface that holds the node's address
(they listen on that interface's first address of its family: 127.0.0.1 for `lo`).

The node's address is `DLSCHED_NODE_ADDR` when the backend sets it (the Ray backend passes Ray's
node IP), else the local end of the route to MASTER_ADDR (127.0.0.1 when the master is local).
Torch's own `tcp://` rendezvous is never used: `tcp_store` is its replacement, also registered as
the `dlsched://host:port` scheme so `torch.distributed.rpc.init_rpc` (which takes a URL, not a
store) gets the same store. Importable without torch (the command line checks the address first).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from datetime import timedelta
from typing import TYPE_CHECKING, Iterator
from urllib.parse import parse_qs, urlparse

import psutil

if TYPE_CHECKING:
    import torch.distributed as dist

SCHEME = "dlsched"
_LISTEN_BACKLOG = 2048
IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


def resolve(host: str) -> str:
    """`host` as an IP address (a name is looked up; an address is returned as is)."""
    try:
        return str(ipaddress.ip_address(host.split("%")[0]))
    except ValueError:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]


def node_address(master_addr: str, given: str | None = None) -> str:
    """The address this node's sockets listen on: `given` (DLSCHED_NODE_ADDR), else the local end
    of the route to the master (a UDP "connect" sends nothing; it only picks the route)."""
    if given:
        return resolve(given)
    master = resolve(master_addr)
    family = socket.AF_INET6 if ":" in master else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((master, 9))
        return s.getsockname()[0]


def interface_of(addr: str) -> str:
    """The name of the network interface holding `addr`; ValueError when no interface of this
    machine has it (then nothing could listen there)."""
    want = ipaddress.ip_address(resolve(addr))
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    if ipaddress.ip_address(a.address.split("%")[0]) == want:
                        return name
                except ValueError:
                    continue
    raise ValueError(f"{addr} is not an address of this machine")


def pin_interfaces(addr: str) -> str:
    """Make gloo, NCCL and TensorPipe listen on the interface of `addr` (overriding any inherited
    setting: a job listens on its node's address, nowhere else). Returns the interface name."""
    name = interface_of(addr)
    for var in IFNAME_VARS:
        os.environ[var] = name
    return name


def _listening_socket(addr: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        s.listen(_LISTEN_BACKLOG)
    except OSError:
        s.close()
        raise
    return s


def tcp_store(master_addr: str, port: int, rank: int, world_size: int, timeout: timedelta) -> "dist.TCPStore":
    """The job's rendezvous store: rank 0 serves it on MASTER_ADDR:port only, the others connect."""
    import torch.distributed as dist

    host = resolve(master_addr)
    if rank != 0:
        return dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    fd = _listening_socket(host, port).detach()  # the store's server owns (and closes) it from here
    return dist.TCPStore(host, port, world_size, is_master=True, timeout=timeout, master_listen_fd=fd)


def store_url(master_addr: str, port: int) -> str:
    """The `init_method` URL of `tcp_store` for APIs that take a URL (RPC)."""
    host = resolve(master_addr)
    return f"{SCHEME}://[{host}]:{port}" if ":" in host else f"{SCHEME}://{host}:{port}"


def _handler(url: str, timeout: timedelta = timedelta(seconds=300), **kwargs) -> Iterator[tuple["dist.Store", int, int]]:
    """`torch.distributed.rendezvous` handler of `dlsched://host:port?rank=R&world_size=N`."""
    u = urlparse(url)
    q = {k: v[0] for k, v in parse_qs(u.query).items()}
    rank, world = int(q["rank"]), int(q["world_size"])
    yield tcp_store(u.hostname or "", int(u.port or 0), rank, world, timeout), rank, world
    raise RuntimeError(f"{SCHEME}:// rendezvous cannot re-rendezvous")


_registered = False


def register() -> None:
    """Register the `dlsched://` scheme with torch.distributed (idempotent)."""
    import torch.distributed as dist

    global _registered
    if not _registered:
        dist.register_rendezvous_handler(SCHEME, _handler)
        _registered = True
