"""The reporting rank's side of `progress.jsonl` (format: `dlsched.trainer.protocol`)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from dlsched.trainer.protocol import PROGRESS


def append_record(job_dir: Path, rec: dict) -> None:
    """Append one JSON line to the job's progress log in a single write on an O_APPEND file, so a
    reader never sees two records interleaved (ranks other than the reporting one use it too)."""
    fd = os.open(Path(job_dir) / PROGRESS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(rec) + "\n").encode())
    finally:
        os.close(fd)


class Reporter:
    """The reporting rank's records: one JSON line per event (`append_record`)."""

    def __init__(self, job_dir: Path, run: str, workers: int, ps: int, batch_size: int, every: float):
        self.job_dir = Path(job_dir)
        self.run, self.workers, self.ps, self.batch_size, self.every = run, workers, ps, batch_size, every
        self._last_t = time.time()
        self._last_step: int | None = None

    def emit(self, event: str, step: int, **fields) -> None:
        rec = {"time": time.time(), "event": event, "step": step, **fields,
               "workers": self.workers, "ps": self.ps, "run": self.run}
        append_record(self.job_dir, rec)

    def start(self, step: int, resumed_from: int, loss: float, **fields) -> None:
        self.emit("start", step, resumed_from=resumed_from, loss=loss, **fields)
        self._last_t, self._last_step = time.time(), step

    def maybe_progress(self, step: int, loss: float) -> None:
        now = time.time()
        if now - self._last_t < self.every or self._last_step is None:
            return
        rate = (step - self._last_step) / (now - self._last_t)
        self.emit("progress", step, loss=loss, steps_per_s=rate, samples_per_s=rate * self.batch_size)
        self._last_t, self._last_step = now, step
