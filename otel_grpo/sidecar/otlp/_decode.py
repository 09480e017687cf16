"""OTLP/HTTP request decoding and response encoding, protobuf and JSON.

OTLP/JSON differs from protobuf's canonical JSON mapping in one place: trace and
span ids are hex strings, not base64. We rewrite them before `ParseDict`, and
back to hex when we answer.
"""

from __future__ import annotations

import base64
import json

from google.protobuf import json_format
from google.protobuf.message import DecodeError as _ProtoDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ._status import Status

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class DecodeError(Exception):
    """The body is not a valid ExportTraceServiceRequest in the declared encoding."""


def media_type(content_type: str | None) -> str | None:
    """`application/json; charset=utf-8` -> `application/json`; None for anything we do not take."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    return base if base in (PROTOBUF, JSON) else None


def _hex_to_b64(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise DecodeError(f"{field} must be a hex string")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise DecodeError(f"{field} is not valid hex: {value[:40]!r}") from None
    return base64.b64encode(raw).decode("ascii")


def _fix_ids(obj: dict, names: tuple[str, ...], where: str) -> None:
    for name in names:
        if name in obj and obj[name] != "":
            obj[name] = _hex_to_b64(obj[name], f"{where}.{name}")


def _hex_ids_to_b64(doc: object) -> None:
    """Rewrite the spec's hex trace/span ids in place so protobuf's JSON parser accepts them."""
    if not isinstance(doc, dict):
        raise DecodeError("the JSON body must be an object")
    for rs in _list(doc, "resourceSpans", "resource_spans"):
        for ss in _list(rs, "scopeSpans", "scope_spans"):
            for span in _list(ss, "spans"):
                _fix_ids(span, ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"), "span")
                for link in _list(span, "links"):
                    _fix_ids(link, ("traceId", "trace_id", "spanId", "span_id"), "link")


def _list(obj: object, *names: str) -> list:
    if not isinstance(obj, dict):
        raise DecodeError("expected a JSON object")
    for name in names:
        if name in obj:
            value = obj[name]
            if value is None:
                return []
            if not isinstance(value, list):
                raise DecodeError(f"{name} must be an array")
            return value
    return []


def decode_request(body: bytes, media: str) -> ExportTraceServiceRequest:
    """Parse a body of media type PROTOBUF or JSON; DecodeError with a readable message if it is not one."""
    request = ExportTraceServiceRequest()
    if media == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (_ProtoDecodeError, RuntimeError, ValueError) as exc:
            raise DecodeError(f"invalid protobuf ExportTraceServiceRequest: {exc}") from None
        return request
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DecodeError(f"invalid JSON: {exc}") from None
    _hex_ids_to_b64(doc)
    try:
        # Unknown fields are ignored, as the OTLP spec asks of receivers.
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise DecodeError(f"invalid OTLP/JSON ExportTraceServiceRequest: {exc}") from None
    return request


def encode_response(media: str, rejected_spans: int = 0, error_message: str = "") -> bytes:
    """An ExportTraceServiceResponse; partial_success only when something was rejected or said."""
    response = ExportTraceServiceResponse()
    if rejected_spans or error_message:
        response.partial_success.rejected_spans = rejected_spans
        response.partial_success.error_message = error_message
    if media == JSON:
        return json_format.MessageToJson(response, indent=None).encode()
    return response.SerializeToString()


def encode_status(media: str, code: int, message: str) -> bytes:
    """A google.rpc.Status body for an error answer, in the request's encoding."""
    status = Status(code=code, message=message)
    if media == JSON:
        return json_format.MessageToJson(status, indent=None).encode()
    return status.SerializeToString()
