"""Database family: six tools over real in-memory SQLite databases.

Each sandbox holds two ``sqlite3`` databases (customers, products, orders), filled from the seed.
Tables and columns are enums in the schemas and are whitelisted again here, since the sandbox
trusts nothing it is given; identifiers reach SQL only from those whitelists and every value
travels as a ``?`` parameter, so text such as ``'; DROP TABLE customers; --`` is stored and
compared as inert data.
"""

from __future__ import annotations

import math
import random
import re
import sqlite3
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from typing import Any

from ...validators.jsonvalue import canonical_json
from ..spec import ExecResult, SandboxError, ToolSpec, run_handler
from .common import DOMAINS, FIRST_NAMES, hex_id, id_schema, iso_date, obj, words

TIERS = ["free", "pro", "enterprise"]
CATEGORIES = ["books", "garden", "kitchen", "office", "outdoor", "toys"]
STATUSES = ["pending", "paid", "shipped", "cancelled", "refunded"]
CITIES = ("lisbon", "osaka", "lagos", "lima", "oslo", "pune", "austin", "graz")
LAST_NAMES = ("silva", "tanaka", "okafor", "novak", "berg", "sharma", "lee", "moreau", "costa", "weber")
FUNCTIONS = ["count", "sum", "avg", "min", "max"]
COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]
INDEX_NAME = r"idx_[a-z][a-z0-9_]{2,40}"

# Column kinds: what a value must be to be stored in or compared with the column.
COLUMNS: dict[str, dict[str, str]] = {
    "customers": {
        "id": "int",
        "name": "text",
        "email": "text",
        "city": "text",
        "tier": "text",
        "active": "bool",
        "joined": "date",
    },
    "products": {
        "id": "int",
        "sku": "text",
        "name": "text",
        "category": "text",
        "price": "real",
        "stock": "int",
        "discontinued": "bool",
    },
    "orders": {
        "id": "int",
        "customer_id": "int",
        "product_id": "int",
        "quantity": "int",
        "total": "real",
        "status": "text",
        "placed": "date",
    },
}
TABLES = list(COLUMNS)
ALL_COLUMNS = sorted({c for cols in COLUMNS.values() for c in cols})
READ_ONLY = frozenset({"id", "total"})  # assigned by the database, derived from price x quantity
REQUIRED: dict[str, tuple[str, ...]] = {
    "customers": ("name", "email", "tier"),
    "products": ("sku", "name", "category", "price"),
    "orders": ("customer_id", "product_id", "quantity"),
}
UNIQUE_COLUMNS = {"customers": ("id", "email"), "products": ("id", "sku"), "orders": ("id",)}
GROUPABLE = {
    "customers": ("tier", "city", "active"),
    "products": ("category", "discontinued"),
    "orders": ("status", "customer_id"),
}

_SCHEMA_SQL = """
CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT NOT NULL UNIQUE,
    city TEXT,
    tier TEXT NOT NULL CHECK (tier IN ('free', 'pro', 'enterprise')),
    active INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1)),
    joined TEXT NOT NULL DEFAULT '2026-01-05'
);
CREATE TABLE products (
    id INTEGER PRIMARY KEY,
    sku TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    category TEXT NOT NULL CHECK (category IN ('books', 'garden', 'kitchen', 'office', 'outdoor', 'toys')),
    price REAL NOT NULL CHECK (price > 0),
    stock INTEGER NOT NULL DEFAULT 0 CHECK (stock >= 0),
    discontinued INTEGER NOT NULL DEFAULT 0 CHECK (discontinued IN (0, 1))
);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    product_id INTEGER NOT NULL REFERENCES products (id),
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    total REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'paid', 'shipped', 'cancelled', 'refunded')),
    placed TEXT NOT NULL DEFAULT '2026-01-05'
);
"""
_RECOMPUTE_TOTAL = "ROUND(quantity * (SELECT price FROM products WHERE products.id = orders.product_id), 2)"
_SQL_OPS = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_DIRECTIONS = {"asc": "ASC", "desc": "DESC"}
_FUNCTIONS = {"count": "COUNT", "sum": "SUM", "avg": "AVG", "min": "MIN", "max": "MAX"}


def _quote(identifier: str) -> str:
    """An identifier for SQL; only ever called with names from the whitelists above."""
    return '"' + identifier.replace('"', '""') + '"'


def _like_pattern(text: str) -> str:
    """A LIKE pattern matching ``text`` literally anywhere (``%`` and ``_`` in it are data)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _connect() -> sqlite3.Connection:
    # a built world is copied from whichever thread dispatches next (a Ray actor's or the driver's);
    # sqlite serialises access to one connection itself, and a world is never written once built
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _close_all(connections: list[sqlite3.Connection]) -> None:
    for conn in connections:
        conn.close()


class DatabaseSandbox:
    """Two SQLite databases in memory with a few dozen rows each, rebuilt identically from a seed."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"database:{seed}")
        self.databases: dict[str, sqlite3.Connection] = {}
        for _ in range(2):
            conn = _connect()
            conn.executescript(_SCHEMA_SQL)
            _fill(conn, rng)
            self.databases[hex_id("db", rng)] = conn
        weakref.finalize(self, _close_all, list(self.databases.values()))

    def clone(self) -> DatabaseSandbox:
        """The same databases, copied page by page (``Connection.backup``): 14x cheaper than
        filling them again from the seed, and nothing written to the copy reaches this one."""
        new = object.__new__(DatabaseSandbox)
        new.databases = {}
        for db_id, conn in self.databases.items():
            copy = _connect()
            conn.backup(copy)
            new.databases[db_id] = copy
        weakref.finalize(new, _close_all, list(new.databases.values()))
        return new

    # -- lookups, each refusing what is not whitelisted -----------------------------------------

    def _db(self, db_id: Any) -> sqlite3.Connection:
        if not isinstance(db_id, str) or db_id not in self.databases:
            raise SandboxError("not_found", f"no database {db_id}")
        return self.databases[db_id]

    @staticmethod
    def _table(table: Any) -> str:
        if not isinstance(table, str) or table not in COLUMNS:
            raise SandboxError("unknown_table", f"no table {table!r}")
        return table

    @staticmethod
    def _column(table: str, column: Any) -> str:
        if not isinstance(column, str) or column not in COLUMNS[table]:
            raise SandboxError("unknown_column", f"no column {column!r} in {table}")
        return column

    @classmethod
    def _writable(cls, table: str, column: Any) -> str:
        cls._column(table, column)
        if column in READ_ONLY:
            raise SandboxError("read_only_column", f"{table}.{column} is set by the database")
        return column

    @staticmethod
    def _check_value(table: str, column: str, value: Any) -> Any:
        """``value`` if it has the column's kind (a boolean is never a number here)."""
        kind = COLUMNS[table][column]
        if kind == "bool":
            ok = type(value) is bool
        elif kind in ("int", "real"):
            ok = type(value) in (int, float) and math.isfinite(value)
        else:
            ok = isinstance(value, str)
            if ok and kind == "date":
                try:
                    date.fromisoformat(value)
                except ValueError:
                    ok = False
        if not ok:
            raise SandboxError("type_mismatch", f"{table}.{column} takes a {kind}, got {value!r}")
        return value

    @staticmethod
    def _out(table: str, column: str, value: Any) -> Any:
        """The JSON form of a stored value: 0/1 back to booleans, floats without binary noise."""
        if value is None:
            return None
        kind = COLUMNS[table][column]
        if kind == "bool":
            return bool(value)
        if isinstance(value, float):
            return round(value, 6)
        return value

    def _where(self, table: str, conditions: list[dict[str, Any]]) -> tuple[str, list[Any]]:
        """``WHERE`` text and its parameters: identifiers from the whitelist, every value a ``?``."""
        parts: list[str] = []
        params: list[Any] = []
        for cond in conditions:
            column = self._column(table, cond["column"])
            kind = COLUMNS[table][column]
            op = cond["op"]
            name = _quote(column)
            if op in _SQL_OPS:
                parts.append(f"{name} {_SQL_OPS[op]} ?")
                params.append(self._check_value(table, column, cond["value"]))
            elif op == "in":
                values = [self._check_value(table, column, v) for v in cond["values"]]
                if not values:
                    raise SandboxError("bad_arguments", "'in' needs at least one value")
                parts.append(f"{name} IN ({', '.join('?' for _ in values)})")
                params.extend(values)
            elif op == "between":
                if kind not in ("int", "real"):
                    raise SandboxError("type_mismatch", f"'between' needs a numeric column, {table}.{column} is {kind}")
                parts.append(f"{name} BETWEEN ? AND ?")
                params += [self._check_value(table, column, cond["low"]), self._check_value(table, column, cond["high"])]
            elif op == "contains":
                if kind not in ("text", "date") or not isinstance(cond["text"], str):
                    raise SandboxError("type_mismatch", f"'contains' needs a text column, {table}.{column} is {kind}")
                parts.append(f"{name} LIKE ? ESCAPE '\\'")
                params.append(_like_pattern(cond["text"]))
            elif op == "is_null":
                parts.append(f"{name} IS NULL")
            else:
                raise SandboxError("bad_arguments", f"unknown operator {op!r}")
        return (" AND ".join(parts) if parts else "1 = 1"), params

    def _matching_ids(self, conn: sqlite3.Connection, table: str, conditions: list[dict[str, Any]]) -> list[int]:
        where, params = self._where(table, conditions)
        return [row[0] for row in conn.execute(f"SELECT id FROM {_quote(table)} WHERE {where} ORDER BY id", params)]

    # -- read access for the samplers --------------------------------------------------------

    def rows(self, db_id: str, table: str) -> list[dict[str, Any]]:
        """Every row of ``table`` as a JSON object, by id."""
        cols = list(COLUMNS[self._table(table)])
        cursor = self._db(db_id).execute(f"SELECT {', '.join(map(_quote, cols))} FROM {_quote(table)} ORDER BY id")
        return [{c: self._out(table, c, v) for c, v in zip(cols, row, strict=True)} for row in cursor]

    def count_matching(self, db_id: str, table: str, conditions: list[dict[str, Any]]) -> int:
        return len(self._matching_ids(self._db(db_id), self._table(table), conditions))

    # -- execution ---------------------------------------------------------------------------

    def execute(self, tool: str, args: dict[str, Any]) -> ExecResult:
        handler = _HANDLERS.get(tool) if isinstance(tool, str) else None
        bound = (lambda a: handler(self, a)) if handler else None
        return run_handler(bound, args, ((sqlite3.IntegrityError, "constraint_violation"), (sqlite3.Error, "sql_error")))

    @staticmethod
    @contextmanager
    def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
        """All of a write or none of it: a refused or failed call leaves the database unchanged."""
        conn.execute("BEGIN")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _select_rows(self, a: dict[str, Any]) -> ExecResult:
        conn, table = self._db(a["database_id"]), self._table(a["table"])
        columns = [self._column(table, c) for c in a["columns"]]
        where, params = self._where(table, a.get("where", []))
        order = a.get("order_by")
        order_sql = "id ASC"
        if order is not None:
            direction = _DIRECTIONS.get(order.get("direction", "asc"))
            if direction is None:
                raise SandboxError("bad_arguments", f"unknown direction {order.get('direction')!r}")
            order_sql = f"{_quote(self._column(table, order['column']))} {direction}, id ASC"
        sql = f"SELECT {', '.join(map(_quote, columns))} FROM {_quote(table)} WHERE {where} ORDER BY {order_sql} LIMIT ? OFFSET ?"
        cursor = conn.execute(sql, [*params, int(a.get("limit", 20)), int(a.get("offset", 0))])
        rows = [[self._out(table, c, v) for c, v in zip(columns, row, strict=True)] for row in cursor]
        return ExecResult(True, {"table": table, "columns": columns, "rows": rows, "count": len(rows)})

    def _insert_row(self, a: dict[str, Any]) -> ExecResult:
        db_id = a["database_id"]
        conn, table = self._db(db_id), self._table(a["table"])
        values = {self._writable(table, c): self._check_value(table, c, v) for c, v in a["values"].items()}
        missing = [c for c in REQUIRED[table] if c not in values]
        if missing:
            raise SandboxError("constraint_violation", f"{table} needs {', '.join(missing)}")
        if table == "orders":
            price = conn.execute("SELECT price FROM products WHERE id = ?", [values["product_id"]]).fetchone()
            if price is None:
                raise SandboxError("constraint_violation", f"no product {values['product_id']}")
            values["total"] = round(price[0] * values["quantity"], 2)
        cols = list(values)
        with self._transaction(conn):
            cursor = conn.execute(
                f"INSERT INTO {_quote(table)} ({', '.join(map(_quote, cols))}) VALUES ({', '.join('?' for _ in cols)})",
                [values[c] for c in cols],
            )
            row_id = cursor.lastrowid
        row = next(r for r in self.rows(db_id, table) if r["id"] == row_id)
        return ExecResult(True, {"table": table, "id": row_id, "row": row}, (f"db.insert {db_id}.{table} id={row_id}",))

    def _update_rows(self, a: dict[str, Any]) -> ExecResult:
        db_id = a["database_id"]
        conn, table = self._db(db_id), self._table(a["table"])
        changes = {self._writable(table, c): self._check_value(table, c, v) for c, v in a["set"].items()}
        if not changes or not a["where"]:
            raise SandboxError("unbounded_write", "an update needs at least one change and one condition")
        with self._transaction(conn):
            ids = self._matching_ids(conn, table, a["where"])
            marks = ", ".join("?" for _ in ids)
            if ids:
                assignments = ", ".join(f"{_quote(c)} = ?" for c in changes)
                conn.execute(f"UPDATE {_quote(table)} SET {assignments} WHERE id IN ({marks})", [*changes.values(), *ids])
                if table == "orders" and {"quantity", "product_id"} & set(changes):
                    conn.execute(
                        f"UPDATE orders SET total = {_RECOMPUTE_TOTAL} WHERE id IN ({marks})",
                        ids,
                    )
        effects = tuple(
            f"db.update {db_id}.{table} id={row_id} {c}={canonical_json(changes[c])}" for row_id in ids for c in sorted(changes)
        )
        return ExecResult(True, {"table": table, "updated": len(ids), "ids": ids}, effects)

    def _delete_rows(self, a: dict[str, Any]) -> ExecResult:
        db_id = a["database_id"]
        conn, table = self._db(db_id), self._table(a["table"])
        if not a["where"]:
            raise SandboxError("unbounded_write", "a delete needs at least one condition")
        with self._transaction(conn):
            ids = self._matching_ids(conn, table, a["where"])
            if len(ids) > a["max_rows"]:
                raise SandboxError("too_many_rows", f"{len(ids)} rows match, more than max_rows={a['max_rows']}")
            if ids:
                conn.execute(f"DELETE FROM {_quote(table)} WHERE id IN ({', '.join('?' for _ in ids)})", ids)
        effects = tuple(f"db.delete {db_id}.{table} id={row_id}" for row_id in ids)
        return ExecResult(True, {"table": table, "deleted": len(ids), "ids": ids}, effects)

    def _aggregate(self, a: dict[str, Any]) -> ExecResult:
        conn, table = self._db(a["database_id"]), self._table(a["table"])
        function = a["function"]
        if function not in _FUNCTIONS:
            raise SandboxError("bad_arguments", f"unknown function {function!r}")
        column = self._column(table, a["column"]) if "column" in a else None
        if column is None and function != "count":
            raise SandboxError("bad_arguments", f"{function} needs a column")
        numeric_column = column is not None and COLUMNS[table][column] in ("int", "real")
        numeric = function == "count" or numeric_column  # whether the aggregate's value is a number
        if function in ("sum", "avg") and not numeric_column:
            raise SandboxError(
                "type_mismatch", f"{function} needs a numeric column, {table}.{column} is {COLUMNS[table][column]}"
            )
        value_sql = f"{_FUNCTIONS[function]}({_quote(column) if column else '*'})"
        where, params = self._where(table, a.get("where", []))
        group = self._column(table, a["group_by"]) if "group_by" in a else None
        if group is None:
            if "having" in a:
                raise SandboxError("bad_arguments", "having needs group_by")
            (value,) = conn.execute(f"SELECT {value_sql} FROM {_quote(table)} WHERE {where}", params).fetchone()
            return ExecResult(
                True,
                {"table": table, "function": function, "column": column, "value": self._agg_out(table, column, function, value)},
            )
        having_sql = ""
        having = a.get("having")
        if having is not None:
            op = _SQL_OPS.get(having["op"])
            if op is None or type(having["value"]) not in (int, float):
                raise SandboxError("bad_arguments", "having compares with eq/ne/lt/le/gt/ge and a number")
            if having["kind"] == "count":
                having_sql = f" HAVING COUNT(*) {op} ?"
            elif having["kind"] == "value" and numeric:
                having_sql = f" HAVING {value_sql} {op} ?"
            else:
                raise SandboxError("type_mismatch", f"having on the value of {function} needs a numeric result")
            params = [*params, having["value"]]
        sql = f"SELECT {_quote(group)}, {value_sql} FROM {_quote(table)} WHERE {where} GROUP BY 1{having_sql} ORDER BY 1"
        groups = [
            [self._out(table, group, key), self._agg_out(table, column, function, value)]
            for key, value in conn.execute(sql, params)
        ]
        result = {"table": table, "function": function, "column": column, "group_by": group, "groups": groups}
        return ExecResult(True, result)

    def _agg_out(self, table: str, column: str | None, function: str, value: Any) -> Any:
        if value is None or function == "count":
            return value
        if function == "avg":
            return round(float(value), 4)
        return self._out(table, column, value) if column is not None else value

    def _create_index(self, a: dict[str, Any]) -> ExecResult:
        db_id = a["database_id"]
        conn, table = self._db(db_id), self._table(a["table"])
        name = a["name"]
        if not isinstance(name, str) or re.fullmatch(INDEX_NAME, name) is None:
            raise SandboxError("bad_arguments", f"index name {name!r} does not match {INDEX_NAME}")
        columns = [self._column(table, c) for c in a["columns"]]
        if not columns or len(set(columns)) != len(columns):
            raise SandboxError("bad_arguments", "index columns must be distinct and at least one")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE lower(name) = ?", [name]).fetchone() is not None:
            raise SandboxError("already_exists", f"{name} already exists in {db_id}")
        unique = a.get("unique", False) is True
        kind = "UNIQUE INDEX" if unique else "INDEX"
        with self._transaction(conn):
            conn.execute(f"CREATE {kind} {_quote(name)} ON {_quote(table)} ({', '.join(map(_quote, columns))})")
        effect = f"db.index {db_id}.{name} on {table}({','.join(columns)})" + (" unique" if unique else "")
        return ExecResult(True, {"index": name, "table": table, "columns": columns, "unique": unique}, (effect,))


_HANDLERS = {
    "select_rows": DatabaseSandbox._select_rows,
    "insert_row": DatabaseSandbox._insert_row,
    "update_rows": DatabaseSandbox._update_rows,
    "delete_rows": DatabaseSandbox._delete_rows,
    "aggregate": DatabaseSandbox._aggregate,
    "create_index": DatabaseSandbox._create_index,
}


def _fill(conn: sqlite3.Connection, rng: random.Random) -> None:
    """A dozen customers, ten products and two dozen orders, all drawn from ``rng``."""
    customers = []
    for i in range(1, 13):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        city = rng.choice(CITIES) if rng.random() < 0.85 else None
        mail = f"{first}.{last}{i}@{rng.choice(DOMAINS)}"
        customers.append(
            (i, f"{first.title()} {last.title()}", mail, city, rng.choice(TIERS), int(rng.random() < 0.8), iso_date(rng))
        )
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?, ?)", customers)
    prices = {}
    products = []
    for i, sku in enumerate(rng.sample(range(1000, 10000), 10), start=1):
        prices[i] = rng.randint(199, 49999) / 100
        row = (i, f"SKU-{sku}", words(rng, 2), rng.choice(CATEGORIES), prices[i], rng.randint(0, 500), int(rng.random() < 0.2))
        products.append(row)
    conn.executemany("INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)", products)
    orders = []
    for i in range(1, 25):
        product, quantity = rng.randint(1, 10), rng.randint(1, 8)
        total = round(prices[product] * quantity, 2)
        orders.append((i, rng.randint(1, 12), product, quantity, total, rng.choice(STATUSES), iso_date(rng)))
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?)", orders)


# -- schemas ----------------------------------------------------------------------------------

DB_ID = id_schema("db")
TABLE = {"enum": TABLES}
COLUMN = {"enum": ALL_COLUMNS}
DATE = {"type": "string", "format": "date"}
ROW_ID = {"type": "integer", "minimum": 1, "maximum": 1_000_000}
SCALAR = {"type": ["string", "number", "boolean"], "maxLength": 200}
VALUE_SCHEMAS: dict[str, Any] = {
    "name": {"type": "string", "minLength": 1, "maxLength": 80},
    "email": {"type": "string", "format": "email", "maxLength": 120},
    "city": {"type": "string", "minLength": 1, "maxLength": 60},
    "tier": {"enum": TIERS},
    "active": {"type": "boolean"},
    "joined": DATE,
    "sku": {"type": "string", "pattern": "^SKU-[0-9]{4}$"},
    "category": {"enum": CATEGORIES},
    "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 100000},
    "stock": {"type": "integer", "minimum": 0, "maximum": 100000},
    "discontinued": {"type": "boolean"},
    "customer_id": ROW_ID,
    "product_id": ROW_ID,
    "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
    "status": {"enum": STATUSES},
    "placed": DATE,
}
# A union discriminated by the ``op`` constant: each operator says which operand fields it takes.
CONDITION = {
    "oneOf": [
        *(obj({"column": COLUMN, "op": {"const": op}, "value": SCALAR}, ["column", "op", "value"]) for op in COMPARISONS),
        obj(
            {
                "column": COLUMN,
                "op": {"const": "in"},
                "values": {"type": "array", "items": SCALAR, "minItems": 1, "maxItems": 10, "uniqueItems": True},
            },
            ["column", "op", "values"],
        ),
        obj(
            {"column": COLUMN, "op": {"const": "between"}, "low": {"type": "number"}, "high": {"type": "number"}},
            ["column", "op", "low", "high"],
        ),
        obj(
            {"column": COLUMN, "op": {"const": "contains"}, "text": {"type": "string", "minLength": 1, "maxLength": 60}},
            ["column", "op", "text"],
        ),
        obj({"column": COLUMN, "op": {"const": "is_null"}}, ["column", "op"]),
    ]
}
WHERE = {"type": "array", "items": CONDITION, "maxItems": 5}
HAVING = {
    "oneOf": [
        obj(
            {
                "kind": {"const": "count"},
                "op": {"enum": COMPARISONS},
                "value": {"type": "integer", "minimum": 0, "maximum": 100000},
            },
            ["kind", "op", "value"],
        ),
        obj({"kind": {"const": "value"}, "op": {"enum": COMPARISONS}, "value": {"type": "number"}}, ["kind", "op", "value"]),
    ]
}
_BETWEEN = {"id": "between_order", "kind": "compare", "each": "/where", "left": "/low", "op": "<=", "right": "/high"}


def _columns_rules(pointer: str, *, require: bool) -> list[dict[str, Any]]:
    """Per table: the columns ``pointer`` may not name (and, for inserts, those it must)."""
    rules = []
    for table, cols in COLUMNS.items():
        rule: dict[str, Any] = {"id": f"{table}_columns", "kind": "required_if", "when": "/table", "equals": table}
        if require:
            rule["then_required"] = [f"{pointer}/{c}" for c in REQUIRED[table]]
        rule["then_forbidden"] = [f"{pointer}/{c}" for c in VALUE_SCHEMAS if c not in cols]
        rules.append(rule)
    return rules


# -- samplers ---------------------------------------------------------------------------------


def _gen_value(rng: random.Random, box: DatabaseSandbox, db_id: str, column: str) -> Any:
    """A fresh, storable value for ``column`` (foreign keys point at existing rows)."""
    if column == "name":
        return f"{rng.choice(FIRST_NAMES).title()} {rng.choice(LAST_NAMES).title()}"
    if column == "email":
        taken = {r["email"] for r in box.rows(db_id, "customers")}
        while True:
            mail = f"{rng.choice(FIRST_NAMES)}.{rng.choice(LAST_NAMES)}{rng.randint(100, 999)}@{rng.choice(DOMAINS)}"
            if mail not in taken:
                return mail
    if column == "sku":
        taken = {r["sku"] for r in box.rows(db_id, "products")}
        while True:
            sku = f"SKU-{rng.randint(1000, 9999)}"
            if sku not in taken:
                return sku
    if column in ("customer_id", "product_id"):
        return rng.choice(box.rows(db_id, "customers" if column == "customer_id" else "products"))["id"]
    simple = {
        "city": lambda: rng.choice(CITIES),
        "tier": lambda: rng.choice(TIERS),
        "active": lambda: rng.random() < 0.5,
        "joined": lambda: iso_date(rng),
        "category": lambda: rng.choice(CATEGORIES),
        "price": lambda: rng.randint(199, 49999) / 100,
        "stock": lambda: rng.randint(0, 500),
        "discontinued": lambda: rng.random() < 0.5,
        "quantity": lambda: rng.randint(1, 12),
        "status": lambda: rng.choice(STATUSES),
        "placed": lambda: iso_date(rng),
    }
    return simple[column]()


def _condition_for(rng: random.Random, table: str, row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A condition that ``row`` satisfies, on a random column of it."""
    column = rng.choice([c for c in COLUMNS[table] if c != "id"])
    kind, value = COLUMNS[table][column], row[column]
    if value is None:
        return {"column": column, "op": "is_null"}
    ops = ["eq"]
    if kind in ("int", "real"):
        ops += ["between", "ge", "le"]
    if kind in ("text", "date"):
        ops += ["contains", "in"]
    if kind == "date":
        ops += ["le", "ge"]
    op = rng.choice(ops)
    if op == "between":
        return {
            "column": column,
            "op": "between",
            "low": math.floor(value) - rng.randint(0, 5),
            "high": math.ceil(value) + rng.randint(0, 5),
        }
    if op == "contains":
        size = min(len(value), rng.randint(2, 5))
        start = rng.randint(0, len(value) - size)
        return {"column": column, "op": "contains", "text": value[start : start + size]}
    if op == "in":
        others = sorted({r[column] for r in rows if r[column] is not None and r[column] != value})
        return {"column": column, "op": "in", "values": [value, *rng.sample(others, min(len(others), rng.randint(0, 3)))]}
    return {"column": column, "op": op, "value": value}


def _pick_row(
    rng: random.Random, box: DatabaseSandbox, tables: list[str] = TABLES
) -> tuple[str, str, dict[str, Any], list[dict[str, Any]]]:
    db_id = rng.choice(sorted(box.databases))
    table = rng.choice(tables)
    rows = box.rows(db_id, table)
    return db_id, table, rng.choice(rows), rows


def _sample_select(rng: random.Random, box: DatabaseSandbox) -> dict[str, Any]:
    db_id, table, row, rows = _pick_row(rng, box)
    cols = list(COLUMNS[table])
    picked = sorted(rng.sample(cols, rng.randint(1, len(cols))), key=cols.index)
    args: dict[str, Any] = {"database_id": db_id, "table": table, "columns": picked}
    if rng.random() < 0.7:
        args["where"] = [_condition_for(rng, table, row, rows) for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.6:
        args["order_by"] = {"column": rng.choice(cols), "direction": rng.choice(["asc", "desc"])}
        args["limit"] = rng.randint(1, 50)
        if "where" not in args and rng.random() < 0.5:
            args["offset"] = rng.randint(0, 5)
    return args


def _sample_insert(rng: random.Random, box: DatabaseSandbox) -> dict[str, Any]:
    db_id = rng.choice(sorted(box.databases))
    table = rng.choice(TABLES)
    optional = [c for c in COLUMNS[table] if c not in READ_ONLY and c not in REQUIRED[table]]
    cols = [*REQUIRED[table], *rng.sample(optional, rng.randint(0, len(optional)))]
    return {"database_id": db_id, "table": table, "values": {c: _gen_value(rng, box, db_id, c) for c in cols}}


def _sample_update(rng: random.Random, box: DatabaseSandbox) -> dict[str, Any]:
    db_id, table, row, rows = _pick_row(rng, box)
    settable = [c for c in COLUMNS[table] if c not in READ_ONLY and c not in UNIQUE_COLUMNS[table]]
    changes = {
        c: _gen_value(rng, box, db_id, c) for c in sorted(rng.sample(settable, rng.randint(1, 2)), key=list(COLUMNS[table]).index)
    }
    where = [{"column": "id", "op": "eq", "value": row["id"]}] if rng.random() < 0.5 else [_condition_for(rng, table, row, rows)]
    return {"database_id": db_id, "table": table, "set": changes, "where": where}


def _sample_delete(rng: random.Random, box: DatabaseSandbox) -> dict[str, Any]:
    db_id = rng.choice(sorted(box.databases))
    ordered = {r["customer_id"] for r in box.rows(db_id, "orders")}
    lonely = [r for r in box.rows(db_id, "customers") if r["id"] not in ordered]
    if lonely and rng.random() < 0.3:
        table, where = "customers", [{"column": "id", "op": "eq", "value": rng.choice(lonely)["id"]}]
    else:
        table, rows = "orders", box.rows(db_id, "orders")
        row = rng.choice(rows)
        where = [_condition_for(rng, table, row, rows) for _ in range(rng.randint(1, 2))]
    count = box.count_matching(db_id, table, where)
    return {"database_id": db_id, "table": table, "where": where, "max_rows": min(100, count + rng.randint(0, 3))}


def _sample_aggregate(rng: random.Random, box: DatabaseSandbox) -> dict[str, Any]:
    db_id, table, row, rows = _pick_row(rng, box)
    numeric = [c for c, kind in COLUMNS[table].items() if kind in ("int", "real") and c != "id"]
    function = rng.choice(FUNCTIONS if numeric else ["count", "min", "max"])
    args: dict[str, Any] = {"database_id": db_id, "table": table, "function": function}
    if function in ("sum", "avg"):
        args["column"] = rng.choice(numeric)
    elif function in ("min", "max"):
        args["column"] = rng.choice([c for c in COLUMNS[table] if c != "id"])
    elif rng.random() < 0.5:
        args["column"] = rng.choice(list(COLUMNS[table]))
    if rng.random() < 0.3:
        args["where"] = [_condition_for(rng, table, row, rows)]
    if rng.random() < 0.7:
        args["group_by"] = rng.choice(GROUPABLE[table])
        numeric_result = function not in ("min", "max") or args["column"] in numeric
        if rng.random() < 0.5:
            if numeric_result and rng.random() < 0.5:
                args["having"] = {"kind": "value", "op": "ge", "value": 0}
            else:
                args["having"] = rng.choice(
                    [{"kind": "count", "op": "ge", "value": 1}, {"kind": "count", "op": "gt", "value": 0}]
                )
    return args


def _sample_index(rng: random.Random, box: DatabaseSandbox) -> dict[str, Any]:
    db_id = rng.choice(sorted(box.databases))
    table = rng.choice(TABLES)
    if rng.random() < 0.3:
        columns, unique = [rng.choice(UNIQUE_COLUMNS[table])], True
    else:
        cols = [c for c in COLUMNS[table] if c != "id"]
        columns, unique = rng.sample(cols, rng.randint(1, 2)), False
    name = f"idx_{table}_{'_'.join(columns)}"[:44]
    return {"database_id": db_id, "table": table, "name": name, "columns": columns, "unique": unique}


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="select_rows",
        family="database",
        description="Read rows of one table, filtered, sorted and paged.",
        schema=obj(
            {
                "database_id": DB_ID,
                "table": TABLE,
                "columns": {"type": "array", "items": COLUMN, "minItems": 1, "maxItems": 8, "uniqueItems": True},
                "where": WHERE,
                "order_by": obj({"column": COLUMN, "direction": {"enum": ["asc", "desc"]}}, ["column"]),
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "offset": {"type": "integer", "minimum": 0, "maximum": 10000},
            },
            ["database_id", "table", "columns"],
        ),
        contract={
            "rules": [
                _BETWEEN,
                {"id": "paging_needs_order", "kind": "required_if", "when": "/offset", "then_required": ["/order_by", "/limit"]},
            ]
        },
        immutable=("/database_id",),
        sample=_sample_select,
        intros=("Look something up in the database.", "Query this table for me.", "Show me the matching rows."),
        labels={
            "where": "filter conditions",
            "order_by": "sort order",
            "limit": "maximum number of rows",
            "offset": "rows to skip",
        },
        renamed=(("fields", "columns"),),
    ),
    ToolSpec(
        name="insert_row",
        family="database",
        description="Insert one row into a table; the database assigns its id.",
        schema=obj(
            {"database_id": DB_ID, "table": TABLE, "values": obj(VALUE_SCHEMAS, [], minProperties=1, maxProperties=8)},
            ["database_id", "table", "values"],
        ),
        contract={"rules": _columns_rules("/values", require=True)},
        immutable=("/database_id",),
        sample=_sample_insert,
        intros=("Add a record to the database.", "Insert this row.", "Please store a new entry in the table."),
        labels={"values": "column values"},
        renamed=(("row", "values"),),
    ),
    ToolSpec(
        name="update_rows",
        family="database",
        description="Change columns of the rows matching at least one condition.",
        schema=obj(
            {
                "database_id": DB_ID,
                "table": TABLE,
                "set": obj(VALUE_SCHEMAS, [], minProperties=1, maxProperties=6),
                "where": {**WHERE, "minItems": 1},
            },
            ["database_id", "table", "set", "where"],
        ),
        contract={"rules": [_BETWEEN, *_columns_rules("/set", require=False)]},
        immutable=("/database_id",),
        sample=_sample_update,
        intros=("Update some records.", "Change these rows in the database.", "Please edit the matching entries."),
        labels={"set": "new column values", "where": "filter conditions"},
    ),
    ToolSpec(
        name="delete_rows",
        family="database",
        description="Delete the rows matching at least one condition, refusing if more than max_rows match.",
        schema=obj(
            {
                "database_id": DB_ID,
                "table": TABLE,
                "where": {**WHERE, "minItems": 1},
                "max_rows": {"type": "integer", "minimum": 1, "maximum": 100},
            },
            ["database_id", "table", "where", "max_rows"],
        ),
        contract={"rules": [_BETWEEN]},
        immutable=("/database_id",),
        sample=_sample_delete,
        intros=("Delete some records.", "Remove these rows from the table.", "Please purge the matching entries."),
        labels={"where": "filter conditions", "max_rows": "maximum number of rows to delete"},
    ),
    ToolSpec(
        name="aggregate",
        family="database",
        description="Count, sum, average or take the min/max of a column, optionally per group.",
        schema=obj(
            {
                "database_id": DB_ID,
                "table": TABLE,
                "function": {"enum": FUNCTIONS},
                "column": COLUMN,
                "where": WHERE,
                "group_by": COLUMN,
                "having": HAVING,
            },
            ["database_id", "table", "function"],
        ),
        contract={
            "rules": [
                _BETWEEN,
                {"id": "having_needs_groups", "kind": "required_if", "when": "/having", "then_required": ["/group_by"]},
                *(
                    {
                        "id": f"{f}_needs_column",
                        "kind": "required_if",
                        "when": "/function",
                        "equals": f,
                        "then_required": ["/column"],
                    }
                    for f in ("sum", "avg", "min", "max")
                ),
            ]
        },
        immutable=("/database_id",),
        sample=_sample_aggregate,
        intros=("Give me some totals from the database.", "Summarise this table.", "Compute a statistic over the rows."),
        labels={
            "function": "aggregate function",
            "group_by": "grouping column",
            "having": "group filter",
            "where": "filter conditions",
        },
    ),
    ToolSpec(
        name="create_index",
        family="database",
        description="Create a (possibly unique) index on columns of a table.",
        schema=obj(
            {
                "database_id": DB_ID,
                "table": TABLE,
                "name": {"type": "string", "pattern": f"^{INDEX_NAME}$"},
                "columns": {"type": "array", "items": COLUMN, "minItems": 1, "maxItems": 3, "uniqueItems": True},
                "unique": {"type": "boolean"},
            },
            ["database_id", "table", "name", "columns"],
        ),
        immutable=("/database_id",),
        sample=_sample_index,
        intros=("Speed up lookups on this table.", "Please add an index.", "Create an index for me."),
        labels={"name": "index name", "unique": "unique index"},
    ),
)
