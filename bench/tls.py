"""TLS against plaintext on one broker, in the same run: produce and fetch throughput.

    python3 -m bench.tls [--seconds 5] [--out DIR]

One broker serves a PLAINTEXT and an SSL listener at once (a throwaway CA and broker
certificate, EC P-256, made with the ``openssl`` command). The load is bench.single_node's
(1 MiB batches over 4 connections, acks=1; fetches of 4 MiB from page cache), run once
on each listener, alternating produce and fetch, so both figures share the machine's
state. The TLS client is Python's ``ssl`` over the same blocking sockets: its encryption
costs the client CPU too, which on a small machine competes with the broker; the run
reports the broker's CPU seconds per GB on each path, which is what the broker pays.

What each path costs the broker:
- plaintext fetch: sendfile/splice of file regions, no copy in user space;
- TLS fetch: the copying fallback, each region read into user memory (``preadv``) and
  encrypted by OpenSSL in ``SSL_write``; kernel TLS (kTLS) would let sendfile encrypt in
  the kernel, but Python's ``ssl`` cannot hand the session keys to the socket and this
  kernel may not have the ``tls`` upper layer protocol (``ktls`` in the result says what
  ``/proc/sys/net/ipv4/tcp_available_ulp`` offers);
- TLS produce: decryption in ``SSL_read`` into the receive buffers, on the event loop
  (network threads move raw bytes only, so they do not serve TLS connections).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile

from bench.single_node import (
    BATCH_BYTES,
    CONNECTIONS,
    RECORD_BYTES,
    Broker,
    _run_connections,
    fetch_work,
    free_port,
    machine,
    one_mib_batch,
    produce_frame,
    produce_work,
    recv_frame,
)


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


def _produce(port: int, seconds: float, frames: list[bytes], broker: Broker, wrap) -> dict:
    cpu0 = broker.cpu_seconds()
    moved, elapsed = _run_connections(port, seconds, produce_work(frames, True), wrap)
    return {"mb_s": moved / elapsed / 1e6,
            "broker_cpu_s_per_gb": (broker.cpu_seconds() - cpu0) / (moved / 1e9)}


def _fetch(port: int, seconds: float, log_end: int, batch: bytes, broker: Broker,
           wrap) -> dict:
    cpu0 = broker.cpu_seconds()
    moved, elapsed = _run_connections(port, seconds, fetch_work("ingest", log_end,
                                                                4 * BATCH_BYTES, len(batch)),
                                      wrap)
    return {"mb_s": moved / elapsed / 1e6,
            "broker_cpu_s_per_gb": (broker.cpu_seconds() - cpu0) / (moved / 1e9)}


def run(seconds: float, batches_per_partition: int = 64) -> dict:
    certs = tempfile.mkdtemp(prefix="pybroker-bench-tls-")
    keystore, ca = make_certificates(certs)
    plain_port, ssl_port = free_port(), free_port()
    broker = Broker({"listeners": f"PLAINTEXT://127.0.0.1:{plain_port},"
                                  f"SSL://127.0.0.1:{ssl_port}",
                     "ssl.keystore.location": keystore, "ssl.truststore.location": ca},
                    port=plain_port)
    context = ssl.create_default_context(cafile=ca)

    def wrap(sock):
        return context.wrap_socket(sock, server_hostname="127.0.0.1")

    try:
        broker.create_topic("ingest", CONNECTIONS)
        batch = one_mib_batch()
        frames = [produce_frame("ingest", p, batch) for p in range(CONNECTIONS)]
        with wrap(socket.create_connection(("127.0.0.1", ssl_port))) as probe:
            negotiated = {"version": probe.version(), "cipher": probe.cipher()[0]}
            scratch = memoryview(bytearray(1 << 16))
            for _ in range(batches_per_partition):  # the data the fetches read
                for frame in frames:
                    probe.sendall(frame)
                    recv_frame(probe, scratch)
        log_end = batches_per_partition * (BATCH_BYTES // (RECORD_BYTES + 16))
        result: dict = {"tls": negotiated, "ktls_offered_by_kernel": ktls_offered(),
                        "ktls_used": False}
        result["fetch_plaintext"] = _fetch(plain_port, seconds, log_end, batch, broker, None)
        result["fetch_tls"] = _fetch(ssl_port, seconds, log_end, batch, broker, wrap)
        result["produce_plaintext"] = _produce(plain_port, seconds, frames, broker, None)
        result["produce_tls"] = _produce(ssl_port, seconds, frames, broker, wrap)
        for figure in ("fetch", "produce"):
            result[f"{figure}_tls_fraction"] = (result[f"{figure}_tls"]["mb_s"]
                                                / result[f"{figure}_plaintext"]["mb_s"])
        result["machine"] = machine()
        return result
    finally:
        broker.stop()
        shutil.rmtree(certs, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", default=None, help="directory for result.json")
    args = parser.parse_args(argv)
    result = run(args.seconds)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "result.json"), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
