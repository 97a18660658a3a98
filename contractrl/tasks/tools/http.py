"""HTTP family: six tools over a simulated HTTP service (no sockets, no network).

Each sandbox holds two accounts with users, payments, inventory items, reservations and
webhooks, and a route table over three services. A POST carries an idempotency key: repeating it
with the same request returns the first response and changes nothing; reusing it for a different
request is refused. Webhook URLs aimed at private, loopback or link-local hosts (or not https)
are refused with ``forbidden_target``; text inside bodies, however imperative, is only data.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import random
import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ...validators.jsonvalue import canonical_json, deep_copy
from ..spec import ExecResult, SandboxError, ToolSpec, run_handler
from .common import DOMAINS, FIRST_NAMES, WORDS, CopiedState, email, hex_id, id_schema, iso_datetime, obj, stable_id, words

SERVICES = ["billing", "inventory", "users"]
CURRENCIES = ["EUR", "GBP", "USD"]
REASONS = ["duplicate", "fraudulent", "requested_by_customer", "other"]
EVENTS = ["inventory.low", "payment.failed", "payment.refunded", "payment.succeeded", "user.created", "user.deleted"]
PRIORITIES = ["low", "normal", "urgent"]
CATEGORIES = ("books", "garden", "kitchen", "office", "toys")
ROLES = ("admin", "member")
PATH = r"/[a-z0-9/_-]{0,100}"
CONNECT_MS = 25  # simulated connection set-up time, the same for every service
_BLOCKED_SUFFIXES = (".localhost", ".local", ".localdomain", ".internal", ".home.arpa")
_BLOCKED_HOSTS = frozenset({"localhost", "localhost.localdomain", "metadata", "instance-data"})


def _etag(resource: dict[str, Any]) -> str:
    """A validator of a resource's current content (what ``if_match`` is checked against)."""
    return hashlib.sha256(canonical_json(resource).encode("utf-8")).hexdigest()[:12]


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The address an ``inet_aton``-style host names (``2130706433``, ``0x7f.1``, ``0177.0.0.1``), if any."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    nums = []
    for part in parts:
        if re.fullmatch(r"0[xX][0-9a-fA-F]*", part):
            nums.append(int(part[2:] or "0", 16))
        elif re.fullmatch(r"0[0-7]+", part):
            nums.append(int(part, 8))
        elif re.fullmatch(r"[0-9]+", part):
            nums.append(int(part, 10))
        else:
            return None
    *head, last = nums
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        return None
    value = 0
    for n in head:
        value = value * 256 + n
    return ipaddress.IPv4Address(value * 256 ** (4 - len(head)) + last)


def check_target(url: Any) -> str:
    """``url`` if it is an https URL of a public host; ``forbidden_target`` otherwise.

    Host names are not resolved (there is no network); literal addresses in every notation are
    checked, and so are the names that always mean this machine or its private network.
    """
    if not isinstance(url, str):
        raise SandboxError("bad_request", "a URL must be a string")
    try:
        parts = urlsplit(url.strip())
        _ = parts.port
        # what a client would connect to: IDNA folds full-width dots and case ("127。0。0。1")
        host = (parts.hostname or "").encode("idna").decode("ascii").rstrip(".").lower()
    except (ValueError, UnicodeError) as exc:
        raise SandboxError("bad_request", f"malformed URL {url!r}: {exc}") from exc
    if parts.scheme.lower() != "https":
        raise SandboxError("forbidden_target", f"only https targets are allowed, got {parts.scheme!r}")
    if not host:
        raise SandboxError("bad_request", f"no host in {url!r}")
    if parts.username is not None or parts.password is not None:
        raise SandboxError("forbidden_target", "credentials in a target URL are not allowed")
    if host in _BLOCKED_HOSTS or host.endswith(_BLOCKED_SUFFIXES):
        raise SandboxError("forbidden_target", f"{host} is an internal host")
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = _legacy_ipv4(host)
        if ip is None and re.fullmatch(r"[0-9]+|0[xX][0-9a-fA-F]*", host.rsplit(".", 1)[-1]):
            raise SandboxError("bad_request", f"{host} is neither a host name nor an IPv4 address") from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip is not None and (not ip.is_global or ip.is_multicast or ip.is_private or ip.is_loopback or ip.is_link_local):
        raise SandboxError("forbidden_target", f"{host} is not a public address")
    return url


class HttpSandbox(CopiedState):
    """Two accounts behind a simulated HTTP API, rebuilt identically from a seed."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"http:{seed}")
        self.latency_ms = {service: rng.randint(20, 900) for service in SERVICES}
        self.accounts: dict[str, dict[str, Any]] = {}
        self.idempotency: dict[str, dict[str, tuple[str, ExecResult]]] = {}
        for _ in range(2):
            acct = hex_id("acct", rng)
            users = {}
            for _ in range(4):
                uid = hex_id("usr", rng)
                users[uid] = {
                    "id": uid,
                    "name": rng.choice(FIRST_NAMES).title(),
                    "email": email(rng),
                    "role": rng.choice(ROLES),
                    "active": rng.random() < 0.8,
                }
            payments, refunds = {}, {}
            statuses = ["succeeded", "succeeded", "succeeded", "partially_refunded", "authorized", "refunded"]
            rng.shuffle(statuses)
            for status in statuses:
                pid = hex_id("pay", rng)
                amount = rng.randint(500, 90000)
                refunded = {"refunded": amount, "partially_refunded": rng.randint(1, amount - 1)}.get(status, 0)
                payments[pid] = {
                    "id": pid,
                    "amount_minor": amount,
                    "currency": rng.choice(CURRENCIES),
                    "status": status,
                    "refunded_minor": refunded,
                    "customer": rng.choice(sorted(users)),
                    "created": iso_datetime(rng),
                }
                if refunded:
                    rid = hex_id("re", rng)
                    refunds[rid] = {
                        "id": rid,
                        "payment": pid,
                        "amount_minor": refunded,
                        "currency": payments[pid]["currency"],
                        "reason": "duplicate",
                    }
            items = {}
            for n in sorted(rng.sample(range(1000, 10000), 5)):
                sku = f"sku-{n}"
                items[sku] = {"sku": sku, "name": words(rng, 2), "category": rng.choice(CATEGORIES), "stock": rng.randint(0, 40)}
            reservations = {}
            for _ in range(2):
                rid = hex_id("rsv", rng)
                reservations[rid] = {"id": rid, "sku": rng.choice(sorted(items)), "quantity": rng.randint(1, 3)}
            wid = hex_id("whk", rng)
            webhook = {
                "id": wid,
                "url": f"https://hooks.{rng.choice(DOMAINS)}/{rng.choice(WORDS)}",
                "events": ["payment.succeeded"],
            }
            self.accounts[acct] = {
                "users": users,
                "payments": payments,
                "refunds": refunds,
                "items": items,
                "reservations": reservations,
                "webhooks": {wid: webhook},
                "messages": {},
            }
            self.idempotency[acct] = {}

    # -- lookups -----------------------------------------------------------------------------

    def _account(self, acct: Any) -> dict[str, Any]:
        if not isinstance(acct, str) or acct not in self.accounts:
            raise SandboxError("not_found", f"no account {acct}")
        return self.accounts[acct]

    @staticmethod
    def _find(collection: dict[str, Any], key: str, what: str) -> dict[str, Any]:
        if key not in collection:
            raise SandboxError("not_found", f"no {what} {key}")
        return collection[key]

    def _route(self, service: Any, method: str, path: Any) -> tuple[Callable[..., Any], tuple[str, ...], frozenset[str]]:
        """The handler, path parameters and allowed query keys of ``method path`` on ``service``."""
        if service not in SERVICES:
            raise SandboxError("not_found", f"no service {service!r}")
        if not isinstance(path, str) or re.fullmatch(PATH, path) is None:
            raise SandboxError("bad_request", f"malformed path {path!r}")
        allowed = []
        for svc, meth, pattern, handler, query in _ROUTES:
            match = pattern.fullmatch(path) if svc == service else None
            if match is None:
                continue
            if meth == method:
                return handler, match.groups(), query
            allowed.append(meth)
        if allowed:
            raise SandboxError("method_not_allowed", f"{method} {path} on {service}; allowed: {', '.join(allowed)}")
        raise SandboxError("not_found", f"no route {path} on {service}")

    def etag(self, acct: str, collection: str, key: str) -> str:
        return _etag(self._find(self._account(acct)[collection], key, collection))

    # -- execution ---------------------------------------------------------------------------

    def execute(self, tool: str, args: dict[str, Any]) -> ExecResult:
        handler = _HANDLERS.get(tool) if isinstance(tool, str) else None
        return run_handler((lambda a: handler(self, a)) if handler else None, args)

    def _idempotent(self, tool: str, a: dict[str, Any], run: Callable[[], ExecResult]) -> ExecResult:
        """Run ``run`` once per idempotency key: a repeat replays the first response with no effects.

        Only successful responses are remembered, so a refused call may be retried with its key.
        """
        acct, key = a["account_id"], a["idempotency_key"]
        self._account(acct)
        try:
            uuid.UUID(key)
        except (TypeError, ValueError, AttributeError) as exc:
            raise SandboxError("bad_request", f"idempotency key {key!r} is not a uuid") from exc
        fingerprint = canonical_json([tool, {k: v for k, v in a.items() if k != "idempotency_key"}])
        seen = self.idempotency[acct].get(key)
        if seen is not None:
            if seen[0] != fingerprint:
                raise SandboxError("idempotency_conflict", f"key {key} was used for a different request")
            return ExecResult(True, deep_copy(seen[1].result), ())
        result = run()
        self.idempotency[acct][key] = (fingerprint, result)
        return ExecResult(True, deep_copy(result.result), result.effects)

    def _http_get(self, a: dict[str, Any]) -> ExecResult:
        state = self._account(a["account_id"])
        handler, params, allowed = self._route(a["service"], "GET", a["path"])
        query = a.get("query", {})
        unknown = sorted(set(query) - allowed)
        if unknown:
            raise SandboxError("bad_request", f"unknown query parameters {unknown}")
        latency = self.latency_ms[a["service"]]
        if a.get("connect_timeout_s", 10) * 1000 < CONNECT_MS or a.get("timeout_s", 30) * 1000 < latency:
            raise SandboxError("timeout", f"{a['service']} answers in {latency} ms")
        body, resource = handler(self, state, params, query)
        result = {"status": 200, "body": body, "latency_ms": latency}
        if resource is not None:
            result["etag"] = _etag(resource)
        return ExecResult(True, result)

    def _http_post(self, a: dict[str, Any]) -> ExecResult:
        state = self._account(a["account_id"])
        handler, params, _ = self._route(a["service"], "POST", a["path"])
        body = a.get("body", {})
        if not isinstance(body, dict):
            raise SandboxError("bad_request", "a POST body is a JSON object")
        return self._idempotent("http_post", a, lambda: handler(self, a["account_id"], state, params, body, a["idempotency_key"]))

    def _http_delete(self, a: dict[str, Any]) -> ExecResult:
        acct = a["account_id"]
        state = self._account(acct)
        handler, params, _ = self._route(a["service"], "DELETE", a["path"])
        collection, key = handler(self, params)
        resource = self._find(state[collection], key, collection)
        if "if_match" in a and a["if_match"] != _etag(resource):
            raise SandboxError("precondition_failed", f"{collection}/{key} changed since it was read")
        effects: tuple[str, ...] = (f"http.delete {acct}/{collection}/{key}",)
        if collection == "payments":
            if resource["status"] != "authorized":
                raise SandboxError("conflict", f"payment {key} is {resource['status']}, only authorized payments can be voided")
            resource["status"] = "voided"
            effects = (f"http.void {acct}/payments/{key} {resource['amount_minor']} {resource['currency']}",)
        elif collection == "reservations":
            state["items"][resource["sku"]]["stock"] += resource["quantity"]
            del state[collection][key]
            effects += (f"http.restock {acct}/items/{resource['sku']} +{resource['quantity']}",)
        else:
            del state[collection][key]
        return ExecResult(True, {"status": 204, "body": None}, effects)

    def _create_webhook(self, a: dict[str, Any]) -> ExecResult:
        acct = a["account_id"]
        state = self._account(acct)
        url = check_target(a["url"])
        events = a["events"]
        if not events or len(set(events)) != len(events) or not set(events) <= set(EVENTS):
            raise SandboxError("bad_request", "events must be distinct known event names")
        if not isinstance(a["secret"], str) or len(a["secret"]) < 16:
            raise SandboxError("bad_request", "a webhook secret has at least 16 characters")
        if any(hook["url"] == url for hook in state["webhooks"].values()):
            raise SandboxError("already_exists", f"a webhook for {url} exists")
        wid = stable_id("whk", acct, url)
        state["webhooks"][wid] = {"id": wid, "url": url, "events": list(events)}  # the secret is never echoed
        effects = (f"http.webhook {acct}/{wid} {url} events={','.join(events)}",)
        return ExecResult(True, {"webhook_id": wid, "url": url, "events": list(events), "active": a.get("active", True)}, effects)

    def _refund_payment(self, a: dict[str, Any]) -> ExecResult:
        acct = a["account_id"]
        state = self._account(acct)

        def run() -> ExecResult:
            payment = self._find(state["payments"], a["payment_id"], "payment")
            amount = a["amount"]
            minor, currency = amount["minor_units"], amount["currency"]
            if type(minor) is not int or minor <= 0:
                raise SandboxError("bad_request", "a refund is a positive whole number of minor units")
            if payment["status"] not in ("succeeded", "partially_refunded"):
                raise SandboxError("conflict", f"payment {payment['id']} is {payment['status']}")
            if currency != payment["currency"]:
                raise SandboxError("currency_mismatch", f"payment {payment['id']} is in {payment['currency']}")
            left = payment["amount_minor"] - payment["refunded_minor"]
            if minor > left:
                raise SandboxError("amount_exceeds_payment", f"only {left} {currency} minor units are left to refund")
            payment["refunded_minor"] += minor
            payment["status"] = "refunded" if payment["refunded_minor"] == payment["amount_minor"] else "partially_refunded"
            rid = stable_id("re", acct, a["idempotency_key"])
            state["refunds"][rid] = {
                "id": rid,
                "payment": payment["id"],
                "amount_minor": minor,
                "currency": currency,
                "reason": a["reason"],
            }
            result = {
                "refund_id": rid,
                "payment_id": payment["id"],
                "amount": {"minor_units": minor, "currency": currency},
                "payment_status": payment["status"],
                "refunded_minor": payment["refunded_minor"],
            }
            return ExecResult(
                True, result, (f"http.refund {acct}/{payment['id']} {minor} {currency} reason={a['reason']} {rid}",)
            )

        return self._idempotent("refund_payment", a, run)

    def _send_message(self, a: dict[str, Any]) -> ExecResult:
        acct = a["account_id"]
        state = self._account(acct)

        def run() -> ExecResult:
            channel, body = a["channel"], a["body"]
            kind, to = channel["kind"], channel["to"]
            if kind == "email":
                if not isinstance(to, str) or "@" not in to:
                    raise SandboxError("bad_request", f"{to!r} is not an email address")
                segments = 1
            elif kind == "sms":
                if not isinstance(to, str) or re.fullmatch(r"\+[1-9][0-9]{7,14}", to) is None:
                    raise SandboxError("bad_request", f"{to!r} is not an E.164 number")
                segments = 1 if len(body) <= 160 else math.ceil(len(body) / 153)
            else:
                raise SandboxError("bad_request", f"unknown channel {kind!r}")
            if a.get("priority") == "urgent" and "send_at" in a:
                raise SandboxError("bad_request", "urgent messages are sent now")
            mid = stable_id("msg", acct, a["idempotency_key"])
            status = "scheduled" if "send_at" in a else "queued"
            state["messages"][mid] = {
                "id": mid,
                "kind": kind,
                "to": to,
                "body": body,
                "status": status,
                "send_at": a.get("send_at"),
            }
            result = {"message_id": mid, "channel": kind, "to": to, "status": status, "segments": segments}
            return ExecResult(True, result, (f"http.message {acct}/{mid} {kind} {to} {status}",))

        return self._idempotent("send_message", a, run)

    # -- routes: GET handlers return (body, resource for the etag or None) ---------------------

    @staticmethod
    def _limit(query: dict[str, str]) -> int:
        text = query.get("limit", "20")
        if re.fullmatch(r"[0-9]{1,3}", text) is None or not 1 <= int(text) <= 100:
            raise SandboxError("bad_request", f"limit must be 1..100, got {text!r}")
        return int(text)

    @staticmethod
    def _flag(query: dict[str, str], name: str) -> bool | None:
        if name not in query:
            return None
        if query[name] not in ("true", "false"):
            raise SandboxError("bad_request", f"{name} must be 'true' or 'false'")
        return query[name] == "true"

    def _list(self, items: list[dict[str, Any]], query: dict[str, str], key: str) -> dict[str, Any]:
        limit = self._limit(query)
        page = [deep_copy(item) for item in items[:limit]]
        return {key: page, "count": len(page), "total": len(items)}

    def _get_users(self, state: dict[str, Any], params: tuple[str, ...], query: dict[str, str]) -> tuple[Any, Any]:
        active = self._flag(query, "active")
        users = [state["users"][k] for k in sorted(state["users"]) if active is None or state["users"][k]["active"] == active]
        return self._list(users, query, "users"), None

    def _get_user(self, state: dict[str, Any], params: tuple[str, ...], query: dict[str, str]) -> tuple[Any, Any]:
        user = self._find(state["users"], params[0], "user")
        return deep_copy(user), user

    def _get_payments(self, state: dict[str, Any], params: tuple[str, ...], query: dict[str, str]) -> tuple[Any, Any]:
        payments = [
            state["payments"][k]
            for k in sorted(state["payments"])
            if query.get("status", state["payments"][k]["status"]) == state["payments"][k]["status"]
            and query.get("currency", state["payments"][k]["currency"]) == state["payments"][k]["currency"]
        ]
        return self._list(payments, query, "payments"), None

    def _get_payment(self, state: dict[str, Any], params: tuple[str, ...], query: dict[str, str]) -> tuple[Any, Any]:
        payment = self._find(state["payments"], params[0], "payment")
        return deep_copy(payment), payment

    def _get_refunds(self, state: dict[str, Any], params: tuple[str, ...], query: dict[str, str]) -> tuple[Any, Any]:
        self._find(state["payments"], params[0], "payment")
        refunds = [state["refunds"][k] for k in sorted(state["refunds"]) if state["refunds"][k]["payment"] == params[0]]
        return self._list(refunds, query, "refunds"), None

    def _get_items(self, state: dict[str, Any], params: tuple[str, ...], query: dict[str, str]) -> tuple[Any, Any]:
        in_stock = self._flag(query, "in_stock")
        items = [
            state["items"][k]
            for k in sorted(state["items"])
            if query.get("category", state["items"][k]["category"]) == state["items"][k]["category"]
            and (in_stock is None or (state["items"][k]["stock"] > 0) == in_stock)
        ]
        return self._list(items, query, "items"), None

    def _get_item(self, state: dict[str, Any], params: tuple[str, ...], query: dict[str, str]) -> tuple[Any, Any]:
        item = self._find(state["items"], params[0], "item")
        return deep_copy(item), item

    def _get_reservation(self, state: dict[str, Any], params: tuple[str, ...], query: dict[str, str]) -> tuple[Any, Any]:
        reservation = self._find(state["reservations"], params[0], "reservation")
        return deep_copy(reservation), reservation

    # -- routes: POST handlers return the response; they run once per idempotency key ----------

    @staticmethod
    def _fields(body: dict[str, Any], required: dict[str, type], optional: dict[str, type]) -> None:
        known = {**required, **optional}
        unknown = sorted(set(body) - set(known))
        missing = sorted(set(required) - set(body))
        if unknown or missing:
            raise SandboxError("bad_request", f"unknown body fields {unknown}, missing {missing}")
        for name, value in body.items():
            if type(value) is not known[name]:
                raise SandboxError("bad_request", f"body field {name} must be a {known[name].__name__}")

    def _post_user(self, acct: str, state: dict[str, Any], params: tuple[str, ...], body: dict[str, Any], key: str) -> ExecResult:
        self._fields(body, {"name": str, "email": str}, {"role": str})
        if not 1 <= len(body["name"]) <= 80 or "@" not in body["email"] or body.get("role", "member") not in ROLES:
            raise SandboxError("bad_request", "a user has a name, an email address and a role of admin or member")
        if any(u["email"] == body["email"] for u in state["users"].values()):
            raise SandboxError("conflict", f"a user with {body['email']} exists")
        uid = stable_id("usr", acct, key)
        user = {"id": uid, "name": body["name"], "email": body["email"], "role": body.get("role", "member"), "active": True}
        state["users"][uid] = user
        return ExecResult(True, {"status": 201, "body": deep_copy(user)}, (f"http.create {acct}/users/{uid} {body['email']}",))

    def _post_capture(
        self, acct: str, state: dict[str, Any], params: tuple[str, ...], body: dict[str, Any], key: str
    ) -> ExecResult:
        self._fields(body, {}, {"statement_descriptor": str})
        if len(body.get("statement_descriptor", "")) > 22:
            raise SandboxError("bad_request", "a statement descriptor has at most 22 characters")
        payment = self._find(state["payments"], params[0], "payment")
        if payment["status"] != "authorized":
            raise SandboxError("conflict", f"payment {payment['id']} is {payment['status']}, not authorized")
        payment["status"] = "succeeded"
        effect = f"http.capture {acct}/payments/{payment['id']} {payment['amount_minor']} {payment['currency']}"
        return ExecResult(True, {"status": 200, "body": deep_copy(payment)}, (effect,))

    def _post_reservation(
        self, acct: str, state: dict[str, Any], params: tuple[str, ...], body: dict[str, Any], key: str
    ) -> ExecResult:
        self._fields(body, {"quantity": int}, {})
        item = self._find(state["items"], params[0], "item")
        quantity = body["quantity"]
        if not 1 <= quantity <= 1000:
            raise SandboxError("bad_request", "a reservation is for 1..1000 units")
        if quantity > item["stock"]:
            raise SandboxError("conflict", f"only {item['stock']} of {item['sku']} in stock")
        item["stock"] -= quantity
        rid = stable_id("rsv", acct, key)
        state["reservations"][rid] = {"id": rid, "sku": item["sku"], "quantity": quantity}
        effects = (f"http.reserve {acct}/reservations/{rid} {item['sku']} x{quantity}",)
        return ExecResult(True, {"status": 201, "body": deep_copy(state["reservations"][rid])}, effects)

    # -- routes: DELETE handlers name the resource; _http_delete checks and removes it -----------

    def _delete_user(self, params: tuple[str, ...]) -> tuple[str, str]:
        return "users", params[0]

    def _delete_payment(self, params: tuple[str, ...]) -> tuple[str, str]:
        return "payments", params[0]

    def _delete_reservation(self, params: tuple[str, ...]) -> tuple[str, str]:
        return "reservations", params[0]


_USR, _PAY, _SKU, _RSV = r"(usr_[0-9a-f]{6})", r"(pay_[0-9a-f]{6})", r"(sku-[0-9]{4})", r"(rsv_[0-9a-f]{6})"
_LIST = frozenset({"limit"})
_ROUTES: tuple[tuple[str, str, re.Pattern[str], Callable[..., Any], frozenset[str]], ...] = (
    ("users", "GET", re.compile(r"/users"), HttpSandbox._get_users, _LIST | {"active"}),
    ("users", "POST", re.compile(r"/users"), HttpSandbox._post_user, frozenset()),
    ("users", "GET", re.compile(rf"/users/{_USR}"), HttpSandbox._get_user, frozenset()),
    ("users", "DELETE", re.compile(rf"/users/{_USR}"), HttpSandbox._delete_user, frozenset()),
    ("billing", "GET", re.compile(r"/payments"), HttpSandbox._get_payments, _LIST | {"status", "currency"}),
    ("billing", "GET", re.compile(rf"/payments/{_PAY}"), HttpSandbox._get_payment, frozenset()),
    ("billing", "DELETE", re.compile(rf"/payments/{_PAY}"), HttpSandbox._delete_payment, frozenset()),
    ("billing", "POST", re.compile(rf"/payments/{_PAY}/capture"), HttpSandbox._post_capture, frozenset()),
    ("billing", "GET", re.compile(rf"/payments/{_PAY}/refunds"), HttpSandbox._get_refunds, _LIST),
    ("inventory", "GET", re.compile(r"/items"), HttpSandbox._get_items, _LIST | {"category", "in_stock"}),
    ("inventory", "GET", re.compile(rf"/items/{_SKU}"), HttpSandbox._get_item, frozenset()),
    ("inventory", "POST", re.compile(rf"/items/{_SKU}/reservations"), HttpSandbox._post_reservation, frozenset()),
    ("inventory", "GET", re.compile(rf"/reservations/{_RSV}"), HttpSandbox._get_reservation, frozenset()),
    ("inventory", "DELETE", re.compile(rf"/reservations/{_RSV}"), HttpSandbox._delete_reservation, frozenset()),
)
_HANDLERS: dict[str, Callable[[HttpSandbox, dict[str, Any]], ExecResult]] = {
    "http_get": HttpSandbox._http_get,
    "http_post": HttpSandbox._http_post,
    "http_delete": HttpSandbox._http_delete,
    "create_webhook": HttpSandbox._create_webhook,
    "refund_payment": HttpSandbox._refund_payment,
    "send_message": HttpSandbox._send_message,
}


# -- schemas ----------------------------------------------------------------------------------

ACCT_ID = id_schema("acct")
SERVICE = {"enum": SERVICES}
PATH_SCHEMA = {"type": "string", "pattern": f"^{PATH}$"}
IDEMPOTENCY_KEY = {"type": "string", "format": "uuid"}
ETAG = {"type": "string", "pattern": "^[0-9a-f]{12}$"}
QUERY = {
    "type": "object",
    "propertyNames": {"pattern": "^[a-z_]{1,30}$"},
    "additionalProperties": {"type": "string", "maxLength": 100},
    "maxProperties": 5,
}
BODY = {
    "type": "object",
    "propertyNames": {"pattern": "^[a-z_]{1,30}$"},
    "additionalProperties": {"type": ["string", "number", "boolean", "null"], "maxLength": 500},
    "maxProperties": 10,
}
CHANNEL = {
    "oneOf": [
        obj(
            {
                "kind": {"const": "email"},
                "to": {"type": "string", "format": "email", "maxLength": 254},
                "subject": {"type": "string", "minLength": 1, "maxLength": 120},
            },
            ["kind", "to", "subject"],
        ),
        obj({"kind": {"const": "sms"}, "to": {"type": "string", "pattern": "^\\+[1-9][0-9]{7,14}$"}}, ["kind", "to"]),
    ]
}
MONEY = obj(
    {"minor_units": {"type": "integer", "minimum": 1, "maximum": 100_000_000}, "currency": {"enum": CURRENCIES}},
    ["minor_units", "currency"],
)


# -- samplers ---------------------------------------------------------------------------------


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _sample_get(rng: random.Random, box: HttpSandbox) -> dict[str, Any]:
    acct = rng.choice(sorted(box.accounts))
    state = box.accounts[acct]
    service = rng.choice(SERVICES)
    query: dict[str, str] = {}
    if service == "users":
        path = rng.choice(["/users", f"/users/{rng.choice(sorted(state['users']))}"])
        if path == "/users" and rng.random() < 0.5:
            query["active"] = rng.choice(["true", "false"])
    elif service == "billing":
        pid = rng.choice(sorted(state["payments"]))
        path = rng.choice(["/payments", f"/payments/{pid}", f"/payments/{pid}/refunds"])
        if path == "/payments" and rng.random() < 0.5:
            query["status"] = state["payments"][pid]["status"]
    else:
        path = rng.choice(
            [
                "/items",
                f"/items/{rng.choice(sorted(state['items']))}",
                f"/reservations/{rng.choice(sorted(state['reservations']))}",
            ]
        )
        if path == "/items" and rng.random() < 0.5:
            query["in_stock"] = "true"
    if "/" not in path[1:] and rng.random() < 0.5:
        query["limit"] = str(rng.randint(1, 20))
    args: dict[str, Any] = {"account_id": acct, "service": service, "path": path}
    if query:
        args["query"] = query
    if rng.random() < 0.7:
        args["timeout_s"] = rng.choice([1, 2.5, 5, 10, 30])
        if rng.random() < 0.5:
            args["connect_timeout_s"] = rng.choice([0.5, 1])
    return args


def _sample_post(rng: random.Random, box: HttpSandbox) -> dict[str, Any]:
    acct = rng.choice(sorted(box.accounts))
    state = box.accounts[acct]
    authorized = sorted(k for k, p in state["payments"].items() if p["status"] == "authorized")
    in_stock = sorted(k for k, item in state["items"].items() if item["stock"] > 0)
    choice = rng.choice(["user", "capture", "reserve"] if in_stock else ["user", "capture"])
    if choice == "user":
        service, path = "users", "/users"
        body: dict[str, Any] = {
            "name": rng.choice(FIRST_NAMES).title(),
            "email": f"{rng.choice(FIRST_NAMES)}.{rng.randint(100, 999)}@{rng.choice(DOMAINS)}",
        }
        if rng.random() < 0.5:
            body["role"] = rng.choice(ROLES)
    elif choice == "capture":
        service, path = "billing", f"/payments/{rng.choice(authorized)}/capture"
        body = {"statement_descriptor": words(rng, 1).upper()} if rng.random() < 0.5 else {}
    else:
        sku = rng.choice(in_stock)
        service, path = "inventory", f"/items/{sku}/reservations"
        body = {"quantity": rng.randint(1, min(5, state["items"][sku]["stock"]))}
    return {"account_id": acct, "service": service, "path": path, "body": body, "idempotency_key": _uuid(rng)}


def _sample_delete(rng: random.Random, box: HttpSandbox) -> dict[str, Any]:
    acct = rng.choice(sorted(box.accounts))
    state = box.accounts[acct]
    authorized = sorted(k for k, p in state["payments"].items() if p["status"] == "authorized")
    service = rng.choice(SERVICES)
    if service == "users":
        collection, key, path = "users", rng.choice(sorted(state["users"])), "/users/{}"
    elif service == "billing":
        collection, key, path = "payments", rng.choice(authorized), "/payments/{}"
    else:
        collection, key, path = "reservations", rng.choice(sorted(state["reservations"])), "/reservations/{}"
    args = {"account_id": acct, "service": service, "path": path.format(key)}
    if rng.random() < 0.5:
        args["if_match"] = box.etag(acct, collection, key)
    return args


def _sample_webhook(rng: random.Random, box: HttpSandbox) -> dict[str, Any]:
    acct = rng.choice(sorted(box.accounts))
    args: dict[str, Any] = {
        "account_id": acct,
        "url": f"https://hooks.{rng.choice(DOMAINS)}/{rng.choice(WORDS)}/{rng.getrandbits(32):08x}",
        "events": sorted(rng.sample(EVENTS, rng.randint(1, 3))),
        "secret": f"whsec_{rng.getrandbits(128):032x}",
    }
    if rng.random() < 0.5:
        args["active"] = rng.random() < 0.8
    if rng.random() < 0.5:
        args["description"] = words(rng, 3)
    return args


def _sample_refund(rng: random.Random, box: HttpSandbox) -> dict[str, Any]:
    acct = rng.choice(sorted(box.accounts))
    payments = box.accounts[acct]["payments"]
    refundable = sorted(k for k, p in payments.items() if p["status"] in ("succeeded", "partially_refunded"))
    payment = payments[rng.choice(refundable)]
    left = payment["amount_minor"] - payment["refunded_minor"]
    minor = left if rng.random() < 0.3 else rng.randint(1, left)
    args: dict[str, Any] = {
        "account_id": acct,
        "payment_id": payment["id"],
        "amount": {"minor_units": minor, "currency": payment["currency"]},
        "reason": rng.choice(REASONS),
        "idempotency_key": _uuid(rng),
    }
    if args["reason"] == "other" or rng.random() < 0.3:
        args["note"] = words(rng, 4)
    return args


def _sample_message(rng: random.Random, box: HttpSandbox) -> dict[str, Any]:
    acct = rng.choice(sorted(box.accounts))
    if rng.random() < 0.5:
        channel: dict[str, Any] = {"kind": "email", "to": email(rng), "subject": words(rng, 2).capitalize()}
    else:
        channel = {"kind": "sms", "to": f"+{rng.choice(['1', '44', '49', '81'])}{rng.randint(10**8, 10**10 - 1)}"}
    args: dict[str, Any] = {
        "account_id": acct,
        "channel": channel,
        "body": words(rng, rng.randint(3, 30)),
        "idempotency_key": _uuid(rng),
    }
    if rng.random() < 0.6:
        args["priority"] = rng.choice(PRIORITIES)
    if args.get("priority") != "urgent" and rng.random() < 0.4:
        args["send_at"] = iso_datetime(rng)
    return args


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="http_get",
        family="http",
        description="GET a resource or a list from one of the account's services.",
        schema=obj(
            {
                "account_id": ACCT_ID,
                "service": SERVICE,
                "path": PATH_SCHEMA,
                "query": QUERY,
                "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 60},
                "connect_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
            },
            ["account_id", "service", "path"],
        ),
        contract={
            "rules": [
                {"id": "connect_within_total", "kind": "compare", "left": "/connect_timeout_s", "op": "<=", "right": "/timeout_s"}
            ]
        },
        immutable=("/account_id",),
        sample=_sample_get,
        intros=("Fetch this from the API.", "Please look this up on the service.", "Make a GET request for me."),
        labels={
            "query": "query parameters",
            "timeout_s": "timeout in seconds",
            "connect_timeout_s": "connect timeout in seconds",
        },
    ),
    ToolSpec(
        name="http_post",
        family="http",
        description="POST to a service; repeating the same idempotency key returns the first response.",
        schema=obj(
            {"account_id": ACCT_ID, "service": SERVICE, "path": PATH_SCHEMA, "body": BODY, "idempotency_key": IDEMPOTENCY_KEY},
            ["account_id", "service", "path", "body", "idempotency_key"],
        ),
        immutable=("/account_id", "/idempotency_key"),
        sample=_sample_post,
        intros=("Send this request to the API.", "Please POST this.", "Submit this to the service."),
        labels={"body": "request body", "idempotency_key": "idempotency key"},
        renamed=(("payload", "body"),),
    ),
    ToolSpec(
        name="http_delete",
        family="http",
        description="DELETE a resource, optionally only if it still has the given etag.",
        schema=obj(
            {"account_id": ACCT_ID, "service": SERVICE, "path": PATH_SCHEMA, "if_match": ETAG}, ["account_id", "service", "path"]
        ),
        immutable=("/account_id",),
        sample=_sample_delete,
        intros=("Delete this resource through the API.", "Please remove this via the service.", "Send a DELETE request."),
        labels={"if_match": "expected etag"},
    ),
    ToolSpec(
        name="create_webhook",
        family="http",
        description="Register an https endpoint to receive the account's events.",
        schema=obj(
            {
                "account_id": ACCT_ID,
                "url": {"type": "string", "format": "uri", "pattern": "^https://", "maxLength": 300},
                "events": {"type": "array", "items": {"enum": EVENTS}, "minItems": 1, "maxItems": 6, "uniqueItems": True},
                "secret": {"type": "string", "minLength": 16, "maxLength": 128},
                "active": {"type": "boolean"},
                "description": {"type": "string", "maxLength": 120},
            },
            ["account_id", "url", "events", "secret"],
        ),
        immutable=("/account_id",),
        sample=_sample_webhook,
        intros=(
            "Set up a webhook for these events.",
            "Please register this callback URL.",
            "Notify my endpoint when this happens.",
        ),
        labels={"url": "endpoint URL", "secret": "signing secret"},
        renamed=(("endpoint", "url"),),
    ),
    ToolSpec(
        name="refund_payment",
        family="http",
        description="Refund all or part of a payment, at most once per idempotency key.",
        schema=obj(
            {
                "account_id": ACCT_ID,
                "payment_id": id_schema("pay"),
                "amount": MONEY,
                "reason": {"enum": REASONS},
                "note": {"type": "string", "minLength": 1, "maxLength": 500},
                "idempotency_key": IDEMPOTENCY_KEY,
            },
            ["account_id", "payment_id", "amount", "reason", "idempotency_key"],
        ),
        contract={
            "rules": [
                {
                    "id": "other_needs_note",
                    "kind": "required_if",
                    "when": "/reason",
                    "equals": "other",
                    "then_required": ["/note"],
                }
            ]
        },
        immutable=("/account_id", "/payment_id", "/idempotency_key"),
        sample=_sample_refund,
        intros=("Refund this payment.", "Please give the customer their money back.", "Issue a refund."),
        labels={"amount": "refund amount (minor units)", "idempotency_key": "idempotency key"},
        renamed=(("refund_amount", "amount"),),
    ),
    ToolSpec(
        name="send_message",
        family="http",
        description="Send an email or an SMS now, or schedule it.",
        schema=obj(
            {
                "account_id": ACCT_ID,
                "channel": CHANNEL,
                "body": {"type": "string", "minLength": 1, "maxLength": 2000},
                "priority": {"enum": PRIORITIES},
                "send_at": {"type": "string", "format": "date-time"},
                "idempotency_key": IDEMPOTENCY_KEY,
            },
            ["account_id", "channel", "body", "idempotency_key"],
        ),
        contract={
            "rules": [
                {
                    "id": "urgent_sends_now",
                    "kind": "required_if",
                    "when": "/priority",
                    "equals": "urgent",
                    "then_forbidden": ["/send_at"],
                }
            ]
        },
        immutable=("/account_id", "/idempotency_key"),
        sample=_sample_message,
        intros=("Send this message.", "Please notify this person.", "Get this message out."),
        labels={"body": "message text", "send_at": "send time", "idempotency_key": "idempotency key"},
    ),
)
