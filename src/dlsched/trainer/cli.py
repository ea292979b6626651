"""Command line and environment of one trainer process (the trainer contract); importable without
torch, so bad arguments fail fast."""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from dlsched.trainer.common import Run

MODELS: tuple[str, ...] = ("mlp", "cnn", "transformer")
#: `--width` default per model: MLP hidden units, CNN channels, transformer d_model.
DEFAULT_WIDTH = {"mlp": 128, "cnn": 16, "transformer": 64}
DEFAULT_LR = {"mlp": 3e-3, "cnn": 3e-3, "transformer": 3e-3}
DEFAULT_COMM_TIMEOUT = 60.0

EPILOG = """\
environment (torch.distributed conventions):
  RANK, WORLD_SIZE        this process's rank and the number of processes (workers + --num-ps);
                          default 0 and 1. In ps mode ranks 0..K-1 are parameter servers and
                          K..WORLD_SIZE-1 workers; rank K reports progress and checkpoints.
  MASTER_ADDR, MASTER_PORT  rendezvous address (needed when WORLD_SIZE > 1); rank 0 serves the
                          rendezvous store on exactly this address (an address of its node)
  DLSCHED_NODE_ADDR       this node's address: every socket of the rank (gloo, NCCL, TensorPipe)
                          listens there and nowhere else (default: the local end of the route to
                          MASTER_ADDR, i.e. 127.0.0.1 on one machine)
  LOCAL_RANK, LOCAL_WORLD_SIZE  this rank's index among the ranks of its node, and their number:
                          with a GPU for each, ddp uses NCCL on cuda:LOCAL_RANK, else gloo on the CPU
  DLSCHED_RUN_ID          id of this launch, echoed as "run" in progress records
  DLSCHED_THREADS         torch threads per process (default 1)
  DLSCHED_COMM_TIMEOUT    seconds before a rank gives up on a vanished peer (default 60)

files in --job-dir: progress.jsonl (events), checkpoint-<step>-<xxh3>.pt (the two newest good
checkpoints: resume points at any world size; a bad one is set aside as *.bad and the previous
one used), done.json (written once all --steps are trained). SIGTERM: all ranks stop at the same step,
checkpoint, log "stop" and exit 0.

a ~10M-parameter model for resize benchmarks: --model mlp --width 3150 (10.1M parameters)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit 2 with one clear line plus usage
        self.print_usage(sys.stderr)
        self.exit(2, f"dlsched.trainer: error: {message}\n")


def _at_least(cast: Callable[[str], float], low: float, strict: bool) -> Callable[[str], float]:
    """An argparse type: the text through `cast`, required > `low` (`strict`) or >= `low`."""
    def parse(s: str) -> float:
        v = cast(s)
        if not (v > low if strict else v >= low):  # NaN fails too
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {low:g}, got {s}")
        return v

    parse.__name__ = cast.__name__  # argparse's "invalid int value: 'x'"
    return parse


_positive_int, _nonneg_int, _positive_float = _at_least(int, 0, True), _at_least(int, 0, False), _at_least(float, 0, True)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m dlsched.trainer", description="Elastic trainer of the dlsched live runtime: "
                "trains one job for --steps steps of a fixed global batch, resuming from the job "
                "directory's checkpoint at whatever world size it is started with.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--job-dir", type=Path, help="job directory (progress log, checkpoint, done marker); created if missing")
    p.add_argument("--model", choices=MODELS, help="network: mlp (Gaussian clusters), cnn (16x16 patterns), transformer (tiny causal LM on a Markov chain)")
    p.add_argument("--mode", choices=("ddp", "ps"), default="ddp", help="ddp: all-reduce of gradients; ps: synchronous parameter servers over torch RPC (default ddp)")
    p.add_argument("--steps", type=_positive_int, help="total optimizer steps of the global batch")
    p.add_argument("--batch-size", type=_positive_int, default=32, help="global batch, split over the workers (default 32)")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="seed of the initialisation and of the synthetic data (default 0)")
    p.add_argument("--num-ps", type=_nonneg_int, default=0, help="parameter servers K (ps mode: >= 1; ddp: 0)")
    p.add_argument("--checkpoint-every", type=_positive_float, default=10.0, help="seconds between periodic checkpoints (default 10)")
    p.add_argument("--lr", type=_positive_float, default=None, help="Adam learning rate (default: per model, 3e-3)")
    p.add_argument("--report-every", type=_positive_float, default=1.0, help="seconds between progress records (default 1)")
    p.add_argument("--width", type=_positive_int, default=None,
                   help="model size knob: MLP hidden units (default 128), CNN channels (16), transformer d_model (64, multiple of 4); "
                        "must stay the same across runs of a job")
    p.add_argument("--standby", action="store_true", help="import torch, print 'ready', then read one JSON line "
                   '{"argv": [...], "env": {...}} from stdin and run as if started with it')
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    p = parser()
    args = p.parse_args(argv)
    if args.standby:
        return args, p
    for name in ("job_dir", "model", "steps"):
        if getattr(args, name) is None:
            p.error(f"--{name.replace('_', '-')} is required")
    if args.mode == "ps" and args.num_ps < 1:
        p.error("--mode ps needs --num-ps >= 1")
    if args.mode == "ddp" and args.num_ps != 0:
        p.error("--mode ddp takes --num-ps 0")
    if args.model == "transformer" and args.width is not None and args.width % 4:
        p.error("--width of the transformer must be a multiple of 4")
    return args, p


def make_run(args: argparse.Namespace, p: argparse.ArgumentParser) -> "Run":
    from dlsched.trainer import protocol as P
    from dlsched.trainer.common import Run

    env = os.environ
    try:
        rank = int(env.get(P.ENV_RANK, "0"))
        world = int(env.get(P.ENV_WORLD_SIZE, "1"))
        timeout = float(env.get("DLSCHED_COMM_TIMEOUT", DEFAULT_COMM_TIMEOUT))
        port = int(env.get(P.ENV_MASTER_PORT, "0"))
        local_rank = int(env.get(P.ENV_LOCAL_RANK, "0"))  # read again by trainer.ddp.placement
        local_world = int(env.get(P.ENV_LOCAL_WORLD_SIZE, "1"))
    except ValueError as e:
        p.error(f"bad environment: {e}")
    if local_world < 1 or not 0 <= local_rank:
        p.error(f"need 0 <= LOCAL_RANK and LOCAL_WORLD_SIZE >= 1, got {local_rank} and {local_world}")
    if world < 1 or not 0 <= rank < world:
        p.error(f"need 0 <= RANK < WORLD_SIZE, got RANK={rank} WORLD_SIZE={world}")
    if world - args.num_ps < 1:
        p.error(f"WORLD_SIZE={world} leaves no worker after --num-ps {args.num_ps}")
    needs_rendezvous = world > 1 or args.mode == "ps"
    if needs_rendezvous and (not env.get(P.ENV_MASTER_ADDR) or port <= 0):
        p.error("MASTER_ADDR and MASTER_PORT must be set when WORLD_SIZE > 1 or in ps mode")
    if timeout <= 0:
        p.error("DLSCHED_COMM_TIMEOUT must be > 0")
    master = env.get(P.ENV_MASTER_ADDR, "127.0.0.1")
    node_addr = "127.0.0.1"
    if needs_rendezvous:
        node_addr = _node_address(p, master, env.get(P.ENV_NODE_ADDR), rank == 0)
    args.job_dir.mkdir(parents=True, exist_ok=True)
    return Run(job_dir=args.job_dir, model=args.model, mode=args.mode, steps=args.steps,
               batch_size=args.batch_size, seed=args.seed, num_ps=args.num_ps,
               checkpoint_every=args.checkpoint_every, lr=args.lr or DEFAULT_LR[args.model],
               report_every=args.report_every, width=args.width or DEFAULT_WIDTH[args.model],
               rank=rank, world_size=world, master_addr=master,
               master_port=port, run_id=env.get(P.ENV_RUN_ID) or uuid.uuid4().hex[:12],
               comm_timeout=timeout, node_addr=node_addr)


def _node_address(p: argparse.ArgumentParser, master: str, given: str | None, hosts_store: bool) -> str:
    """Where this rank listens (`trainer.rendezvous`), checked to be an address of this machine;
    rank 0 also serves the store on MASTER_ADDR, which must then be one of its addresses too."""
    from dlsched.trainer import rendezvous

    try:
        addr = rendezvous.node_address(master, given)
        rendezvous.interface_of(addr)
        if hosts_store:
            rendezvous.interface_of(master)
    except (OSError, ValueError) as e:
        p.error(f"cannot listen on this node's address (MASTER_ADDR={master}, "
                f"DLSCHED_NODE_ADDR={given or 'unset'}): {e}")
    return addr
