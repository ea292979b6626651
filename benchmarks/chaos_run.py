"""The large chaos run: many real small jobs on a real `dlsched serve` (local backend) while a
seeded injector kills trainers, kills and restarts the service, corrupts checkpoints and starts a
second service against the same store (the injector and the checks: `tests/chaos.py`; a small run
of it is `tests/test_chaos.py`, in CI).

Prints each fault as it lands and, at the end, the counts docs/LIVE.md records: faults injected
by kind, jobs finished or failed (with reasons), steps lost per kind of run boundary against the
checkpoint interval, jobs run twice, second services that came up; writes them as JSON with
`--json`. Exit code 1 when any promise was broken.

    python benchmarks/chaos_run.py [--jobs 50] [--faults 100] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/chaos.py is the harness

from tests.chaos import ChaosConfig, Fault, run_chaos  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=50, help="jobs submitted at the start (default 50)")
    ap.add_argument("--faults", type=int, default=100, help="faults to inject (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-steps", type=int, default=1500)
    ap.add_argument("--max-steps", type=int, default=4000)
    ap.add_argument("--gap", type=float, nargs=2, default=(1.0, 4.0), metavar=("MIN", "MAX"),
                    help="seconds between two faults (default 1 4)")
    ap.add_argument("--timeout", type=float, default=3 * 3600, help="give up after this many seconds")
    ap.add_argument("--json", type=Path, help="also write the summary here")
    ap.add_argument("--work", type=Path, help="keep the service's folders here (default: a temporary folder)")
    args = ap.parse_args()
    if args.jobs < 1 or args.faults < 0 or not 0 < args.min_steps <= args.max_steps:
        ap.error("need --jobs >= 1, --faults >= 0 and 0 < --min-steps <= --max-steps")
    cfg = ChaosConfig(jobs=args.jobs, faults=args.faults, seed=args.seed, steps=(args.min_steps, args.max_steps),
                      gap_s=tuple(args.gap), timeout_s=args.timeout)
    work = args.work or Path(tempfile.mkdtemp(prefix="dlsched-chaos-"))
    t0 = time.time()

    def show(f: Fault) -> None:
        print(f"{time.time() - t0:8.1f} s  {f.kind:<19} {f.job or '':<12} {f.outcome}", flush=True)

    report = run_chaos(work, cfg, progress=show)
    summary = {"machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
               "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "work": str(work),
               **report.summary()}
    print(json.dumps(summary, indent=1))
    if args.json:  # with every fault, for a second look at the work folder
        faults = [{"t": round(f.time - t0, 2), "unix": round(f.time, 3), "kind": f.kind, "job": f.job, "outcome": f.outcome} for f in report.faults]
        args.json.write_text(json.dumps({**summary, "faults": faults}, indent=1))
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
