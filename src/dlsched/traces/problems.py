"""Collecting everything wrong with a trace file, so a user fixes it in one pass, not one error a run.

Each problem is reported as `file:row: column: problem`, with rows numbered as a user sees them in
an editor (the header is row 1). Checks are vectorised (a boolean mask over the rows), so a log
keeps only the first `cap` rows of each mask but counts all of them: the first `cap` problems of
the whole file are always among those kept, and the total stays exact.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dlsched.core.errors import TraceError

#: How many problems a report lists before it says "... and N more".
DEFAULT_CAP = 50


class ProblemLog:
    """Problems found in one trace (possibly spread over several files, e.g. DL2's daily CSVs)."""

    def __init__(self, file: str, cap: int = DEFAULT_CAP):
        self.file = file
        self.cap = cap
        self._items: list[tuple[str, int, int, str, str]] = []  # file, line, seq, column, message
        self._count = 0
        self._bad_lines: set[tuple[str, int]] = set()

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def add(self, line: int, column: str, message: str, file: str | None = None) -> None:
        self._items.append((file or self.file, int(line), len(self._items), column, message))
        self._count += 1
        self._bad_lines.add((file or self.file, int(line)))

    def flagged(self, lines: np.ndarray, file: str | None = None) -> np.ndarray:
        """Which of these rows already have a problem (so derived checks need not repeat it)."""
        f = file or self.file
        bad = {ln for fl, ln in self._bad_lines if fl == f}
        return np.isin(np.asarray(lines), np.fromiter(bad, dtype=np.int64, count=len(bad)))

    def add_rows(
        self,
        mask: np.ndarray,
        lines: np.ndarray,
        column: str,
        message: str | Callable[[int], str],
        file: str | None = None,
    ) -> int:
        """Report every row where `mask` is true; `message(i)` may describe row position i."""
        idx = np.flatnonzero(np.asarray(mask, dtype=bool))
        fname = file or self.file
        self._bad_lines.update((fname, int(x)) for x in np.asarray(lines)[idx].tolist())
        for i in idx[: self.cap]:
            text = message(int(i)) if callable(message) else message
            self._items.append((file or self.file, int(lines[i]), len(self._items), column, text))
        self._count += len(idx)
        return len(idx)

    def formatted(self) -> list[str]:
        """The problems in file order, capped, as `file:row: column: problem` lines."""
        items = sorted(self._items, key=lambda t: (t[0], t[1], t[2]))
        out = [f"{f}:{line}: {col}: {msg}" for f, line, _, col, msg in items[: self.cap]]
        if self._count > len(out):
            out.append(f"... and {self._count - len(out)} more")
        return out

    def raise_if_any(self, what: str) -> None:
        if self._count:
            raise TraceError(
                f"{what}: {self._count} problem{'s' if self._count != 1 else ''} in {self.file}",
                problems=self.formatted(),
            )
