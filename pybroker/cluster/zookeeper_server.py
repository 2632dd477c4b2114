"""A standalone ZooKeeper from Debian's package, for ``pybroker cluster local`` and the tests.

``start_zookeeper(data_dir, port=0, tick_ms=200)`` writes ``zoo.cfg`` and a log4j
configuration into ``data_dir`` and runs the server as a plain java process (no
``zkServer.sh``, no systemd, never the system instance on 2181)::

    java -cp <data_dir>:/usr/share/java/zookeeper.jar:<slf4j-log4j12, log4j-1.2> \
         org.apache.zookeeper.server.quorum.QuorumPeerMain <data_dir>/zoo.cfg

Debian's ``zkEnv.sh`` puts only ``zookeeper.jar`` on the class path: its manifest names
the jars it needs (``Class-Path``). We add the slf4j binding for log4j 1.2, else slf4j
falls back to its no-op logger and a server that fails to start says nothing; the log
goes to ``<data_dir>/zookeeper.log``, the JVM's own output to ``zookeeper.out``.

Settings chosen for development and tests, not production: a small ``tickTime`` (200 ms)
allows short session timeouts (ZooKeeper accepts 2 to 20 ticks unless
``maxSessionTimeout`` widens it: we allow up to 120 s so Kafka's default 18 s works too),
``forceSync=no`` (no fsync per transaction: the data dir is throwaway), and a 4 MB
transaction log preallocation instead of 64 MB (first-touch page faults on this kind
of VM make a big preallocation cost seconds).

``ZooKeeperProcess`` is not thread-safe; one owner starts and stops it.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from typing import NamedTuple

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# Where Debian (libzookeeper-java) and upstream tarballs (ZOOKEEPER_HOME/lib) keep the jars.
JAR_DIRS = ("/usr/share/java", "/usr/share/zookeeper", "/usr/share/zookeeper/lib")
LOG_JARS = ("slf4j-log4j12.jar", "log4j-1.2.jar")
JVM_FLAGS = (
    "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",  # C1 only: starts faster, and ZooKeeper here is light
    "-Djava.awt.headless=true",
    "-Dzookeeper.admin.enableServer=false",
)


class ZooKeeperNotFoundError(RuntimeError):
    """java or ZooKeeper's jar is not installed."""


class ZooKeeperStartError(RuntimeError):
    """The server exited or did not answer in time (the message holds the log tail)."""


class ZooKeeperInstall(NamedTuple):
    java: str
    classpath: list[str]  # zookeeper.jar first, then the logging binding if present


def _find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java") or (
        "/usr/bin/java" if os.access("/usr/bin/java", os.X_OK) else None)


def _find_jar() -> str | None:
    dirs = list(JAR_DIRS)
    if os.environ.get("ZOOKEEPER_HOME"):
        home = os.environ["ZOOKEEPER_HOME"]
        dirs[:0] = [home, os.path.join(home, "lib")]
    for directory in dirs:
        plain = os.path.join(directory, "zookeeper.jar")
        if os.path.isfile(plain):
            return plain
        versioned = sorted(glob.glob(os.path.join(directory, "zookeeper-3.*.jar")))
        versioned = [j for j in versioned if "-tests" not in j and "-sources" not in j]
        if versioned:
            return versioned[-1]
    return None


def find_zookeeper() -> ZooKeeperInstall | None:
    """java and ZooKeeper's class path, or None when either is missing."""
    java, jar = _find_java(), _find_jar()
    if java is None or jar is None:
        return None
    classpath = [jar]
    jar_dir = os.path.dirname(jar)
    if glob.glob(os.path.join(jar_dir, "zookeeper-jute*.jar")) or jar_dir == "/usr/share/java":
        # Debian: the manifest's Class-Path finds the rest; add the logging binding.
        classpath += [os.path.join("/usr/share/java", j) for j in LOG_JARS
                      if os.path.isfile(os.path.join("/usr/share/java", j))]
    else:
        classpath += sorted(glob.glob(os.path.join(jar_dir, "*.jar")))
    return ZooKeeperInstall(java, classpath)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send a four-letter command (``ruok``, ``srvr``) and return the whole answer."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode())
        chunks = []
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


_running: set[ZooKeeperProcess] = set()  # strong references: a dropped one is killed too


@atexit.register
def _kill_leftovers() -> None:
    """An owner that forgot to stop its server (or died on an exception) leaves no java."""
    for zk in list(_running):
        zk.kill()


class ZooKeeperProcess:
    """One running standalone server. ``connect`` is the kazoo/Kafka connect string."""

    def __init__(self, data_dir: str, host: str, port: int, process: subprocess.Popen[bytes]):
        self.data_dir = data_dir
        self.host = host
        self.port = port
        self.process = process
        _running.add(self)

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def pause(self) -> None:
        """SIGSTOP: the server stops answering; its clients' sessions time out."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> int:
        """SIGTERM (SIGKILL after STOP_TIMEOUT_S); returns the exit code."""
        if self.running():
            self.process.send_signal(signal.SIGCONT)  # a paused JVM cannot handle SIGTERM
            self.process.terminate()
            try:
                return self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        return self.kill()

    def kill(self) -> int:
        if self.running():
            self.process.kill()
        _running.discard(self)
        return self.process.wait()

    def log_tail(self, lines: int = 40) -> str:
        return _log_tail(self.data_dir, lines)

    def __enter__(self) -> ZooKeeperProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ZooKeeperProcess {self.connect} pid={self.pid} data_dir={self.data_dir}>"


def _log_tail(data_dir: str, lines: int) -> str:
    parts = []
    for name in ("zookeeper.log", "zookeeper.out"):
        path = os.path.join(data_dir, name)
        with contextlib.suppress(OSError), open(path, errors="replace") as f:
            text = "".join(f.readlines()[-lines:]).strip()
            if text:
                parts.append(f"--- {path}\n{text}")
    return "\n".join(parts) or "(no output)"


def _write_config(data_dir: str, host: str, port: int, tick_ms: int) -> str:
    os.makedirs(os.path.join(data_dir, "data"), exist_ok=True)
    cfg = os.path.join(data_dir, "zoo.cfg")
    with open(cfg, "w") as f:
        f.write(
            f"dataDir={os.path.join(data_dir, 'data')}\n"
            f"clientPort={port}\n"
            f"clientPortAddress={host}\n"
            f"tickTime={tick_ms}\n"
            f"minSessionTimeout={2 * tick_ms}\n"
            f"maxSessionTimeout={max(120_000, 20 * tick_ms)}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
            "forceSync=no\n"
            "preAllocSize=4096\n"
            "autopurge.snapRetainCount=3\n"
            "autopurge.purgeInterval=1\n")
    with open(os.path.join(data_dir, "log4j.properties"), "w") as f:
        f.write(
            "log4j.rootLogger=INFO, FILE\n"
            "log4j.appender.FILE=org.apache.log4j.RollingFileAppender\n"
            f"log4j.appender.FILE.File={os.path.join(data_dir, 'zookeeper.log')}\n"
            "log4j.appender.FILE.MaxFileSize=10MB\n"
            "log4j.appender.FILE.MaxBackupIndex=1\n"
            "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n\n")
    return cfg


def _listens(pid: int, port: int) -> bool:
    """Does process ``pid`` hold the socket listening on ``port``? (Linux /proc; elsewhere
    assumed.) Without this, another server on the port would pass for ours."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1]
                  for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return not os.path.isdir("/proc/self/fd")
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                # local_address is HEXIP:HEXPORT, state 0A is LISTEN, field 9 the inode
                if (fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port
                        and fields[9] in inodes):
                    return True
    return False


def _serving(zk: ZooKeeperProcess) -> bool:
    """Ours listens and ``srvr`` names the mode (it does only once the server serves
    requests; ``ruok`` says imok as soon as the port is open)."""
    if not _listens(zk.pid, zk.port):
        return False
    try:
        return "Mode:" in four_letter_word(zk.host, zk.port, "srvr", timeout_s=1.0)
    except OSError:
        return False


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZooKeeper binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ZooKeeperStartError(
                f"cannot start ZooKeeper on {host}:{port}: {exc.strerror}") from None


def start_zookeeper(data_dir: str, port: int = 0, tick_ms: int = 200,
                    host: str = "127.0.0.1") -> ZooKeeperProcess:
    """Start a standalone server with its files in ``data_dir``; port 0 picks a free one.

    Restarting on the same ``data_dir`` and port keeps the znodes. Raises
    ZooKeeperNotFoundError when java or ZooKeeper is not installed and ZooKeeperStartError
    (with the log tail) when it does not serve within START_TIMEOUT_S.
    """
    install = find_zookeeper()
    if install is None:
        raise ZooKeeperNotFoundError(
            "ZooKeeper is not installed (need java and zookeeper.jar: on Debian, "
            "`apt-get install zookeeper`; or set JAVA_HOME / ZOOKEEPER_HOME)")
    data_dir = os.path.abspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    # A picked port may be taken by someone else before java binds it: pick again.
    attempts = 3 if port == 0 else 1
    for attempt in range(attempts):
        chosen = port or _free_port(host)
        try:
            _check_port_free(host, chosen)
            return _start(install, data_dir, host, chosen, tick_ms)
        except ZooKeeperStartError as exc:
            if attempt + 1 == attempts or "Address already in use" not in str(exc):
                raise
    raise AssertionError("unreachable")


def _start(install: ZooKeeperInstall, data_dir: str, host: str, port: int,
           tick_ms: int) -> ZooKeeperProcess:
    cfg = _write_config(data_dir, host, port, tick_ms)
    classpath = os.pathsep.join([data_dir, *install.classpath])
    argv = [install.java, *JVM_FLAGS,
            f"-Dlog4j.configuration=file:{os.path.join(data_dir, 'log4j.properties')}",
            "-cp", classpath, MAIN_CLASS, cfg]
    with open(os.path.join(data_dir, "zookeeper.out"), "ab") as out:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, cwd=data_dir,
                                   start_new_session=True)  # a ^C to the owner is not ZK's
    zk = ZooKeeperProcess(data_dir, host, port, process)
    deadline = time.monotonic() + START_TIMEOUT_S
    delay = 0.02
    while True:
        if not zk.running():
            zk.kill()
            raise ZooKeeperStartError(
                f"ZooKeeper exited with code {process.returncode} while starting on "
                f"{host}:{port}:\n{_log_tail(data_dir, 40)}")
        if _serving(zk):
            return zk
        if time.monotonic() > deadline:
            zk.kill()
            raise ZooKeeperStartError(
                f"ZooKeeper did not serve on {host}:{port} within {START_TIMEOUT_S:.0f} s:\n"
                f"{_log_tail(data_dir, 40)}")
        time.sleep(delay)
        delay = min(delay * 2, 0.25)
