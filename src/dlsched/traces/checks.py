"""Vectorised column checks shared by every adapter.

Each check converts one column to a NumPy array and reports every bad row to the ProblemLog; bad
values come back as NaN (numbers) or None (text), so later checks need not trip over them again.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from dlsched.traces.problems import ProblemLog
from dlsched.traces.reader import LINE

_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


def lines_of(df: pd.DataFrame) -> np.ndarray:
    return df[LINE].to_numpy()


def numbers(
    df: pd.DataFrame,
    col: str,
    log: ProblemLog,
    *,
    required: bool = True,
    default: float = np.nan,
    min_value: float | None = None,
    strict: bool = False,
    integer: bool = False,
    max_value: float | None = None,
) -> np.ndarray:
    """Column `col` as floats. Missing cells are a problem when `required`, else `default`;
    values below `min_value` (or at it, if `strict`) or above `max_value` are problems."""
    n = len(df)
    if col not in df.columns:
        return np.full(n, default, dtype=float)
    raw = df[col]
    lines = lines_of(df)
    missing = raw.isna().to_numpy()
    num = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float, na_value=np.nan, copy=True)
    bad = np.isnan(num) & ~missing
    if bad.any():
        vals = raw.to_numpy()
        log.add_rows(bad, lines, col, lambda i: f"not a number: {str(vals[i])!r}")
    if required:
        log.add_rows(missing, lines, col, "missing value")
    else:
        num[missing] = default
    with np.errstate(invalid="ignore"):
        inf = np.isinf(num)
        if inf.any():
            log.add_rows(inf, lines, col, "not a finite number")
            num[inf] = np.nan
        if min_value is not None:
            low = (num <= min_value) if strict else (num < min_value)
            if low.any():
                op = ">" if strict else ">="
                log.add_rows(low, lines, col, lambda i: f"must be {op} {min_value:g}, got {num[i]:g}")
                num[low] = np.nan
        if max_value is not None:
            high = num > max_value
            if high.any():
                log.add_rows(high, lines, col, lambda i: f"must be <= {max_value:g}, got {num[i]:g}")
                num[high] = np.nan
        if integer:
            frac = ~np.isnan(num) & (num != np.floor(num))
            if frac.any():
                log.add_rows(frac, lines, col, lambda i: f"must be a whole number, got {num[i]:g}")
                num[frac] = np.nan
    return num


def texts(
    df: pd.DataFrame, col: str, log: ProblemLog, *, required: bool = True, default: str | None = None
) -> np.ndarray:
    """Column `col` as an object array of stripped strings (missing -> `default`)."""
    n = len(df)
    if col not in df.columns:
        return np.full(n, default, dtype=object)
    raw = df[col]
    missing = raw.isna().to_numpy()
    out = raw.astype(object).to_numpy(dtype=object, copy=True)
    if missing.any():
        out[missing] = default
    present = ~missing
    if present.any():
        stripped = raw[present].astype(str).str.strip()
        out[present] = stripped.to_numpy(dtype=object)
        blank = np.zeros(n, dtype=bool)
        blank[present] = (stripped == "").to_numpy()
        missing = missing | blank
        out[blank] = default
    if required:
        log.add_rows(missing, lines_of(df), col, "missing value")
    return out


def choices(
    df: pd.DataFrame, col: str, log: ProblemLog, allowed: Iterable[str], default: str
) -> np.ndarray:
    """A text column restricted to `allowed` (case-insensitive)."""
    allowed = tuple(allowed)
    vals = texts(df, col, log, required=False, default=default)
    low = np.array([v.lower() if isinstance(v, str) else v for v in vals], dtype=object)
    bad = ~np.isin(low, allowed)
    if bad.any():
        log.add_rows(bad, lines_of(df), col, lambda i: f"must be one of {', '.join(allowed)}, got {vals[i]!r}")
        low[bad] = default
    return low


def booleans(df: pd.DataFrame, col: str, log: ProblemLog, default: bool) -> np.ndarray:
    vals = texts(df, col, log, required=False, default=None)
    out = np.full(len(df), default, dtype=bool)
    low = pd.Series(vals, dtype=object).str.lower()
    is_true = low.isin(_TRUE).to_numpy()
    is_false = low.isin(_FALSE).to_numpy()
    out[is_true] = True
    out[is_false] = False
    bad = pd.notna(vals) & ~is_true & ~is_false
    if bad.any():
        log.add_rows(bad, lines_of(df), col, lambda i: f"must be true or false, got {vals[i]!r}")
    return out


def timestamps(df: pd.DataFrame, col: str, log: ProblemLog, fmt: str | None = None) -> np.ndarray:
    """Date-time text as Unix seconds (float); unparseable cells are problems."""
    raw = df[col]
    missing = raw.isna().to_numpy()
    # as text: pandas warns it will read numeric cells as epoch seconds, which a date-time column is not
    text = raw.astype(str).where(~missing, None)
    ts = pd.to_datetime(text, format=fmt, errors="coerce")
    bad = ts.isna().to_numpy() & ~missing
    lines = lines_of(df)
    log.add_rows(missing, lines, col, "missing value")
    if bad.any():
        vals = raw.to_numpy()
        want = f" (expected {fmt})" if fmt else ""
        log.add_rows(bad, lines, col, lambda i: f"not a date-time{want}: {str(vals[i])!r}")
    secs = ts.to_numpy(dtype="datetime64[ns]").astype("int64") / 1e9
    return np.where(ts.isna().to_numpy(), np.nan, secs)


def unique_ids(ids: np.ndarray, lines: np.ndarray, log: ProblemLog, col: str = "job_id") -> None:
    """Every repeated id after its first occurrence is a problem naming the first row."""
    s = pd.Series(ids, dtype=object)
    dup = s.duplicated(keep="first").to_numpy() & pd.notna(ids)
    if dup.any():
        first = pd.Series(lines).groupby(s.to_numpy()).transform("first").to_numpy()
        log.add_rows(dup, lines, col, lambda i: f"duplicate job id {ids[i]!r} (first on row {first[i]})")
