"""Seeded case generation over a source of valid calls (the built-in catalog, BFCL data or a JSON
Schema corpus: tasks/sources.py), or over a model's natural failures (tasks/natural.py).

Case ``i`` of a run depends only on (seed, i) and the configuration, never on the cases before it,
so the same seed gives the same cases however the work is split. Corruption families are assigned
round-robin, so every family gets its share; the tool and the sandbox seed are drawn per case.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..validators import Verifier, load_contract
from ..validators.jsonvalue import canonical_json
from ..validators.transition import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_OPS
from .cases import ABSTAIN, Case, OfflineCase, PublicCase, cluster_key
from .catalog import TOOL_FAMILIES, tools_of
from .corruptions import CORRUPTION_FAMILIES, Corruption, corrupt
from .natural import NaturalSource, failure_case
from .sources import BUILTIN, CallSource, SourceCall, check_source, make_source, source_families, stated_contrast
from .spec import ToolSpec

MAX_DRAWS = 200


@dataclass(frozen=True)
class GenerateConfig:
    seed: int
    n: int
    families: tuple[str, ...] = CORRUPTION_FAMILIES
    tool_families: tuple[str, ...] = TOOL_FAMILIES
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_ops: int = DEFAULT_MAX_OPS
    source: str = BUILTIN  # or bfcl:CATEGORY, bfcl:DIR, jsonschema:DIR, bfcl-results:DIR, bfcl-results-live:DIR
    request_style: str = "verbatim"  # or paraphrase (tasks/requests.py)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"n must be >= 1, got {self.n}")
        unknown = set(self.families) - set(CORRUPTION_FAMILIES)
        if unknown:
            raise ConfigError(f"unknown corruption families {sorted(unknown)}; choose from {', '.join(CORRUPTION_FAMILIES)}")
        check_source(self.source, self.request_style)
        hosted = source_families(self.source)
        if set(self.families) - set(hosted):
            raise ConfigError(
                f"source {self.source!r} cannot host families {sorted(set(self.families) - set(hosted))}; "
                f"it hosts {', '.join(hosted)}"
            )
        if not self.families:
            raise ConfigError("at least one corruption family is needed")
        tools_of(self.tool_families)  # validates the names

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "n": self.n,
            "families": list(self.families),
            "tool_families": list(self.tool_families),
            "max_attempts": self.max_attempts,
            "max_ops": self.max_ops,
            # recorded only when not the default, so earlier built-in case sets stay byte-identical
            **({"source": self.source} if self.source != BUILTIN else {}),
            **({"request_style": self.request_style} if self.request_style != "verbatim" else {}),
        }


def _digest(*parts: Any) -> str:
    return hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()


class CaseGenerator:
    """Compiles each tool's verifier once and turns (seed, index) into one case."""

    def __init__(self, config: GenerateConfig) -> None:
        self.config = config
        self.source: CallSource | NaturalSource = make_source(config.source, config.tool_families, config.request_style)
        self._compiled: dict[str, tuple[Verifier, str]] = {}

    def _verifier(self, spec: ToolSpec) -> tuple[Verifier, str]:
        """The tool's verifier and schema hash, by schema (BFCL reuses names across entries)."""
        key = canonical_json([spec.name, spec.schema, spec.contract])
        if key not in self._compiled:
            verifier = Verifier.build(spec.schema, load_contract(spec.contract))
            self._compiled[key] = (verifier, verifier.schema.sha256)
        return self._compiled[key]

    def case(self, index: int, reject: Callable[[Case], bool] | None = None) -> Case:
        family = self.config.families[index % len(self.config.families)]
        rng = random.Random(f"case:{self.config.seed}:{index}")
        rejected = 0
        source = self.source
        if isinstance(source, NaturalSource):  # nothing to draw: each natural failure is one case
            raise ConfigError(f"{source.name}: natural failures are taken in the seed's order by generate_cases, not drawn")
        for draw in range(MAX_DRAWS):
            call = source.draw(rng, family)
            corruption = corrupt(family, call.spec, self._verifier(call.spec)[0], call.args, rng)
            if corruption is None:
                continue
            built = self._build(index, draw, call, corruption, rng)
            if built is None:
                continue
            if reject is None or not reject(built):
                return built
            rejected += 1
        where = f"tool families {list(self.config.tool_families)}" if self.config.source == BUILTIN else self.config.source
        message = f"no {family!r} case could be built from {where} in {MAX_DRAWS} draws"
        if rejected:
            # a small family space can be used up by the split it must stay disjoint from
            message += (
                f"; {rejected} of them were refused as overlapping the excluded case set,"
                f" so leave {family!r} out of the families drawn (`cases generate --families`, `data.families` in"
                " training) or draw fewer cases"
            )
        raise ConfigError(message)

    def _build(self, index: int, draw: int, call: SourceCall, c: Corruption, rng: random.Random) -> Case | None:
        spec = call.spec
        assert not isinstance(self.source, NaturalSource)
        request = self.source.request(call, c, rng)
        expected = self.source.expected(call, c)
        if expected is None:
            return None
        case_id = "c" + _digest(self.config.seed, index, draw, spec.name, c.family)[:15]
        public = PublicCase(
            case_id=case_id,
            family=c.family,
            tool=spec.name,
            tool_family=spec.family,
            schema=spec.schema,
            schema_sha256=self._verifier(spec)[1],
            schema_version=spec.version,
            contract=spec.contract,
            request=request,
            candidate=c.candidate,
            report=c.report,
            immutable=spec.immutable,
            max_attempts=self.config.max_attempts,
            max_ops=max(self.config.max_ops, c.max_ops),
            world_seed=call.world_seed,
        )
        if "withheld_value" in c.detail and _leaks(public, c.detail["withheld_value"]):
            return None
        stated = stated_contrast(self.source, call, c)
        if stated is not None and stated["request"] == request:
            # no spelling of the withheld value was found to take out, so the person's own words may
            # still state it ("New York" for America/New_York): not a case that must abstain
            return None
        offline = OfflineCase(
            case_id=case_id,
            target=c.target,
            target_patch=c.gold_patch if c.gold_patch is not None else ABSTAIN,
            expected=expected,
            cluster=cluster_key(spec.name, c.target, c.candidate),
            corruption={
                "family": c.family,
                **c.detail,
                **({"schema_version": c.schema_version} if c.schema_version else {}),
                **({"request_style": self.config.request_style} if self.config.request_style != "verbatim" else {}),
                **({"stated": stated} if stated is not None else {}),
            },
        )
        return Case(public, offline)


def _leaks(public: PublicCase, value: Any) -> bool:
    """Whether a withheld value can be read anywhere in the public half."""
    text = canonical_json(public.to_row())
    needle = canonical_json(value)
    if needle in text:
        return True
    # the row text is JSON-escaped, so a string with quotes or newlines is also looked for raw in the request
    return isinstance(value, str) and (value in text or value in public.request)


def generate_cases(
    config: GenerateConfig, reject: Callable[[Case], bool] | None = None, progress: Iterable[int] | None = None
) -> list[Case]:
    """``config.n`` cases; ``reject`` lets a caller refuse a case (e.g. one overlapping another split)."""
    generator = CaseGenerator(config)
    indices = progress if progress is not None else range(config.n)
    if isinstance(generator.source, NaturalSource):
        return natural_cases(generator.source, config, reject, indices)
    return [generator.case(i, reject) for i in indices]


def natural_cases(
    source: NaturalSource, config: GenerateConfig, reject: Callable[[Case], bool] | None, indices: Iterable[int]
) -> list[Case]:
    """The first ``config.n`` natural failures of ``config.families`` in the seed's order, each used
    once (a natural failure is one call: drawing it twice would only repeat it); those ``reject``
    refuses are passed over. Too few failures is an error that says how many there are."""
    pool = iter(source.ordered(config.seed, config.families))
    out: list[Case] = []
    rejected = 0
    for _ in indices:
        for failure in pool:
            case = failure_case(failure, config.max_attempts, config.max_ops)
            if reject is not None and reject(case):
                rejected += 1
                continue
            out.append(case)
            break
        else:
            have = len(source.ordered(config.seed, config.families))
            raise ConfigError(
                f"{source.name} has {have} natural failures of families {list(config.families)}"
                + (f", {rejected} of them refused as overlapping the excluded case set" if rejected else "")
                + f"; {config.n} cases were asked for"
            )
    return out
