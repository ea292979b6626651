"""Trainings and experiment cells run torch on one thread and leave the caller's count alone."""

from __future__ import annotations

import pytest
import torch

from dlsched.rl.threads import one_thread


def test_one_thread_inside_and_the_callers_count_restored_after_even_on_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2

        @one_thread()
        def fails() -> None:
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            fails()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
