"""Code family: six tools over an in-memory repository of branches, commits and source files.

A repository holds commits (each a full snapshot of the tracked files) and branches; each branch
has a head commit and its own working tree, where edits land until they are committed. The test
runner is simulated, deterministically: a test passes when every ``assert f(x) == y`` in it holds
for the ``return value + k`` functions defined under ``src/``, so renames and edits can break it.
Paths follow the file family's rules (``path_traversal`` is refused by the sandbox itself) and
source text is inert data: nothing is ever executed.
"""

from __future__ import annotations

import fnmatch
import keyword
import random
import re
from typing import Any

from ..spec import ExecResult, SandboxError, ToolSpec, run_handler
from .common import WORDS, CopiedState, hex_id, id_schema, obj, stable_id, words
from .files import PATH, clean_path, split_lines

VERBS = ("load", "check", "compute", "format", "merge", "parse", "render", "score")
ACTIONS = ["add", "modify", "delete"]
SCOPES = ["file", "branch"]
# Patterns end ``$(?!\n)``: Python's ``$`` also matches before a final newline, Rust's does not.
BRANCH_PATTERN = r"^(?!.*(?:\.\.|//|/\.|\.lock$))[a-z0-9](?:[a-z0-9._/-]{0,61}[a-z0-9])?$(?!\n)"
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
SECONDS_PER_TEST = 0.25
_DEF = re.compile(r"def ([A-Za-z_]\w*)\(")
_RETURN = re.compile(r"\s+return value \+ (-?\d+)\s*")
_ASSERT = re.compile(r"\s+assert ([A-Za-z_]\w*)\((-?\d+)\) == (-?\d+)\s*")


def join_lines(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def check_branch_name(name: Any) -> str:
    """Git's ref-name rules, restricted to the schema's alphabet: refusals are ``invalid_name``."""
    if not isinstance(name, str) or not re.fullmatch(BRANCH_PATTERN, name):
        raise SandboxError("invalid_name", f"{str(name)[:80]!r} is not a valid branch name")
    return name


def _module(rng: random.Random, noun: str) -> tuple[str, str]:
    """A source module of two ``return value + k`` functions and its test file."""
    names = [f"{verb}_{noun}" for verb in rng.sample(VERBS, 2)]
    src, tests = [], [f"from src.{noun} import {', '.join(names)}\n"]
    for i, name in enumerate(names, start=1):
        k = rng.randint(1, 9)
        src.append(f'def {name}(value):\n    """{name.split("_")[0].title()} the {noun}."""\n    return value + {k}\n')
        expected = i + k + (1 if rng.random() < 0.1 else 0)  # now and then a test that already fails
        tests.append(f"def test_{name}():\n    assert {name}({i}) == {expected}\n")
    return "\n\n".join(src), "\n\n".join(tests)


class CodeEditSandbox(CopiedState):
    """One or two repositories with a root commit and two branches with uncommitted work."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"code:{seed}")
        self.repos: dict[str, dict[str, Any]] = {}
        for _ in range(rng.randint(1, 2)):
            repo_id = hex_id("repo", rng)
            tree = {
                "README.md": f"# {words(rng, 2)}\n\n{words(rng, 8)}\n",
                "docs/notes.md": f"{words(rng, 5)}\n{words(rng, 4)}\n",
            }
            for noun in rng.sample(WORDS, rng.randint(2, 3)):
                tree[f"src/{noun}.py"], tree[f"tests/test_{noun}.py"] = _module(rng, noun)
            root = stable_id("cmt", repo_id, "initial", tree)
            commits = {root: {"parent": None, "subject": "Initial import", "tree": tree}}
            main = dict(tree)
            main["notes/todo.md"] = f"- [ ] {words(rng, 3)}\n- [ ] {words(rng, 3)}\n"
            dirty = rng.choice(sorted(p for p in tree if p.startswith("src/")))
            main[dirty] += f"\n\n# TODO: {words(rng, 4)}\n"
            side = dict(tree)
            side["docs/notes.md"] += f"{words(rng, 6)}\n"
            branches = {"main": {"head": root, "work": main}, f"feature/{rng.choice(WORDS)}": {"head": root, "work": side}}
            self.repos[repo_id] = {"commits": commits, "branches": branches}

    def _repo(self, repo_id: str) -> dict[str, Any]:
        if repo_id not in self.repos:
            raise SandboxError("not_found", f"no repository {repo_id}")
        return self.repos[repo_id]

    def _branch(self, repo_id: str, name: str) -> dict[str, Any]:
        branches = self._repo(repo_id)["branches"]
        if name not in branches:
            raise SandboxError("not_found", f"no branch {name} in {repo_id}")
        return branches[name]

    def _source(self, branch: dict[str, Any], path: str) -> str:
        if path not in branch["work"]:
            raise SandboxError("not_found", f"no file {path}")
        return branch["work"][path]

    def execute(self, tool: str, args: dict[str, Any]) -> ExecResult:
        handler = getattr(self, f"_{tool}", None) if isinstance(tool, str) and tool in _TOOL_NAMES else None
        return run_handler(handler, args)

    def _replace_in_file(self, a: dict[str, Any]) -> ExecResult:
        path = clean_path(a["path"])
        branch = self._branch(a["repo_id"], a["branch"])
        text, old, new = self._source(branch, path), a["old"], a["new"]
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            raise SandboxError("bad_arguments", "old must be non-empty text and new text")
        found = text.count(old)
        if not found:
            raise SandboxError("no_match", f"{old[:40]!r} does not occur in {path}")
        count = a.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise SandboxError("bad_arguments", "count must be a positive integer")
        done = min(found, count)
        branch["work"][path] = text.replace(old, new, done)
        result = {"path": path, "replacements": done, "remaining": found - done}
        return ExecResult(True, result, (f"code.replace {a['repo_id']}/{a['branch']}:{path} {done}x",))

    def _insert_lines(self, a: dict[str, Any]) -> ExecResult:
        path = clean_path(a["path"])
        branch = self._branch(a["repo_id"], a["branch"])
        lines, new = split_lines(self._source(branch, path)), split_lines(a["text"])
        line = a["line"]
        if not isinstance(line, int) or isinstance(line, bool) or not 1 <= line <= len(lines) + 1:
            raise SandboxError("line_out_of_range", f"line must be between 1 and {len(lines) + 1}")
        branch["work"][path] = join_lines(lines[: line - 1] + new + lines[line - 1 :])
        result = {"path": path, "line": line, "inserted": len(new), "lines": len(lines) + len(new)}
        return ExecResult(True, result, (f"code.insert {a['repo_id']}/{a['branch']}:{path} @{line} +{len(new)} lines",))

    def _create_branch(self, a: dict[str, Any]) -> ExecResult:
        name = check_branch_name(a["name"])
        repo = self._repo(a["repo_id"])
        ref = a["from_ref"]
        if ref in repo["branches"]:
            head = repo["branches"][ref]["head"]
        elif ref in repo["commits"]:
            head = ref
        else:
            raise SandboxError("not_found", f"no branch or commit {str(ref)[:80]} in {a['repo_id']}")
        if name in repo["branches"]:
            raise SandboxError("already_exists", f"branch {name} exists")
        repo["branches"][name] = {"head": head, "work": dict(repo["commits"][head]["tree"])}
        return ExecResult(True, {"branch": name, "head": head}, (f"code.branch {a['repo_id']}/{name} from {ref} at {head}",))

    def _commit(self, a: dict[str, Any]) -> ExecResult:
        changes = [(clean_path(f["path"]), f["action"]) for f in a["files"]]
        branch = self._branch(a["repo_id"], a["branch"])
        if not changes or len({p for p, _ in changes}) != len(changes):
            raise SandboxError("bad_arguments", "files must name each path once")
        work, parent = branch["work"], branch["head"]
        tree = dict(self.repos[a["repo_id"]]["commits"][parent]["tree"])
        for path, action in changes:
            if action not in ACTIONS:
                raise SandboxError("bad_arguments", f"action must be one of {', '.join(ACTIONS)}")
            if action == "delete":
                if path not in tree:
                    raise SandboxError("not_tracked", f"{path} is not tracked")
                del tree[path]
                continue
            if path not in work:
                raise SandboxError("not_found", f"no file {path}")
            if action == "add" and path in tree:
                raise SandboxError("already_tracked", f"{path} is already tracked; use modify")
            if action == "modify" and path not in tree:
                raise SandboxError("not_tracked", f"{path} is not tracked; use add")
            if action == "modify" and tree[path] == work[path]:
                raise SandboxError("no_changes", f"{path} has no uncommitted changes")
            tree[path] = work[path]
        message = a["message"]
        cid = stable_id("cmt", a["repo_id"], a["branch"], parent, message, [list(c) for c in changes])
        self.repos[a["repo_id"]]["commits"][cid] = {"parent": parent, "subject": message["subject"], "tree": tree}
        branch["head"] = cid
        for path, action in changes:
            if action == "delete":
                work.pop(path, None)
        effects = [f"code.commit {a['repo_id']}/{a['branch']} {cid} {len(changes)} files"]
        effects += [f"code.{action} {cid} {path}" for path, action in sorted(changes)]
        return ExecResult(True, {"commit": cid, "parent": parent, "branch": a["branch"], "files": len(changes)}, tuple(effects))

    def _rename_symbol(self, a: dict[str, Any]) -> ExecResult:
        path = clean_path(a["path"])
        branch = self._branch(a["repo_id"], a["branch"])
        old, new = a["old_name"], a["new_name"]
        for name in (old, new):
            if not isinstance(name, str) or not IDENTIFIER.fullmatch(name) or keyword.iskeyword(name):
                raise SandboxError("invalid_name", f"{str(name)[:80]!r} is not an identifier")
        if old == new:
            raise SandboxError("same_name", f"{old} is already called {new}")
        scope = a.get("scope", "file")
        if scope not in SCOPES:
            raise SandboxError("bad_arguments", f"scope must be one of {', '.join(SCOPES)}")
        targets = [path] if scope == "file" else sorted(p for p in branch["work"] if p.endswith(".py") or p == path)
        old_re, new_re = re.compile(rf"\b{re.escape(old)}\b"), re.compile(rf"\b{re.escape(new)}\b")
        if not old_re.search(self._source(branch, path)):
            raise SandboxError("no_match", f"{old} does not occur in {path}")
        if any(new_re.search(branch["work"][p]) for p in targets):
            raise SandboxError("name_conflict", f"{new} is already used")
        effects, changed, total = [], [], 0
        for p in targets:
            text, n = old_re.subn(new, branch["work"][p])
            if n:
                branch["work"][p] = text
                changed.append(p)
                total += n
                effects.append(f"code.rename {a['repo_id']}/{a['branch']}:{p} {old}->{new} {n}x")
        return ExecResult(True, {"renamed": total, "files": changed}, tuple(effects))

    def _run_tests(self, a: dict[str, Any]) -> ExecResult:
        branch = self._branch(a["repo_id"], a["branch"])
        selector = a.get("selector", {"kind": "all"})
        tests = _collect(branch["work"])
        if selector["kind"] == "pattern":
            tests = {tid: body for tid, body in tests.items() if fnmatch.fnmatchcase(tid, selector["pattern"])}
        elif selector["kind"] != "all":
            raise SandboxError("bad_arguments", "selector kind must be all or pattern")
        if not tests:
            raise SandboxError("no_tests", "the selector matches no test")
        defs = _definitions(branch["work"])
        budget = max(0, int(a.get("timeout_s", 60) / SECONDS_PER_TEST))  # simulated: each test takes SECONDS_PER_TEST
        passed, failed, ran = 0, [], 0
        for tid in sorted(tests):
            if ran == budget or (failed and a.get("fail_fast", False)):
                break
            ran += 1
            error = _outcome(tests[tid], defs)
            if error is None:
                passed += 1
            else:
                failed.append({"test": tid, "error": error})
        status = "failed" if failed else ("timeout" if ran < len(tests) else "passed")
        result = {"status": status, "collected": len(tests), "passed": passed, "failed": failed, "skipped": len(tests) - ran}
        return ExecResult(True, result, (f"code.test {a['repo_id']}/{a['branch']} {passed} passed {len(failed)} failed",))


def _collect(work: dict[str, str]) -> dict[str, list[str]]:
    """Test id (``path::name``) -> the lines of its body, for every ``tests/test_*.py`` file."""
    tests: dict[str, list[str]] = {}
    for path in sorted(work):
        if not re.fullmatch(r"tests/(?:.*/)?test_[^/]*\.py", path):
            continue
        current = None
        for line in split_lines(work[path]):
            found = _DEF.match(line)
            if found:
                current = f"{path}::{found.group(1)}" if found.group(1).startswith("test_") else None
                if current:
                    tests[current] = []
            elif current and line.startswith((" ", "\t")):
                tests[current].append(line)
    return tests


def _definitions(work: dict[str, str]) -> dict[str, int | None]:
    """Function name -> its ``k`` in ``return value + k`` (None if it returns anything else)."""
    defs: dict[str, int | None] = {}
    for path in sorted(work):
        if not path.startswith("src/") or not path.endswith(".py"):
            continue
        current = None
        for line in split_lines(work[path]):
            found, ret = _DEF.match(line), _RETURN.fullmatch(line)
            if found:
                current = found.group(1)
                defs[current] = None
            elif ret and current:
                defs[current] = int(ret.group(1))
    return defs


def _outcome(body: list[str], defs: dict[str, int | None]) -> str | None:
    """None when every assertion of a test holds, else the first failure."""
    for line in body:
        check = _ASSERT.fullmatch(line)
        if not check:
            continue
        name, arg, expected = check.group(1), int(check.group(2)), int(check.group(3))
        if name not in defs:
            return f"NameError: name '{name}' is not defined"
        got = None if defs[name] is None else arg + defs[name]
        if got != expected:
            return f"AssertionError: {name}({arg}) == {got}, expected {expected}"
    return None


REPO_ID = id_schema("repo")
BRANCH = {"type": "string", "pattern": BRANCH_PATTERN}
REF = {"type": "string", "pattern": r"^(?:cmt_[0-9a-f]{6}|[a-z0-9][a-z0-9._/-]{0,62})$(?!\n)"}
NAME = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,63}$(?!\n)"}
SELECTOR = {
    "oneOf": [
        obj({"kind": {"const": "all"}}, ["kind"]),
        obj(
            {"kind": {"const": "pattern"}, "pattern": {"type": "string", "pattern": r"^[A-Za-z0-9_*?.:/\[\]-]{1,100}$(?!\n)"}},
            ["kind", "pattern"],
        ),
    ]
}
MESSAGE = obj(
    {
        "subject": {"type": "string", "minLength": 1, "maxLength": 72, "pattern": r"^[^ \t\r\n][^\r\n]*$(?!\n)"},
        "body": {"type": "string", "maxLength": 2000},
    },
    ["subject"],
)
CHANGE = obj({"path": PATH, "action": {"enum": ACTIONS}}, ["path", "action"])


def _pick_branch(rng: random.Random, box: CodeEditSandbox) -> tuple[str, str, dict[str, Any]]:
    repo_id = rng.choice(sorted(box.repos))
    name = rng.choice(sorted(box.repos[repo_id]["branches"]))
    return repo_id, name, box.repos[repo_id]["branches"][name]


def _sample_replace(rng: random.Random, box: CodeEditSandbox) -> dict[str, Any]:
    repo_id, name, branch = _pick_branch(rng, box)
    path = rng.choice(sorted(branch["work"]))
    text = branch["work"][path]
    returns = re.findall(r"return value \+ (\d+)", text)
    if returns:
        k = rng.choice(returns)
        old, new = f"return value + {k}", f"return value + {int(k) + rng.randint(1, 5)}"
    else:
        old = rng.choice([w for w in text.split() if w.isalpha()])
        new = rng.choice([old.title(), old.upper(), f"{old}s"])
    return {"repo_id": repo_id, "branch": name, "path": path, "old": old, "new": new, "count": rng.randint(1, 3)}


def _sample_insert(rng: random.Random, box: CodeEditSandbox) -> dict[str, Any]:
    repo_id, name, branch = _pick_branch(rng, box)
    path = rng.choice(sorted(branch["work"]))
    lead = "# " if path.endswith(".py") else ""
    text = "\n".join(f"{lead}{words(rng, rng.randint(2, 5))}" for _ in range(rng.randint(1, 3)))
    line = rng.randint(1, len(split_lines(branch["work"][path])) + 1)
    return {"repo_id": repo_id, "branch": name, "path": path, "line": line, "text": text}


def _sample_branch(rng: random.Random, box: CodeEditSandbox) -> dict[str, Any]:
    repo_id = rng.choice(sorted(box.repos))
    repo = box.repos[repo_id]
    ref = rng.choice(sorted(repo["branches"]) + sorted(repo["commits"]))
    while True:
        name = f"{rng.choice(['feature', 'fix', 'chore'])}/{rng.choice(WORDS)}-{rng.randint(2, 99)}"
        if name not in repo["branches"]:
            return {"repo_id": repo_id, "name": name, "from_ref": ref}


def _sample_commit(rng: random.Random, box: CodeEditSandbox) -> dict[str, Any]:
    repo_id, name, branch = _pick_branch(rng, box)
    tree = box.repos[repo_id]["commits"][branch["head"]]["tree"]
    dirty = [
        {"path": p, "action": "modify" if p in tree else "add"}
        for p in sorted(branch["work"])
        if tree.get(p) != branch["work"][p]
    ]
    files = rng.sample(dirty, rng.randint(1, len(dirty)))
    clean = [p for p in sorted(tree) if tree[p] == branch["work"].get(p) and p.startswith(("docs/", "README"))]
    if clean and rng.random() < 0.3:
        files.append({"path": rng.choice(clean), "action": "delete"})
    message: dict[str, Any] = {"subject": f"{rng.choice(VERBS).title()} {words(rng, rng.randint(2, 5))}"}
    if rng.random() < 0.5:
        message["body"] = f"{words(rng, 8)}.\n\n{words(rng, 6)}."
    return {"repo_id": repo_id, "branch": name, "message": message, "files": files}


def _sample_rename(rng: random.Random, box: CodeEditSandbox) -> dict[str, Any]:
    repo_id, name, branch = _pick_branch(rng, box)
    path = rng.choice(sorted(p for p in branch["work"] if p.startswith("src/")))
    old = rng.choice(_DEF.findall(branch["work"][path]))
    used = " ".join(branch["work"].values())
    new = next(f"{old}_{s}" for s in ("v2", "impl", "new", "fn", "x") if f"{old}_{s}" not in used)
    return {"repo_id": repo_id, "branch": name, "path": path, "old_name": old, "new_name": new, "scope": rng.choice(SCOPES)}


def _sample_tests(rng: random.Random, box: CodeEditSandbox) -> dict[str, Any]:
    repo_id, name, branch = _pick_branch(rng, box)
    selector: dict[str, Any] = {"kind": "all"}
    if rng.random() < 0.6:
        tid = rng.choice(sorted(_collect(branch["work"])))
        noun = tid.split("::")[0][len("tests/test_") : -len(".py")]
        selector = {"kind": "pattern", "pattern": rng.choice([f"*{noun}*", f"tests/test_{noun}.py::*", tid])}
    return {
        "repo_id": repo_id,
        "branch": name,
        "selector": selector,
        "timeout_s": rng.choice([30, 60, 120, 300]),
        "fail_fast": rng.random() < 0.5,
    }


def _distinct(rule_id: str, left: str, right: str) -> dict[str, Any]:
    return {"id": rule_id, "kind": "compare", "left": left, "op": "!=", "right": right, "as": "string"}


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="replace_in_file",
        family="code",
        description="Replace occurrences of a piece of text in a file of a branch's working tree.",
        schema=obj(
            {
                "repo_id": REPO_ID,
                "branch": BRANCH,
                "path": PATH,
                "old": {"type": "string", "minLength": 1, "maxLength": 2000},
                "new": {"type": "string", "maxLength": 2000},
                "count": {"type": "integer", "minimum": 1, "maximum": 100},
            },
            ["repo_id", "branch", "path", "old", "new"],
        ),
        contract={"rules": [_distinct("changes_text", "/old", "/new")]},
        immutable=("/repo_id", "/branch", "/path"),
        sample=_sample_replace,
        intros=("Change this text in the file.", "Please make this edit.", "Replace the code for me."),
        labels={
            "repo_id": "repository",
            "old": "text to replace",
            "new": "replacement text",
            "count": "maximum number of replacements",
        },
    ),
    ToolSpec(
        name="insert_lines",
        family="code",
        description="Insert lines before a given line of a file (one past the end appends).",
        schema=obj(
            {
                "repo_id": REPO_ID,
                "branch": BRANCH,
                "path": PATH,
                "line": {"type": "integer", "minimum": 1, "maximum": 100000},
                "text": {"type": "string", "minLength": 1, "maxLength": 4000},
            },
            ["repo_id", "branch", "path", "line", "text"],
        ),
        immutable=("/repo_id", "/branch", "/path"),
        sample=_sample_insert,
        intros=("Add these lines to the file.", "Please insert this text.", "Put these lines in the file."),
        labels={"repo_id": "repository", "line": "line number", "text": "lines to insert"},
    ),
    ToolSpec(
        name="create_branch",
        family="code",
        description="Create a branch from an existing branch or commit.",
        schema=obj({"repo_id": REPO_ID, "name": BRANCH, "from_ref": REF}, ["repo_id", "name", "from_ref"]),
        contract={"rules": [_distinct("new_name", "/name", "/from_ref")]},
        immutable=("/repo_id", "/from_ref"),
        sample=_sample_branch,
        intros=("Start a new branch.", "Please create a branch.", "Branch off for me."),
        labels={"repo_id": "repository", "name": "branch name", "from_ref": "starting point"},
        renamed=(("branch_name", "name"),),
    ),
    ToolSpec(
        name="commit",
        family="code",
        description="Commit changes of a branch's working tree: files to add, modify or delete.",
        schema=obj(
            {
                "repo_id": REPO_ID,
                "branch": BRANCH,
                "message": MESSAGE,
                "files": {"type": "array", "items": CHANGE, "minItems": 1, "maxItems": 20},
            },
            ["repo_id", "branch", "message", "files"],
        ),
        contract={"rules": [{"id": "one_change_per_path", "kind": "unique", "array": "/files", "field": "/path"}]},
        immutable=("/repo_id", "/branch"),
        sample=_sample_commit,
        intros=("Commit my changes.", "Please record these changes.", "Make a commit."),
        labels={"repo_id": "repository", "message": "commit message", "files": "files to commit"},
    ),
    ToolSpec(
        name="rename_symbol",
        family="code",
        description="Rename an identifier in one file or across every Python file of a branch.",
        schema=obj(
            {"repo_id": REPO_ID, "branch": BRANCH, "path": PATH, "old_name": NAME, "new_name": NAME, "scope": {"enum": SCOPES}},
            ["repo_id", "branch", "path", "old_name", "new_name"],
        ),
        contract={"rules": [_distinct("new_differs", "/old_name", "/new_name")]},
        immutable=("/repo_id", "/branch"),
        sample=_sample_rename,
        intros=("Rename this function.", "Please rename the symbol.", "Give this identifier a new name."),
        labels={"repo_id": "repository", "path": "file that defines it", "old_name": "current name", "scope": "rename scope"},
        renamed=(("symbol", "old_name"),),
    ),
    ToolSpec(
        name="run_tests",
        family="code",
        description="Run all tests of a branch or those whose id matches a pattern.",
        schema=obj(
            {
                "repo_id": REPO_ID,
                "branch": BRANCH,
                "selector": SELECTOR,
                "timeout_s": {"type": "integer", "minimum": 1, "maximum": 600},
                "fail_fast": {"type": "boolean"},
            },
            ["repo_id", "branch"],
        ),
        immutable=("/repo_id",),
        sample=_sample_tests,
        intros=("Run the tests.", "Do the tests pass?", "Please check the test suite."),
        labels={
            "repo_id": "repository",
            "selector": "tests to run",
            "timeout_s": "timeout in seconds",
            "fail_fast": "stop at the first failure",
        },
    ),
)

_TOOL_NAMES = frozenset(spec.name for spec in TOOLS)
