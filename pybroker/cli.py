"""``pybroker`` command line: ``serve`` and ``log dump`` here; more commands plug in.

A command family is a function ``register(subparsers)`` that adds its sub-parsers and
sets ``func`` on each (called with the parsed args, returns the exit code). Families are
this module's ``COMMANDS`` plus every module ``pybroker/cli_<family>.py`` that defines
``register`` (found by name, so adding a family touches no existing file): ``topic``,
``produce`` and ``consume`` live in ``cli_topic.py`` and ``cli_clients.py``. The client
commands share their options and their way to fail (``cli_connect.py``).

A command ends with ``CommandError`` to fail with one line on stderr (``pybroker:
MESSAGE``) and exit status 1; a client command's other client-side failures (a
``KafkaException``, a timeout, a socket error) are put into one line the same way by the
``failure_text`` its parser set, so none ends with a traceback; interrupted (Ctrl-C), it
exits with the shell's status 130, quietly.

``serve`` runs a single node, or with ``--zookeeper`` (``zookeeper.connect``) a member of
the cluster coordinated by that ZooKeeper (docs/REPLICATION.md); ``cluster local`` (in
``cli_cluster.py``) starts a local one for development. ``serve`` logs one line per record
on stderr (``time level logger message``), says when recovery starts and how long it
took, and prints ``ready`` with the listen address once the port accepts connections.
SIGTERM/SIGINT shut down cleanly and exit 0.

Log lines carry strings clients chose (client ids, group and member ids, topic names,
error text), so ``EscapingFormatter`` escapes control characters in every message: a
client cannot start a line of its own, or send a terminal escape, through its group id.
A traceback keeps its line breaks, each of its lines indented and escaped, so no line of
it passes for a record either.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import pkgutil
import re
import sys
from collections.abc import Callable, Sequence
from types import TracebackType

LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%dT%H:%M:%S"

# What could end a log line or rewrite what a reader sees: C0 controls, DEL, C1 controls
# (NEL among them) and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Lines of a traceback start with this: a line a client's string broke off inside one
# cannot start like a record.
TRACEBACK_INDENT = "    "


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100
                                else f"\\u{ord(char):04x}")


def escape_controls(text: str) -> str:
    """``text`` with its control characters written as Python escapes (``\\n``, ``\\x1b``)."""
    return _CONTROL.sub(_escaped, text)


class EscapingFormatter(logging.Formatter):
    """One record, one line: control characters of the message are escaped, and
    tracebacks (and stacks) are indented and escaped line by line."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.message
        escaped = escape_controls(message)
        if escaped == message:
            return super().formatMessage(record)
        record.message = escaped  # this handler's rendering only
        try:
            return super().formatMessage(record)
        finally:
            record.message = message

    def formatException(self, ei: tuple[type[BaseException], BaseException,
                                        TracebackType | None] | tuple[None, None, None]
                        ) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join(TRACEBACK_INDENT + escape_controls(line) for line in text.split("\n"))


def setup_logging(level: str = "INFO") -> None:
    """Every record of the process to stderr, one line each (``EscapingFormatter``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter(LOG_FORMAT, LOG_DATE_FORMAT))
    logging.basicConfig(handlers=[handler], level=getattr(logging, level.upper(), logging.INFO),
                        force=True)


# ---------------------------------------------------------------------------- serve


def _register_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run a broker (single node, or a cluster member)",
                       description="Run a broker. Settings: properties file, then "
                       "PYBROKER_<KEY> environment variables, then these flags. Without "
                       "zookeeper.connect it is a single node leading every partition. "
                       "With it (--zookeeper) it joins the cluster coordinated through "
                       "that ZooKeeper: give every member the same ZooKeeper (and chroot) "
                       "and its own --broker-id and data directory; the brokers elect a "
                       "controller among themselves.")
    p.add_argument("--config", metavar="FILE", help="properties file (Kafka key names)")
    p.add_argument("--data-dir", metavar="DIR", help="log directory (log.dirs)")
    p.add_argument("--listen", metavar="HOST:PORT", help="address to listen on (port 0: any)")
    p.add_argument("--broker-id", metavar="N", type=int,
                   help="broker.id, unique in the cluster")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]",
                   help="zookeeper.connect: join the cluster coordinated there "
                   "(comma-separated ensemble members allowed)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="any other setting, e.g. --set num.partitions=3 (repeatable)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from pybroker.config import BrokerConfig

    overrides: dict[str, object] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set wants KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    # None means "flag not given": BrokerConfig.load keeps the value from file/environment.
    # --listen sets listeners too, so it beats a listeners= line of the file (not a
    # --set listeners=..., which names more than the one PLAINTEXT listener).
    overrides.update({"log.dirs": args.data_dir, "broker.id": args.broker_id,
                      "listen": args.listen,
                      "listeners": overrides.get("listeners", args.listen),
                      "zookeeper.connect": args.zookeeper})
    config = BrokerConfig.load(args.config, overrides=overrides)
    setup_logging(config["log.level"])
    try:
        import uvloop
        uvloop.install()
    except ImportError:  # pragma: no cover - a declared dependency
        logging.getLogger("pybroker").warning("uvloop missing, using the default loop")
    return asyncio.run(_run_broker(config))


async def _run_broker(config: object) -> int:
    from pybroker.broker.broker import Broker

    log = logging.getLogger("pybroker")
    broker = Broker(config)  # type: ignore[arg-type]
    broker.install_signal_handlers()
    try:
        host, port = await broker.start()
    except (OSError, ValueError) as exc:  # a port in use, bad listeners or TLS stores
        log.error("cannot start: %s", exc)
        await broker.shutdown()
        return 1
    log.info("ready: listening on %s:%d (advertised %s:%d), broker.id %d, data dir %s",
             host, port, *broker.advertised, broker.broker_id, broker.data_dir)
    await broker.wait_stopped()
    await broker.shutdown()
    return broker.exit_code


# -------------------------------------------------------------------------- log dump


def _register_log(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("log", help="inspect log files")
    log_sub = p.add_subparsers(dest="log_command", required=True)
    dump = log_sub.add_parser("dump", help="print the batches of a segment or partition dir",
                              add_help=False)
    dump.add_argument("rest", nargs=argparse.REMAINDER)
    dump.set_defaults(func=_log_dump)


def _log_dump(args: argparse.Namespace) -> int:
    from pybroker.log import dump

    return dump.main(args.rest) or 0


# ---------------------------------------------------------------------------- main

COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_register_serve, _register_log]
# The commands above by name: `serve` and `log` need no family module, and importing them
# all (clients, admin, groups) cost ~10 ms of every broker start.
BUILTIN = frozenset({"serve", "log"})


def _family_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    import pybroker

    found = []
    for module in sorted(m.name for m in pkgutil.iter_modules(pybroker.__path__)):
        if module.startswith("cli_"):
            mod = importlib.import_module(f"pybroker.{module}")
            if hasattr(mod, "register"):
                found.append(mod.register)
    return found


def build_parser(families: bool = True) -> argparse.ArgumentParser:
    """The whole command line; ``families=False`` leaves out the ``cli_*`` modules."""
    parser = argparse.ArgumentParser(prog="pybroker", description="A broker that speaks the "
                                     "Apache Kafka wire protocol.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS + (_family_commands() if families else []):
        register(sub)
    return parser


class CommandError(Exception):
    """Ends a command with its message on one line of stderr and exit status 1."""


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    command = next((w for w in words if not w.startswith("-")), None)
    parser = build_parser(families=command not in BUILTIN)
    args, extra = parser.parse_known_args(words)
    if extra:
        # argparse leaves options out of a REMAINDER that starts with one (`log dump -h`)
        if getattr(args, "func", None) is not _log_dump:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.rest = extra + args.rest
    try:
        return int(args.func(args) or 0)
    except CommandError as exc:
        print(f"pybroker: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if getattr(args, "failure_text", None) is None:
            raise
        return 130  # a client command interrupted while it waits: the shell's status
    except Exception as exc:
        # a client command's failure to reach or use a broker (cli_connect.failure_text)
        explain = getattr(args, "failure_text", None)
        text = explain(exc, args) if explain is not None else None
        if text is None:
            raise
        print(f"pybroker: {text}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
