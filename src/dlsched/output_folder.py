"""Where a command writes its results: never silently over an earlier run's.

Rerunning experiments is the normal way to use dlsched, and a report that an earlier run left
behind may be the one someone is comparing against. So:

- the default folder (e.g. `dlsched-report`) is used when it holds no results yet; otherwise the
  run writes to the first numbered sibling that holds none (`dlsched-report-2`, `-3`, ...) and
  says so;
- a folder the user named (`--out DIR`, or `out:` in a run config) that already holds results is
  an error unless `--overwrite` is given: they asked for that place, so picking another would
  surprise them, and replacing its files needs their word;
- a path that is a file, or lies under one, is an input error (one line, exit 2), found before
  any work is done.

What "holds results" means is the caller's: a report holds one of its own file names (so a report
can still go into a folder of the user's own files); an experiment folder holds anything at all.
Resumable folders (the real-traces experiment's cells, DL2 training's checkpoint) do not go
through here: rerunning into them continues the earlier run by design.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dlsched.core.errors import ConfigError


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` to a temporary file in the same directory, then rename it onto `path`, so
    readers (and a run killed half-way) see the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def not_empty(folder: Path) -> bool:
    """Whether a folder holds anything (an experiment's notion of holding results)."""
    return any(folder.iterdir())


def check_writable_folder(path: Path, option: str = "--out") -> None:
    """Raise ConfigError when `path` cannot become a folder: it is a file, or one of its parents is."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path}: is a file, not a folder; name a folder for the results")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{option} {path}: {parent} is a file, not a folder")
            break


@dataclass(frozen=True)
class OutputFolder:
    """The results folder of one run: `requested` (None = use `default`), `overwrite` (the user
    allows replacing an earlier run's files in a folder they named), and `holds_results`."""

    requested: Path | None
    default: str
    overwrite: bool = False
    holds_results: Callable[[Path], bool] = not_empty
    what: str = "files"  # what it holds, for messages: "a report", "files"

    def check(self) -> None:
        """Fail early, before any work: a file where a folder is needed, or a named folder that
        holds an earlier run's results without --overwrite."""
        if self.requested is None:
            return
        check_writable_folder(self.requested)
        if not self.overwrite and self.requested.is_dir() and self.holds_results(self.requested):
            raise ConfigError(
                f"--out {self.requested} already holds {self.what}; pass --overwrite to replace them, "
                "or name another folder")

    def claim(self) -> tuple[Path, str]:
        """Create and return the folder to write to, with a note for the user when it is not the
        one they would expect ("" otherwise). A new folder is created with one `mkdir` (atomic), so
        two runs claiming at once get different new folders; an existing folder that holds no
        results (e.g. left empty by a run that failed) is reused."""
        self.check()
        if self.requested is not None:
            self.requested.mkdir(parents=True, exist_ok=True)
            return self.requested, ""
        first = Path(self.default)
        if self.overwrite and not first.is_file():
            first.mkdir(parents=True, exist_ok=True)
            return first, ""
        n = 1
        while True:
            path = first if n == 1 else first.with_name(f"{first.name}-{n}")
            n += 1
            try:
                path.mkdir(parents=True)
            except FileExistsError:
                if not path.is_dir() or self.holds_results(path):
                    continue
            if path == first:
                return path, ""
            return path, (f"{first} already holds {self.what}, so this run writes to {path} "
                          "(name a folder with --out, or pass --overwrite to replace the earlier ones)")
