"""The authorizer's rules (Kafka's AclAuthorizer), held against a plain model of them."""

from __future__ import annotations

import asyncio
import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from pybroker.security.authorizer import AclAuthorizer, parse_super_users
from pybroker.security.store import FileAclStore

ALICE, BOB = "User:alice", "User:bob"
T = ResourceType.TOPIC
Op, Perm = AclOperation, AclPermissionType


def _authorizer(bindings: list[AclBinding], tmp_path: str, super_users: str = "",
                allow_if_no_acl: bool = False) -> AclAuthorizer:
    os.makedirs(tmp_path, exist_ok=True)
    authorizer = AclAuthorizer(FileAclStore(tmp_path), parse_super_users(super_users),
                               allow_if_no_acl)

    async def setup() -> None:
        await authorizer.start()
        assert await authorizer.create(bindings) == [None] * len(bindings)
    asyncio.run(setup())
    return authorizer


def _acl(name: str, principal: str, op: AclOperation, perm: AclPermissionType = Perm.ALLOW,
         pattern: PatternType = PatternType.LITERAL, host: str = "*",
         kind: ResourceType = T) -> AclBinding:
    return AclBinding(ResourcePattern(kind, name, pattern),
                      AccessControlEntry(principal, host, op, perm))


def test_deny_wins_over_allow(tmp_path):
    a = _authorizer([_acl("orders", ALICE, Op.READ), _acl("orders", ALICE, Op.READ, Perm.DENY)],
                    str(tmp_path))
    assert not a.authorize(ALICE, "10.0.0.1", Op.READ, T, "orders")


def test_implied_operations(tmp_path):
    a = _authorizer([_acl("w", ALICE, Op.WRITE), _acl("c", ALICE, Op.ALTER_CONFIGS),
                     _acl("all", ALICE, Op.ALL)], str(tmp_path))
    assert a.authorize(ALICE, "h", Op.DESCRIBE, T, "w")
    assert not a.authorize(ALICE, "h", Op.READ, T, "w")
    assert a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, T, "c")
    assert not a.authorize(ALICE, "h", Op.DESCRIBE, T, "c")
    assert all(a.authorize(ALICE, "h", op, T, "all") for op in (Op.READ, Op.DELETE, Op.ALTER))


def test_wildcards_prefixes_hosts_and_principals(tmp_path):
    a = _authorizer([_acl("*", ALICE, Op.READ), _acl("logs-", BOB, Op.READ, pattern=PatternType.PREFIXED),
                     _acl("x", "User:*", Op.WRITE, host="10.0.0.9")], str(tmp_path))
    assert a.authorize(ALICE, "h", Op.READ, T, "anything")
    assert a.authorize(BOB, "h", Op.READ, T, "logs-2024")
    assert not a.authorize(BOB, "h", Op.READ, T, "log")
    assert a.authorize(BOB, "10.0.0.9", Op.WRITE, T, "x")
    assert not a.authorize(BOB, "10.0.0.8", Op.WRITE, T, "x")


def test_super_users_and_no_acl_found(tmp_path):
    a = _authorizer([_acl("a", ALICE, Op.READ, Perm.DENY)], str(tmp_path / "1"),
                    super_users="User:alice; User:root", allow_if_no_acl=True)
    assert a.authorize(ALICE, "h", Op.READ, T, "a")  # super users pass every DENY
    assert a.authorize(BOB, "h", Op.READ, T, "unguarded")  # no ACL at all on it
    assert not a.authorize(BOB, "h", Op.READ, T, "a")  # an ACL exists, none allows bob
    strict = _authorizer([], str(tmp_path / "2"))
    assert not strict.authorize(BOB, "h", Op.READ, T, "unguarded")


def test_filters_any_and_match(tmp_path):
    a = _authorizer([_acl("orders", ALICE, Op.READ), _acl("ord", ALICE, Op.READ,
                                                          pattern=PatternType.PREFIXED),
                     _acl("*", BOB, Op.WRITE), _acl("other", BOB, Op.WRITE)], str(tmp_path))
    match = AclBindingFilter(T, "orders", PatternType.MATCH)
    assert {b.pattern.name for b in a.bindings(match)} == {"orders", "ord", "*"}
    exact = AclBindingFilter(T, "orders", PatternType.ANY)
    assert {b.pattern.name for b in a.bindings(exact)} == {"orders"}
    assert len(list(a.bindings(AclBindingFilter(principal=BOB)))) == 2
    assert AclBindingFilter(ResourceType.UNKNOWN).problem() is not None


def test_store_survives_a_new_authorizer(tmp_path):
    a = _authorizer([_acl("orders", ALICE, Op.READ)], str(tmp_path))
    with open(os.path.join(tmp_path, "acls.json")) as f:
        stored = json.load(f)
    assert stored["acls"][0]["acls"] == [{"principal": ALICE, "permissionType": "Allow",
                                          "operation": "Read", "host": "*"}]
    again = _authorizer([], str(tmp_path))
    assert list(again.bindings()) == list(a.bindings())


def test_invalid_bindings_are_refused(tmp_path):
    a = _authorizer([], str(tmp_path))
    refused = asyncio.run(a.create([
        _acl("t", ALICE, Op.ANY), _acl("t", ALICE, Op.READ, pattern=PatternType.MATCH),
        _acl("", ALICE, Op.READ), _acl("other", ALICE, Op.ALTER, kind=ResourceType.CLUSTER),
        _acl("t", "alice", Op.READ), _acl("t", ALICE, Op.READ)]))
    assert [r is None for r in refused] == [False] * 5 + [True]


NAMES = st.sampled_from(["a", "ab", "abc", "b", "*"])
PRINCIPALS = st.sampled_from([ALICE, BOB, "User:*"])
OPS = st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.ALTER, Op.DELETE])
ACLS = st.builds(_acl, NAMES, PRINCIPALS, OPS, st.sampled_from([Perm.ALLOW, Perm.DENY]),
                 st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
                 st.sampled_from(["*", "h1", "h2"]))
IMPLIED = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}}


def _model(acls: list[AclBinding], principal: str, host: str, op: AclOperation,
           name: str) -> bool:
    """Kafka's rules written out plainly."""
    def applies(b: AclBinding) -> bool:
        p, e = b
        on_resource = (p.name in (name, "*") if p.pattern_type == PatternType.LITERAL
                       else name.startswith(p.name))
        return on_resource and e.principal in (principal, "User:*") and e.host in (host, "*")
    on = [b for b in acls if (b.pattern.name in (name, "*") if b.pattern.pattern_type ==
                              PatternType.LITERAL else name.startswith(b.pattern.name))]
    if not on:
        return False
    mine = [b.entry for b in on if applies(b)]
    if any(e.permission == Perm.DENY and e.operation in (op, Op.ALL) for e in mine):
        return False
    return any(e.permission == Perm.ALLOW and (e.operation in (op, Op.ALL)
                                               or e.operation in IMPLIED.get(op, ()))
               for e in mine)


@settings(max_examples=150, deadline=None)
@given(st.lists(ACLS, max_size=8), PRINCIPALS.filter(lambda p: p != "User:*"),
       st.sampled_from(["h1", "h2"]), OPS.filter(lambda o: o != Op.ALL),
       st.sampled_from(["a", "ab", "abc", "b", "c"]))
def test_decisions_match_the_model(tmp_path_factory, acls, principal, host, op, name):
    a = _authorizer(acls, str(tmp_path_factory.mktemp("acl")))
    assert a.authorize(principal, host, op, T, name) == _model(acls, principal, host, op, name)
