"""TLS against plaintext on one broker, in the same run: produce and fetch throughput.

    python3 -m bench.tls [--seconds 5] [--out DIR] [--kafka [REFERENCE_DIR]]

One broker serves a PLAINTEXT and an SSL listener at once (a throwaway CA and broker
certificate, EC P-256, made with the ``openssl`` command). The load is bench.single_node's
(1 MiB batches over 4 connections, acks=1; fetches of 4 MiB from page cache), run once
on each listener, plaintext then TLS for each figure, so each fraction comes from
back-to-back runs. ``--kafka`` runs the same against Apache Kafka 4.1 (the reference
folder's ``kafka.sh``) configured with the same PEM certificates, for Kafka's fraction. The TLS client is Python's ``ssl`` over the same blocking sockets: its encryption
costs the client CPU too, which on a small machine competes with the broker; the run
reports the broker's CPU seconds per GB on each path, which is what the broker pays.

What each path costs the broker:
- plaintext fetch: sendfile/splice of file regions, no copy in user space;
- TLS fetch: the copying fallback, each region read into user memory (``preadv``) and
  encrypted by OpenSSL in ``SSL_write``; kernel TLS (kTLS) would let sendfile encrypt in
  the kernel, but Python's ``ssl`` cannot hand the session keys to the socket and this
  kernel may not have the ``tls`` upper layer protocol (``ktls`` in the result says what
  ``/proc/sys/net/ipv4/tcp_available_ulp`` offers);
- TLS produce: decryption in ``SSL_read`` straight into the frame buffers, by the
  network threads for large frames (``tlsread.recv_wait``), as plaintext frames are
  received by them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile

from bench.hostile.side_by_side import REFERENCE, free_port_pair
from bench.single_node import (
    BATCH_BYTES,
    CONNECTIONS,
    RECORD_BYTES,
    Broker,
    _run_connections,
    create_topic,
    fetch_work,
    free_port,
    machine,
    one_mib_batch,
    process_cpu_seconds,
    produce_frame,
    produce_work,
    recv_frame,
)
from pybroker.net.tls_connection import KTLS_AVAILABLE


def make_certificates(directory: str) -> tuple[str, str]:
    """(keystore: key + chain, CA file) in ``directory``, with the openssl command."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, cwd=directory,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=bench CA")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "broker.pem", "-days", "2", "-extfile", "san.ext")
    keystore = os.path.join(directory, "keystore.pem")
    with open(keystore, "wb") as out:
        for name in ("broker.key", "broker.pem"):
            with open(os.path.join(directory, name), "rb") as part:
                out.write(part.read())
    return keystore, os.path.join(directory, "ca.pem")


def ktls_offered() -> bool:
    try:
        with open("/proc/sys/net/ipv4/tcp_available_ulp") as f:
            return "tls" in f.read().split()
    except OSError:
        return False


class _Target:
    """A broker under test: its two ports and its process's CPU seconds."""

    def __init__(self, plain_port: int, ssl_port: int, pid: int) -> None:
        self.plain_port, self.ssl_port, self.pid = plain_port, ssl_port, pid

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.pid)


def _measure(target: _Target, port: int, seconds: float, work, wrap) -> dict:
    cpu0 = target.cpu_seconds()
    moved, elapsed = _run_connections(port, seconds, work, wrap)
    return {"mb_s": moved / elapsed / 1e6,
            "broker_cpu_s_per_gb": (target.cpu_seconds() - cpu0) / (moved / 1e9)}


def measure(target: _Target, seconds: float, ca: str, batches_per_partition: int = 64
            ) -> dict:
    """Fetch and produce, each on the PLAINTEXT listener then on the SSL one."""
    context = ssl.create_default_context(cafile=ca)

    def wrap(sock: socket.socket) -> socket.socket:
        return context.wrap_socket(sock, server_hostname="127.0.0.1")

    create_topic(target.plain_port, "ingest", CONNECTIONS)
    batch = one_mib_batch()
    frames = [produce_frame("ingest", p, batch) for p in range(CONNECTIONS)]
    with wrap(socket.create_connection(("127.0.0.1", target.ssl_port))) as probe:
        cipher = probe.cipher()
        result: dict = {"tls": {"version": probe.version(),
                                "cipher": cipher[0] if cipher else None}}
        scratch = memoryview(bytearray(1 << 16))
        for _ in range(batches_per_partition):  # the data the fetches read
            for frame in frames:
                probe.sendall(frame)
                recv_frame(probe, scratch)
    log_end = batches_per_partition * (BATCH_BYTES // (RECORD_BYTES + 16))
    fetch = fetch_work("ingest", log_end, 4 * BATCH_BYTES, len(batch))
    produce = produce_work(frames, True)
    for name, work in (("fetch", fetch), ("produce", produce)):
        plain = _measure(target, target.plain_port, seconds, work, None)
        tls = _measure(target, target.ssl_port, seconds, work, wrap)
        result[name] = {"plaintext": plain, "tls": tls,
                        "tls_fraction": tls["mb_s"] / plain["mb_s"]}
    return result


def run_pybroker(seconds: float, keystore: str, ca: str) -> dict:
    plain_port, ssl_port = free_port(), free_port()
    broker = Broker({"listeners": f"PLAINTEXT://127.0.0.1:{plain_port},"
                                  f"SSL://127.0.0.1:{ssl_port}",
                     "ssl.keystore.location": keystore, "ssl.truststore.location": ca},
                    port=plain_port)
    try:
        return measure(_Target(plain_port, ssl_port, broker.proc.pid), seconds, ca)
    finally:
        broker.stop()


def run_kafka(seconds: float, keystore: str, ca: str, reference: str) -> dict:
    """Apache Kafka (``kafka.sh`` of the reference folder) with the same certificates."""
    port, ssl_port = free_port_pair(), free_port()
    work = tempfile.mkdtemp(prefix="bench-tls-kafka-")
    listeners = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1}," \
                f"SSL://127.0.0.1:{ssl_port}"
    settings = {"listeners": listeners, "advertised.listeners": listeners,
                "listener.security.protocol.map":
                    "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
                "ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
                "ssl.truststore.type": "PEM", "ssl.truststore.location": ca}
    env = dict(os.environ, KAFKA_PORT=str(port), KAFKA_WORK=work, KAFKA_FRESH="1",
               KAFKA_SET=" ".join(f"{k}={v}" for k, v in settings.items()))
    script = os.path.join(reference, "kafka.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True,
                             timeout=300)
    found = re.search(r"pid (\d+) port", started.stdout)
    try:
        if started.returncode or not found:
            raise RuntimeError(f"kafka.sh start failed: {started.stdout}{started.stderr}")
        return measure(_Target(port, ssl_port, int(found.group(1))), seconds, ca)
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, timeout=300)
        shutil.rmtree(work, ignore_errors=True)


def run(seconds: float, kafka_reference: str | None = None) -> dict:
    certs = tempfile.mkdtemp(prefix="pybroker-bench-tls-")
    try:
        keystore, ca = make_certificates(certs)
        result: dict = {"ktls_offered_by_kernel": ktls_offered(),
                        "ktls_used": KTLS_AVAILABLE,
                        "pybroker": run_pybroker(seconds, keystore, ca)}
        if kafka_reference:
            result["kafka"] = run_kafka(seconds, keystore, ca, kafka_reference)
        result["machine"] = machine()
        return result
    finally:
        shutil.rmtree(certs, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", default=None, help="directory for result.json")
    parser.add_argument("--kafka", nargs="?", const=REFERENCE, default=None,
                        metavar="REFERENCE_DIR",
                        help=f"also Apache Kafka, with the same certificates "
                             f"(kafka.sh of {REFERENCE} by default)")
    args = parser.parse_args(argv)
    result = run(args.seconds, args.kafka)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "result.json"), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
