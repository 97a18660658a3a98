"""Reading a JSON text that is still being written (``validators/json_prefix.py``).

Both directions a stop decision needs are hunted against references it shares no code with: every
prefix of a text ``json.dumps`` wrote is viable and holds only what the finished value holds, and a
prefix read as not viable parses, with any continuation, under neither the strict parser nor the
standard library.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from contractrl.validators.json_prefix import read_json_prefix
from contractrl.validators.jsonvalue import json_identical, leaves
from contractrl.validators.pointer import parse_pointer, resolve
from contractrl.validators.strict_json import parse_json_text

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=8)
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=12
)
containers = st.lists(values, max_size=4) | st.dictionaries(st.text(max_size=4), values, max_size=4)


@st.composite
def written(draw: st.DrawFn) -> tuple[Any, str]:
    """A value and a text of it as a generator might write it: any spacing, escaped or not."""
    value = draw(containers)
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 0, 2])), separators=separators)
    return value, draw(st.sampled_from(["", " ", "\n"])) + text


@settings(max_examples=300, deadline=None)
@given(written())
@example(([{"op": "add", "path": "/x", "value": 'a"b\\c\u00e9'}], '[{"op":"add","path":"/x","value":"a\\"b\\\\c\\u00e9"}]'))
@example(({"a": -1.5e-07, "b": [True, None]}, '{"a": -1.5e-07, "b": [true, null]}'))
def test_every_prefix_is_viable_and_holds_only_what_the_value_keeps(case: tuple[Any, str]) -> None:
    value, text = case
    for end in range(len(text) + 1):
        read = read_json_prefix(text[:end])
        assert read.viable, (text[:end], read.reason)
        if not read.started:
            continue
        for pointer, leaf in leaves(read.value).items():
            tokens = parse_pointer(pointer)
            final = resolve(value, tokens)
            if read.closed(tokens):
                assert json_identical(final, leaf), (text[:end], pointer)
            elif isinstance(leaf, str):  # the string being written: a start of the finished one
                assert isinstance(final, str) and final.startswith(leaf), (text[:end], pointer)
                assert tuple(map(str, read.open_path or ())) == tokens
            else:  # an open container, empty so far
                assert leaf in ([], {}) and type(final) is type(leaf), (text[:end], pointer)
    whole = read_json_prefix(text)
    assert whole.open_path is None and json_identical(whole.value, value) and whole.depth == _depth(value)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


json_ish = st.text(alphabet='[]{}",:.-+eE0123456789 truefalsn\\u"ab\t\n', max_size=24)


@settings(max_examples=500, deadline=None)
@given(json_ish, st.lists(json_ish, max_size=6))
@example('{"a":1,"a"', ['":2}', ":2}"])
@example("[01", ["]"])
@example('["\\x"', ["]"])
def test_a_prefix_read_as_not_viable_never_parses_whatever_follows(text: str, continuations: list[str]) -> None:
    read = read_json_prefix(text)
    if read.viable:
        return
    for more in ["", "]", "}", '"', '"]', '"}', "0]", "0}", *continuations]:
        assert not parse_json_text(text + more).is_value, (text, more, read.reason)
        if '"a"' not in text:  # the standard library keeps the last of duplicate keys
            with pytest.raises(ValueError):
                json.loads(text + more)


@settings(max_examples=500, deadline=None)
@given(json_ish)
def test_a_whole_value_is_read_whole(text: str) -> None:
    """A container the strict parser accepts is read complete and equal; the reader never raises."""
    parsed = parse_json_text(text)
    read = read_json_prefix(text)
    if parsed.is_value and text.lstrip()[:1] in ("[", "{"):
        assert read.viable and read.open_path is None and json_identical(read.value, parsed.value)


@pytest.mark.parametrize(
    "text, reason",
    [
        ('[{"op":"add","path":"/x","value":"[{"desc', "expected ','"),  # a value that closed too early
        ('{"op":"add","op"', "duplicate key"),
        ("[01", "does not begin a number"),
        ('{"a":}', "no value starts"),
        ("[1,]", "no value starts"),
        ('{"a":1} x', "text after the value"),
        ('["a\\x', "bad escape"),
        ('["a\\u12g', "bad \\u escape"),
        ('["a\tb"]', "control character"),
        ("[nul,", "expected 'null'"),
        ("[1.e5]", "is not a number"),
    ],
)
def test_what_no_continuation_can_mend(text: str, reason: str) -> None:
    read = read_json_prefix(text)
    assert not read.viable and reason in read.reason


@pytest.mark.parametrize(
    "text, value, open_path",
    [
        ('{"a":1.', {}, ()),  # a number still being written is left out
        ('{"a":-', {}, ()),
        ("[1e+", [], ()),
        ('{"a":tr', {}, ()),
        ('{"a":1,"b', {"a": 1}, ()),  # so is a key
        ('{"a":"x\\u12', {"a": "x"}, ("a",)),  # and an escape begun
        ('{"a":"x\\', {"a": "x"}, ("a",)),
        ('{"a":"x\\\\', {"a": "x\\"}, ("a",)),
        ('{"a":{"b":[1,"q', {"a": {"b": [1, "q"]}}, ("a", "b", 1)),
        ('[{"op":"add"}, {"path":"/x"', [{"op": "add"}, {"path": "/x"}], (1,)),
        ('{"a": [] }', {"a": []}, None),
    ],
)
def test_what_a_prefix_holds(text: str, value: Any, open_path: tuple | None) -> None:
    read = read_json_prefix(text)
    assert read.viable and read.value == value and read.open_path == open_path


def test_nothing_written_yet() -> None:
    for text in ("", "  ", "\n"):
        read = read_json_prefix(text)
        assert read.viable and not read.started
