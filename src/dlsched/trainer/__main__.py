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
            return 0
        from dlsched.trainer.ps import run_ps
        return run_ps(run)
    except SystemExit:
        raise
    except BaseException as e:  # a vanished peer, a timeout, a bug: exit non-zero, never hang
        traceback.print_exc()
        print(f"dlsched.trainer: rank {run.rank} failed: {e}", file=sys.stderr, flush=True)
        os._exit(1)


def standby() -> int:
    """A warm interpreter: torch, torch.distributed and the models are imported and touched;
    wait for the real command line (a resize then skips the ~3 s of imports)."""
    import torch.distributed  # noqa: F401

    import dlsched.trainer.ddp  # noqa: F401
    import dlsched.trainer.ps  # noqa: F401
    from dlsched.trainer import models

    models.build_model("mlp", 8, 0)
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
