"""The live controller: the scheduling core on wall-clock time (`loop`), its decisions, what it
observes, failed runs, reports, and the store bookkeeping it relies on (`job_record`)."""

from dlsched.live.controller.loop import Controller, live_refusal

__all__ = ["Controller", "live_refusal"]
