"""ICE candidates the page trickles before its offer is answered leave no WARNING per call start;
every other warning of FastRTC's and aiortc's loggers still does."""

from __future__ import annotations

import logging

import pytest

from app.ui import rtc_log


@pytest.fixture(autouse=True)
def installed():
    rtc_log.install()
    rtc_log.install()  # idempotent
    yield


def _warn(caplog: pytest.LogCaptureFixture, name: str, message: str, level: int = logging.INFO) -> list[logging.LogRecord]:
    caplog.clear()
    with caplog.at_level(level, logger=name):
        logging.getLogger(name).warning(message)
    return [r for r in caplog.records if r.name == name]


def test_the_filter_is_installed_once_per_logger() -> None:
    for name in rtc_log.EARLY_CANDIDATE:
        assert sum(isinstance(f, rtc_log.EarlyCandidateFilter) for f in logging.getLogger(name).filters) == 1


@pytest.mark.parametrize("name,message", [
    ("fastrtc.webrtc_connection_mixin", "Received ICE candidate for unknown connection: abc123"),
    ("aiortc.rtcpeerconnection", "RTCPeerConnection addIceCandidate called without remote description"),
])
def test_an_early_candidate_is_a_debug_line(caplog: pytest.LogCaptureFixture, name: str, message: str) -> None:
    assert _warn(caplog, name, message) == []  # at INFO: gone
    records = _warn(caplog, name, message, level=logging.DEBUG)  # at DEBUG: kept, as DEBUG
    assert [(r.levelname, r.getMessage()) for r in records] == [("DEBUG", message)]


@pytest.mark.parametrize("name,message", [
    ("fastrtc.webrtc_connection_mixin", "Invalid candidate format: x"),
    ("aiortc.rtcpeerconnection", "Something else went wrong"),
    ("app.ui.handler", "Received ICE candidate for unknown connection: abc123"),  # not their logger
])
def test_other_warnings_stay_warnings(caplog: pytest.LogCaptureFixture, name: str, message: str) -> None:
    records = _warn(caplog, name, message)
    assert [(r.levelname, r.getMessage()) for r in records] == [("WARNING", message)]
