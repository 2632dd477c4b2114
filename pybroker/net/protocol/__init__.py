"""The Kafka wire protocol: generated message layouts and types, and the codec over them.

``codec`` is the generic path for every API; ``pybroker._native.wire`` parses Produce
requests and builds Fetch responses without touching record bytes.
"""

from pybroker.net.protocol.codec import (
    ZERO_UUID,
    MissingFieldError,
    RequestHeader,
    UnknownFieldError,
    api_name,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    read_request_header,
    read_response_header,
    request_header_version,
    response_defaults,
    response_header_version,
    supported_versions,
    with_defaults,
)

__all__ = [
    "ZERO_UUID", "RequestHeader", "MissingFieldError", "UnknownFieldError", "api_name", "decode_request",
    "decode_response", "encode_request", "encode_response", "read_request_header",
    "read_response_header", "request_header_version", "response_header_version",
    "supported_versions", "response_defaults", "with_defaults",
]
