"""Native stderr routed through logging: captured from fd 2, each distinct message warned once."""

from __future__ import annotations

import logging
import os

import pytest

from contractrl.rollout.native_log import log_native_lines, native_stderr_to_log

LOGGER = "contractrl.rollout.native_log"


def test_fd2_writes_are_logged_once_each_and_kept_off_the_console(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        with native_stderr_to_log("native"):
            os.write(2, b"[10:00:01] conv.cc:12: Warning: feature A ignored\n[10:00:01] conv.cc:12: Warning: feature A ignored\n")
            os.write(2, b"\nconv.cc:40: Warning: feature B ignored\n")
        with native_stderr_to_log("native"):
            os.write(2, b"[10:00:02] conv.cc:12: Warning: feature A ignored\n")
    assert capfd.readouterr().err == ""
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert records == [
        (logging.WARNING, "native: conv.cc:12: Warning: feature A ignored (2 times)"),
        (logging.WARNING, "native: conv.cc:40: Warning: feature B ignored"),
        (logging.DEBUG, "native: conv.cc:12: Warning: feature A ignored"),
    ]
    # fd 2 is back: later writes reach the console again
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_an_exception_inside_still_restores_fd2_and_logs(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(RuntimeError), native_stderr_to_log("native"):
        os.write(2, b"compile failed: feature C\n")
        raise RuntimeError("boom")
    assert "native: compile failed: feature C" in caplog.text
    os.write(2, b"restored\n")
    assert capfd.readouterr().err == "restored\n"


def test_blank_and_timestamp_only_lines_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        log_native_lines("native", "\n   \n[11:22:33]\n")
    assert not [r for r in caplog.records if r.name == LOGGER]
