"""Showing text that a user or a job wrote: every character that would act instead of print.

A job name, a reason or a trace cell can hold terminal escapes (`ESC[2J` clears the screen), a
bell, a newline that fakes another line, or a right-to-left override that reverses what follows.
`visible` turns each such character into its escape (`\\x1b`, `\\n`, `\\u202e`), so it shows
instead of acting, and an operator sees that something odd is there. The console
(`cli_support.safe`) and the status page both start from it.
"""

from __future__ import annotations


def visible(text: object) -> str:
    """`text` with every control and invisible formatting character written as its escape."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))
