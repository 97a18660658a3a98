"""File family: six tools over an in-memory file tree, one or two workspaces per sandbox.

Nothing here touches the real filesystem: a workspace is a dict of file paths to text plus a set of
directories. Paths are relative POSIX paths; the sandbox refuses absolute paths and ``..``
traversal itself (``path_traversal``), whatever the schema let through, and treats file content as
inert data: text is stored and returned verbatim, never interpreted.
"""

from __future__ import annotations

import fnmatch
import random
import re
from typing import Any

from ..spec import ExecResult, SandboxError, ToolSpec, run_handler
from .common import WORDS, CopiedState, email, hex_id, id_schema, obj, words

ENCODINGS = ["utf-8", "ascii", "latin-1"]
MODES = ["overwrite", "append", "create"]
MIMES = ["text/plain", "text/markdown", "text/csv", "application/json", "text/x-python"]
TOP_DIRS = ("docs", "notes", "src")
EXTENSIONS = {"docs": "md", "notes": "txt", "src": "py"}
PATH_CHARS = re.compile(r"[A-Za-z0-9._/-]{1,200}")
MAX_PATH = 200
QUOTA_BYTES = 1_000_000
MAX_LINE = 500  # searches look at the first 500 characters of a line, bounding the regex work


def clean_path(path: Any, *, allow_root: bool = False) -> str:
    """The normalised form of a relative POSIX path, or a typed refusal.

    Absolute paths and any ``..`` segment (with either separator) are ``path_traversal``; other
    characters outside the schema's set are ``invalid_path``. ``.`` and empty segments are
    dropped, so ``docs/./a.md`` and ``docs//a.md`` name ``docs/a.md``; the root is ``""``.
    """
    if not isinstance(path, str) or not path:
        raise SandboxError("invalid_path", "a path must be a non-empty string")
    if path.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", path):
        raise SandboxError("path_traversal", f"absolute path {path[:80]!r} is outside the workspace")
    if ".." in re.split(r"[/\\]", path):
        raise SandboxError("path_traversal", f"path {path[:80]!r} climbs out of the workspace")
    if len(path) > MAX_PATH or not PATH_CHARS.fullmatch(path):
        raise SandboxError("invalid_path", f"path {path[:80]!r} has characters outside [A-Za-z0-9._/-] or is too long")
    norm = "/".join(part for part in path.split("/") if part not in ("", "."))
    if not norm and not allow_root:
        raise SandboxError("invalid_path", "the workspace root is not a file")
    return norm


def split_lines(text: str) -> list[str]:
    """Lines split on ``\\n`` only (content is data: no other separator is honoured)."""
    if not text:
        return []
    return (text[:-1] if text.endswith("\n") else text).split("\n")


def parent_of(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def ancestors(path: str) -> list[str]:
    """The directories above ``path``, outermost first, without the root."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def under(path: str, root: str) -> bool:
    return not root or path.startswith(root + "/")


def compile_search_regex(pattern: str, case_sensitive: bool) -> re.Pattern[str]:
    """Compile a search pattern, refusing the shapes that backtrack catastrophically.

    A quantified group that itself holds a quantifier or an alternation (``(a+)+``, ``(a|a)*``)
    or more than two unbounded quantifiers (``.*.*.*x``) is ``regex_too_complex``: the search runs
    in the sandbox and must return promptly whatever the caller sends.
    """
    try:
        compiled = re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)
    except (re.error, RecursionError, OverflowError) as exc:
        raise SandboxError("invalid_regex", f"pattern does not compile: {exc}") from exc
    risky: list[bool] = []  # one flag per open group: holds a quantifier or an alternation
    unbounded, i = 0, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            i += 1
            while i < len(pattern) and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif ch == "(":
            risky.append(False)
        elif ch == ")" and risky:
            inner = risky.pop()
            quantified = i + 1 < len(pattern) and pattern[i + 1] in "*+{"
            if inner and quantified:
                raise SandboxError("regex_too_complex", "a repeated group may not itself repeat or alternate")
            if risky:
                risky[-1] = risky[-1] or inner
        elif ch in "*+{|" and risky:
            risky[-1] = True
        if ch in "*+" or (ch == "{" and re.match(r"\{\d+,\}", pattern[i:])):
            unbounded += 1
        i += 1
    if unbounded > 2:
        raise SandboxError("regex_too_complex", "at most two unbounded quantifiers")
    return compiled


class FilesSandbox(CopiedState):
    """One or two workspaces of a few directories and text files, rebuilt identically from a seed."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"file:{seed}")
        self.workspaces: dict[str, dict[str, Any]] = {}
        for _ in range(rng.randint(1, 2)):
            ws_id = hex_id("ws", rng)
            files: dict[str, str] = {"README.md": f"# {words(rng, 2)}\n\n{words(rng, 6)}\n"}
            dirs = set(TOP_DIRS)
            for top in TOP_DIRS:
                for _ in range(rng.randint(1, 3)):
                    files[f"{top}/{rng.choice(WORDS)}.{EXTENSIONS[top]}"] = _text(rng)
            dirs.add("notes/archive")
            files[f"notes/archive/{rng.choice(WORDS)}_{rng.choice(WORDS)}.txt"] = _text(rng)
            meta = {path: {"owner": email(rng), "tags": [], "mime": _mime(path)} for path in sorted(files)}
            self.workspaces[ws_id] = {"files": files, "dirs": dirs, "meta": meta}

    def _workspace(self, ws_id: str) -> dict[str, Any]:
        if ws_id not in self.workspaces:
            raise SandboxError("not_found", f"no workspace {ws_id}")
        return self.workspaces[ws_id]

    def _file(self, ws: dict[str, Any], path: str) -> str:
        if path in ws["dirs"]:
            raise SandboxError("is_a_directory", f"{path} is a directory")
        if path not in ws["files"]:
            raise SandboxError("not_found", f"no file {path}")
        return ws["files"][path]

    def _dir(self, ws: dict[str, Any], path: str) -> str:
        if path in ws["files"]:
            raise SandboxError("not_a_directory", f"{path} is a file")
        if path and path not in ws["dirs"]:
            raise SandboxError("not_found", f"no directory {path}")
        return path

    def execute(self, tool: str, args: dict[str, Any]) -> ExecResult:
        handler = getattr(self, f"_{tool}", None) if isinstance(tool, str) and tool in _TOOL_NAMES else None
        return run_handler(handler, args)

    def _read_file(self, a: dict[str, Any]) -> ExecResult:
        path = clean_path(a["path"])
        ws = self._workspace(a["workspace_id"])
        data = self._file(ws, path).encode("utf-8")
        limit, encoding = a.get("max_bytes", 65536), a.get("encoding", "utf-8")
        if encoding not in ENCODINGS or not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise SandboxError("bad_arguments", f"encoding must be one of {', '.join(ENCODINGS)} and max_bytes positive")
        text = data[:limit].decode(encoding, errors="replace")
        result = {"path": path, "content": text, "bytes": len(data), "truncated": len(data) > limit}
        return ExecResult(True, result, (f"file.read {a['workspace_id']}/{path} {min(len(data), limit)} bytes",))

    def _write_file(self, a: dict[str, Any]) -> ExecResult:
        path = clean_path(a["path"])
        ws = self._workspace(a["workspace_id"])
        content, mode = a["content"], a.get("mode", "overwrite")
        if not isinstance(content, str) or mode not in MODES:
            raise SandboxError("bad_arguments", "content must be text and mode one of " + ", ".join(MODES))
        if path in ws["dirs"]:
            raise SandboxError("is_a_directory", f"{path} is a directory")
        exists = path in ws["files"]
        if mode == "create" and exists:
            raise SandboxError("already_exists", f"{path} exists and mode is create")
        if mode == "append" and not exists:
            raise SandboxError("not_found", f"no file {path} to append to")
        missing = [d for d in ancestors(path) if d not in ws["dirs"]]
        for d in missing:
            if d in ws["files"]:
                raise SandboxError("not_a_directory", f"{d} is a file")
        if missing and not a.get("create_dirs", False):
            raise SandboxError("parent_missing", f"directory {missing[0]} does not exist")
        new_text = ws["files"][path] + content if mode == "append" else content
        used = sum(len(t.encode("utf-8")) for p, t in ws["files"].items() if p != path) + len(new_text.encode("utf-8"))
        if used > QUOTA_BYTES:
            raise SandboxError("quota_exceeded", f"workspace would hold {used} bytes, over {QUOTA_BYTES}")
        ws["dirs"].update(missing)
        ws["files"][path] = new_text
        size = len(content.encode("utf-8"))
        effects = [f"file.mkdir {a['workspace_id']}/{d}" for d in missing]
        effects.append(f"file.{'append' if mode == 'append' else 'write'} {a['workspace_id']}/{path} {size} bytes")
        if "metadata" in a:
            meta = {
                "owner": a["metadata"].get("owner"),
                "tags": list(a["metadata"].get("tags", [])),
                "mime": a["metadata"]["mime"],
            }
            ws["meta"][path] = meta
            effects.append(f"file.meta {a['workspace_id']}/{path} mime={meta['mime']} tags={','.join(meta['tags'])}")
        elif not exists:
            ws["meta"][path] = {"owner": None, "tags": [], "mime": _mime(path)}
        result = {"path": path, "bytes": len(new_text.encode("utf-8")), "written": size, "created": not exists}
        return ExecResult(True, result, tuple(effects))

    def _list_dir(self, a: dict[str, Any]) -> ExecResult:
        root = clean_path(a["path"], allow_root=True)
        ws = self._workspace(a["workspace_id"])
        self._dir(ws, root)
        recursive, glob = a.get("recursive", False), a.get("glob", "*")
        entries = []
        for kind, paths in (("dir", ws["dirs"]), ("file", ws["files"])):
            for path in paths:
                inside = under(path, root) and (recursive or parent_of(path) == root)
                if inside and fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], glob):
                    entry: dict[str, Any] = {"path": path, "type": kind}
                    if kind == "file":
                        entry["bytes"] = len(ws["files"][path].encode("utf-8"))
                    entries.append(entry)
        entries.sort(key=lambda e: e["path"])
        return ExecResult(True, {"path": root or ".", "entries": entries, "count": len(entries)})

    def _move_file(self, a: dict[str, Any]) -> ExecResult:
        source, dest = clean_path(a["source"]), clean_path(a["destination"])
        ws = self._workspace(a["workspace_id"])
        text = self._file(ws, source)
        if source == dest:
            raise SandboxError("same_path", f"{source} and {dest} are the same file")
        if dest in ws["dirs"]:
            raise SandboxError("is_a_directory", f"{dest} is a directory")
        for d in ancestors(dest):
            if d in ws["files"]:
                raise SandboxError("not_a_directory", f"{d} is a file")
            if d not in ws["dirs"]:
                raise SandboxError("parent_missing", f"directory {d} does not exist")
        replaced = dest in ws["files"]
        if replaced and not a.get("overwrite", False):
            raise SandboxError("already_exists", f"{dest} exists and overwrite is false")
        ws["files"][dest] = text
        ws["meta"][dest] = ws["meta"].pop(source, {"owner": None, "tags": [], "mime": _mime(dest)})
        del ws["files"][source]
        effects = [f"file.move {a['workspace_id']}/{source} -> {a['workspace_id']}/{dest}"]
        if replaced:
            effects.append(f"file.replace {a['workspace_id']}/{dest}")
        return ExecResult(True, {"source": source, "destination": dest, "replaced": replaced}, tuple(effects))

    def _delete_file(self, a: dict[str, Any]) -> ExecResult:
        path = clean_path(a["path"])
        ws = self._workspace(a["workspace_id"])
        if path not in ws["files"] and path not in ws["dirs"] and a.get("missing_ok", False):
            return ExecResult(True, {"path": path, "deleted": False})
        size = len(self._file(ws, path).encode("utf-8"))
        del ws["files"][path]
        ws["meta"].pop(path, None)
        return ExecResult(True, {"path": path, "deleted": True}, (f"file.delete {a['workspace_id']}/{path} {size} bytes",))

    def _search_files(self, a: dict[str, Any]) -> ExecResult:
        root = clean_path(a["root"], allow_root=True)
        ws = self._workspace(a["workspace_id"])
        self._dir(ws, root)
        match, case = a["match"], a.get("case_sensitive", False)
        if match["kind"] == "regex":
            found = compile_search_regex(match["pattern"], case).search
        elif match["kind"] == "substring" and isinstance(match["text"], str) and match["text"]:
            needle = match["text"] if case else match["text"].casefold()
            found = (lambda line: needle in line) if case else (lambda line: needle in line.casefold())
        else:
            raise SandboxError("bad_arguments", "match must be a substring or a regex")
        hits = [
            {"path": path, "line": n, "text": line[:200]}
            for path in sorted(ws["files"])
            if under(path, root)
            for n, line in enumerate(split_lines(ws["files"][path]), start=1)
            if found(line[:MAX_LINE])
        ]
        limit = a.get("max_results", 50)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise SandboxError("bad_arguments", "max_results must be a positive integer")
        return ExecResult(True, {"matches": hits[:limit], "total": len(hits), "truncated": len(hits) > limit})


def _text(rng: random.Random) -> str:
    return "".join(f"{words(rng, rng.randint(3, 6))}\n" for _ in range(rng.randint(2, 5)))


def _mime(path: str) -> str:
    ext = path.rsplit(".", 1)[-1]
    return {"md": "text/markdown", "py": "text/x-python", "csv": "text/csv", "json": "application/json"}.get(ext, "text/plain")


WS_ID = id_schema("ws")
# Relative POSIX path: no leading slash, no ``..`` segment. The sandbox checks the same itself.
# Every pattern ends ``$(?!\n)``: Python's ``$`` also matches before a final newline, Rust's does not.
PATH = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_PATH,
    "pattern": r"^(?!/)(?!.*(^|/)\.\.(/|$))[A-Za-z0-9._/-]{1,200}$(?!\n)",
}
# The regex subset both backends read alike, as a grammar: atoms (plain characters, escapes,
# classes, a closing group) take at most one quantifier, optionally lazy; anchors, ``|`` and ``(``
# take none; no ``(?`` constructs (named groups, inline flags, lookaround) and no back-references;
# ``-`` inside a class only in an alphanumeric range or escaped. Python's ``format: regex`` alone
# accepts ``(?P<x>..)``, ``a{``, ``]``, ``a++`` and ``[\d-z]``; ECMA 262 (jsonschema-rs) alone
# accepts ``[^]``: each is outside the subset.
_ESC = r"\\[dDwWsS.*+?^$|(){}\[\]\\/-]"
_CLASS = rf"\[\^?(?:[A-Za-z0-9]-[A-Za-z0-9]|[A-Za-z0-9 _.,*+?$|(){{}}]|{_ESC})+\]"
_QUANT = r"(?:[*+?]|\{[0-9]{1,3}(?:,[0-9]{0,3})?\})\??"
_ATOM = rf"(?:[A-Za-z0-9 _.,-]|{_ESC}|{_CLASS}|\))(?:{_QUANT})?"
REGEX = {
    "type": "string",
    "format": "regex",
    "minLength": 1,
    "maxLength": 100,
    "pattern": rf"^(?!.*\(\?)(?:{_ATOM}|[\^$|(]|\\[bB])+$(?!\n)",
}
GLOB = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[A-Za-z0-9._*?\[\]!-]+$(?!\n)"}
METADATA = obj(
    {
        "owner": {"type": "string", "format": "email", "maxLength": 120},
        "tags": {
            "type": "array",
            "items": {"type": "string", "pattern": r"^[a-z0-9-]{1,24}$(?!\n)"},
            "maxItems": 8,
            "uniqueItems": True,
        },
        "mime": {"enum": MIMES},
    },
    ["mime"],
)
MATCH = {
    "oneOf": [
        obj({"kind": {"const": "substring"}, "text": {"type": "string", "minLength": 1, "maxLength": 100}}, ["kind", "text"]),
        obj({"kind": {"const": "regex"}, "pattern": REGEX}, ["kind", "pattern"]),
    ]
}


def _pick_file(rng: random.Random, box: FilesSandbox) -> tuple[str, str]:
    ws_id = rng.choice(sorted(box.workspaces))
    return ws_id, rng.choice(sorted(box.workspaces[ws_id]["files"]))


def _fresh_name(rng: random.Random, files: dict[str, str], folder: str, ext: str) -> str:
    """A file name in ``folder`` that does not exist yet (initial names never carry a digit)."""
    while True:
        path = f"{folder}/{rng.choice(WORDS)}-{rng.randint(2, 99)}.{ext}"
        if path not in files:
            return path


def _sample_read(rng: random.Random, box: FilesSandbox) -> dict[str, Any]:
    ws_id, path = _pick_file(rng, box)
    return {
        "workspace_id": ws_id,
        "path": path,
        "encoding": rng.choice(ENCODINGS),
        "max_bytes": rng.choice([64, 256, 4096, 65536]),
    }


def _sample_write(rng: random.Random, box: FilesSandbox) -> dict[str, Any]:
    ws_id = rng.choice(sorted(box.workspaces))
    files = box.workspaces[ws_id]["files"]
    mode = rng.choice(MODES)
    args: dict[str, Any] = {"workspace_id": ws_id}
    if mode == "create":
        nested = rng.random() < 0.5
        folder = f"drafts/{rng.choice(WORDS)}" if nested else rng.choice(TOP_DIRS)
        args.update(path=_fresh_name(rng, files, folder, "md"), mode=mode, create_dirs=nested)
    else:
        args.update(path=rng.choice(sorted(files)), mode=mode)
    args["content"] = _text(rng)
    if mode != "append":
        tags = sorted(set(rng.sample(WORDS, rng.randint(0, 3))))
        args["metadata"] = {"owner": email(rng), "tags": tags, "mime": _mime(args["path"])}
    return args


def _sample_list(rng: random.Random, box: FilesSandbox) -> dict[str, Any]:
    ws_id = rng.choice(sorted(box.workspaces))
    args = {
        "workspace_id": ws_id,
        "path": rng.choice([".", *sorted(box.workspaces[ws_id]["dirs"])]),
        "recursive": rng.random() < 0.5,
    }
    if rng.random() < 0.5:
        args["glob"] = rng.choice(["*.md", "*.txt", "*.py", "*", "[a-m]*"])
    return args


def _sample_move(rng: random.Random, box: FilesSandbox) -> dict[str, Any]:
    ws_id, source = _pick_file(rng, box)
    files = box.workspaces[ws_id]["files"]
    others = [p for p in sorted(files) if p != source]
    if rng.random() < 0.3 and others:
        return {"workspace_id": ws_id, "source": source, "destination": rng.choice(others), "overwrite": True}
    folder = rng.choice(sorted(box.workspaces[ws_id]["dirs"]))
    dest = _fresh_name(rng, files, folder, source.rsplit(".", 1)[-1])
    return {"workspace_id": ws_id, "source": source, "destination": dest, "overwrite": rng.random() < 0.5}


def _sample_delete(rng: random.Random, box: FilesSandbox) -> dict[str, Any]:
    ws_id, path = _pick_file(rng, box)
    return {"workspace_id": ws_id, "path": path, "missing_ok": rng.random() < 0.5}


def _sample_search(rng: random.Random, box: FilesSandbox) -> dict[str, Any]:
    """A search that finds at least one line: its text comes from a line of an existing file."""
    ws_id, path = _pick_file(rng, box)
    lines = [line.split() for line in box.workspaces[ws_id]["files"][path].split("\n") if line and line.split()[0].isalpha()]
    line = rng.choice(lines)
    word = rng.choice(line)
    root = rng.choice([".", parent_of(path) or "."])
    if rng.random() < 0.5:
        match = {"kind": "substring", "text": word if rng.random() < 0.5 else word.upper()}
        case = match["text"] == word and rng.random() < 0.5
    else:
        patterns = [rf"\b{word[:3]}[a-z]*", f"^{line[0]} ", rf"{word}(\s|$)", f"[{word[0]}]{word[1:]}"]
        match, case = {"kind": "regex", "pattern": rng.choice(patterns)}, True
    return {"workspace_id": ws_id, "root": root, "match": match, "case_sensitive": case, "max_results": rng.randint(1, 50)}


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="read_file",
        family="file",
        description="Read a text file from a workspace, up to a byte limit.",
        schema=obj(
            {
                "workspace_id": WS_ID,
                "path": PATH,
                "encoding": {"enum": ENCODINGS},
                "max_bytes": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
            },
            ["workspace_id", "path"],
        ),
        immutable=("/workspace_id",),
        sample=_sample_read,
        intros=("Show me what is in this file.", "Please open the file for me.", "Read this file."),
        labels={"workspace_id": "workspace", "max_bytes": "byte limit"},
    ),
    ToolSpec(
        name="write_file",
        family="file",
        description="Write, append to or create a text file, optionally creating its folders.",
        schema=obj(
            {
                "workspace_id": WS_ID,
                "path": PATH,
                "content": {"type": "string", "maxLength": 20000},
                "mode": {"enum": MODES},
                "create_dirs": {"type": "boolean"},
                "metadata": METADATA,
            },
            ["workspace_id", "path", "content"],
        ),
        contract={
            "rules": [
                {
                    "id": "append_keeps_metadata",
                    "kind": "required_if",
                    "when": "/mode",
                    "equals": "append",
                    "then_forbidden": ["/metadata"],
                }
            ]
        },
        immutable=("/workspace_id",),
        sample=_sample_write,
        intros=("Save this text to a file.", "Please write the file.", "Put this content in the workspace."),
        labels={
            "workspace_id": "workspace",
            "mode": "write mode",
            "create_dirs": "create missing folders",
            "metadata": "file metadata",
        },
        renamed=(("data", "content"),),
    ),
    ToolSpec(
        name="list_dir",
        family="file",
        description="List the files and folders in a folder, optionally recursively and filtered by name.",
        schema=obj(
            {"workspace_id": WS_ID, "path": PATH, "recursive": {"type": "boolean"}, "glob": GLOB}, ["workspace_id", "path"]
        ),
        immutable=("/workspace_id",),
        sample=_sample_list,
        intros=("What is in this folder?", "List the folder for me.", "Show me the files here."),
        labels={"workspace_id": "workspace", "path": "folder", "recursive": "include subfolders", "glob": "name pattern"},
    ),
    ToolSpec(
        name="move_file",
        family="file",
        description="Move or rename a file inside a workspace.",
        schema=obj(
            {"workspace_id": WS_ID, "source": PATH, "destination": PATH, "overwrite": {"type": "boolean"}},
            ["workspace_id", "source", "destination"],
        ),
        contract={
            "rules": [
                {
                    "id": "distinct_paths",
                    "kind": "compare",
                    "left": "/source",
                    "op": "!=",
                    "right": "/destination",
                    "as": "string",
                }
            ]
        },
        immutable=("/workspace_id", "/source"),
        sample=_sample_move,
        intros=("Move this file.", "Please rename the file.", "I need this file somewhere else."),
        labels={"workspace_id": "workspace", "source": "file to move", "overwrite": "replace an existing file"},
        renamed=(("dest", "destination"),),
    ),
    ToolSpec(
        name="delete_file",
        family="file",
        description="Delete a file from a workspace.",
        schema=obj({"workspace_id": WS_ID, "path": PATH, "missing_ok": {"type": "boolean"}}, ["workspace_id", "path"]),
        immutable=("/workspace_id", "/path"),
        sample=_sample_delete,
        intros=("Delete this file.", "Please remove the file.", "Get rid of this file for me."),
        labels={"workspace_id": "workspace", "missing_ok": "ignore a missing file"},
    ),
    ToolSpec(
        name="search_files",
        family="file",
        description="Find the lines matching a substring or a regular expression under a folder.",
        schema=obj(
            {
                "workspace_id": WS_ID,
                "root": PATH,
                "match": MATCH,
                "case_sensitive": {"type": "boolean"},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 200},
            },
            ["workspace_id", "root", "match"],
        ),
        immutable=("/workspace_id",),
        sample=_sample_search,
        intros=("Search the files for this.", "Where does this appear in the workspace?", "Find matching lines for me."),
        labels={"workspace_id": "workspace", "root": "folder to search", "match": "search", "max_results": "result limit"},
    ),
)

_TOOL_NAMES = frozenset(spec.name for spec in TOOLS)
