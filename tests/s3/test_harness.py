"""The test cluster itself: the ports it picks are free when picked and released before
the drives bind them, so another process can take one in between; the drives then start
again on other ports."""

import socket

import conftest
from conftest import Cluster


def test_drives_start_again_on_other_ports_when_one_is_taken(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    picked = []
    free_ports = conftest.free_ports

    def first_taken(n):
        ports = free_ports(n)
        picked.append(ports)
        if len(picked) == 1:
            ports[1] = port  # drive 2's S3 and peer port
        elif len(picked) == 2:
            ports[-1] = port  # the last drive's metrics port
        return ports

    monkeypatch.setattr(conftest, "free_ports", first_taken)
    c = Cluster(n=3, k=2, m=1)
    try:
        assert len(picked) == 3
        assert f"127.0.0.1:{port}" not in c.addrs + c.metrics_addrs
        s3 = c.client(0)
        s3.create_bucket(Bucket="harness")
        s3.put_object(Bucket="harness", Key="k", Body=b"x" * 100_000)
        for i in range(3):
            assert c.client(i).get_object(Bucket="harness", Key="k")["Body"].read() == b"x" * 100_000
            assert c.metric(i, "oed_http_connections_refused_total") == 0
    finally:
        c.stop()
        taken.close()
