#!/usr/bin/env python3
"""Generate pybroker/net/protocol/messages.py from Kafka's message specifications.

Usage: python3 tools/gen_protocol.py [--specs DIR] [--out FILE] [--check]

Reads every ``*Request.json`` / ``*Response.json`` (plus the request and response header
specs) in ``../shared/kafka-message-specs`` relative to the repository, and writes a compact
Python table of the facts needed to interoperate: per API key the name, valid and flexible
versions, and for the request and the response the field tree (snake_case name, type,
version range, nullable versions, tag and tagged versions, default). Documentation texts,
comments, entity types and ``mapKey`` are left out on purpose (see the specs' SOURCE.md).

Struct types named by a field without inline ``fields`` are resolved from the file's
``commonStructs`` or from an inline definition elsewhere in the same file, and inlined, so
the codec never needs a name lookup. ``--check`` exits 1 when the committed file is stale.
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
DEFAULT_OUT = os.path.join(REPO, "pybroker", "net", "protocol", "messages.py")

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


RESERVED = {"APIS", "REQUEST_HEADER_FIELDS", "RESPONSE_HEADER_FIELDS"}


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
        self._collect(spec.get("fields", []))

    def _collect(self, fields: list) -> None:
        for f in fields:
            if "fields" in f:
                self.structs.setdefault(f["type"].removeprefix("[]"), f["fields"])
                self._collect(f["fields"])

    def field(self, f: dict) -> str:
        ftype = f["type"]
        base = ftype.removeprefix("[]")
        children = None
        if base not in PRIMITIVES:
            children = f.get("fields") or self.structs[base]
            ftype = "[]struct" if ftype.startswith("[]") else "struct"
        args = [repr(snake(f["name"])), repr(ftype), repr(parse_versions(f["versions"]))]
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


def generate(specs_dir: str) -> str:
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

    counting = Shared()
    render(requests, responses, headers, counting)
    shared = Shared(counting.seen)
    tables = render(requests, responses, headers, shared)
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
        '"""',
        "",
        "# ruff: noqa: E501",
        "from pybroker.net.protocol.schema import Api, F",
        "",
        *shared.definitions,
        tables,
    ]
    return "\n".join(out)


def render(requests: dict, responses: dict, headers: dict, shared: Shared) -> str:
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
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", default=DEFAULT_SPECS)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the output file differs from what would be generated")
    args = parser.parse_args(argv)
    text = generate(args.specs)
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            same = f.read() == text
        if not same:
            print(f"{args.out} is stale: run python3 tools/gen_protocol.py", file=sys.stderr)
        return 0 if same else 1
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
