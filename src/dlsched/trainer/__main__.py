"""`python -m dlsched.trainer`: see `dlsched.trainer.cli` for the options (or `--help`).

Arguments are checked before torch is imported, so a bad command line fails in a fraction of a
second with exit code 2."""

from __future__ import annotations

import json
import os
import sys
import traceback

from dlsched.trainer.cli import make_run, parse
from dlsched.trainer.signals import STOP


def main(argv: list[str] | None = None) -> int:
    STOP.install()
    args, p = parse(sys.argv[1:] if argv is None else argv)
    if args.standby:
        return standby()
    run = make_run(args, p)
    import torch

    torch.set_num_threads(int(os.environ.get("DLSCHED_THREADS", "1")))
    try:
        if run.mode == "ddp":
            from dlsched.trainer.ddp import run_ddp
            run_ddp(run)
            code = 0
        else:
            from dlsched.trainer.ps import run_ps
            code = run_ps(run)
    except SystemExit:
        raise
    except BaseException as e:  # a vanished peer, a timeout, a bug: exit non-zero, never hang
        traceback.print_exc()
        print(f"dlsched.trainer: rank {run.rank} failed: {e}", file=sys.stderr, flush=True)
        os._exit(1)
    # Everything that matters is on disk (checkpoint renamed into place, progress written with
    # unbuffered appends, RPC shut down). The interpreter's own teardown (gloo and torch
    # destructors) took ~0.8 s of every resize pause, and a resize waits for the old run to be gone.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def standby() -> int:
    """A warm interpreter: torch, torch.distributed and the models are imported and touched;
    wait for the real command line (a resize then skips the ~3 s of imports)."""
    import torch
    import torch.distributed  # noqa: F401

    import dlsched.trainer.ddp  # noqa: F401
    import dlsched.trainer.ps  # noqa: F401
    from dlsched.trainer import models

    # One tiny training step: the first optimizer built in a process imports torch's compiler
    # stack (~1.3 s) and the first backward initialises autograd; pay both while idle.
    net = models.build_model("mlp", 8, 0)
    opt = torch.optim.Adam(net.parameters())
    net(torch.zeros(2, models.MLP_IN)).sum().backward()
    opt.step()
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line:
        return 0  # the pool closed our stdin: nothing to run
    try:
        msg = json.loads(line)
        argv, env = msg["argv"], msg.get("env", {})
        if not isinstance(argv, list) or not isinstance(env, dict):
            raise TypeError("argv must be a list and env an object")
    except (ValueError, KeyError, TypeError) as e:
        print(f"dlsched.trainer: bad standby request: {e}", file=sys.stderr, flush=True)
        return 2
    if "--standby" in argv:
        print("dlsched.trainer: a standby request cannot ask for --standby", file=sys.stderr, flush=True)
        return 2
    os.environ.update({str(k): str(v) for k, v in env.items()})
    return main([str(a) for a in argv])


if __name__ == "__main__":
    sys.exit(main())
