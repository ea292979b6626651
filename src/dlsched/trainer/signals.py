"""SIGTERM handling: before training starts there is nothing to save, so the process just exits
(a rank blocked in rendezvous would otherwise wait for peers that were stopped too); once the
loop runs, the signal only raises a flag that the ranks agree on at the next step boundary."""

from __future__ import annotations

import os
import signal
import sys


class StopFlag:
    def __init__(self) -> None:
        self.requested = False
        self.training = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        if not self.training:
            sys.stdout.flush()
            os._exit(0)
        self.requested = True


STOP = StopFlag()
