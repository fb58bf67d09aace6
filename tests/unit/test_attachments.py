"""The pure side of attachments (MESSAGES §4): which files are text to inline, base64 refused
in one sentence, the line a model gets for a file it is not sent."""

from __future__ import annotations

import base64

import pytest

from postroom.core.attachments import AttachmentRef, decode_base64, is_text_mime, placeholder
from postroom.core.errors import InvalidInput, TooLarge


@pytest.mark.parametrize(
    ("mime", "name", "text"),
    [
        ("text/plain", "", True),
        ("text/csv; charset=utf-8", "", True),
        ("application/json", "", True),
        ("application/vnd.api+json", "", True),
        ("application/octet-stream", "main.py", True),
        ("", "notes.md", True),
        ("application/pdf", "a.pdf", False),
        ("application/octet-stream", "archive.zip", False),
        ("image/png", "a.txt", False),
    ],
)
def test_text_files_are_told_by_type_or_by_name(mime: str, name: str, text: bool) -> None:
    assert is_text_mime(mime, name) is text


def test_base64_is_decoded_within_the_cap_or_refused_in_one_sentence() -> None:
    assert decode_base64(base64.b64encode(b"abc").decode(), name="a", cap_bytes=3) == b"abc"
    with pytest.raises(TooLarge, match=r"^The attachment 'a' is 4 bytes; the limit is 3\.$"):
        decode_base64(base64.b64encode(b"abcd").decode(), name="a", cap_bytes=3)
    with pytest.raises(TooLarge, match="larger than the limit of 3 bytes"):
        decode_base64("A" * 400, name="a", cap_bytes=3)
    with pytest.raises(InvalidInput, match=r"^An attachment has data that is not valid base64\.$"):
        decode_base64("not base64!", name="", cap_bytes=100)


def test_a_file_not_sent_is_named_with_its_type_and_size() -> None:
    ref = AttachmentRef("file", "application/zip", "old.zip", 3 * 1024 * 1024)
    assert placeholder(ref) == "[attachment: old.zip, application/zip, 3.0 MB]"
    assert (
        placeholder(AttachmentRef("image", "", "", 2048))
        == "[attachment: image, unknown type, 2 KB]"
    )
