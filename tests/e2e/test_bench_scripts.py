"""The benchmark scripts still run against the current code: a tiny load through each, checking
that every row of its table is printed (the figures themselves belong to ``bench/``, not here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_script(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=BENCH, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_history_benchmark_runs() -> None:
    out = run_script("history.py", "--sizes", "1000,3000", "--repeats", "3")
    assert "     1,000 " in out and "     3,000 " in out
    assert "largest/smallest: read" in out


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_end_to_end_benchmark_runs() -> None:
    out = run_script("e2e.py", "--quick", "--repeats", "1")
    for row in (
        "observed messages/s",
        "turns/s (delivered)",
        "latency p99 @200/s",
        "RSS, 10k chats/200k msgs",
        "one more idle chat",
        "start-up to /healthz",
    ):
        assert row in out, out


def test_run_storage_benchmark_runs() -> None:
    out = run_script("runs_storage.py", "--turns", "20", "--size", "256")
    assert "bytes stored per turn at turn 20" in out and "ratio: " in out, out


@pytest.mark.slow
def test_wal_benchmark_runs() -> None:
    out = run_script("wal.py", "--seconds", "3", "--rate", "20")
    assert "largest WAL: " in out and "POST latency: " in out, out


def test_admission_benchmark_runs() -> None:
    out = run_script("admission.py", "--counts", "0,10", "--repeats", "1")
    assert "           0  " in out and "          10  " in out, out
