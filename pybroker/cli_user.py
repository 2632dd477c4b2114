"""``pybroker user create|list|delete``: users' SCRAM credentials, like Kafka's
``kafka-configs.sh --entity-type users --alter --add-config 'SCRAM-SHA-256=[...]'``.

Over confluent-kafka's ``AdminClient`` (AlterUserScramCredentials,
DescribeUserScramCredentials), so it works against any Kafka-protocol broker
(``--bootstrap HOST:PORT``, ``--timeout``, as every client command)::

    pybroker user create alice --password alice-secret [--mechanism SCRAM-SHA-512]
        [--iterations 8192]
    pybroker user list [alice ...]
    pybroker user delete alice [--mechanism SCRAM-SHA-256]

The client salts the password (a random salt, ``--iterations``, default 4096) and sends
the salted password, never the password itself. ``--mechanism`` may be repeated; create's
default is SCRAM-SHA-256 and SCRAM-SHA-512 both, delete's every mechanism the user has.
``list`` prints one line per user: ``alice SCRAM-SHA-256 iterations=4096``. Errors go to
stderr (with Kafka's error name) and make the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pybroker.cli_connect import add_client_options, report_each
from pybroker.cli_topic import _admin
from pybroker.kafka_admin import error_text
from pybroker.security.scram import DEFAULT_ITERATIONS, MECHANISM_CODES

MECHANISMS = tuple(MECHANISM_CODES)


def register(subparsers: Any) -> None:
    """Add ``user`` and its subcommands to ``pybroker``'s parser."""
    user = subparsers.add_parser("user", help="create, list, delete users' SCRAM credentials")
    sub = user.add_subparsers(dest="user_command", required=True)

    p = sub.add_parser("create", help="set a user's SCRAM credentials (new or replaced)")
    p.add_argument("name", metavar="USER")
    p.add_argument("--password", required=True)
    p.add_argument("--mechanism", action="append", choices=MECHANISMS, default=[],
                   help="SCRAM-SHA-256 or SCRAM-SHA-512 (default: both)")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"PBKDF2 iterations, 4096-16384 (default {DEFAULT_ITERATIONS})")
    p.set_defaults(func=create_main)

    p = sub.add_parser("list", help="users with SCRAM credentials (or the ones named)")
    p.add_argument("names", nargs="*", metavar="USER")
    p.set_defaults(func=list_main)

    p = sub.add_parser("delete", help="remove a user's SCRAM credentials")
    p.add_argument("name", metavar="USER")
    p.add_argument("--mechanism", action="append", choices=MECHANISMS, default=[],
                   help="only this mechanism's (default: every one the user has)")
    p.set_defaults(func=delete_main)

    for parser in sub.choices.values():
        add_client_options(parser)


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return getattr(ScramMechanism, name.replace("-", "_"))


def _alter(args: argparse.Namespace, admin: Any, alterations: list[Any], done: str) -> int:
    futures = admin.alter_user_scram_credentials(alterations, request_timeout=args.timeout)
    return report_each(futures, args.timeout, lambda user: f"{done} {user}")


def create_main(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    admin = _admin(args)
    alterations = [UserScramCredentialUpsertion(
        args.name, ScramCredentialInfo(_mechanism(m), args.iterations),
        args.password.encode()) for m in args.mechanism or MECHANISMS]
    return _alter(args, admin, alterations, "set SCRAM credentials of")


def _described(args: argparse.Namespace, admin: Any,
               names: list[str]) -> tuple[dict[str, Any], int]:
    """user -> UserScramCredentialsDescription, and the exit status so far."""
    found: dict[str, Any] = {}
    status = 0
    if not names:
        try:
            found = admin.describe_user_scram_credentials(
                request_timeout=args.timeout).result(timeout=args.timeout)
        except Exception as exc:
            print(f"error: {error_text(exc)}", file=sys.stderr)
            return {}, 1
        return found, 0
    for user, future in admin.describe_user_scram_credentials(
            names, request_timeout=args.timeout).items():
        try:
            found[user] = future.result(timeout=args.timeout)
        except Exception as exc:
            print(f"{user}: {error_text(exc)}", file=sys.stderr)
            status = 1
    return found, status


def list_main(args: argparse.Namespace) -> int:
    found, status = _described(args, _admin(args), args.names)
    for user, description in sorted(found.items()):
        for info in description.scram_credential_infos:
            print(f"{user} {info.mechanism.name.replace('_', '-')} "
                  f"iterations={info.iterations}")
    return status


def delete_main(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import UserScramCredentialDeletion

    admin = _admin(args)
    mechanisms = args.mechanism
    if not mechanisms:
        found, status = _described(args, admin, [args.name])
        if status:
            return status
        mechanisms = [info.mechanism.name.replace("_", "-")
                      for info in found[args.name].scram_credential_infos]
    return _alter(args, admin, [UserScramCredentialDeletion(args.name, _mechanism(m))
                                for m in mechanisms], "deleted SCRAM credentials of")
