"""The real thing in a real browser: ``floatlab lessons`` starts JupyterLab on loopback, headless
Chromium (Debian's ``chromium`` and ``chromium-driver`` packages, driven by Selenium) opens lesson 01,
runs it, clicks a bit of the toggler and watches the shown value change.

Skipped, with the reason, where Chromium, its driver, Selenium or JupyterLab is missing; ``.ci/run``
installs Chromium first, so CI always runs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
)
LESSON = "01-anatomy-of-a-float.ipynb"
TOKEN = "floatlab-browser-test"


def _missing() -> str | None:
    if CHROMIUM is None:
        return "Chromium is not installed (apt-get install -y chromium chromium-driver)"
    if CHROMEDRIVER is None:
        return "chromedriver is not installed (apt-get install -y chromium-driver)"
    for module, extra in (("selenium", "dev"), ("jupyterlab", "lessons"), ("ipywidgets", "lessons")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'floatlab[{extra}]')"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            data: dict[str, Any] = json.loads(response.read())
            return data
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[str]:
    """JupyterLab on 127.0.0.1, started by ``floatlab lessons``; yields its base URL."""
    port = _free_port()
    home = tmp_path / "jupyter"
    env = dict(os.environ)
    env.update(
        NUMBA_NUM_THREADS="2",
        JUPYTER_PLATFORM_DIRS="1",
        # a private config, runtime and workspace area: no user settings, nothing left behind
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        IPYTHONDIR=str(home / "ipython"),
        FLOATLAB_LESSONS_TOKEN=TOKEN,  # (through the environment: a --token would show in ps)
    )
    env.pop("FLOATLAB_WIDGETS", None)
    cmd = [sys.executable, "-m", "floatlab", "lessons", str(tmp_path / "lessons")]
    cmd += ["--no-browser", "--port", str(port)]
    log = (tmp_path / "jupyterlab.log").open("w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while _get(f"{base}/api/status?token={TOKEN}") is None:
            if server.poll() is not None:
                pytest.fail(
                    f"JupyterLab exited with {server.returncode}: {(tmp_path / 'jupyterlab.log').read_text()}"
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"JupyterLab did not answer in 120 s: {(tmp_path / 'jupyterlab.log').read_text()}"
                )
            time.sleep(0.5)
        yield base
    finally:
        # stop the server and its kernels: SIGINT twice is Jupyter's own "shut down without asking"
        for _ in range(2):
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGINT)
                time.sleep(0.5)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium under Selenium, with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def _shown(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    text: str = driver.find_element(By.CSS_SELECTOR, ".floatlab-bittoggler .floatlab-view").text
    return text


def _idle(driver: Any) -> bool:
    """True when the status bar reports the notebook's kernel as idle."""
    from selenium.webdriver.common.by import By

    return any("| Idle" in e.text for e in driver.find_elements(By.CSS_SELECTOR, ".jp-StatusBar-Widget"))


def _accept_kernel_dialog(driver: Any) -> bool:
    """Click "Select" in a "Select Kernel" dialog, if one is open; False when there is none."""
    from selenium.webdriver.common.by import By

    for dialog in driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog"):
        if "Select Kernel" in dialog.text:
            dialog.find_element(By.CSS_SELECTOR, "button.jp-mod-accept").click()
    return False


def _click_bit(driver: Any, bit: int, timeout: float = 60.0) -> None:
    """Click bit ``bit`` of the toggler once it is in view and nothing lies over it.

    While "Run All Cells" is still running, later cells' outputs appear and the notebook scrolls, so
    an element that was clickable a moment ago may be covered (by an output's ``<pre>``) or replaced
    when the click lands. Scroll it to the middle of the view and try again until ``timeout``.
    """
    from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while True:
        try:
            element = driver.find_element(By.CSS_SELECTOR, f".floatlab-bittoggler .floatlab-bit-{bit}")
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
            element.click()
            return
        except (ElementClickInterceptedException, StaleElementReferenceException):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_clicking_a_bit_in_lesson_01_changes_the_value(lab: str, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 120)
    browser.get(f"{lab}/lab/tree/{LESSON}?token={TOKEN}")
    try:
        # wait for the notebook and a connected, idle kernel (the status bar says "... | Idle"), then
        # Run > Run All Cells
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".jp-Notebook .jp-Cell")))
        wait.until(_idle)
        wait.until(
            ec.element_to_be_clickable((By.XPATH, "//li[contains(@class,'lm-MenuBar-item')][.='Run']"))
        ).click()
        wait.until(
            ec.element_to_be_clickable(
                (By.XPATH, "//li[contains(@class,'lm-Menu-item')][normalize-space()='Run All Cells']")
            )
        ).click()
        # should JupyterLab still ask which kernel to use, take the one it proposes (the notebook's)
        wait.until(
            lambda d: _accept_kernel_dialog(d) or d.find_elements(By.CSS_SELECTOR, ".floatlab-bittoggler")
        )

        # the toggler of 1.0 appears (a live widget, not its static drawing)
        bit14 = wait.until(
            ec.element_to_be_clickable((By.CSS_SELECTOR, ".floatlab-bittoggler .floatlab-bit-14"))
        )
        wait.until(lambda d: "0x3C00" in _shown(d))
        # let Run All finish, so no later output moves the toggler while it is clicked
        wait.until(_idle)
        assert "normal, exactly 1" in _shown(browser)
        assert bit14.text == "0"  # 1.0 is 0 01111 0000000000: the top exponent bit is clear

        # flip the top exponent bit: every exponent bit set, fraction 0, so 1.0 becomes infinity
        _click_bit(browser, 14)
        wait.until(lambda d: "0x7C00" in _shown(d))
        assert "infinity (positive)" in _shown(browser)
        assert browser.find_element(By.CSS_SELECTOR, ".floatlab-bittoggler .floatlab-bit-14").text == "1"

        # flip it back, then the last fraction bit: one ulp above 1
        _click_bit(browser, 14)
        wait.until(lambda d: "0x3C00" in _shown(d))
        _click_bit(browser, 0)
        wait.until(lambda d: "0x3C01" in _shown(d))
        assert "1.0009765625" in _shown(browser)
        assert browser.find_element(By.CSS_SELECTOR, ".floatlab-bittoggler .floatlab-bit-0").text == "1"
    except Exception:
        browser.save_screenshot(str(tmp_path / "lesson-01.png"))  # kept in pytest's tmp dir for a look
        raise
