"""Headless Chromium for the chat page's tests: Debian's browser driven by Playwright.

Playwright's own browser builds cannot be downloaded here, so it is pointed at a
system Chromium (``$LOCALLLM_TEST_CHROMIUM``, or ``chromium`` / ``chromium-browser``
/ ``google-chrome`` on the PATH). On a fresh machine where the tests run as root
with apt-get (CI), the browser is installed from Debian's packages once; where
none can be had, the browser tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
import subprocess

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _found() -> str | None:
    configured = os.environ.get("LOCALLLM_TEST_CHROMIUM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return next((path for name in BROWSER_NAMES if (path := shutil.which(name))), None)


def _install_with_apt() -> str:
    """apt-get's output when it failed, else an empty string."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
    result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:  # the package lists may be missing or stale on a fresh machine
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
        result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    return "" if result.returncode == 0 else result.stderr[-500:]


def chromium_or_reason() -> tuple[str | None, str]:
    """The browser's path, or None and why there is none."""
    path = _found()
    if path:
        return path, ""
    if os.environ.get("LOCALLLM_TEST_CHROMIUM"):
        return None, f"LOCALLLM_TEST_CHROMIUM={os.environ['LOCALLLM_TEST_CHROMIUM']} is not an executable"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, "no Chromium found (install Debian's 'chromium' or set LOCALLLM_TEST_CHROMIUM)"
    failure = _install_with_apt()
    path = _found()
    return (path, "") if path else (None, f"could not install Chromium with apt-get: {failure}")
