"""Trace adapters: every public trace (and our own CSV format) becomes one Workload of JobSpecs.

    load_trace(path)          -> Workload   (format detected from the file)
    validate_trace(path)      -> ["file:row: column: problem", ...]
    trace_info(workload)      -> summary dict
    default_workload()        -> the small ITP slice shipped with the package
    dl2_workload(...)         -> DL2's Alibaba-pattern generator
    synthetic_workload(...)   -> Poisson / pattern generator
    write_trace(workload, p)  -> dlsched CSV
"""

from dlsched.traces.canonical import write_trace
from dlsched.traces.dl2 import dl2_workload
from dlsched.traces.embedded import default_workload
from dlsched.traces.registry import FORMATS, detect_format, load_trace, validate_trace
from dlsched.traces.synthetic import synthetic_workload
from dlsched.traces.workload import Workload, trace_info

__all__ = [
    "FORMATS", "Workload", "default_workload", "detect_format", "dl2_workload", "load_trace",
    "synthetic_workload", "trace_info", "validate_trace", "write_trace",
]
