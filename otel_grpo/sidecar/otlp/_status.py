"""`google.rpc.Status`, declared by hand: opentelemetry-proto does not ship it.

OTLP/HTTP answers a malformed request with a Status message in the body. We
declare the message in a private descriptor pool (so it never clashes with
googleapis-common-protos if that is installed) instead of depending on it.

    >>> Status(code=3, message="bad").SerializeToString()
    b'\\x08\\x03\\x12\\x03bad'
"""

from __future__ import annotations

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _build_status_class():
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    file = descriptor_pb2.FileDescriptorProto(
        name="otel_grpo/google_rpc_status.proto",
        package="google.rpc",
        syntax="proto3",
        dependency=["google/protobuf/any.proto"],
    )
    msg = file.message_type.add(name="Status")
    msg.field.add(name="code", number=1, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL, json_name="code")
    msg.field.add(name="message", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL, json_name="message")
    msg.field.add(
        name="details", number=3, type=_F.TYPE_MESSAGE, label=_F.LABEL_REPEATED,
        type_name=".google.protobuf.Any", json_name="details",
    )
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status"))


Status = _build_status_class()
"""The `google.rpc.Status` message class (code, message, details)."""

# google.rpc.Code values used in OTLP answers.
INVALID_ARGUMENT = 3
INTERNAL = 13
UNAVAILABLE = 14
