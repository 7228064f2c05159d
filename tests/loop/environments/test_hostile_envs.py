"""Environments are trusted code that reads the model's text: what they hand back is made storable, and the episode
stream's mask and loss stay the model's own tokens."""

from __future__ import annotations

from ratchet.loop.environments import check_message


def test_an_environment_message_the_store_cannot_hold_is_made_valid_utf8():
    text = b"out \xff\xfe".decode("utf-8", "surrogateescape")  # a tool's bytes decoded the os way
    msg = check_message({"role": "tool", "content": text}, "test.step")
    assert msg["content"].encode("utf-8") and msg["content"].startswith("out ")
    assert check_message({"role": "tool", "content": "a\x00b"}, "test.step")["content"] == "a\x00b"  # NUL is text
