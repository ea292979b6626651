"""Reading a CSV trace into a DataFrame that remembers, for every row, its line in the file.

pandas does the parsing (C engine, fast on the 82k-row Philly file). Blank lines are kept while
parsing and dropped afterwards, so that `_line` matches what an editor shows; a row with too many
fields is reported (with its line) and truncated, instead of aborting the whole read.
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Sequence

import pandas as pd

from dlsched.core.errors import TraceError
from dlsched.traces.problems import ProblemLog

LINE = "_line"


def require_file(path: Path) -> None:
    if path.is_dir():
        raise TraceError(f"{path} is a folder, not a trace file")
    if not path.is_file():
        raise TraceError(f"no such trace file: {path}")


def first_line(path: Path) -> str:
    """The first line of a text file ('' when empty); never raises on odd bytes."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().rstrip("\r\n")


def read_csv(
    path: Path,
    log: ProblemLog,
    *,
    required: Sequence[str],
    text_columns: Sequence[str] = (),
    skiprows: int = 0,
) -> pd.DataFrame | None:
    """Parse `path`; missing columns, bad field counts and empty files go to `log`.

    Returns None when nothing row-level can be checked (no header, missing required columns).
    `skiprows` skips leading non-CSV lines (the canonical format's metadata line), and row
    numbers account for them.
    """
    require_file(path)
    header_line = skiprows + 1
    dtypes = {c: str for c in text_columns}
    kwargs = dict(dtype=dtypes, skip_blank_lines=False, skiprows=skiprows, skipinitialspace=True, index_col=False)
    try:
        try:
            with warnings.catch_warnings():  # a row with more fields than the header: report it
                warnings.simplefilter("error", pd.errors.ParserWarning)
                df = pd.read_csv(path, **kwargs)
        except (pd.errors.ParserError, pd.errors.ParserWarning):
            df = _read_ragged(path, log, kwargs, skiprows)
            if df is None:
                return None
    except pd.errors.EmptyDataError:
        log.add(header_line, "-", "file is empty (no header)")
        return None
    except UnicodeDecodeError as exc:
        log.add(header_line, "-", f"file is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})")
        return None
    except (pd.errors.ParserError, csv.Error) as exc:  # e.g. a quote never closed
        log.add(header_line, "-", f"not valid CSV: {' '.join(str(exc).split())}")
        return None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        have = ", ".join(df.columns)
        for c in missing:
            log.add(header_line, c, f"missing required column (the header has: {have})")
        return None
    df[LINE] = df.index.to_numpy() + header_line + 1
    data_cols = [c for c in df.columns if c != LINE]
    df = df[df[data_cols].notna().any(axis=1)].reset_index(drop=True)
    if df.empty:
        log.add(header_line, "-", "the file has a header but no rows")
        return None
    return df


def _read_ragged(path: Path, log: ProblemLog, kwargs: dict, skiprows: int) -> pd.DataFrame | None:
    """Slow path for rows with more fields than the header: report each, keep the rest aligned."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for _ in range(skiprows):
            f.readline()
        reader = csv.reader(f, strict=True)  # strict: a quote never closed is an error, not rows lost
        try:
            header = next(reader, None)
            if header is None:
                log.add(skiprows + 1, "-", "file is empty (no header)")
                return None
            n = len(header)
            for row in reader:
                if len(row) > n:
                    log.add(reader.line_num + skiprows, "-", f"row has {len(row)} fields, the header has {n}")
        except csv.Error as exc:
            hint = " (a quote never closed?)" if "end of data" in str(exc) else ""
            log.add(reader.line_num + skiprows, "-", f"not valid CSV: {exc}{hint}")
            return None
    with warnings.catch_warnings():  # the truncation pandas warns about is reported above
        warnings.simplefilter("ignore", pd.errors.ParserWarning)
        return pd.read_csv(path, engine="python", on_bad_lines=lambda bad: bad[:n], **kwargs)
