"""The size and time of `GET /jobs` and the status page with many stored jobs (issue 17's paging).

A store of N queued jobs (SQLite in a temp dir) behind the real FastAPI app and a fake controller;
each request is timed 20 times through FastAPI's test client (no network), median reported.

    python benchmarks/bench_api_paging.py [--jobs 1200] [PATH ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.test_api's FakeController

from dlsched.live.api import create_app  # noqa: E402
from dlsched.live.spec import TrainJob  # noqa: E402
from dlsched.live.store import Store  # noqa: E402
from tests.test_api import FakeController  # noqa: E402

PATHS = ["/jobs", "/jobs?limit=1000", "/jobs?order=newest&limit=20", "/"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1200)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("paths", nargs="*", default=PATHS)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/dlsched.db")
        for i in range(args.jobs):
            store.add(TrainJob(model="mlp", steps=100, name=f"job {i}"))
        with TestClient(create_app(store, FakeController())) as client:
            for path in args.paths:
                client.get(path)  # warm
                times, size, code = [], 0, 0
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    r = client.get(path)
                    times.append(time.perf_counter() - t0)
                    size, code = len(r.content), r.status_code
                print(f"{path:32s} {code} {size / 1024:8.1f} KB  median {1000 * statistics.median(times):6.1f} ms")
        store.close()


if __name__ == "__main__":
    main()
