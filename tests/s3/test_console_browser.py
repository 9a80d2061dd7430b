"""The web console in a real browser: Debian's headless Chromium, driven by Selenium
through Debian's chromedriver, against a real 6-drive cluster (docs/console.md).

It logs in (with the keyboard; a wrong secret is refused), sees the six drives up, a
drive killed shown down and its heal after it returns, uploads a file through the page
and reads it back with boto3, runs statistics on an object and compares them with the
object's bytes computed here, checks that one key's session does not see another key's
bucket and that a form posted from another origin changes nothing, and that the pages
fit a 360 px wide screen. The time until the overview is interactive is printed (run
with `-s` to see it); with OED_TEST_SCREENSHOTS=DIR each page's screenshot is saved
there (docs/img holds the ones docs/console.md shows).
"""

import hashlib
import http.server
import json
import os
import secrets
import shutil
import struct
import threading
import time
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import ACCESS_KEY, Cluster

# Heal slowly enough that its backlog shows on the overview for a while.
HEAL = ["heal_rate_bytes=131072", "heal_retry_seconds=1"]


def chromium_paths():
    browser = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return browser, driver


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(extra=lambda i: HEAL)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    path, driver = chromium_paths()
    assert os.path.exists(path) and os.path.exists(driver), \
        "Debian's chromium and chromium-driver packages are needed (deploy/test.sh installs them)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = path
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,900", "--no-first-run", "--disable-extensions",
              f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        opts.add_argument(a)
    b = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    b.set_page_load_timeout(30)
    yield b
    b.quit()


def shot(b, name):
    """Saves a screenshot of the page when OED_TEST_SCREENSHOTS names a directory."""
    out = os.environ.get("OED_TEST_SCREENSHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        b.save_screenshot(str(Path(out) / f"console-{name}.png"))


def wait(b, what, check, timeout=30):
    return WebDriverWait(b, timeout, poll_frequency=0.2).until(
        lambda d: check(d), message=f"timed out waiting for {what}")


def console_url(cluster, i=0):
    return f"{cluster.endpoint(i)}/_oed/console/"


def log_in(b, cluster, key, secret, i=0):
    b.get(console_url(cluster, i))
    wait(b, "the page", lambda d: d.find_elements(By.ID, "login-form")
         or d.find_element(By.ID, "logout").is_displayed())
    if not b.find_elements(By.ID, "login-form"):
        log_out(b)
    form = b.find_element(By.ID, "login-form")
    assert form.is_displayed()
    field = b.find_element(By.ID, "access-key")
    field.clear()
    field.send_keys(key)
    # The keyboard alone: tab to the secret, Enter to submit.
    field.send_keys(Keys.TAB)
    b.switch_to.active_element.send_keys(secret + Keys.ENTER)


def log_out(b):
    b.find_element(By.ID, "logout").click()
    wait(b, "the login form", lambda d: d.find_elements(By.ID, "login-form"))


def drive_states(b):
    return {r.get_attribute("data-drive"): r.get_attribute("data-state")
            for r in b.find_elements(By.CSS_SELECTOR, "#drives tr[data-drive]")}


def test_a_wrong_secret_is_refused_and_the_right_one_shows_six_drives_up(cluster, browser):
    b = browser
    log_in(b, cluster, ACCESS_KEY, "not-the-secret")
    err = wait(b, "the login error", lambda d: d.find_element(By.ID, "login-error").text)
    assert "AccessDenied" in err
    shot(b, "login")
    log_in(b, cluster, ACCESS_KEY, cluster.secret)
    wait(b, "the overview", lambda d: d.execute_script("return document.body.dataset.ready") == "overview")
    ready_ms = b.execute_script("return window.oedTimings && window.oedTimings.overviewReadyMs")
    nav = b.execute_script(
        "const n = performance.getEntriesByType('navigation')[0]; return n ? n.duration : null")
    print(f"\nconsole overview interactive after {ready_ms:.0f} ms (page load {nav} ms)")
    states = wait(b, "six drives", lambda d: (s := drive_states(d)) and len(s) == 6 and s)
    assert set(states) == set(cluster.ids) and set(states.values()) == {"up"}
    assert b.find_element(By.ID, "whoami").text == ACCESS_KEY
    # Power is always shown with how it was known (oedd dev's drives model theirs).
    body = b.find_element(By.TAG_NAME, "main").text
    assert " W (modelled)" in body or " W (measured)" in body, body
    shot(b, "overview")


def test_a_killed_drive_shows_down_and_its_heal_after_it_returns(cluster, browser):
    b = browser
    s3 = cluster.client()
    s3.create_bucket(Bucket="heal-me")
    b.get(console_url(cluster) + "#/overview")
    wait(b, "the overview", lambda d: len(drive_states(d)) == 6)
    cluster.kill9(4)
    killed = time.time()
    wait(b, "drive-5 down", lambda d: drive_states(d).get(cluster.ids[4]) == "down", timeout=10)
    print(f"\ndrive shown down {time.time() - killed:.1f} s after kill -9")
    row = b.find_element(By.CSS_SELECTOR, f'#drives tr[data-drive="{cluster.ids[4]}"]')
    assert row.find_element(By.CSS_SELECTOR, ".state").text == "down"
    for n in range(16):
        s3.put_object(Bucket="heal-me", Key=f"o{n}", Body=secrets.token_bytes(1 << 20))
    cluster.start(4)
    wait(b, "drive-5 up", lambda d: drive_states(d).get(cluster.ids[4]) == "up", timeout=30)
    queued = wait(b, "its heal on the overview", lambda d: int(
        d.find_element(By.ID, "heal").get_attribute("data-queued") or 0) > 0 and
        d.find_element(By.ID, "heal").text, timeout=120)
    assert "heal" in queued
    shot(b, "heal")
    wait(b, "the heal done", lambda d: d.find_element(By.ID, "heal").get_attribute("data-queued") == "0",
         timeout=180)


def test_a_drive_page_plots_its_last_hour(cluster, browser):
    b = browser
    b.get(console_url(cluster) + f"#/drives/{cluster.ids[1]}")
    wait(b, "the drive page", lambda d: d.execute_script("return document.body.dataset.ready") == "drive")
    plots = b.find_elements(By.CSS_SELECTOR, "figure.plot")
    series = {p.get_attribute("data-series") for p in plots}
    assert {"cpu", "disk", "net", "requests"} <= series
    for p in plots:
        svg = p.find_element(By.CSS_SELECTOR, "svg")
        assert svg.get_attribute("role") == "img" and svg.get_attribute("aria-label")
        assert p.find_element(By.CSS_SELECTOR, "details summary").text
    shot(b, "drive")


def test_a_file_uploaded_through_the_page_reads_back_with_boto3(cluster, browser, tmp_path):
    b = browser
    s3 = cluster.client()
    s3.create_bucket(Bucket="uploads")
    small = tmp_path / "notes.txt"
    small.write_bytes(b"near the data\n" * 1000)
    large = tmp_path / "big.bin"
    large.write_bytes(secrets.token_bytes(20 * 1024 * 1024 + 12345))
    b.get(console_url(cluster) + "#/buckets/uploads")
    wait(b, "the bucket page", lambda d: d.execute_script("return document.body.dataset.ready") == "bucket")
    for f in (small, large):
        b.find_element(By.ID, "upload-file").send_keys(str(f))
        b.find_element(By.ID, "upload-button").click()
        status = wait(b, f"the upload of {f.name}", lambda d: (
            s := d.find_element(By.ID, "upload-status")).get_attribute("data-state") in ("done", "error")
            and s, timeout=120)
        assert status.get_attribute("data-state") == "done", status.text
        got = s3.get_object(Bucket="uploads", Key=f.name)["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(f.read_bytes()).digest()
    assert s3.head_object(Bucket="uploads", Key="big.bin")["ETag"].endswith('-3"'), "multipart"
    wait(b, "both in the listing", lambda d: {"notes.txt", "big.bin"} <= {
        r.get_attribute("data-key") for r in d.find_elements(By.CSS_SELECTOR, "#objects tr[data-key]")})
    row = b.find_element(By.CSS_SELECTOR, '#objects tr[data-key="notes.txt"]')
    row.find_element(By.CSS_SELECTOR, "button.details").click()
    detail = wait(b, "the details", lambda d: (e := d.find_element(By.ID, "object-detail")).is_displayed()
                  and "14000" in e.text.replace(",", "").replace(" ", "") and e)
    assert detail
    shot(b, "bucket")


def test_statistics_run_on_the_drives_match_the_bytes(cluster, browser):
    b = browser
    s3 = cluster.client()
    s3.create_bucket(Bucket="numbers")
    rng = __import__("random").Random(7)
    values = [rng.uniform(-1000, 1000) for _ in range(300_000)]
    s3.put_object(Bucket="numbers", Key="series.f64", Body=struct.pack(f"<{len(values)}d", *values))
    data = s3.get_object(Bucket="numbers", Key="series.f64")["Body"].read()
    mine = struct.unpack(f"<{len(data) // 8}d", data)
    b.get(console_url(cluster) + "#/op?bucket=numbers&key=series.f64")
    wait(b, "the operation page", lambda d: d.find_elements(By.ID, "op-run"))
    Select(b.find_element(By.ID, "op-select")).select_by_value("stats")
    Select(b.find_element(By.ID, "op-format")).select_by_value("f64le")
    b.find_element(By.ID, "op-run").click()
    out = wait(b, "the result", lambda d: (
        e := d.find_element(By.ID, "op-result")).get_attribute("data-state") in ("done", "error") and e,
        timeout=60)
    assert out.get_attribute("data-state") == "done", out.text
    result = json.loads(out.text)
    assert result["count"] == len(mine)
    assert result["min"] == min(mine) and result["max"] == max(mine)
    assert abs(result["sum"] - sum(mine)) <= 1e-9 * sum(abs(v) for v in mine)
    assert abs(result["mean"] - sum(mine) / len(mine)) < 1e-9 * 1000
    saved = b.find_element(By.ID, "op-saved")
    assert int(saved.get_attribute("data-download")) == len(data)
    assert int(saved.get_attribute("data-saved")) > len(data) // 2, saved.text
    b.execute_script("arguments[0].scrollIntoView({block: 'center'})", saved)
    shot(b, "op")


def test_one_keys_session_does_not_see_another_keys_bucket(cluster, browser):
    b = browser
    made = {}
    for name in ("ann", "ben"):
        k = json.loads(cluster.admin("key", "create", f"browser {name}", "--json"))
        bucket = f"of-{name}-{secrets.token_hex(2)}"
        cluster.client().create_bucket(Bucket=bucket)
        cluster.admin("bucket", "allow", bucket, "--key", k["access_key_id"], "--read", "--write")
        made[name] = (k["access_key_id"], k["secret_access_key"], bucket)
    cluster.client().put_object(Bucket=made["ann"][2], Key="private.txt", Body=b"ann's")
    log_out(b)
    log_in(b, cluster, made["ben"][0], made["ben"][1])
    wait(b, "ben's buckets", lambda d: d.find_elements(By.CSS_SELECTOR, "a[data-bucket]"))
    names = {a.get_attribute("data-bucket") for a in b.find_elements(By.CSS_SELECTOR, "a[data-bucket]")}
    assert made["ben"][2] in names and made["ann"][2] not in names
    assert not b.find_element(By.ID, "nav-overview").is_displayed()
    b.get(console_url(cluster) + f"#/buckets/{made['ann'][2]}")
    text = wait(b, "the refusal", lambda d: "AccessDenied" in (t := d.find_element(By.TAG_NAME, "main").text) and t)
    assert "private.txt" not in text
    b.get(console_url(cluster) + "#/overview")
    wait(b, "the overview refused", lambda d: "AccessDenied" in d.find_element(By.TAG_NAME, "main").text)
    assert not b.find_elements(By.CSS_SELECTOR, "#drives tr[data-drive]")
    log_out(b)


class Evil(http.server.BaseHTTPRequestHandler):
    """Another origin's page that posts a form to the console as soon as it loads."""
    target = ""
    # Chromium may open a connection it sends nothing on: it must not hold the server.
    timeout = 5

    def do_GET(self):
        page = (f'<!doctype html><form id="f" method="POST" enctype="text/plain" '
                f'action="{self.target}"><input name="x" value="y"></form>'
                f'<script>document.getElementById("f").submit()</script>').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args):
        pass


def test_a_form_posted_from_another_origin_changes_nothing(cluster, browser):
    b = browser
    s3 = cluster.client()
    s3.create_bucket(Bucket="guarded")
    log_in(b, cluster, ACCESS_KEY, cluster.secret)
    wait(b, "the overview", lambda d: d.execute_script("return document.body.dataset.ready") == "overview")
    Evil.target = console_url(cluster) + "api/s3/guarded/planted"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        b.get(f"http://127.0.0.1:{server.server_port}/")
        answer = wait(b, "the console's answer", lambda d: d.current_url.startswith(
            cluster.endpoint()) and d.find_element(By.TAG_NAME, "body").text)
        assert json.loads(answer)["code"] in ("CrossSiteRequest", "InvalidCsrfToken", "NotLoggedIn")
    finally:
        server.shutdown()
    listed = s3.list_objects_v2(Bucket="guarded").get("Contents", [])
    assert listed == []


def test_the_pages_fit_a_360_px_screen(cluster, browser):
    b = browser
    b.set_window_size(360, 780)
    try:
        log_in(b, cluster, ACCESS_KEY, cluster.secret)
        for route, ready in (("#/overview", "overview"), (f"#/drives/{cluster.ids[0]}", "drive"),
                             ("#/buckets/uploads", "bucket")):
            b.get(console_url(cluster) + route)
            wait(b, route, lambda d: d.execute_script("return document.body.dataset.ready") == ready)
            width = b.execute_script("return document.documentElement.scrollWidth")
            inner = b.execute_script("return window.innerWidth")
            assert width <= inner, f"{route}: {width} px wide in a {inner} px window"
        shot(b, "narrow")
    finally:
        b.set_window_size(1280, 900)
