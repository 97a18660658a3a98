"""How often a GRPO run's policy abstains on each twin of its contrast pairs, block by block.

With ``experimental.contrast.grpo=true`` each unrepairable case a step draws is rolled out beside
its contrast (the same call and report, the withheld value stated in the request). The request is
the only thing that tells the twins apart, so a policy that has learned when to abstain abstains on
the unrepairable twin and repairs the contrast; one that has not abstains on both at one rate.
This reads the run's own training rollouts (``rollouts/step-*``, each a frozen ledger) and gives,
in blocks of steps, the abstention rate on the unrepairable twins, on their contrasts and on the
missing_required cases drawn (whose report is the same as an unrepairable case's), with the number
of episodes and groups and how many groups abstained in every episode: the figures of RESULTS.md's
"Twenty GRPO steps on both seeds".

    python benchmarks/twin_abstention.py runs/exp_g19 [runs/exp_g19s1 ...] [--block 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from contractrl.errors import ContractRLError, InputFileError
from contractrl.rollout.ledger import read_ledger
from contractrl.tasks.contrast import CONTRAST_SUFFIX

SIDES = ("unrepairable", "contrast", "missing_required")


@dataclass(frozen=True)
class SideRates:
    """One side of the twins (or missing_required) over one block of steps."""

    side: str
    episodes: int
    abstained: int
    groups: int
    all_abstain_groups: int

    @property
    def rate(self) -> float | None:
        return self.abstained / self.episodes if self.episodes else None


@dataclass(frozen=True)
class BlockRates:
    """A block of consecutive steps: each side's rates, and the pairs whose 2 x group episodes all abstained."""

    first_step: int
    last_step: int
    sides: tuple[SideRates, ...]
    pairs: int
    all_abstain_pairs: int

    def side(self, name: str) -> SideRates:
        return next(s for s in self.sides if s.side == name)


def _side(row: dict[str, Any]) -> str | None:
    if str(row["case_id"]).endswith(CONTRAST_SUFFIX):
        return "contrast"
    family = row["case_family"]
    return family if family in ("unrepairable", "missing_required") else None


def block_rates(steps: Sequence[tuple[int, Iterable[dict[str, Any]]]], block: int = 5) -> list[BlockRates]:
    """Abstention per side over blocks of ``block`` steps, from (step number, ledger rows) in step order.

    A group is one case's episodes within one step; a pair is an unrepairable case and its contrast
    within one step (the contrast's id is the case's plus ``-contrast``).
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    blocks: list[BlockRates] = []
    for start in range(0, len(steps), block):
        chunk = steps[start : start + block]
        groups: dict[tuple[int, str, str], list[bool]] = {}
        for step, rows in chunk:
            for row in rows:
                side = _side(row)
                if side is not None:
                    base = str(row["case_id"]).removesuffix(CONTRAST_SUFFIX)
                    groups.setdefault((step, base, side), []).append(bool(row["abstained"]))
        sides = []
        for name in SIDES:
            mine = [g for key, g in groups.items() if key[2] == name]
            sides.append(
                SideRates(
                    side=name,
                    episodes=sum(len(g) for g in mine),
                    abstained=sum(sum(g) for g in mine),
                    groups=len(mine),
                    all_abstain_groups=sum(all(g) for g in mine),
                )
            )
        pairs = [(s, c) for (s, c, side) in groups if side == "contrast" and (s, c, "unrepairable") in groups]
        blocks.append(
            BlockRates(
                first_step=chunk[0][0],
                last_step=chunk[-1][0],
                sides=tuple(sides),
                pairs=len(pairs),
                all_abstain_pairs=sum(all(groups[(s, c, "unrepairable")]) and all(groups[(s, c, "contrast")]) for s, c in pairs),
            )
        )
    return blocks


def run_steps(run_dir: Path) -> list[tuple[int, list[dict[str, Any]]]]:
    """The run's training rollouts, each step's ledger verified as it is read."""
    steps = sorted((int(d.name.removeprefix("step-")), d) for d in (run_dir / "rollouts").glob("step-*") if d.name[5:].isdigit())
    if not steps:
        raise InputFileError(f"{run_dir}: no rollouts/step-* directories; is it a GRPO run's output directory?")
    return [(number, read_ledger(d)) for number, d in steps]


def _fmt(side: SideRates) -> str:
    rate = "n/a" if side.rate is None else f"{side.rate:.2f}"
    return f"{rate} ({side.episodes} ep, {side.groups} groups, {side.all_abstain_groups} all-abstain)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="GRPO run directories (each with rollouts/step-*)")
    parser.add_argument("--block", type=int, default=5, help="steps per block (default 5)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.block < 1:
        parser.error(f"--block must be >= 1, got {args.block}")
    result: dict[str, list[dict[str, Any]]] = {}
    for run in args.runs:
        try:
            blocks = block_rates(run_steps(run), args.block)
        except ContractRLError as exc:  # a missing run, or a step ledger not frozen or altered
            print(f"error: {exc}", file=sys.stderr)
            return 2
        result[str(run)] = [{**asdict(b), "rates": {s.side: s.rate for s in b.sides}} for b in blocks]
        if not args.json:
            for b in blocks:
                print(f"{run} steps {b.first_step}-{b.last_step}: pairs {b.pairs} ({b.all_abstain_pairs} all-abstain)")
                for side in b.sides:
                    print(f"  {side.side:>16}: {_fmt(side)}")
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    return 0
