"""Patch parsing, every mask code, atomic copy-on-write apply and collateral edits."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from contractrl.validators import (
    AbstainAction,
    Budgets,
    Code,
    InvalidAction,
    PatchAction,
    PublicState,
    RefusalAction,
    RepairContract,
    Verifier,
    apply_patch,
    changed_leaves,
    collateral_edits,
    parse_action,
)
from contractrl.validators.collateral import off_pointer_edits
from contractrl.validators.mask import static_violation

DOC: dict[str, Any] = {
    "id": "u1",
    "owner": {"account": "acc-9", "name": "Ana"},
    "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}],
    "note": "hi",
    "flag": True,
}
IMMUTABLE = ("/id", "/owner/account", "/items/1/sku")


def _parse(ops: Any, max_ops: int = 5, allowed: frozenset[str] | None = None) -> Any:
    text = ops if isinstance(ops, str) else json.dumps(ops)
    kwargs = {"allowed_ops": allowed} if allowed else {}
    return parse_action(text, max_ops=max_ops, **kwargs)


def _mask_and_apply(ops: list[dict]) -> tuple[Code | None, Any]:
    """The first violated rule (static mask, then apply), or (None, patched document)."""
    action = _parse(ops)
    if isinstance(action, InvalidAction):
        return action.code, None
    from contractrl.validators.pointer import parse_pointer

    immutable = tuple(parse_pointer(p) for p in IMMUTABLE)
    for i, op in enumerate(action.ops):
        violation = static_violation(op, i, immutable)
        if violation:
            return violation.code, None
    result = apply_patch(DOC, action.ops, immutable=immutable)  # as RepairContract.step passes them
    return (None, result.document) if result.ok else (result.code, None)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("ABSTAIN", AbstainAction),
        ("I'm sorry, I cannot do that", RefusalAction),
        ('[{"op": "replace", "path": "/note", "value": "x"}]', PatchAction),
    ],
)
def test_action_kinds(text: str, kind: type) -> None:
    assert isinstance(_parse(text), kind)


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ({"op": "replace", "path": "/note", "value": 1}, Code.PATCH_MALFORMED),  # not an array
        ([], Code.PATCH_MALFORMED),
        (["replace"], Code.PATCH_MALFORMED),
        ([{"op": "merge", "path": "/note", "value": 1}], Code.PATCH_MALFORMED),
        ([{"op": "replace", "value": 1}], Code.PATCH_MALFORMED),
        ([{"op": "replace", "path": "note", "value": 1}], Code.PATCH_MALFORMED),
        ([{"op": "replace", "path": "/a~2", "value": 1}], Code.PATCH_MALFORMED),
        ([{"op": "add", "path": "/x"}], Code.PATCH_MALFORMED),
        ([{"op": "move", "path": "/x"}], Code.PATCH_MALFORMED),
        ([{"op": "copy", "path": "/x", "from": 3}], Code.PATCH_MALFORMED),
        ('[{"op": "replace", "path": "/note", "value": 1}', Code.TRUNCATED),
        ('[{"op": "replace", "path": "/note", "path": "/flag", "value": 1}]', Code.DUPLICATE_KEY),
    ],
)
def test_parse_failures(ops: Any, code: Code) -> None:
    action = _parse(ops)
    assert isinstance(action, InvalidAction)
    assert action.code is code, action.message


def test_op_not_allowed_by_config() -> None:
    action = _parse([{"op": "remove", "path": "/note"}], allowed=frozenset({"add", "replace"}))
    assert isinstance(action, InvalidAction) and action.code is Code.OP_NOT_ALLOWED


def test_op_budget_is_checked_before_operations() -> None:
    action = _parse([{"op": "replace", "path": "/note", "value": 1}] * 3, max_ops=2)
    assert isinstance(action, InvalidAction) and action.code is Code.OP_BUDGET_EXCEEDED
    # junk operations past the budget are never inspected
    action = _parse([{"op": "replace", "path": "/note", "value": 1}, "junk", "junk"], max_ops=2)
    assert action.code is Code.OP_BUDGET_EXCEEDED


def test_unknown_members_are_ignored_as_rfc6902_says() -> None:
    action = _parse([{"op": "remove", "path": "/note", "value": 7, "comment": "x"}])
    assert isinstance(action, PatchAction)
    assert action.to_list() == [{"op": "remove", "path": "/note"}]


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "replace", "path": "/missing", "value": 1}], Code.PATH_UNAVAILABLE),
        ([{"op": "add", "path": "/nope/x", "value": 1}], Code.PATH_UNAVAILABLE),
        ([{"op": "add", "path": "/items/5", "value": 1}], Code.PATH_UNAVAILABLE),
        ([{"op": "add", "path": "/items/01", "value": 1}], Code.PATH_UNAVAILABLE),
        ([{"op": "remove", "path": "/items/-"}], Code.PATH_UNAVAILABLE),
        ([{"op": "add", "path": "/note/x", "value": 1}], Code.PATH_UNAVAILABLE),
        ([{"op": "test", "path": "/ghost", "value": 1}], Code.PATH_UNAVAILABLE),
        ([{"op": "replace", "path": "/id", "value": "u2"}], Code.PATH_IMMUTABLE),
        ([{"op": "replace", "path": "/owner", "value": {}}], Code.PATH_IMMUTABLE),  # ancestor of an immutable path
        ([{"op": "remove", "path": "/owner/account"}], Code.PATH_IMMUTABLE),
        ([{"op": "add", "path": "/items/0", "value": {}}], Code.PATH_IMMUTABLE),  # would shift /items/1/sku
        ([{"op": "remove", "path": "/items/0"}], Code.PATH_IMMUTABLE),
        ([{"op": "move", "from": "/id", "path": "/note"}], Code.PATH_IMMUTABLE),
        ([{"op": "copy", "from": "/note", "path": "/id"}], Code.PATH_IMMUTABLE),
        ([{"op": "replace", "path": "", "value": {}}], Code.ROOT_WRITE_FORBIDDEN),
        ([{"op": "remove", "path": ""}], Code.ROOT_WRITE_FORBIDDEN),
        ([{"op": "move", "from": "/owner", "path": "/owner/name/x"}], Code.MOVE_SOURCE_INVALID),
        ([{"op": "move", "from": "/ghost", "path": "/note"}], Code.MOVE_SOURCE_INVALID),
        ([{"op": "copy", "from": "/ghost", "path": "/note"}], Code.MOVE_SOURCE_INVALID),
        ([{"op": "test", "path": "/flag", "value": 1}], Code.TEST_FAILED),
        ([{"op": "test", "path": "/items/0/qty", "value": True}], Code.TEST_FAILED),
    ],
)
def test_each_mask_code(ops: list[dict], code: Code) -> None:
    before = copy.deepcopy(DOC)
    found, patched = _mask_and_apply(ops)
    assert found is code
    assert patched is None
    assert before == DOC


def test_allowed_edits_next_to_immutable_paths() -> None:
    for ops in (
        [{"op": "add", "path": "/items/-", "value": {"sku": "c"}}],  # append shifts nothing
        [{"op": "add", "path": "/items/2", "value": {"sku": "c"}}],
        [{"op": "replace", "path": "/owner/name", "value": "Bo"}],
        [{"op": "copy", "from": "/id", "path": "/note"}],  # reading an immutable value is fine
        [{"op": "test", "path": "/id", "value": "u1"}],
    ):
        code, patched = _mask_and_apply(ops)
        assert code is None, ops
        assert patched["id"] == "u1"


APPEND_DOC: dict[str, Any] = {"a": [0], "b": [{"x": 1}], "c": [7, 8], "d": []}
# /a/1, /b/1/x, /d/0 and /d/1 are immutable and absent: the next append to a, b or d would create one
APPEND_IMMUTABLE = ("/a/1", "/b/1/x", "/d/1")


def _append_env() -> tuple[RepairContract, PublicState]:
    env = RepairContract(Verifier.build({"type": "object"}), Budgets(max_attempts=3, max_ops=3), APPEND_IMMUTABLE)
    # the schema accepts any object, so reopen the terminal initial state to let patches apply
    return env, dataclasses.replace(env.initial_state(APPEND_DOC), done=False, outcome=None)


def test_append_that_creates_an_absent_immutable_path_is_refused() -> None:
    """Issue 49 section 3: ``add /a/-`` creates ``/a/1`` just as ``add /a/1`` does, and the
    whole-object arm refuses the object both would make; the patch arm once admitted the ``-`` form."""
    env, state = _append_env()
    appended = env.step(state, json.dumps([{"op": "add", "path": "/a/-", "value": 1}]))
    indexed = env.step(state, json.dumps([{"op": "add", "path": "/a/1", "value": 1}]))
    whole = env.step_object(state, json.dumps({**APPEND_DOC, "a": [0, 1]}))
    assert appended.outcome is indexed.outcome is whole.outcome is Code.PATH_IMMUTABLE
    assert appended.patched is None and appended.state.candidate is state.candidate
    assert appended.record.pointer == "/a/-" and "/a/1" in appended.record.message


@pytest.mark.parametrize(
    ("ops", "op_index"),
    [
        ([{"op": "add", "path": "/b/-", "value": {"x": 2}}], 0),  # immutable /b/1/x lies under the new element
        ([{"op": "add", "path": "/b/-", "value": {}}], 0),  # even one that does not hold it yet
        ([{"op": "copy", "from": "/c", "path": "/a/-"}], 0),
        ([{"op": "move", "from": "/c/0", "path": "/a/-"}], 0),
        ([{"op": "add", "path": "/d/-", "value": 1}, {"op": "add", "path": "/d/-", "value": 2}], 1),  # /d/0, then /d/1
        ([{"op": "test", "path": "/c/0", "value": 7}, {"op": "copy", "from": "/a/0", "path": "/a/-"}], 1),
    ],
)
def test_every_append_that_resolves_to_an_immutable_path_is_refused(ops: list[dict], op_index: int) -> None:
    env, state = _append_env()
    result = env.step(state, json.dumps(ops))
    assert result.outcome is Code.PATH_IMMUTABLE, result.record.message
    assert result.patched is None and result.record.message.startswith(f"operation {op_index} ")


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "add", "path": "/c/-", "value": 9}],  # /c holds no immutable path
        [{"op": "add", "path": "/d/-", "value": 1}],  # creates /d/0; /d/1 is still absent
        [{"op": "add", "path": "/b/0/y", "value": 1}],  # beside the element that will hold /b/1/x
    ],
)
def test_appends_that_create_no_immutable_path_are_admitted(ops: list[dict]) -> None:
    env, state = _append_env()
    result = env.step(state, json.dumps(ops))
    assert result.outcome is Code.ACCEPTED, result.record.message


def test_apply_semantics_match_rfc6902() -> None:
    ops = [
        {"op": "add", "path": "/items/-", "value": {"sku": "z"}},
        {"op": "move", "from": "/note", "path": "/memo"},
        {"op": "copy", "from": "/owner/name", "path": "/alias"},
        {"op": "test", "path": "/items/2/sku", "value": "z"},
        {"op": "test", "path": "/items/0/qty", "value": 1.0},  # numbers compare numerically
        {"op": "remove", "path": "/flag"},
    ]
    result = apply_patch(DOC, _parse(ops, max_ops=10).ops)
    assert result.ok, result.message
    doc = result.document
    assert doc["items"][-1] == {"sku": "z"}
    assert "note" not in doc and doc["memo"] == "hi"
    assert doc["alias"] == "Ana" and "flag" not in doc


def test_failed_patch_is_all_or_nothing_and_input_is_never_mutated() -> None:
    before = copy.deepcopy(DOC)
    ops = [{"op": "replace", "path": "/note", "value": "changed"}, {"op": "remove", "path": "/ghost"}]
    result = apply_patch(DOC, _parse(ops).ops)
    assert not result.ok and result.op_index == 1 and result.code is Code.PATH_UNAVAILABLE
    assert before == DOC
    ok = apply_patch(DOC, _parse([{"op": "replace", "path": "/items/0/qty", "value": 9}]).ops)
    assert ok.ok and before == DOC and ok.document["items"][0]["qty"] == 9
    assert ok.document["owner"] is DOC["owner"]  # untouched subtrees are shared, not copied


def test_patch_values_are_deep_copied() -> None:
    action = _parse([{"op": "add", "path": "/extra", "value": {"deep": [1, 2]}}])
    result = apply_patch(DOC, action.ops)
    action.ops[0].value["deep"].append(3)
    assert result.document["extra"] == {"deep": [1, 2]}


def test_collateral_edits() -> None:
    before = {"a": 1, "b": {"c": 2, "d": 3}, "list": [1, 2, 3]}
    after = {"a": 1, "b": {"c": 9, "d": 4}, "list": [1, 2, 3]}
    assert changed_leaves(before, after) == ["/b/c", "/b/d"]
    assert collateral_edits(before, after, (("b", "c"),)) == ["/b/d"]
    assert collateral_edits(before, after, (("b",),)) == []
    # a type change with an equal Python value is still a change: 1 -> true
    assert changed_leaves({"x": 1}, {"x": True}) == ["/x"]
    # appending names the new element only: no collateral
    appended = apply_patch(before, _parse([{"op": "add", "path": "/list/-", "value": 4}]).ops)
    assert appended.touched == (("list", "3"),)
    assert collateral_edits(before, appended.document, appended.touched) == []
    # inserting at the front renumbers the elements after it, which no operation named
    inserted = apply_patch(before, _parse([{"op": "add", "path": "/list/0", "value": 0}]).ops)
    assert collateral_edits(before, inserted.document, inserted.touched) == ["/list/1", "/list/2", "/list/3"]


def test_off_pointer_edits_expose_coarse_repairs() -> None:
    """Fixing /owner/name by replacing all of /owner is local to its op, but not to the pointer."""
    ops = [{"op": "replace", "path": "/owner", "value": {"account": "acc-9", "name": "Bo", "tier": 1}}]
    result = apply_patch(DOC, _parse(ops).ops)
    assert collateral_edits(DOC, result.document, result.touched) == []
    assert off_pointer_edits(DOC, result.document, ("/owner/name",)) == ["/owner/tier"]
    assert off_pointer_edits(DOC, result.document, ("/owner",)) == []
