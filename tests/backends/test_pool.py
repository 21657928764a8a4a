"""The native kernels' thread pool under churn, from C (tests/backends/pool_check.c).

A worker that read a finished job's ticket and was then stopped by the scheduler could take an item
of the next job under the old ticket, with the next job's task or argument, and count it in the next
job's total: the caller then went on before an item was done (wrong logits, now and then) or while
a worker still ran one (a crash). Many threads on few cores make the scheduler stop workers at any
instruction; the old pool failed this within a second.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_item_runs_once_and_before_its_job_returns(tmp_path: Path) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler"
    binary = tmp_path / "pool_check"
    built = subprocess.run([compiler, "-O2", "-std=gnu11", "-Wall", "-Wextra", "-pthread", "-o", str(binary),
                            str(ROOT / "tests" / "backends" / "pool_check.c"), str(ROOT / "kernels" / "pool.c")],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    for threads in (4, 8):
        done = subprocess.run([str(binary), str(threads), "300000"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 items ran other than once, 0 after their job returned" in done.stdout, done.stdout
