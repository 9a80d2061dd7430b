"""The web console's server side, over real HTTP on a real cluster (docs/console.md):
logging in, the session cookie, the CSRF and same-origin checks, what each key may see,
the overview and a drive's history, and S3 through the console with a key's own rights.
The pages themselves are driven in a real browser by test_console_browser.py."""

import http.client
import json
import secrets
import urllib.parse
import urllib.request

import pytest
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, Cluster


class Page:
    """A browser's side of the console on drive `i`: its cookie and CSRF token."""

    def __init__(self, cluster, i=0):
        self.host, port = cluster.addrs[i].split(":")
        self.port = int(port)
        self.cookie = None
        self.csrf = None

    def request(self, method, path, body=None, headers=None, cookie=True):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        h = dict(headers or {})
        if cookie and self.cookie:
            h["Cookie"] = f"oed_console={self.cookie}"
        conn.request(method, "/_oed/console/" + path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r, data

    def login(self, key, secret):
        r, data = self.request("POST", "api/login",
                               json.dumps({"access_key_id": key, "secret_access_key": secret}),
                               {"Content-Type": "application/json"})
        if r.status == 200:
            cookie = r.getheader("Set-Cookie")
            self.cookie = cookie.split(";", 1)[0].split("=", 1)[1]
            self.csrf = json.loads(data)["csrf"]
        return r, data

    def s3(self, method, path, body=None, headers=None, csrf=True):
        h = dict(headers or {})
        if csrf and method not in ("GET", "HEAD"):
            h["X-OED-CSRF"] = self.csrf
        return self.request(method, "api/s3/" + path, body, h)


@pytest.fixture(scope="module")
def keys(cluster):
    """Two keys of the table, each with every right in a bucket of its own."""
    made = {}
    for name in ("alice", "bob"):
        k = json.loads(cluster.admin("key", "create", f"console {name}", "--json"))
        bucket = f"console-{name}-{secrets.token_hex(3)}"
        cluster.client().create_bucket(Bucket=bucket)
        cluster.admin("bucket", "allow", bucket, "--key", k["access_key_id"],
                      "--read", "--write", "--owner")
        made[name] = (k["access_key_id"], k["secret_access_key"], bucket)
    return made


def test_the_page_and_its_assets_are_served_with_a_strict_policy(cluster):
    p = Page(cluster)
    r, data = p.request("GET", "")
    assert r.status == 200 and b"app.js" in data
    csp = r.getheader("Content-Security-Policy")
    assert "default-src 'none'" in csp
    assert f"script-src http://{cluster.addrs[0]}/_oed/console/app.js;" in csp
    assert "frame-ancestors 'none'" in csp
    assert r.getheader("X-Frame-Options") == "DENY"
    assert r.getheader("X-Content-Type-Options") == "nosniff"
    total = 0
    for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        r, data = p.request("GET", name)
        assert r.status == 200 and r.getheader("Content-Type").startswith(kind)
        total += len(data)
    assert total < 150_000
    conn = http.client.HTTPConnection(p.host, p.port, timeout=10)
    conn.request("GET", "/_oed/console")
    r = conn.getresponse()
    assert r.status == 308 and r.getheader("Location") == "/_oed/console/"


def test_a_wrong_secret_or_unknown_key_is_refused_alike(cluster, keys):
    p = Page(cluster)
    for key, secret in ((ACCESS_KEY, "wrong"), ("OEDNOSUCHKEY00000000", cluster.secret),
                        (keys["alice"][0], keys["bob"][1])):
        r, data = p.login(key, secret)
        assert r.status == 403, data
        assert json.loads(data)["code"] == "AccessDenied"
        assert r.getheader("Set-Cookie") is None
    r, data = p.request("POST", "api/login", b"not json", {"Content-Type": "application/json"})
    assert r.status == 400 and json.loads(data)["code"] == "BadRequest"
    # A form cannot log in: the login is JSON.
    r, data = p.request("POST", "api/login",
                        json.dumps({"access_key_id": ACCESS_KEY, "secret_access_key": cluster.secret}),
                        {"Content-Type": "text/plain"})
    assert r.status == 400 and r.getheader("Set-Cookie") is None
    r, data = p.request("GET", "api/session")
    assert r.status == 401 and json.loads(data)["code"] == "NotLoggedIn"


def test_a_login_sets_a_strict_http_only_cookie_and_no_secret(cluster):
    p = Page(cluster)
    r, data = p.login(ACCESS_KEY, cluster.secret)
    assert r.status == 200
    cookie = r.getheader("Set-Cookie")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/_oed/console/" in cookie
    assert "Secure" not in cookie  # no TLS here; test_tls covers Secure
    assert cluster.secret not in cookie and cluster.secret.encode() not in data
    answer = json.loads(data)
    assert answer["access_key_id"] == ACCESS_KEY and answer["admin"] is True
    r, data = p.request("GET", "api/session")
    assert r.status == 200 and json.loads(data)["csrf"] == answer["csrf"]
    # Any drive takes the cookie: they share the cluster secret.
    other = Page(cluster, 3)
    other.cookie = p.cookie
    r, _ = other.request("GET", "api/session")
    assert r.status == 200
    # An altered cookie is nobody's.
    other.cookie = p.cookie[:-1] + ("0" if p.cookie[-1] != "0" else "1")
    r, _ = other.request("GET", "api/session")
    assert r.status == 401


def test_the_overview_shows_every_drive_and_the_cluster(cluster):
    p = Page(cluster)
    p.login(ACCESS_KEY, cluster.secret)
    r, data = p.request("GET", "api/overview")
    assert r.status == 200, data
    o = json.loads(data)
    assert [d["id"] for d in o["drives"]] == cluster.ids
    assert all(d["up"] for d in o["drives"]), o
    assert o["k"] == cluster.k and o["m"] == cluster.m
    assert o["totals"]["drives_up"] == len(cluster.ids)
    d = o["drives"][0]
    assert d["capacity"]["total_bytes"] > 0
    assert d["heal"]["queued"] >= 0 and "last_complete_ms" in d["scrub"]
    assert d["drain"]["state"] == "none" and d["rebalance"]["state"] in ("none", "done")
    if d["power"] is not None:
        assert d["power"]["method"] in ("measured", "modelled")
    r, data = p.request("GET", f"api/drives/{cluster.ids[2]}/history")
    assert r.status == 200, data
    h = json.loads(data)
    assert h["id"] == cluster.ids[2] and h["period_seconds"] == 10
    assert isinstance(h["points"], list)
    r, data = p.request("GET", "api/drives/no-such-drive/history")
    assert r.status == 404 and json.loads(data)["code"] == "NoSuchDrive"


def test_a_down_drive_shows_down_and_its_history_is_unavailable(cluster):
    p = Page(cluster)
    p.login(ACCESS_KEY, cluster.secret)
    cluster.kill9(4)
    try:
        # An overview is made at most once a second: the next one shows it.
        o = cluster.wait_for("drive-5 down", lambda: (
            o := json.loads(p.request("GET", "api/overview")[1])) and not o["drives"][4]["up"] and o,
            timeout=5, every=0.2)
        down = [d for d in o["drives"] if not d["up"]]
        assert [d["id"] for d in down] == [cluster.ids[4]]
        assert down[0]["error"] and down[0]["capacity"] is None
        assert o["totals"]["drives_up"] == len(cluster.ids) - 1
        r, data = p.request("GET", f"api/drives/{cluster.ids[4]}/history")
        assert r.status == 503 and json.loads(data)["code"] == "DriveUnavailable"
    finally:
        cluster.start(4)


def test_a_key_sees_its_own_buckets_and_not_the_cluster(cluster, keys):
    alice, bob = keys["alice"], keys["bob"]
    p = Page(cluster)
    r, data = p.login(alice[0], alice[1])
    assert r.status == 200 and json.loads(data)["admin"] is False
    r, data = p.request("GET", "api/overview")
    assert r.status == 403 and json.loads(data)["code"] == "AccessDenied"
    r, data = p.request("GET", f"api/drives/{cluster.ids[0]}/history")
    assert r.status == 403
    r, data = p.s3("GET", "")
    assert r.status == 200
    assert alice[2].encode() in data and bob[2].encode() not in data
    r, data = p.s3("GET", f"{bob[2]}?list-type=2")
    assert r.status == 403 and b"<Code>AccessDenied</Code>" in data
    r, data = p.s3("PUT", f"{bob[2]}/planted", b"x")
    assert r.status == 403
    with pytest.raises(ClientError):
        cluster.client().head_object(Bucket=bob[2], Key="planted")


def test_s3_through_the_console_is_s3_with_the_keys_rights(cluster, keys):
    alice = keys["alice"]
    p = Page(cluster)
    p.login(alice[0], alice[1])
    body = secrets.token_bytes(300_000)
    key = "dir one/a+b é.bin"
    path = alice[2] + "/" + "/".join(urllib.parse.quote(s, safe="") for s in key.split("/"))
    r, data = p.s3("PUT", path, body, {"Content-Type": "application/octet-stream",
                                        "x-amz-meta-origin": "console"})
    assert r.status == 200, data
    got = cluster.client().get_object(Bucket=alice[2], Key=key)
    assert got["Body"].read() == body and got["Metadata"] == {"origin": "console"}
    r, data = p.s3("GET", path)
    assert r.status == 200 and data == body
    r, data = p.s3("HEAD", path, headers={"x-amz-checksum-mode": "ENABLED"})
    assert r.status == 200 and int(r.getheader("Content-Length")) == len(body)
    r, data = p.s3("GET", f"{alice[2]}?list-type=2&prefix=dir%20one%2F&delimiter=%2F")
    assert r.status == 200 and b"<Key>dir one/a+b" in data
    # A near-data operation, as a page runs it.
    values = [1.5, -2.0, 4.25, 8.0]
    import struct
    cluster.client().put_object(Bucket=alice[2], Key="v.f64",
                                Body=struct.pack(f"<{len(values)}d", *values))
    r, data = p.s3("POST", f"{alice[2]}/v.f64?oed-op", json.dumps({"op": "stats", "format": "f64le"}),
                   {"Content-Type": "application/json"})
    assert r.status == 200, data
    answer = json.loads(data)
    assert answer["result"]["count"] == 4 and answer["result"]["sum"] == sum(values)
    assert answer["cost"]["object_bytes"] == 32
    r, data = p.s3("DELETE", path)
    assert r.status == 204
    with pytest.raises(ClientError):
        cluster.client().head_object(Bucket=alice[2], Key=key)


def test_a_change_needs_the_csrf_token_and_the_consoles_origin(cluster, keys):
    alice = keys["alice"]
    p = Page(cluster)
    p.login(alice[0], alice[1])
    r, data = p.s3("PUT", f"{alice[2]}/forged", b"x", csrf=False)
    assert r.status == 403 and json.loads(data)["code"] == "InvalidCsrfToken"
    r, data = p.s3("PUT", f"{alice[2]}/forged", b"x", {"X-OED-CSRF": "0" * 32}, csrf=False)
    assert r.status == 403 and json.loads(data)["code"] == "InvalidCsrfToken"
    for h in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
              {"Sec-Fetch-Site": "same-site"}):
        r, data = p.s3("PUT", f"{alice[2]}/forged", b"x", h)
        assert r.status == 403 and json.loads(data)["code"] == "CrossSiteRequest"
        r, data = p.request("POST", "api/login",
                            json.dumps({"access_key_id": alice[0], "secret_access_key": alice[1]}),
                            {"Content-Type": "application/json", **h})
        assert r.status == 403 and json.loads(data)["code"] == "CrossSiteRequest"
    with pytest.raises(ClientError):
        cluster.client().head_object(Bucket=alice[2], Key="forged")
    # Reads need no token; a logout does.
    r, _ = p.s3("GET", f"{alice[2]}?list-type=2")
    assert r.status == 200
    r, _ = p.request("POST", "api/logout")
    assert r.status == 403
    r, _ = p.request("POST", "api/logout", headers={"X-OED-CSRF": p.csrf})
    assert r.status == 204


def test_a_session_ends_when_its_key_is_rotated_or_deleted(cluster):
    k = json.loads(cluster.admin("key", "create", "console short", "--json"))
    p = Page(cluster)
    assert p.login(k["access_key_id"], k["secret_access_key"])[0].status == 200
    assert p.request("GET", "api/session")[0].status == 200
    cluster.admin("key", "rotate", k["access_key_id"], "--json")
    cluster.wait_for("the rotation on drive 0",
                     lambda: p.request("GET", "api/session")[0].status == 401, timeout=30)
    r, data = p.request("GET", "api/session")
    assert json.loads(data)["code"] == "NotLoggedIn"
    cluster.admin("key", "delete", k["access_key_id"])


def test_the_console_can_be_turned_off():
    c = Cluster(n=1, k=1, m=0, extra=lambda i: ["console=false"])
    try:
        p = Page(c)
        for path in ("", "app.js", "api/session"):
            r, data = p.request("GET", path)
            assert r.status == 404 and json.loads(data)["code"] == "ConsoleOff"
        r, _ = p.login(ACCESS_KEY, c.secret)
        assert r.status == 404
    finally:
        c.stop()


def test_an_object_key_with_dot_segments_names_itself(cluster, keys):
    """A page addresses objects by the query (`oed-key`): a key such as `../B/k` is that
    key, never the object `k` of bucket B that a browser would make of the path."""
    alice, bob = keys["alice"], keys["bob"]
    s3 = cluster.client()
    s3.put_object(Bucket=bob[2], Key="victim", Body=b"bob's")
    s3.put_object(Bucket=alice[2], Key=f"../{bob[2]}/victim", Body=b"a trap")
    p = Page(cluster)
    p.login(ACCESS_KEY, cluster.secret)
    q = urllib.parse.quote(f"../{bob[2]}/victim", safe="")
    r, data = p.s3("GET", f"{alice[2]}?oed-key={q}")
    assert r.status == 200 and data == b"a trap"
    r, _ = p.s3("DELETE", f"{alice[2]}?oed-key={q}")
    assert r.status == 204
    assert s3.get_object(Bucket=bob[2], Key="victim")["Body"].read() == b"bob's"
    r, data = p.s3("GET", f"?oed-key={q}")
    assert r.status == 400 and json.loads(data)["code"] == "BadRequest"


def test_an_html_object_never_runs_as_a_page_of_the_console(cluster, keys):
    alice = keys["alice"]
    html = b"<script>fetch('/_oed/console/api/session')</script>"
    cluster.client().put_object(Bucket=alice[2], Key="x.html", Body=html, ContentType="text/html")
    url = cluster.client().generate_presigned_url(
        "get_object", Params={"Bucket": alice[2], "Key": "x.html"}, ExpiresIn=60)
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.read() == html
        assert r.headers["Content-Security-Policy"] == "sandbox"
        assert r.headers["X-Content-Type-Options"] == "nosniff"
    p = Page(cluster)
    p.login(alice[0], alice[1])
    r, data = p.s3("GET", f"{alice[2]}?oed-key=x.html")
    assert r.status == 200 and data == html
    assert "sandbox" in r.getheader("Content-Security-Policy")
    assert r.getheader("Cache-Control") == "private, no-store"


def test_the_consoles_requests_are_counted_as_its_own(cluster, keys):
    alice = keys["alice"]
    p = Page(cluster)
    p.login(alice[0], alice[1])
    before = cluster.metric_sum(0, "oed_requests_total", api="console", op="ListObjectsV2")
    p.s3("GET", f"{alice[2]}?list-type=2")
    p.request("GET", "api/session")
    assert cluster.metric_sum(0, "oed_requests_total", api="console", op="ListObjectsV2") == before + 1
    assert cluster.metric_sum(0, "oed_requests_total", api="console", op="ConsoleSession") >= 1
    assert cluster.metric_sum(0, "oed_requests_total", api="console", op="ConsoleLogin") >= 1
