"""The ``contractrl`` command: one entry point, one sub-command per job.

Exit statuses are part of the contract: 0 accepted / success, 1 rejected, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from .errors import ContractRLError
from .io import read_bytes, read_json_file
from .validators import Budgets, RepairContract, Verifier, VerifierReport, load_contract
from .validators.patch import OP_KINDS
from .validators.schema import BACKENDS

EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2


def _emit(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def _verifier(args: argparse.Namespace) -> Verifier:
    schema = read_json_file(args.schema, "schema")
    contract = load_contract(read_json_file(args.contract, "contract")) if args.contract else None
    kwargs: dict[str, Any] = {"backend": args.backend, "lenient": args.lenient}
    return Verifier.build(schema, contract, **kwargs) if contract else Verifier.build(schema, **kwargs)


def cmd_check(args: argparse.Namespace) -> int:
    verifier = _verifier(args)
    report, _ = verifier.verify_text(read_bytes(args.call, "call"))
    _emit(report.to_dict())
    return EXIT_OK if report.accepted else EXIT_REJECTED


def _allowed_ops(text: str) -> frozenset[str]:
    ops = frozenset(o.strip() for o in text.split(",") if o.strip())
    unknown = ops - set(OP_KINDS)
    if unknown or not ops:
        raise argparse.ArgumentTypeError(f"--allow-ops takes a comma list of {','.join(OP_KINDS)}")
    return ops


def cmd_patch(args: argparse.Namespace) -> int:
    verifier = _verifier(args)
    call = read_json_file(args.call, "call")
    patch_text = read_bytes(args.patch, "patch")
    contract = RepairContract(verifier, Budgets(max_attempts=1, max_ops=args.max_ops, allowed_ops=args.allow_ops), args.immutable)
    result = contract.step(contract.initial_state(call), patch_text)
    if result.patched is not None:
        report = result.state.report
    else:
        rec = result.record
        report = VerifierReport.single(result.outcome, rec.message, pointer=rec.pointer)
    _emit(
        {
            "outcome": result.outcome.value,
            "object": result.patched,
            "report": report.to_dict(),
            "collateral": list(result.collateral),
        }
    )
    return EXIT_OK if result.accepted_object is not None else EXIT_REJECTED


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import format_rows, initial_report_json, run_demo

    print("ContractRL mechanism demo: scripted actions through the real validator (not a learned policy).\n")
    print("Verifier report of the corrupted call:")
    print(initial_report_json())
    rows = run_demo()
    print()
    print(format_rows(rows))
    unsafe = [r for r in rows if r.dispatched and r.outcome != "accepted"]
    print(f"\n{len(rows)} attempts, {sum(r.dispatched for r in rows)} dispatched, {len(unsafe)} unsafe dispatches.")
    return EXIT_OK if not unsafe else EXIT_REJECTED


def _add_verifier_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schema", required=True, help="JSON Schema file (BFCL, draft-04/06/07 or 2020-12)")
    p.add_argument("--call", required=True, help="the tool call's arguments as JSON")
    p.add_argument("--backend", choices=BACKENDS, default="rs", help="validation backend (default: rs)")
    p.add_argument("--contract", help="cross-field rules file: {'rules': [...]}")
    p.add_argument("--lenient", action="store_true", help="drop unknown schema keywords/formats instead of failing")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contractrl", description="Train and run tool-call repair policies.")
    parser.add_argument("--version", action="version", version=f"contractrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="verify a tool call against a schema and print the typed report")
    _add_verifier_args(check)
    check.set_defaults(func=cmd_check)

    patch = sub.add_parser("patch", help="apply an RFC 6902 patch under the action mask and re-verify")
    _add_verifier_args(patch)
    patch.add_argument("--patch", required=True, help="the patch (JSON array of operations) or ABSTAIN")
    patch.add_argument(
        "--immutable", action="append", default=[], metavar="POINTER", help="a path the patch may not change (repeatable)"
    )
    patch.add_argument("--max-ops", type=int, default=2, help="operation budget K (default: 2)")
    patch.add_argument(
        "--allow-ops", type=_allowed_ops, default=frozenset(OP_KINDS), help="comma list of allowed ops (default: all six)"
    )
    patch.set_defaults(func=cmd_patch)

    demo = sub.add_parser("demo", help="walk through every repair outcome on a built-in tool")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ContractRLError as exc:
        print(f"contractrl {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
