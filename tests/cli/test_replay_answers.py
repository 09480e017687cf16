"""What `otel-grpo replay` says of a receiver's error answer (the sidecar's own is tested end to end in
tests/sidecar/test_replay.py): a collector may answer in JSON, a proxy with a page of its own."""

from __future__ import annotations

import pytest
import requests
from google.rpc.status_pb2 import Status

from otel_grpo.cli.replay import _reason


def _answer(media: str, body: bytes) -> requests.Response:
    answer = requests.Response()
    answer.status_code, answer._content = 413, body
    answer.headers["Content-Type"] = media
    return answer


@pytest.mark.parametrize(("media", "body", "said"), [
    ("application/x-protobuf", Status(code=3, message="too large").SerializeToString(), "too large"),
    ("application/json; charset=utf-8", b'{"code": 3, "message": "too large"}', "too large"),
    ("application/json", b"[1]", "[1]"),
    ("text/html", b"<h1>413 Request Entity Too Large</h1>", "<h1>413 Request Entity Too Large</h1>"),
    ("application/x-protobuf", b"oops", "oops"),  # no Status (wire type 7): as text
])
def test_an_error_answer_is_read_as_what_it_says(media, body, said):
    assert _reason(_answer(media, body)) == said
