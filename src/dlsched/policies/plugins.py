"""Policy plugins: policies that other installed packages register, so that a researcher keeps
their policy in their own package and still runs it everywhere a built-in one runs (`dlsched
policies`, simulate/compare `-p`, sweep, `dlsched serve`). How to write one: docs/PLUGINS.md.

A plugin is an entry point of the group `dlsched.policies`; its name is the policy's name and it
points at the policy's factory, exactly what a built-in registry entry points at: a callable (a
function, or the `Policy` subclass itself) whose keyword arguments are the policy's options and
which returns a `Policy`.

    [project.entry-points."dlsched.policies"]
    smallest-first = "smallest_first:SmallestFirst"

Its one-line description (`dlsched policies`) is the factory's `description` attribute when it
has one, else the first line of its docstring.

Lazy, once per process: discovery reads the installed packages' metadata and imports nothing;
a plugin's module is imported the first time it is needed (listing its description, checking
its options, building it), and the outcome, good or bad, is kept. A plugin that cannot be used
(its name is a built-in's or another plugin's, is not a name one can type, or its module fails to
import) is skipped with one warning line naming its distribution and entry point; asking for it
by name is a ConfigError with the same line. A broken plugin never breaks the built-ins or the
other plugins (docs/DECISIONS.md, "Policy plugins").
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, Collection

from dlsched.core.errors import ConfigError

GROUP = "dlsched.policies"

#: What a policy name may be: what `-p a,b` and the registry's lower-casing leave intact.
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")

log = logging.getLogger("dlsched.plugins")


def _one_line(exc: BaseException) -> str:
    """An exception as `Type: message` on one line (a traceback's worth of text would bury the
    plugin's name in a listing)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


@dataclass(eq=False)
class PluginPolicy:
    """One policy registered by an installed distribution."""

    name: str
    entry_point: metadata.EntryPoint
    distribution: str
    version: str
    _factory: Callable[..., Any] | None = field(default=None, repr=False)
    _error: str | None = field(default=None, repr=False)

    @property
    def where(self) -> str:
        """Which entry point of which distribution: every message about the plugin names it."""
        return f"entry point '{self.entry_point.name} = {self.entry_point.value}' of distribution " \
               f"{self.distribution} {self.version}"

    def factory(self) -> Callable[..., Any]:
        """The plugin's factory, imported on the first call; a ConfigError naming the entry point
        if it cannot be imported or is not a callable with a signature (checked once, kept)."""
        if self._factory is None and self._error is None:
            try:
                obj = self.entry_point.load()
            except Exception as exc:  # anything its import raises: the plugin's, not ours
                self._error = f"{self.where} cannot be imported: {_one_line(exc)}"
            else:
                if not callable(obj):
                    self._error = f"{self.where} is a {type(obj).__name__!r} object, not a policy factory or class"
                else:
                    try:
                        inspect.signature(obj)
                    except (TypeError, ValueError) as exc:  # its options could not be checked
                        self._error = f"{self.where} has no signature to read its options from: {_one_line(exc)}"
                    else:
                        self._factory = obj
            if self._error is not None:
                log.warning("plugin policy %r skipped: %s", self.name, self._error)
        if self._error is not None:
            raise ConfigError(f"plugin policy {self.name!r} cannot be used: {self._error}")
        assert self._factory is not None
        return self._factory

    def description(self) -> str:
        """The factory's `description`, else its docstring's first line (imports the plugin)."""
        fn = self.factory()
        text = getattr(fn, "description", None)
        if not isinstance(text, str) or not text.strip():
            doc = fn.__doc__ or ""  # a class's own docstring: never the base Policy's
            text = inspect.cleandoc(doc).split("\n", 1)[0] if doc.strip() else ""
        return " ".join(text.split()) or "(no description)"


@dataclass
class Plugins:
    """What discovery found: the usable plugins by name, and the names one cannot use, with why."""

    usable: dict[str, PluginPolicy] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # name -> the one-line error
    problems: list[str] = field(default_factory=list)  # every warning discovery gave

    def get(self, name: str) -> PluginPolicy | None:
        """The plugin called `name`; None if there is none; a ConfigError if it cannot be used."""
        if name in self.broken:
            raise ConfigError(self.broken[name])
        return self.usable.get(name)


_found: Plugins | None = None


def discover(builtins: Collection[str]) -> Plugins:
    """The installed plugins, read once per process (entry points only; nothing is imported).
    A name taken by a built-in (the built-in wins) or claimed by two distributions (neither
    wins) is skipped with a warning, as is a name one cannot type."""
    global _found
    if _found is not None:
        return _found
    found = Plugins()
    try:
        eps = list(metadata.entry_points(group=GROUP))
    except Exception as exc:  # a broken metadata file of some package must not stop dlsched
        found.problems.append(f"cannot read the installed packages' {GROUP} entry points: {_one_line(exc)}")
        eps = []
    claims: dict[str, list[PluginPolicy]] = {}
    for ep in eps:
        dist = getattr(ep, "dist", None)
        plugin = PluginPolicy(ep.name, ep, getattr(dist, "name", None) or "(unknown distribution)",
                              getattr(dist, "version", None) or "?")
        if not _NAME.match(ep.name):
            found.problems.append(f"plugin policy {ep.name!r} skipped: {plugin.where}: a policy name is lower-case "
                                  "letters, digits, '-', '_' and '.', starting with a letter or digit")
        elif ep.name in builtins:
            found.problems.append(f"plugin policy {ep.name!r} skipped: {plugin.where} has the name of a built-in "
                                  "policy (the built-in is used; rename the entry point)")
        else:
            claims.setdefault(ep.name, []).append(plugin)
    for name, plugins in claims.items():
        if len(plugins) == 1:
            found.usable[name] = plugins[0]
            continue
        whose = "; ".join(p.where for p in plugins)
        found.broken[name] = (f"plugin policy {name!r} cannot be used: {len(plugins)} distributions register it "
                              f"({whose}); uninstall all but one")
        found.problems.append(f"plugin policy {name!r} skipped: {len(plugins)} distributions register it "
                              f"({whose}); uninstall all but one")
    for line in found.problems:
        log.warning("%s", line)
    _found = found
    return found


def forget() -> None:
    """Discover again on the next use (after installing a plugin into a running process; tests)."""
    global _found
    _found = None
    importlib.invalidate_caches()  # importlib.metadata's cache of each sys.path folder's listing too
