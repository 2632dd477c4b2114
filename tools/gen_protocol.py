#!/usr/bin/env python3
"""Generate the protocol tables and types from Kafka's message specifications.

Usage: python3 tools/gen_protocol.py [--specs DIR] [--check]

Reads every ``*Request.json`` / ``*Response.json`` (plus the request and response header
specs) in ``../shared/kafka-message-specs`` relative to the repository, and writes a compact
Python table of the facts needed to interoperate: per API key the name, valid and flexible
versions, and for the request and the response the field tree (snake_case name, type,
version range, nullable versions, tag and tagged versions, default). Documentation texts,
comments, entity types and ``mapKey`` are left out on purpose (see the specs' SOURCE.md).

Struct types named by a field without inline ``fields`` are resolved from the file's
``commonStructs`` or from an inline definition elsewhere in the same file, and inlined, so
the codec never needs a name lookup.

From the same specs it writes ``pybroker/net/protocol/typed.py``: one ``TypedDict`` per
request, response and struct, so mypy checks the dicts handlers build and read (see
:class:`TypedDicts`), and ``csrc/pb_protocol.h``: the first flexible request version of
every API key (the native request header parser's table) and, for the APIs native code
encodes (:data:`NATIVE_APIS`), the versions, first flexible versions and each field's
versions and tag, so native code holds no protocol numbers of its own. ``--check`` exits 1
when a committed output is stale.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_SPECS = os.path.normpath(os.path.join(REPO, "..", "shared", "kafka-message-specs"))
MESSAGES_OUT = os.path.join("pybroker", "net", "protocol", "messages.py")
TYPES_OUT = os.path.join("pybroker", "net", "protocol", "typed.py")
HEADER_OUT = os.path.join("csrc", "pb_protocol.h")

# API keys whose messages native code parses or builds (pybroker/_native/wire.pyx):
# Produce and Fetch. Their versions, field versions and tags go into the C header.
NATIVE_APIS = (0, 1)

# Record formats ("type": "data") the broker reads and writes: the consumer protocol's
# subscription and assignment, the records of ``__consumer_offsets`` and those of
# ``__transaction_state``.
DATA_SPECS = ("ConsumerProtocolSubscription.json", "ConsumerProtocolAssignment.json",
              "group-coordinator/OffsetCommitKey.json", "group-coordinator/OffsetCommitValue.json",
              "group-coordinator/GroupMetadataKey.json", "group-coordinator/GroupMetadataValue.json",
              "transaction-coordinator/TransactionLogKey.json",
              "transaction-coordinator/TransactionLogValue.json")

# "N+" has no upper bound; the codec treats this as "every version".
UNBOUNDED = 0x7FFF

PRIMITIVES = {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
              "string", "uuid", "bytes", "records"}

_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake(name: str) -> str:
    return _SNAKE.sub("_", name).lower()


def load_spec(path: str) -> dict:
    """JSON with whole-line ``//`` comments (Kafka's dialect)."""
    with open(path, encoding="utf-8") as f:
        lines = [ln for ln in f if not ln.lstrip().startswith("//")]
    return json.loads("".join(lines))


def parse_versions(text: str | None) -> tuple[int, int] | None:
    """``"3+"`` -> (3, UNBOUNDED), ``"0-12"`` -> (0, 12), ``"5"`` -> (5, 5), none -> None."""
    if text is None or text == "none":
        return None
    text = text.strip()
    if text.endswith("+"):
        return (int(text[:-1]), UNBOUNDED)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def field_versions(f: dict) -> tuple[int, int] | None:
    """The versions a field exists in. A field that exists only as a tagged field may give
    only its tagged versions (``__transaction_state``'s value); Kafka's generator reads
    those as its versions too."""
    return parse_versions(f.get("versions", f.get("taggedVersions")))


def parse_default(ftype: str, raw):
    """The spec's default as a Python value; ``...`` means "the type's default"."""
    if raw is None:
        return ...
    if isinstance(raw, bool) or isinstance(raw, int):
        return raw
    text = str(raw).strip()
    if text == "null":
        return None
    if ftype == "bool":
        return text == "true"
    if ftype in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(text, 0)
    if ftype == "float64":
        return float(text)
    return text


def indent(text: str, pad: str) -> str:
    """``text`` with every line but the first indented by ``pad``."""
    return text.replace("\n", "\n" + pad)


RESERVED = {"APIS", "DATA", "REQUEST_HEADER_FIELDS", "RESPONSE_HEADER_FIELDS"}


class Shared:
    """Struct field lists that occur more than once (a common struct used twice, the same
    struct in several APIs) are written once, as module constants referenced by name.

    A first pass counts every rendered field list (``counts`` None); the second hoists
    those seen at least twice. Definitions come out children first, so each name is
    bound before it is used.
    """

    def __init__(self, counts: Counter | None = None) -> None:
        self.counts = counts
        self.seen: Counter = Counter()
        self.names: dict[str, str] = {}
        self.definitions: list[str] = []

    def use(self, struct_name: str, text: str) -> str:
        self.seen[text] += 1
        if self.counts is None or self.counts[text] < 2 or text.count("\n") < 3:
            return text
        name = self.names.get(text)
        if name is None:
            base = name = snake(struct_name).upper()
            taken = set(self.names.values()) | RESERVED
            n = 2
            while name in taken:
                name, n = f"{base}_{n}", n + 1
            self.names[text] = name
            self.definitions.append(f"{name} = {text}\n")
        return name


class Generator:
    def __init__(self, spec: dict, shared: Shared):
        self.shared = shared
        self.structs: dict[str, list] = {}
        for common in spec.get("commonStructs", []):
            self.structs[common["name"]] = common["fields"]
        self._collect_into(self.structs, spec.get("fields", []))

    @staticmethod
    def _collect_into(structs: dict[str, list], fields: list) -> None:
        """Every struct defined inline in ``fields``, by type name, into ``structs``."""
        for f in fields:
            if "fields" in f:
                structs.setdefault(f["type"].removeprefix("[]"), f["fields"])
                Generator._collect_into(structs, f["fields"])

    def field(self, f: dict) -> str:
        ftype = f["type"]
        base = ftype.removeprefix("[]")
        children = None
        if base not in PRIMITIVES:
            children = f.get("fields") or self.structs[base]
            ftype = "[]struct" if ftype.startswith("[]") else "struct"
        args = [repr(snake(f["name"])), repr(ftype), repr(field_versions(f))]
        nullable = parse_versions(f.get("nullableVersions"))
        if nullable is not None:
            args.append(f"nullable={nullable!r}")
        if "tag" in f:
            args.append(f"tag={int(f['tag'])}")
            args.append(f"tagged={parse_versions(f.get('taggedVersions'))!r}")
        default = parse_default(base, f.get("default"))
        if default is not ...:
            args.append(f"default={default!r}")
        if "flexibleVersions" in f:
            args.append(f"flexible={parse_versions(f['flexibleVersions'])!r}")
        if children is not None:
            args.append("fields=" + self.shared.use(base, self.fields(children)))
        return "F(" + ", ".join(args) + ")"

    def fields(self, fields: list) -> str:
        """The field list as a tuple expression, rendered at indent 0."""
        if not fields:
            return "()"
        return "(\n" + "".join(f"    {indent(self.field(f), '    ')},\n" for f in fields) + ")"


def first_flexible(spec: dict) -> int | None:
    rng = parse_versions(spec.get("flexibleVersions"))
    return None if rng is None else rng[0]


def load_specs(specs_dir: str) -> tuple[dict[int, dict], dict[int, dict], dict[str, dict]]:
    """(requests by API key, responses by API key, headers by name)."""
    requests: dict[int, dict] = {}
    responses: dict[int, dict] = {}
    headers: dict[str, dict] = {}
    for name in sorted(os.listdir(specs_dir)):
        if not name.endswith(".json"):
            continue
        spec = load_spec(os.path.join(specs_dir, name))
        if spec["type"] == "request":
            requests[spec["apiKey"]] = spec
        elif spec["type"] == "response":
            responses[spec["apiKey"]] = spec
        elif spec["type"] == "header":
            headers[spec["name"]] = spec
    return requests, responses, headers


def load_data_specs(specs_dir: str) -> dict[str, dict]:
    """The :data:`DATA_SPECS` by name."""
    specs = [load_spec(os.path.join(specs_dir, path)) for path in DATA_SPECS]
    return {spec["name"]: spec for spec in specs}


def generate(specs_dir: str) -> str:
    """The text of ``messages.py``."""
    requests, responses, headers = load_specs(specs_dir)
    data = load_data_specs(specs_dir)
    counting = Shared()
    render(requests, responses, headers, data, counting)
    shared = Shared(counting.seen)
    tables = render(requests, responses, headers, data, shared)
    out = [
        '"""Kafka message layouts: GENERATED by tools/gen_protocol.py, do not edit.',
        "",
        "Regenerate with ``python3 tools/gen_protocol.py`` (reads ../shared/kafka-message-specs).",
        "Each API: Api(name, (min, max) valid versions, first flexible request version,",
        "first flexible response version, request fields, response fields). Each field:",
        "F(snake_name, type, (first, last) versions, nullable=(first, last), tag=N,",
        "tagged=(first, last), default=value, flexible=..., fields=(children)); a last",
        f"version of {UNBOUNDED:#x} means open-ended, a missing default means the type's default.",
        "Field lists that occur more than once are the upper-case constants defined first.",
        "DATA: record formats by name, each Data((min, max) valid versions, first flexible",
        "version, fields).",
        '"""',
        "",
        "# ruff: noqa: E501",
        "from pybroker.net.protocol.schema import Api, Data, F",
        "",
        *shared.definitions,
        tables,
    ]
    return "\n".join(out)


def render(requests: dict, responses: dict, headers: dict, data: dict[str, dict],
           shared: Shared) -> str:
    out = []
    for header in ("RequestHeader", "ResponseHeader"):
        spec = headers[header]
        var = snake(header).upper() + "_FIELDS"
        out.append(f"{var} = {Generator(spec, shared).fields(spec['fields'])}")
        out.append("")
    out.append("APIS = {")
    for key in sorted(requests):
        req, resp = requests[key], responses[key]
        valid = parse_versions(req["validVersions"])
        if parse_versions(resp["validVersions"]) != valid:
            raise SystemExit(f"api {key}: request and response versions differ")
        name = req["name"].removesuffix("Request")
        request = indent(Generator(req, shared).fields(req["fields"]), " " * 8)
        response = indent(Generator(resp, shared).fields(resp["fields"]), " " * 8)
        out.append(f"    {key}: Api(")
        out.append(f"        {name!r}, {valid!r}, {first_flexible(req)!r}, {first_flexible(resp)!r},")
        out.append(f"        request={request},")
        out.append(f"        response={response},")
        out.append("    ),")
    out.append("}")
    out.append("")
    out.append("DATA = {")
    for name, spec in data.items():
        valid = parse_versions(spec["validVersions"])
        fields = indent(Generator(spec, shared).fields(spec["fields"]), " " * 8)
        out.append(f"    {name!r}: Data(")
        out.append(f"        {valid!r}, {first_flexible(spec)!r},")
        out.append(f"        fields={fields},")
        out.append("    ),")
    out.append("}")
    return "\n".join(out) + "\n"


PY_TYPES = {"bool": "bool", "int8": "int", "int16": "int", "uint16": "int", "int32": "int",
            "uint32": "int", "int64": "int", "float64": "float", "string": "str",
            "uuid": "uuid.UUID", "bytes": "bytes", "records": "Records"}


def versions_note(rng: tuple[int, int] | None, valid: tuple[int, int]) -> str:
    """``"v3+"``, ``"v0-4"``, ``"v7"``, or ``""`` when the field is in every valid version."""
    if rng is None:
        return "in no version"
    lo, hi = rng
    if lo <= valid[0] and hi >= valid[1]:
        return ""
    if hi >= valid[1]:
        return f"v{lo}+"
    return f"v{lo}" if lo == hi else f"v{lo}-{hi}"


class TypedDicts:
    """One ``TypedDict`` per message and per struct, for mypy.

    A key is required when the encoder requires it in every version: the field is in every
    valid version, not tagged, and has no default in the spec. Any other key is
    ``NotRequired`` (its versions are the comment; the encoder requires it at the versions
    that have it unless the spec gives a default, and tagged fields are sent only when
    they differ from their default). The
    type of a field is the union over its versions (``| None`` when nullable in any).
    A struct is named by the spec, prefixed with the message name unless it starts with
    it already (``MetadataResponseTopic``; ``ProduceRequestTopicProduceData``), an API
    name it starts with giving way to the message name (``ListOffsetsTopic`` of
    ``ListOffsetsRequest`` is ``ListOffsetsRequestTopic``), so names are unique although
    specs reuse struct names (``TopicData``) with other fields.
    """

    def __init__(self) -> None:
        self.classes: list[str] = []
        self.names: set[str] = set()

    def message(self, spec: dict) -> None:
        structs = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
        Generator._collect_into(structs, spec.get("fields", []))
        valid = parse_versions(spec["validVersions"])
        assert valid is not None
        self._struct(spec["name"], spec["name"], spec["fields"], structs, valid)

    def _type_name(self, message: str, struct: str) -> str:
        if struct.startswith(message):
            return struct
        api = message.removesuffix("Request").removesuffix("Response")
        rest = struct.removeprefix(api)
        if rest != struct and rest[:1].isupper():
            return message + rest  # ListOffsetsTopic of ListOffsetsRequest
        return message + struct

    def _struct(self, name: str, message: str, fields: list, structs: dict[str, list],
                valid: tuple[int, int]) -> None:
        if name in self.names:
            raise SystemExit(f"two structs named {name}")
        self.names.add(name)
        lines = [f"class {name}(TypedDict):"]
        nested: list[tuple[str, list]] = []
        for f in fields:
            ftype = f["type"]
            base = ftype.removeprefix("[]")
            if base in PRIMITIVES:
                py = PY_TYPES[base]
            else:
                py = self._type_name(message, base)
                if py not in self.names and all(py != n for n, _ in nested):
                    nested.append((py, f.get("fields") or structs[base]))
            if ftype.startswith("[]"):
                py = f"list[{py}]"
            if parse_versions(f.get("nullableVersions")) is not None:
                py += " | None"
            notes = [versions_note(field_versions(f), valid)]
            if "tag" in f:
                notes.append(f"tag {f['tag']}")
            if notes[0] or "tag" in f or "default" in f:
                py = f"NotRequired[{py}]"
            note = ", ".join(n for n in notes if n)
            lines.append(f"    {snake(f['name'])}: {py}" + (f"  # {note}" if note else ""))
        if not fields:
            lines.append("    pass")
        self.classes.append("\n".join(lines) + "\n")
        for child, child_fields in nested:
            if child not in self.names:
                self._struct(child, message, child_fields, structs, valid)


def generate_types(specs_dir: str) -> str:
    """The text of ``typed.py``."""
    requests, responses, _ = load_specs(specs_dir)
    dicts = TypedDicts()
    for key in sorted(requests):
        dicts.message(requests[key])
        dicts.message(responses[key])
    for spec in load_data_specs(specs_dir).values():
        dicts.message(spec)
    out = [
        '"""Typed Kafka messages: GENERATED by tools/gen_protocol.py, do not edit.',
        "",
        "Regenerate with ``python3 tools/gen_protocol.py`` (reads ../shared/kafka-message-specs).",
        "One TypedDict per request, response, record format and struct of ``messages.py``: the",
        "codec decodes into and encodes from plain dicts of these shapes, and mypy checks them.",
        "A key is required where the encoder requires it in every version (no default in the",
        "spec, not tagged); a comment gives the versions of a field that is not in every one.",
        "A missing required key is ``MissingFieldError`` when encoded, a key the struct has in",
        "no version ``UnknownFieldError``; mypy reports both where a dict is typed.",
        '"""',
        "",
        "# ruff: noqa: E501",
        "from __future__ import annotations",
        "",
        "import uuid",
        "from typing import NotRequired, TypedDict",
        "",
        "from pybroker.net.protocol.schema import Records",
        "",
        "",
        "\n\n".join(dicts.classes),
    ]
    return "\n".join(out)


def c_field_defines(prefix: str, fields: list, structs: dict[str, list]) -> list[str]:
    """``#define``s of each field's first (and, when bounded, last) version and tag, named
    by the field's path: ``PB_FETCH_RESPONSE_RESPONSES_PARTITIONS_LOG_START_OFFSET_FIRST``."""
    out = []
    for f in fields:
        name = f"{prefix}_{snake(f['name']).upper()}"
        rng = field_versions(f)
        if rng is not None:
            out.append(f"#define {name}_FIRST {rng[0]}")
            if rng[1] != UNBOUNDED:
                out.append(f"#define {name}_LAST {rng[1]}")
        if "tag" in f:
            out.append(f"#define {name}_TAG {int(f['tag'])}")
        base = f["type"].removeprefix("[]")
        if base not in PRIMITIVES:
            out += c_field_defines(name, f.get("fields") or structs[base], structs)
    return out


def generate_header(specs_dir: str) -> str:
    """The text of ``csrc/pb_protocol.h``."""
    requests, responses, _ = load_specs(specs_dir)
    limit = max(requests) + 1
    firsts = [first_flexible(requests[key]) if key in requests else None
              for key in range(limit)]
    table = ", ".join("PB_NEVER_FLEXIBLE" if v is None else str(v) for v in firsts)
    out = [
        "/* Kafka protocol versions: GENERATED by tools/gen_protocol.py, do not edit.",
        " * Regenerate with `python3 tools/gen_protocol.py` (reads ../shared/kafka-message-specs).",
        " * Versions and tags of the messages native code reads and writes, and the first",
        " * flexible request version of every API key (request header v2 from there on). */",
        "#ifndef PB_PROTOCOL_H",
        "#define PB_PROTOCOL_H",
        "",
        "#include <stdint.h>",
        "",
        "#define PB_NEVER_FLEXIBLE 0x7FFF",
        "/* one past the highest API key in the specs */",
        f"#define PB_API_KEY_LIMIT {limit}",
        "/* by API key: PB_NEVER_FLEXIBLE where the API has no flexible version or no spec */",
        "static const int16_t pb_first_flexible_request[PB_API_KEY_LIMIT] = {",
        *[f"    {line.strip()}" for line in wrap(table + ",", 88)],
        "};",
    ]
    for key in NATIVE_APIS:
        for spec in (requests[key], responses[key]):
            structs = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
            Generator._collect_into(structs, spec["fields"])
            prefix = "PB_" + snake(spec["name"]).upper()
            api = prefix.rsplit("_", 1)[0]
            valid = parse_versions(spec["validVersions"])
            assert valid is not None
            out += ["", f"/* {spec['name']} (API key {key}) */"]
            if spec["type"] == "request":
                out.append(f"#define {api}_MIN_VERSION {valid[0]}")
                out.append(f"#define {api}_MAX_VERSION {valid[1]}")
            flexible = first_flexible(spec)
            out.append(f"#define {prefix}_FIRST_FLEXIBLE "
                       f"{'PB_NEVER_FLEXIBLE' if flexible is None else flexible}")
            out += c_field_defines(prefix, spec["fields"], structs)
    out += ["", "#endif", ""]
    return "\n".join(out)


def wrap(text: str, width: int) -> list[str]:
    """``text`` cut at spaces into lines of at most ``width`` characters."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line]


def outputs(specs_dir: str) -> dict[str, str]:
    """Every generated file, by its path in the repository."""
    return {MESSAGES_OUT: generate(specs_dir), TYPES_OUT: generate_types(specs_dir),
            HEADER_OUT: generate_header(specs_dir)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", default=DEFAULT_SPECS)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if an output file differs from what would be generated")
    args = parser.parse_args(argv)
    stale = 0
    for relpath, text in outputs(args.specs).items():
        path = os.path.join(REPO, relpath)
        if args.check:
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    print(f"{relpath} is stale: run python3 tools/gen_protocol.py",
                          file=sys.stderr)
                    stale = 1
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return stale


if __name__ == "__main__":
    sys.exit(main())
