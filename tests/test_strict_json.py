"""Each outcome of strict parsing, with the raw text always kept."""

from __future__ import annotations

import pytest

from contractrl.validators import Code, ParseLimits, parse_json_text, parse_response


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"a": 1, "b": [true, null, "x"]}', Code.ACCEPTED),
        ("  [1, 2.5, -3e2]  \n", Code.ACCEPTED),
        ('{"a": 1, "a": 2}', Code.DUPLICATE_KEY),
        ('{"outer": {"k": 1, "k": 1}}', Code.DUPLICATE_KEY),
        ("NaN", Code.NON_FINITE_NUMBER),
        ('{"x": Infinity}', Code.NON_FINITE_NUMBER),
        ("[-Infinity]", Code.NON_FINITE_NUMBER),
        ("[1e400]", Code.NON_FINITE_NUMBER),
        ("[1, 2]]", Code.MALFORMED_JSON),
        ('{"a": 1} {"b": 2}', Code.MALFORMED_JSON),
        ("{'a': 1}", Code.MALFORMED_JSON),
        ('{"a": "line\x01break"}', Code.MALFORMED_JSON),
        ("\ufeff{}", Code.MALFORMED_JSON),
        ('["\\ud800"]', Code.MALFORMED_JSON),
        ("```json\n[]\n```", Code.MALFORMED_JSON),
        ("", Code.MALFORMED_JSON),
        (" \n", Code.MALFORMED_JSON),
        ("[1, 2", Code.TRUNCATED),
        ('{"a": "unterminated', Code.TRUNCATED),
        ('{"a": ', Code.TRUNCATED),
        ('{"a": tr', Code.TRUNCATED),
        ("1" * 5000, Code.TOO_LARGE),
    ],
)
def test_parse_codes(text: str, code: Code) -> None:
    parsed = parse_json_text(text)
    assert parsed.code is code, parsed.message
    assert parsed.raw == text
    assert (parsed.value is not None) == (code is Code.ACCEPTED)


def test_valid_surrogate_pair_is_accepted() -> None:
    assert parse_json_text('["\\ud83d\\ude00"]').value == ["\U0001f600"]


def test_invalid_utf8_bytes_are_malformed_and_kept_visible() -> None:
    parsed = parse_json_text(b'{"a": "\xff"}')
    assert parsed.code is Code.MALFORMED_JSON
    assert "invalid UTF-8" in parsed.message
    assert "\\xff" in parsed.raw


def test_generator_stop_on_length_is_truncation_even_if_text_parses() -> None:
    assert parse_json_text("[12]", finish_reason="length").code is Code.TRUNCATED
    assert parse_json_text("[12]", finish_reason="stop").code is Code.ACCEPTED


def test_size_and_depth_limits() -> None:
    limits = ParseLimits(max_bytes=20, max_depth=3)
    assert parse_json_text('"' + "x" * 30 + '"', limits).code is Code.TOO_LARGE
    assert parse_json_text("[[[1]]]", limits).code is Code.ACCEPTED
    assert parse_json_text("[[[[1]]]]", limits).code is Code.TOO_DEEP
    # brackets inside strings are text, not nesting
    assert parse_json_text('["[[[[[["]', limits).code is Code.ACCEPTED


def test_multibyte_text_is_measured_in_bytes() -> None:
    assert parse_json_text('"' + "é" * 10 + '"', ParseLimits(max_bytes=15)).code is Code.TOO_LARGE


@pytest.mark.parametrize("text", ["ABSTAIN", "abstain", "  ABSTAIN: the date is not in the request ", "ABSTAIN - no id"])
def test_abstain_is_recognised_with_its_reason(text: str) -> None:
    parsed = parse_response(text)
    assert parsed.code is Code.ABSTAIN
    if ":" in text or "-" in text:
        assert parsed.message


@pytest.mark.parametrize(
    "text", ["I'm sorry, I can't help with that.", "I cannot modify this call.", "As an AI, I won't", '{"refusal": "policy"}']
)
def test_explicit_refusals(text: str) -> None:
    assert parse_response(text).code is Code.REFUSAL


def test_abstain_inside_json_or_prose_is_not_abstain() -> None:
    assert parse_response('["ABSTAIN"]').code is Code.ACCEPTED
    assert parse_response("I think ABSTAIN").code is Code.MALFORMED_JSON
