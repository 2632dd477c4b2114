"""Generic Kafka request/response codec driven by the generated message table.

Wire format (https://kafka.apache.org/protocol, all integers big-endian):

    frame           := size:int32 header body          (size counts header + body)
    request header  v0: api_key:int16 api_version:int16 correlation_id:int32
                    v1: v0 + client_id:nullable_string (always int16-length, never compact)
                    v2: v1 + tagged_fields
    response header v0: correlation_id:int32      v1: v0 + tagged_fields
    string          := int16 length (-1 null) + utf-8   | compact: uvarint(length+1), 0 null
    bytes, records  := int32 length (-1 null) + data    | compact: uvarint(length+1), 0 null
    array           := int32 count (-1 null) + items    | compact: uvarint(count+1), 0 null
    nullable struct := int8 (-1 null, 1 present) + struct
    tagged_fields   := uvarint count, then per field uvarint tag, uvarint size, value

Flexible versions (``flexibleVersions`` of each API) use the compact forms and end every
struct with tagged fields. Request header v2 goes with flexible request versions (but
ControlledShutdown v0 uses v0); response header v1 with flexible responses, except
ApiVersions, always v0 so a client can read it whatever version it asked (KIP-511).

Decoded bodies are dicts with snake_case keys; every field of the struct is present (fields
absent from the version take their defaults), arrays of structs are lists of dicts,
``records`` fields are memoryview slices of the caller's buffer (no copy), uuids are
``uuid.UUID``. Malformed input raises ``InvalidRequestError``; a read never goes past the end
of the buffer given, so callers pass exactly one frame.

Encoding takes the same dicts (``typed.py`` has their types, for mypy). A field of the
version being written that the spec gives no default must be in the dict, else
``MissingFieldError``; fields with a spec default, tagged fields and fields of other
versions may be left out. A key that is no field of its struct in any version raises
``UnknownFieldError``. Both name the message, version, struct and key:
``{"error_cod": 3}`` must not reach the client as success, and neither may a response
that forgot its error code. ``response_defaults`` is the explicit way to start from
defaults. A ``records`` value may be a
bytes-like object, a ``FileRegion``, or a list of both: when any region is present the
encoder returns a list of segments (bytes and FileRegions) for sendfile, else one bytes.

Why closures per (message, version): the per-field type, nullability and flexibility
decisions are made once when a plan is compiled (lazily, cached), so decoding a request is
one call per field with no branching on the schema.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from pybroker._native.reqheader import parse_request_header, request_header_version
from pybroker._native.wire import read_uvarint
from pybroker.errors import InvalidRequestError, UnsupportedVersionError
from pybroker.file_region import FileRegion
from pybroker.net.protocol.schema import TYPE_DEFAULT, F, in_range
from pybroker.net.protocol.table import APIS, DATA

__all__ = [
    "RequestHeader", "read_request_header", "parse_request_header", "decode_request", "encode_response",
    "encode_request", "read_response_header", "decode_response", "supported_versions",
    "request_header_version", "response_header_version", "api_name", "ZERO_UUID",
    "UnknownFieldError", "MissingFieldError", "response_defaults", "with_defaults", "encode_data", "decode_data",
]

API_VERSIONS_KEY = 18
ZERO_UUID = uuid.UUID(int=0)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

Segments = list  # list[bytes | FileRegion]


class UnknownFieldError(ValueError):
    """A dict to encode has a key its struct does not have in any version: a bug of the
    code that built it (a misspelt field), never of the peer."""


class MissingFieldError(ValueError):
    """A dict to encode lacks a field its version needs and the spec gives no default
    for: a bug of the code that built it, never of the peer."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_size: int  # the body starts at this offset of the frame


# --------------------------------------------------------------------------- reading


class _Reader:
    """A bounded cursor over one frame; every read checks the bound."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: memoryview, pos: int, end: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end

    def take(self, n: int) -> int:
        p = self.pos
        q = p + n
        if n < 0 or q > self.end:
            raise InvalidRequestError(f"truncated: need {n} bytes at {p}, frame ends at {self.end}")
        self.pos = q
        return p

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.buf, self.pos, self.end)
        return value

    def count(self, n: int) -> int:
        """An array count or length, which can never exceed what is left of the frame."""
        if n > self.end - self.pos:
            raise InvalidRequestError(f"length {n} exceeds the {self.end - self.pos} bytes left")
        return n


def _fixed(st: struct.Struct) -> Callable[[_Reader], Any]:
    size, unpack = st.size, st.unpack_from

    def read(r: _Reader) -> Any:
        return unpack(r.buf, r.take(size))[0]
    return read


def _read_bool(r: _Reader) -> bool:
    return r.buf[r.take(1)] != 0


def _read_uuid(r: _Reader) -> uuid.UUID:
    p = r.take(16)
    return uuid.UUID(bytes=bytes(r.buf[p:p + 16]))


def _length_reader(flexible: bool, wide: bool) -> Callable[[_Reader], int]:
    """Reads a length or count; -1 means null."""
    if flexible:
        def read(r: _Reader) -> int:
            return r.count(r.uvarint() - 1)
        return read
    st = _I32 if wide else _I16

    def read_fixed(r: _Reader) -> int:
        n = st.unpack_from(r.buf, r.take(st.size))[0]
        if n < -1:
            raise InvalidRequestError(f"negative length {n}")
        return r.count(n)
    return read_fixed


def _null_check(name: str, nullable: bool) -> Callable[[], None]:
    def null() -> None:
        if not nullable:
            raise InvalidRequestError(f"null for non-nullable field {name}")
        return None
    return null


def _string_reader(name: str, flexible: bool, nullable: bool) -> Callable[[_Reader], Any]:
    length, null = _length_reader(flexible, False), _null_check(name, nullable)

    def read(r: _Reader) -> str | None:
        n = length(r)
        if n < 0:
            return null()
        p = r.take(n)
        try:
            return str(r.buf[p:p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise InvalidRequestError(f"field {name}: invalid utf-8") from e
    return read


def _bytes_reader(name: str, flexible: bool, nullable: bool, view: bool) -> Callable:
    length, null = _length_reader(flexible, True), _null_check(name, nullable)

    def read(r: _Reader) -> Any:
        n = length(r)
        if n < 0:
            return null()
        p = r.take(n)
        # records stay a view of the receive buffer (zero copy); small bytes are copied so
        # handlers may keep them after the buffer is reused.
        return r.buf[p:p + n] if view else bytes(r.buf[p:p + n])
    return read


_FIXED_READERS = {
    "int8": _fixed(_I8), "int16": _fixed(_I16), "uint16": _fixed(_U16),
    "int32": _fixed(_I32), "uint32": _fixed(_U32), "int64": _fixed(_I64),
    "float64": _fixed(_F64), "bool": _read_bool, "uuid": _read_uuid,
}


def _array_reader(name: str, flexible: bool, nullable: bool, item: Callable) -> Callable:
    length, null = _length_reader(flexible, True), _null_check(name, nullable)

    def read(r: _Reader) -> list | None:
        n = length(r)
        if n < 0:
            return null()
        return [item(r) for _ in range(n)]
    return read


def _nullable_struct_reader(item: Callable) -> Callable:
    def read(r: _Reader) -> dict | None:
        if _I8.unpack_from(r.buf, r.take(1))[0] < 0:
            return None
        return item(r)
    return read


# --------------------------------------------------------------------------- writing


class _Writer:
    """Output buffer; FileRegions split it into segments sent with sendfile."""

    __slots__ = ("buf", "segments", "size")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.segments: list | None = None
        self.size = 0  # bytes already moved to segments

    def uvarint(self, n: int) -> None:
        buf = self.buf
        while n > 0x7F:
            buf.append((n & 0x7F) | 0x80)
            n >>= 7
        buf.append(n)

    def region(self, region: FileRegion) -> None:
        if self.segments is None:
            self.segments = []
        if self.buf:
            self.segments.append(bytes(self.buf))
            self.size += len(self.buf)
            self.buf = bytearray()
        self.segments.append(region)
        self.size += region.length

    def finish(self) -> bytes | Segments:
        """The frame with its size prefix filled in (the first 4 bytes were reserved)."""
        if self.segments is None:
            _I32.pack_into(self.buf, 0, len(self.buf) - 4)
            return bytes(self.buf)
        if self.buf:
            self.segments.append(bytes(self.buf))
            self.size += len(self.buf)
        first = self.segments[0]
        self.segments[0] = _I32.pack(self.size - 4) + first[4:]
        return self.segments


def _fixed_writer(st: struct.Struct) -> Callable[[_Writer, Any], None]:
    pack = st.pack

    def write(w: _Writer, v: Any) -> None:
        w.buf += pack(v)
    return write


def _write_bool(w: _Writer, v: Any) -> None:
    w.buf.append(1 if v else 0)


def _write_uuid(w: _Writer, v: Any) -> None:
    w.buf += v.bytes if isinstance(v, uuid.UUID) else bytes(v)


_FIXED_WRITERS = {
    "int8": _fixed_writer(_I8), "int16": _fixed_writer(_I16), "uint16": _fixed_writer(_U16),
    "int32": _fixed_writer(_I32), "uint32": _fixed_writer(_U32), "int64": _fixed_writer(_I64),
    "float64": _fixed_writer(_F64), "bool": _write_bool, "uuid": _write_uuid,
}


def _length_writer(flexible: bool, wide: bool) -> Callable[[_Writer, int], None]:
    if flexible:
        def write(w: _Writer, n: int) -> None:
            w.uvarint(n + 1)
        return write
    pack = (_I32 if wide else _I16).pack

    def write_fixed(w: _Writer, n: int) -> None:
        w.buf += pack(n)
    return write_fixed


def _null_writer(name: str, nullable: bool, length: Callable) -> Callable[[_Writer], None]:
    def write(w: _Writer) -> None:
        if not nullable:
            raise ValueError(f"None for non-nullable field {name}")
        length(w, -1)
    return write


def _string_writer(name: str, flexible: bool, nullable: bool) -> Callable:
    length = _length_writer(flexible, False)
    null = _null_writer(name, nullable, length)

    def write(w: _Writer, v: Any) -> None:
        if v is None:
            return null(w)
        data = v.encode("utf-8")
        length(w, len(data))
        w.buf += data
    return write


_write_client_id = _string_writer("client_id", False, True)


def _bytes_writer(name: str, flexible: bool, nullable: bool) -> Callable:
    length = _length_writer(flexible, True)
    null = _null_writer(name, nullable, length)

    def write(w: _Writer, v: Any) -> None:
        if v is None:
            return null(w)
        if isinstance(v, FileRegion):
            v = [v]
        if isinstance(v, (list, tuple)):
            length(w, sum(p.length if isinstance(p, FileRegion) else len(p) for p in v))
            for p in v:
                if isinstance(p, FileRegion):
                    w.region(p)
                else:
                    w.buf += p
            return None
        length(w, memoryview(v).nbytes)
        w.buf += v
    return write


def _array_writer(name: str, flexible: bool, nullable: bool, item: Callable) -> Callable:
    length = _length_writer(flexible, True)
    null = _null_writer(name, nullable, length)

    def write(w: _Writer, v: Any) -> None:
        if v is None:
            return null(w)
        length(w, len(v))
        for x in v:
            item(w, x)
    return write


def _nullable_struct_writer(item: Callable) -> Callable:
    def write(w: _Writer, v: Any) -> None:
        if v is None:
            w.buf.append(0xFF)
            return
        w.buf.append(1)
        item(w, v)
    return write


# --------------------------------------------------------------------------- plans


def _type_default(f: F) -> Any:
    """A fresh default value for a field (lists and dicts are never shared)."""
    if f.default is not TYPE_DEFAULT:
        return f.default  # explicit defaults are immutable scalars or None
    t = f.type
    if t.startswith("[]"):
        return []
    if t == "struct":
        return {c.name: _type_default(c) for c in f.fields}
    return _SCALAR_DEFAULTS.get(t, 0)


_SCALAR_DEFAULTS = {"bool": False, "float64": 0.0, "uuid": ZERO_UUID, "string": "",
                    "bytes": b"", "records": None}


_FIXED_FORMATS = {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
                  "int64": "q", "float64": "d", "bool": "?"}
_IMMUTABLE = (int, float, str, bytes, uuid.UUID, type(None))

Step = tuple[Callable[[_Reader, dict], None], Callable[[_Writer, dict], None]]


def _run_step(fields: list[F]) -> Step:
    """Consecutive fixed-width fields as one struct format: one unpack/pack for the run
    (a Fetch partition's six integers cost one call, not six)."""
    names = tuple(f.name for f in fields)
    pairs = tuple((f.name, _type_default(f)) for f in fields)
    st = struct.Struct(">" + "".join(_FIXED_FORMATS[f.type] for f in fields))
    size, unpack, pack = st.size, st.unpack_from, st.pack

    def read(r: _Reader, d: dict) -> None:
        d.update(zip(names, unpack(r.buf, r.take(size)), strict=True))

    def write(w: _Writer, d: dict) -> None:
        get = d.get
        try:
            w.buf += pack(*[get(name, default) for name, default in pairs])
        except struct.error as e:
            raise ValueError(f"fields {names}: {e}") from e
    return read, write


def _field_step(f: F, version: int, flexible: bool, where: str) -> Step:
    read_value, write_value = _field_codec(f, version, flexible, where)
    name = f.name

    def read(r: _Reader, d: dict) -> None:
        d[name] = read_value(r)

    def write(w: _Writer, d: dict) -> None:
        v = d.get(name, TYPE_DEFAULT)
        if v is TYPE_DEFAULT:
            v = _type_default(f)
        try:
            write_value(w, v)
        except (struct.error, TypeError, AttributeError) as e:
            raise ValueError(f"field {name}={v!r}: {e}") from e
    return read, write


class _Plan:
    """One struct at one version: how to read and write each field, in wire order.

    ``where`` names it in errors: ``MetadataResponse v12`` for a message,
    ``MetadataResponse v12, topics[].partitions[]`` for a struct inside one.
    """

    __slots__ = ("steps", "tagged", "by_tag", "defaults", "fresh", "flexible", "known",
                 "required", "where")

    def __init__(self, fields: tuple[F, ...], version: int, flexible: bool, where: str) -> None:
        self.flexible = flexible
        self.where = where
        # The fields of every version: one dict serves all versions of a handler.
        self.known = frozenset(f.name for f in fields)
        # Fields of this version that the spec gives no default: the caller must say them.
        self.required = frozenset(
            f.name for f in fields
            if in_range(f.versions, version) and f.default is TYPE_DEFAULT
            and not (f.tag is not None and in_range(f.tagged, version)))
        self.steps: list[Step] = []
        self.tagged: list[tuple[int, str, Callable, Callable, F]] = []
        missing: list[F] = []  # fields not read at this version: filled with defaults
        run: list[F] = []
        for f in fields:
            is_tagged = f.tag is not None and in_range(f.tagged, version)
            flex = flexible if f.flexible is TYPE_DEFAULT else in_range(f.flexible, version)
            if f.tag is not None and is_tagged and flexible:
                read, write = _field_codec(f, version, flex, where)
                self.tagged.append((f.tag, f.name, read, write, f))
                missing.append(f)  # default first, overwritten when the tag is present
            elif in_range(f.versions, version) and not is_tagged:
                if f.type in _FIXED_FORMATS:
                    run.append(f)
                    continue
                if run:
                    self.steps.append(_run_step(run))
                    run = []
                self.steps.append(_field_step(f, version, flex, where))
            else:
                missing.append(f)
        if run:
            self.steps.append(_run_step(run))
        self.tagged.sort(key=lambda t: t[0])
        self.by_tag = {t[0]: t for t in self.tagged}
        # Immutable defaults are copied in one dict copy; lists and dicts made per message.
        self.defaults = {f.name: _type_default(f) for f in missing
                         if isinstance(_type_default(f), _IMMUTABLE)}
        self.fresh = [f for f in missing if f.name not in self.defaults]

    def _unknown(self, d: dict) -> UnknownFieldError:
        unknown = ", ".join(repr(k) for k in d if k not in self.known)
        return UnknownFieldError(f"{self.where}: no field {unknown}; its fields are "
                                 f"{', '.join(sorted(self.known))}")

    def _missing(self, d: dict) -> MissingFieldError:
        missing = ", ".join(sorted(self.required - d.keys()))
        return MissingFieldError(f"{self.where}: missing {missing} (no default in the spec)")

    def read(self, r: _Reader) -> dict:
        d = self.defaults.copy()
        for f in self.fresh:
            d[f.name] = _type_default(f)
        for read, _ in self.steps:
            read(r, d)
        if self.flexible:
            for _ in range(r.uvarint()):
                tag = r.uvarint()
                size = r.count(r.uvarint())
                start = r.pos
                entry = self.by_tag.get(tag)
                if entry is not None:
                    end, r.end = r.end, start + size
                    try:
                        d[entry[1]] = entry[2](r)
                    finally:
                        r.end = end
                r.pos = start + size  # unknown tags are skipped, as Kafka does
        return d

    def write(self, w: _Writer, d: dict) -> None:
        # One C-level pass over the keys (their hashes are cached), ~25 ns a key: 6-10% of
        # encoding a response here (bench/micro/test_bench_codec.py). The Produce and Fetch
        # responses of the hot path are built natively from tuples and need no check.
        keys = d.keys()
        if not (keys <= self.known and keys >= self.required):
            raise self._unknown(d) if not keys <= self.known else self._missing(d)
        for _, write in self.steps:
            write(w, d)
        if not self.flexible:
            return
        present = []
        for tag, name, _, write_value, f in self.tagged:
            v = d.get(name, TYPE_DEFAULT)
            if v is TYPE_DEFAULT or v == _type_default(f):
                continue  # tagged fields are sent only when they differ from the default
            sub = _Writer()
            write_value(sub, v)
            present.append((tag, sub.buf))
        w.uvarint(len(present))
        for tag, data in present:
            w.uvarint(tag)
            w.uvarint(len(data))
            w.buf += data


def _field_codec(f: F, version: int, flexible: bool, where: str) -> tuple[Callable, Callable]:
    nullable = in_range(f.nullable, version)
    t = f.type
    if t in ("struct", "[]struct"):
        path = f.name + ("[]" if t == "[]struct" else "")
        inner = f"{where}.{path}" if ", " in where else f"{where}, {path}"
        plan = _Plan(f.fields, version, flexible, inner)
        read, write = plan.read, plan.write
        if t == "[]struct":
            return (_array_reader(f.name, flexible, nullable, read),
                    _array_writer(f.name, flexible, nullable, write))
        if nullable:
            return _nullable_struct_reader(read), _nullable_struct_writer(write)
        return read, write
    if t.startswith("[]"):
        item = F(f.name, t[2:], f.versions)
        read, write = _field_codec(item, version, flexible, where)
        return (_array_reader(f.name, flexible, nullable, read),
                _array_writer(f.name, flexible, nullable, write))
    if t == "string":
        return _string_reader(f.name, flexible, nullable), _string_writer(f.name, flexible, nullable)
    if t in ("bytes", "records"):
        return (_bytes_reader(f.name, flexible, nullable, t == "records"),
                _bytes_writer(f.name, flexible, nullable))
    return _FIXED_READERS[t], _FIXED_WRITERS[t]


_PLANS: dict[tuple[int, int, bool], _Plan] = {}


def _plan(api_key: int, api_version: int, response: bool) -> _Plan:
    key = (api_key, api_version, response)
    plan = _PLANS.get(key)
    if plan is None:
        api = APIS.get(api_key)
        if api is None:
            raise InvalidRequestError(f"unknown api key {api_key}")
        if not api.versions[0] <= api_version <= api.versions[1]:
            raise UnsupportedVersionError(f"{api.name} v{api_version} is not supported")
        first_flex = api.response_flexible if response else api.request_flexible
        flexible = first_flex is not None and api_version >= first_flex
        where = f"{api.name}{'Response' if response else 'Request'} v{api_version}"
        plan = _Plan(api.response if response else api.request, api_version, flexible, where)
        _PLANS[key] = plan
    return plan


_DATA_PLANS: dict[tuple[str, int], _Plan] = {}


def _data_plan(name: str, version: int) -> _Plan:
    plan = _DATA_PLANS.get((name, version))
    if plan is None:
        data = DATA[name]
        if not data.versions[0] <= version <= data.versions[1]:
            raise UnsupportedVersionError(f"{name} v{version} is not supported")
        flexible = data.flexible is not None and version >= data.flexible
        plan = _DATA_PLANS[(name, version)] = _Plan(data.fields, version, flexible,
                                                    f"{name} v{version}")
    return plan


# --------------------------------------------------------------------------- public API


def api_name(api_key: int) -> str | None:
    api = APIS.get(api_key)
    return None if api is None else api.name


def supported_versions() -> list[tuple[int, int, int]]:
    """(api_key, min_version, max_version) for every API in the specs, by api key."""
    return [(key, api.versions[0], api.versions[1]) for key, api in sorted(APIS.items())]


def _is_known_version(api_key: int, api_version: int) -> bool:
    api = APIS.get(api_key)
    return api is not None and api.versions[0] <= api_version <= api.versions[1]


def _is_flexible(api_key: int, api_version: int, response: bool) -> bool:
    """Whether the version is flexible; a version newer than the table's counts as flexible
    when the API has flexible versions, as Kafka's generated ``requestHeaderVersion`` does."""
    api = APIS.get(api_key)
    if api is None:
        return False
    first = api.response_flexible if response else api.request_flexible
    return first is not None and api_version >= first


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0  # KIP-511: clients parse the ApiVersions response header as v0
    return 1 if _is_flexible(api_key, api_version, True) else 0


def _view(buf: Any) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def read_request_header(buf: Any) -> RequestHeader:
    """Parse the request header at the start of ``buf`` (one frame, without its size).

    Unknown API keys parse as header v1, unknown versions of known APIs by the API's
    flexible versions, so the server can still answer with the right correlation id (an
    ApiVersions request of an unknown version included). The parser is native
    (``pybroker._native.reqheader``); the broker calls it directly for the plain tuple.
    """
    return RequestHeader._make(parse_request_header(buf))


def _skip_tagged(r: _Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.take(r.count(r.uvarint()))


def _decode(api_key: int, api_version: int, buf: Any, offset: int, response: bool) -> dict:
    plan = _plan(api_key, api_version, response)
    mv = _view(buf)
    if not 0 <= offset <= len(mv):
        raise InvalidRequestError(f"body offset {offset} outside a frame of {len(mv)} bytes")
    r = _Reader(mv, offset, len(mv))
    try:
        return plan.read(r)
    except (struct.error, IndexError, ValueError, OverflowError) as e:
        # Belt and braces: every read is bounds-checked, but no parse error may leak out
        # as anything but INVALID_REQUEST.
        raise InvalidRequestError(f"malformed {api_name(api_key)} v{api_version}: {e}") from e


def decode_request(api_key: int, api_version: int, buf: Any, offset: int = 0) -> dict:
    """Decode a request body starting at ``offset`` of ``buf`` (one frame, no size prefix).

    Raises ``InvalidRequestError`` for an unknown key or malformed body and
    ``UnsupportedVersionError`` for a version outside the spec's range.
    """
    return _decode(api_key, api_version, buf, offset, False)


def decode_response(api_key: int, api_version: int, buf: Any, offset: int = 0) -> dict:
    """Decode a response body (``offset`` from ``read_response_header``)."""
    return _decode(api_key, api_version, buf, offset, True)


def read_response_header(api_key: int, api_version: int, buf: Any) -> tuple[int, int]:
    """(correlation_id, header_size) of a response frame given without its size prefix."""
    mv = _view(buf)
    r = _Reader(mv, 0, len(mv))
    correlation_id = _I32.unpack_from(r.buf, r.take(4))[0]
    if response_header_version(api_key, api_version) >= 1:
        _skip_tagged(r)
    return correlation_id, r.pos


def encode_response(api_key: int, api_version: int, correlation_id: int,
                    body: dict) -> bytes | Segments:
    """The whole response frame, size prefix included.

    Returns bytes, or a list of bytes and ``FileRegion`` segments when a ``records`` field
    holds file regions (their lengths are counted in the size prefix).

    An ApiVersions request of a version this table does not know is answered with a v0
    body (KIP-511; Kafka's ``RequestContext.apiVersion()`` does the same), which every
    client can parse: put UNSUPPORTED_VERSION and the supported ranges in ``body``.
    """
    if api_key == API_VERSIONS_KEY and not _is_known_version(api_key, api_version):
        api_version = 0
    plan = _plan(api_key, api_version, True)
    w = _Writer()
    w.buf += _I32.pack(0)  # size, filled in by finish()
    w.buf += _I32.pack(correlation_id)
    if response_header_version(api_key, api_version) >= 1:
        w.buf.append(0)  # no header tagged fields
    plan.write(w, body)
    return w.finish()


def response_defaults(api_key: int, api_version: int) -> dict:
    """A response of ``api_version`` with every field at its default (arrays empty): the
    start of an answer that knows only its error, such as a whole-request error. Stating
    this is what lets the encoder refuse a response that forgot a field."""
    _plan(api_key, api_version, True)  # the version must be one of the spec's
    return {f.name: _type_default(f) for f in APIS[api_key].response}


def error_response(api_key: int, api_version: int, code: int, message: str) -> dict | None:
    """A whole-request error: ``response_defaults`` with ``code`` in the top-level
    ``error_code`` (and ``message`` where the version has ``error_message``); None for a
    response of this version without a top-level error code. Raises InvalidRequestError
    or UnsupportedVersionError for an API or version the table does not know."""
    api = APIS.get(api_key)
    if api is None:
        raise InvalidRequestError(f"unknown api key {api_key}")
    fields = {f.name: f for f in api.response}
    error_code = fields.get("error_code")
    if error_code is None or not in_range(error_code.versions, api_version):
        return None
    body = response_defaults(api_key, api_version)
    body["error_code"] = int(code)
    if "error_message" in fields:
        body["error_message"] = message or None
    return body


def with_defaults(api_key: int, api_version: int, body: dict, response: bool = False) -> dict:
    """``body`` with every field of ``api_version`` it leaves out at its default, at every
    depth: for a hand-written message in a test or a probe, which names only what it is
    about. The broker's own messages never go through this; they state every field."""
    _plan(api_key, api_version, response)
    api = APIS[api_key]
    return _with_defaults(api.response if response else api.request, api_version, body)


def _with_defaults(fields: tuple[F, ...], version: int, body: dict) -> dict:
    out = dict(body)
    for f in fields:
        if not in_range(f.versions, version):
            continue
        v = out.get(f.name, TYPE_DEFAULT)
        if v is TYPE_DEFAULT:
            out[f.name] = _type_default(f)
        elif f.type == "struct" and isinstance(v, dict):
            out[f.name] = _with_defaults(f.fields, version, v)
        elif f.type == "[]struct" and isinstance(v, list):
            out[f.name] = [_with_defaults(f.fields, version, item) for item in v]
    return out


def encode_data(name: str, version: int, body: dict) -> bytes:
    """A record format of the specs (``messages.DATA``: ``OffsetCommitValue``,
    ``ConsumerProtocolAssignment``, ...) at ``version``, with no version prefix."""
    w = _Writer()
    _data_plan(name, version).write(w, body)
    if w.segments is not None:
        raise ValueError(f"{name} cannot carry file regions")
    return bytes(w.buf)


def decode_data(name: str, version: int, buf: Any, offset: int = 0) -> dict:
    """The record format ``name`` at ``version`` from ``buf[offset:]``; bytes after it are
    ignored (newer versions append fields). Raises ``InvalidRequestError`` when malformed,
    ``UnsupportedVersionError`` for a version outside the spec's."""
    plan = _data_plan(name, version)
    mv = _view(buf)
    if not 0 <= offset <= len(mv):
        raise InvalidRequestError(f"{name}: offset {offset} outside {len(mv)} bytes")
    try:
        return plan.read(_Reader(mv, offset, len(mv)))
    except (struct.error, IndexError, ValueError, OverflowError) as e:
        raise InvalidRequestError(f"malformed {name} v{version}: {e}") from e


def encode_request(api_key: int, api_version: int, correlation_id: int, body: dict,
                   client_id: str | None = "pybroker") -> bytes:
    """The whole request frame, size prefix included (for the project's client and tests)."""
    plan = _plan(api_key, api_version, False)
    w = _Writer()
    w.buf += _I32.pack(0)
    w.buf += struct.pack(">hhi", api_key, api_version, correlation_id)
    hv = request_header_version(api_key, api_version)
    if hv >= 1:
        _write_client_id(w, client_id)
    if hv >= 2:
        w.buf.append(0)
    plan.write(w, body)
    out = w.finish()
    if not isinstance(out, bytes):
        raise ValueError("requests cannot carry file regions")
    return out
