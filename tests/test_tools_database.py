"""The database tool family: a real SQLite sandbox rebuilt from the seed, inert injection text,
whitelisted identifiers and bounded writes.

The invariants every tool keeps (shape, bounded schema, valid samples, determinism) are in test_catalog.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from contractrl.tasks.spec import ExecResult, ToolSpec
from contractrl.tasks.tools.database import TOOLS, DatabaseSandbox
from contractrl.validators import Code, Verifier, load_contract

INJECTION = "'; DROP TABLE customers; --"
BY_NAME = {spec.name: spec for spec in TOOLS}


def _db(box: DatabaseSandbox) -> str:
    return sorted(box.databases)[0]


def _tables(box: DatabaseSandbox, db_id: str) -> list[str]:
    return [r[0] for r in box.databases[db_id].execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]


def test_state_is_rebuilt_identically_from_the_seed() -> None:
    a, b = DatabaseSandbox(7), DatabaseSandbox(7)
    assert sorted(a.databases) == sorted(b.databases)
    for db_id in a.databases:
        for table in ("customers", "products", "orders"):
            assert a.rows(db_id, table) == b.rows(db_id, table)
            assert len(a.rows(db_id, table)) >= 10
    assert sorted(DatabaseSandbox(8).databases) != sorted(a.databases)


def test_sql_injection_in_values_is_inert_data() -> None:
    box = DatabaseSandbox(3)
    db = _db(box)
    before = len(box.rows(db, "customers"))
    values = {"name": INJECTION, "email": "x.y@example.com", "tier": "pro", "city": "x' OR '1'='1"}
    inserted = box.execute("insert_row", {"database_id": db, "table": "customers", "values": values})
    assert inserted.ok
    assert inserted.result["row"]["name"] == INJECTION
    assert _tables(box, db) == ["customers", "orders", "products"]
    assert len(box.rows(db, "customers")) == before + 1
    found = box.execute(
        "select_rows",
        {
            "database_id": db,
            "table": "customers",
            "columns": ["id", "name"],
            "where": [{"column": "name", "op": "eq", "value": INJECTION}],
        },
    )
    assert found.ok and found.result["rows"] == [[inserted.result["id"], INJECTION]]
    # a classic tautology compares as a plain string: it matches nothing else
    tautology = box.execute(
        "select_rows",
        {
            "database_id": db,
            "table": "customers",
            "columns": ["id"],
            "where": [{"column": "email", "op": "eq", "value": "' OR '1'='1"}],
        },
    )
    assert tautology.ok and tautology.result["rows"] == []
    # update and delete conditions with injection text touch no row
    for tool, extra in (("update_rows", {"set": {"tier": "free"}}), ("delete_rows", {"max_rows": 100})):
        args = {
            "database_id": db,
            "table": "orders",
            "where": [{"column": "status", "op": "eq", "value": "paid' OR 1=1; --"}],
            **extra,
        }
        if tool == "update_rows":
            args["table"] = "customers"
            args["where"] = [{"column": "city", "op": "eq", "value": "x' OR 1=1; DROP TABLE orders; --"}]
        out = box.execute(tool, args)
        assert out.ok and out.effects == (), (tool, out)
    assert _tables(box, db) == ["customers", "orders", "products"]
    assert len(box.rows(db, "orders")) == 24


def test_like_wildcards_in_contains_are_literal() -> None:
    box = DatabaseSandbox(4)
    db = _db(box)
    for text in ("%", "_", "\\"):
        out = box.execute(
            "select_rows",
            {
                "database_id": db,
                "table": "customers",
                "columns": ["id"],
                "where": [{"column": "name", "op": "contains", "text": text}],
            },
        )
        assert out.ok and out.result["rows"] == [], text
    box.execute(
        "insert_row",
        {"database_id": db, "table": "customers", "values": {"name": "100% real", "email": "p@example.com", "tier": "free"}},
    )
    out = box.execute(
        "select_rows",
        {
            "database_id": db,
            "table": "customers",
            "columns": ["name"],
            "where": [{"column": "name", "op": "contains", "text": "0% r"}],
        },
    )
    assert out.result["rows"] == [["100% real"]]


@pytest.mark.parametrize(
    ("tool", "args", "code"),
    [
        ("select_rows", {"table": "customers; DROP TABLE orders", "columns": ["id"]}, "unknown_table"),
        ("select_rows", {"table": "customers", "columns": ["id, (SELECT sql FROM sqlite_master)"]}, "unknown_column"),
        ("select_rows", {"table": "customers", "columns": ["sku"]}, "unknown_column"),
        (
            "select_rows",
            {"table": "customers", "columns": ["id"], "order_by": {"column": "id; DROP TABLE orders"}},
            "unknown_column",
        ),
        (
            "select_rows",
            {"table": "customers", "columns": ["id"], "order_by": {"column": "id", "direction": "desc; --"}},
            "bad_arguments",
        ),
        (
            "select_rows",
            {"table": "customers", "columns": ["id"], "where": [{"column": "id", "op": "OR 1=1 --", "value": 1}]},
            "bad_arguments",
        ),
        (
            "insert_row",
            {"table": "customers", "values": {"name": "a", "email": "b@c.d", "tier": "pro", "id": 1}},
            "read_only_column",
        ),
        (
            "insert_row",
            {"table": "customers", "values": {"name": "a", "email": "b@c.d", "tier": "pro", "sku": "SKU-1000"}},
            "unknown_column",
        ),
        ("insert_row", {"table": "customers", "values": {"name": "a", "email": "b@c.d"}}, "constraint_violation"),
        (
            "insert_row",
            {"table": "customers", "values": {"name": "a", "email": "b@c.d", "tier": "platinum"}},
            "constraint_violation",
        ),
        (
            "insert_row",
            {"table": "customers", "values": {"name": "a", "email": "b@c.d", "tier": "pro", "active": 1}},
            "type_mismatch",
        ),
        (
            "insert_row",
            {"table": "orders", "values": {"customer_id": 999, "product_id": 1, "quantity": 1}},
            "constraint_violation",
        ),
        (
            "insert_row",
            {"table": "orders", "values": {"customer_id": 1, "product_id": 999, "quantity": 1}},
            "constraint_violation",
        ),
        ("update_rows", {"table": "customers", "set": {"tier": "pro"}, "where": []}, "unbounded_write"),
        (
            "update_rows",
            {"table": "customers", "set": {}, "where": [{"column": "id", "op": "eq", "value": 1}]},
            "unbounded_write",
        ),
        (
            "update_rows",
            {"table": "orders", "set": {"total": 1}, "where": [{"column": "id", "op": "eq", "value": 1}]},
            "read_only_column",
        ),
        (
            "update_rows",
            {"table": "orders", "set": {"quantity": True}, "where": [{"column": "id", "op": "eq", "value": 1}]},
            "type_mismatch",
        ),
        ("delete_rows", {"table": "orders", "where": [], "max_rows": 100}, "unbounded_write"),
        (
            "delete_rows",
            {"table": "orders", "where": [{"column": "quantity", "op": "ge", "value": 1}], "max_rows": 3},
            "too_many_rows",
        ),
        ("aggregate", {"table": "customers", "function": "sum", "column": "name"}, "type_mismatch"),
        ("aggregate", {"table": "orders", "function": "median", "column": "total"}, "bad_arguments"),
        (
            "aggregate",
            {"table": "orders", "function": "count", "having": {"kind": "count", "op": "ge", "value": 1}},
            "bad_arguments",
        ),
        ("create_index", {"table": "orders", "name": "idx_x; DROP TABLE orders", "columns": ["status"]}, "bad_arguments"),
        ("create_index", {"table": "orders", "name": "idx_orders_x", "columns": ["status", "status"]}, "bad_arguments"),
        (
            "create_index",
            {"table": "orders", "name": "idx_orders_x", "columns": ["status"], "unique": True},
            "constraint_violation",
        ),
        ("drop_table", {"table": "orders"}, "unknown_tool"),
        ("select_rows", {"columns": ["id"]}, "bad_arguments"),
    ],
)
def test_refusals_are_typed_and_leave_the_database_unchanged(tool: str, args: dict[str, Any], code: str) -> None:
    box = DatabaseSandbox(5)
    db = _db(box)
    snapshot = {t: box.rows(db, t) for t in ("customers", "products", "orders")}
    out = box.execute(tool, {"database_id": db, **args})
    assert out == ExecResult(False, None, (), code)
    assert {t: box.rows(db, t) for t in snapshot} == snapshot
    assert _tables(box, db) == ["customers", "orders", "products"]


def test_delete_with_dependants_is_refused_and_rolled_back() -> None:
    box = DatabaseSandbox(2)
    db = _db(box)
    customer = box.rows(db, "orders")[0]["customer_id"]
    out = box.execute(
        "delete_rows",
        {"database_id": db, "table": "customers", "where": [{"column": "id", "op": "eq", "value": customer}], "max_rows": 1},
    )
    assert out.error == "constraint_violation"
    assert any(r["id"] == customer for r in box.rows(db, "customers"))


def test_writes_change_what_reads_see() -> None:
    box = DatabaseSandbox(6)
    db = _db(box)
    order = box.rows(db, "orders")[0]
    price = next(p["price"] for p in box.rows(db, "products") if p["id"] == order["product_id"])
    where = [{"column": "id", "op": "eq", "value": order["id"]}]
    updated = box.execute(
        "update_rows", {"database_id": db, "table": "orders", "set": {"quantity": 3, "status": "shipped"}, "where": where}
    )
    assert updated.effects == (
        f"db.update {db}.orders id={order['id']} quantity=3",
        f'db.update {db}.orders id={order["id"]} status="shipped"',
    )
    row = box.execute(
        "select_rows", {"database_id": db, "table": "orders", "columns": ["quantity", "total", "status"], "where": where}
    )
    assert row.result["rows"] == [[3, round(price * 3, 2), "shipped"]]
    deleted = box.execute("delete_rows", {"database_id": db, "table": "orders", "where": where, "max_rows": 1})
    assert deleted.effects == (f"db.delete {db}.orders id={order['id']}",)
    count = box.execute("aggregate", {"database_id": db, "table": "orders", "function": "count"})
    assert count.result["value"] == 23
    again = box.execute(
        "create_index", {"database_id": db, "table": "orders", "name": "idx_orders_status", "columns": ["status"]}
    )
    assert again.ok
    assert (
        box.execute(
            "create_index", {"database_id": db, "table": "orders", "name": "idx_orders_status", "columns": ["placed"]}
        ).error
        == "already_exists"
    )


def test_grouped_aggregate_with_having() -> None:
    box = DatabaseSandbox(9)
    db = _db(box)
    orders = box.rows(db, "orders")
    out = box.execute(
        "aggregate",
        {
            "database_id": db,
            "table": "orders",
            "function": "count",
            "group_by": "status",
            "having": {"kind": "count", "op": "ge", "value": 2},
        },
    )
    expected = sorted((s, n) for s in {o["status"] for o in orders} if (n := sum(o["status"] == s for o in orders)) >= 2)
    assert [tuple(g) for g in out.result["groups"]] == expected


def _codes(spec: ToolSpec, args: dict[str, Any]) -> set[str]:
    report = Verifier.build(spec.schema, load_contract(spec.contract)).verify(args)
    return {e.code.value for e in report.errors}


def test_contracts_catch_cross_field_mistakes() -> None:
    db = "db_abcdef"
    insert = BY_NAME["insert_row"]
    assert Code.CROSS_FIELD.value in _codes(
        insert,
        {"database_id": db, "table": "customers", "values": {"name": "a", "email": "a@b.co", "tier": "pro", "sku": "SKU-1234"}},
    )
    assert Code.CROSS_FIELD.value in _codes(
        insert, {"database_id": db, "table": "orders", "values": {"customer_id": 1, "quantity": 2}}
    )
    select = BY_NAME["select_rows"]
    assert Code.CROSS_FIELD.value in _codes(select, {"database_id": db, "table": "orders", "columns": ["id"], "offset": 5})
    between = [{"column": "quantity", "op": "between", "low": 5, "high": 1}]
    assert Code.CROSS_FIELD.value in _codes(select, {"database_id": db, "table": "orders", "columns": ["id"], "where": between})
    aggregate = BY_NAME["aggregate"]
    assert Code.CROSS_FIELD.value in _codes(aggregate, {"database_id": db, "table": "orders", "function": "sum"})
    having = {"kind": "count", "op": "ge", "value": 1}
    assert Code.CROSS_FIELD.value in _codes(
        aggregate, {"database_id": db, "table": "orders", "function": "count", "having": having}
    )
    # the discriminated condition union: 'between' needs low and high, not value
    assert _codes(
        select,
        {"database_id": db, "table": "orders", "columns": ["id"], "where": [{"column": "id", "op": "between", "value": 1}]},
    )
    update = BY_NAME["update_rows"]
    assert _codes(update, {"database_id": db, "table": "orders", "set": {"quantity": 2}, "where": []})
