"""OTLP/HTTP trace ingest: body reading with a decompression limit, decoding, extraction."""

from ._body import BodyError, read_body
from ._decode import PROTOBUF, JSON, DecodeError, decode_request, encode_response, encode_status
from ._extract import Batch, PhaseRecord, SampleRecord, StepRecord, extract
from ._status import Status

__all__ = [
    "JSON",
    "PROTOBUF",
    "Batch",
    "BodyError",
    "DecodeError",
    "PhaseRecord",
    "SampleRecord",
    "Status",
    "StepRecord",
    "decode_request",
    "encode_response",
    "encode_status",
    "extract",
    "read_body",
]
