#!/usr/bin/env python3
"""The house's limits, checked on the source tree (run by scripts/test.sh, a second):

1. No import circles between modules, at every level of the real module tree: the tree is
   read from the `mod` declarations (`#[path]` included, test modules left out), and a
   module's uses are its `use` trees (grouped imports `use super::{a, b::{c}}` expanded) and
   the `crate::`, `super::` and `self::` paths in its code, each resolved to the deepest
   module it names. For every module with children, its children may not use each other in a
   circle (a use from anywhere inside child a into anywhere inside child b counts as a → b).
   Across crates Cargo forbids circles.
2. No source file above 700 lines.
3. No function above 120 lines outside tests, counted as written (comments and blank lines
   included), like clippy's `too_many_lines`.
4. No room (a crate, or the Python package) above 25% of the house's lines.
5. One build for every documented command: the README's (cargo's ./target, or
   CARGO_TARGET_DIR when set). The justfile, scripts/, python/tests/ and docs/ may read
   CARGO_TARGET_DIR but set no default of their own (only .ci/run, CI's cache, sets one);
   a second default is a second 30-minute build of burn for whoever runs that command.

Test code (`#[cfg(test)]` modules and tails, `*_tests.rs`, `tests/`) is left out of 1 and 3.
Prints every violation and exits 1 if there is one; `--graph` prints the module edges.
"""
import os
import re
import sys

ROOTS = ["crates", "python/src", "tests"]
MAX_FILE, MAX_FN, MAX_ROOM = 700, 120, 0.25


def rust_files(root):
    for d, _, fs in os.walk(root):
        if "/target" in d:
            continue
        for f in sorted(fs):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def strip_comments(text):
    """The text without comments and string contents (line structure kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == '"' or (c == "r" and re.match(r'r#*"', text[i:i + 8]) and
                          (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            m = re.match(r'r(#*)"', text[i:])
            if m:
                end = '"' + m.group(1)
                j = text.find(end, i + len(m.group(0)))
                j = n if j < 0 else j + len(end)
            else:
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                j += 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(code, start):
    """The index just past the brace block that opens at or after `start`."""
    i = code.index("{", start)
    depth = 0
    while i < len(code):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(code)


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(#\[[^\]]*\]\s*)*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*(;|\{)")


def without_tests(code):
    """The code without `#[cfg(test)]` modules (inline ones and declarations)."""
    while True:
        m = TEST_MOD.search(code)
        if not m:
            return code
        end = m.end() if m.group(4) == ";" else block_end(code, m.start())
        code = code[:m.start()] + "\n" * code.count("\n", m.start(), end) + code[end:]


MOD_DECL = re.compile(r"(#\[path\s*=\s*\"([^\"]+)\"\]\s*)?(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def use_paths(tree, prefix=()):
    """The full paths of a `use` tree's leaves: `a::{b, c::{d, e}}` → a::b, a::c::d, a::c::e."""
    tree = tree.strip()
    depth, i = 0, 0
    while i < len(tree):
        if tree[i] == "{" and depth == 0:
            head = [s for s in tree[:i].split("::") if s.strip()]
            inner = tree[i + 1:tree.rindex("}")]
            parts, depth2, last = [], 0, 0
            for j, ch in enumerate(inner):
                if ch == "{":
                    depth2 += 1
                elif ch == "}":
                    depth2 -= 1
                elif ch == "," and depth2 == 0:
                    parts.append(inner[last:j])
                    last = j + 1
            parts.append(inner[last:])
            out = []
            for p in parts:
                if p.strip():
                    out += use_paths(p, prefix + tuple(s.strip() for s in head))
            return out
        i += 1
    leaf = re.sub(r"\s+as\s+\w+$", "", tree)
    return [prefix + tuple(s.strip() for s in leaf.split("::") if s.strip())]


class Crate:
    """The module tree of one crate and every module's uses."""

    def __init__(self, src):
        self.src = src
        self.files = {}  # module path (tuple) → file
        root = "lib.rs" if os.path.exists(os.path.join(src, "lib.rs")) else "main.rs"
        self.walk((), os.path.join(src, root), True)
        self.uses = {m: self.references(m) for m in self.files}

    def walk(self, module, path, owns_dir):
        if not os.path.exists(path):
            return
        self.files[module] = path
        code = without_tests(strip_comments(open(path, encoding="utf-8").read()))
        base = os.path.dirname(path)
        if not owns_dir:
            base = os.path.join(base, os.path.splitext(os.path.basename(path))[0])
        for m in MOD_DECL.finditer(code):
            name, explicit = m.group(5), m.group(2)
            if explicit:
                child = os.path.join(os.path.dirname(path), explicit)
                self.walk(module + (name,), child, os.path.basename(child) == "mod.rs")
            elif os.path.exists(os.path.join(base, name + ".rs")):
                self.walk(module + (name,), os.path.join(base, name + ".rs"), False)
            else:
                self.walk(module + (name,), os.path.join(base, name, "mod.rs"), True)

    def resolve(self, module, path):
        """The deepest module a path used in `module` names, or None (external, a prelude)."""
        if not path:
            return None
        first = path[0]
        if first == "crate":
            at, rest = (), path[1:]
        elif first in ("super", "self"):
            at, rest = module, path
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    at = at[:-1]
                rest = rest[1:]
        elif module + (first,) in self.files:
            at, rest = module, path
        else:
            return None
        for name in rest:
            if at + (name,) in self.files:
                at = at + (name,)
            else:
                break
        return at

    def references(self, module):
        code = without_tests(strip_comments(open(self.files[module], encoding="utf-8").read()))
        found = set()
        for m in re.finditer(r"\buse\s+([^;]+);", code):
            for p in use_paths(m.group(1)):
                found.add(self.resolve(module, p))
        for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", code):
            found.add(self.resolve(module, tuple(m.group(1).split("::"))))
        found.discard(None)
        found.discard(module)
        return found

    def circles(self):
        """(parent, a, b) for every use a → b between children of a parent lying on a cycle."""
        out = []
        parents = {m[:-1] for m in self.files if m}
        for parent in sorted(parents):
            kids = sorted({m[len(parent)] for m in self.files if len(m) > len(parent) and m[:len(parent)] == parent})
            graph = {k: set() for k in kids}
            for m, targets in self.uses.items():
                if len(m) <= len(parent) or m[:len(parent)] != parent:
                    continue
                for t in targets:
                    if len(t) > len(parent) and t[:len(parent)] == parent and t[len(parent)] != m[len(parent)]:
                        graph[m[len(parent)]].add(t[len(parent)])
            for a, b in cycles(graph):
                out.append((parent, a, b))
        return out


def cycles(graph):
    """Edges (a, b) that lie on a cycle."""
    def reaches(a, b):
        seen, stack = set(), [a]
        while stack:
            n = stack.pop()
            if n == b:
                return True
            for m in graph.get(n, ()):
                if m not in seen:
                    seen.add(m)
                    stack.append(m)
        return False
    return sorted((a, b) for a in graph for b in graph[a] if reaches(b, a))


FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?((const|async|unsafe|extern\s+\"\w+\")\s+)*fn\s+(\w+)", re.M)


def long_functions(path):
    """(name, lines as written) of every function above MAX_FN outside test code."""
    raw = open(path, encoding="utf-8").read()
    code = without_tests(strip_comments(raw))
    out = []
    for m in FN.finditer(code):
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace and "{" not in code[m.end():semi]):
            continue
        end = block_end(code, m.end())
        lines = code.count("\n", m.start(), end) + 1
        if lines > MAX_FN:
            out.append((m.group(5), lines))
    return out


def is_test(path):
    return path.startswith("tests/") or path.endswith("_tests.rs") or "/tests/" in path


# A default target directory other than cargo's: a path of its own, or an assignment of
# CARGO_TARGET_DIR (justfile `export X :=`, shell `X=`/`${X:-…}`, Python `environ.get(X, …)`).
SECOND_BUILD = re.compile(
    r"uqbench-target\b|export\s+CARGO_TARGET_DIR|CARGO_TARGET_DIR\s*:?=|CARGO_TARGET_DIR:-(?![^}]*/target\})"
    r"|get\(\s*[\"']CARGO_TARGET_DIR[\"']\s*,")


def one_build():
    """Check 5: the files of documented commands that set a target directory of their own."""
    files = ["README.md", "justfile"]
    for folder, ext in (("scripts", (".sh", ".py")), ("python/tests", (".py",)), ("docs", (".md",))):
        files += [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(ext)]
    out = []
    for path in files:
        if path == "scripts/house-check.py":
            continue
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            # The Python package's own build (pyo3, no burn) is a separate one by design.
            if SECOND_BUILD.search(line) and "UQBENCH_PYTHON_TARGET" not in line:
                out.append(f"{path}:{n}: a build directory other than the README's (cargo's "
                           f"./target or CARGO_TARGET_DIR): {line.strip()[:100]}")
    return out


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    bad, rooms, total = [], {}, 0
    for root in ROOTS:
        for path in rust_files(root):
            n = sum(1 for _ in open(path, encoding="utf-8"))
            parts = path.split("/")
            room = "/".join(parts[:2]) if parts[0] in ("crates", "python") else parts[0]
            rooms[room] = rooms.get(room, 0) + n
            total += n
            if n > MAX_FILE:
                bad.append(f"{path}: {n} lines (at most {MAX_FILE})")
            if not is_test(path):
                for name, length in long_functions(path):
                    bad.append(f"{path}: fn {name} has {length} lines (at most {MAX_FN})")
    for room, n in sorted(rooms.items()):
        if room != "tests" and n > MAX_ROOM * total:
            bad.append(f"{room}: {n} of the house's {total} lines ({100 * n / total:.0f}%, at most "
                       f"{100 * MAX_ROOM:.0f}%)")
    srcs = [os.path.join("crates", c, "src") for c in sorted(os.listdir("crates"))] + ["python/src"]
    for src in srcs:
        crate = Crate(src)
        if "--graph" in sys.argv:
            for m in sorted(crate.uses):
                for t in sorted(crate.uses[m]):
                    print(f"{src}: {'::'.join(m) or '(root)'} -> {'::'.join(t) or '(root)'}")
        for parent, a, b in crate.circles():
            where = "::".join(parent) or "(crate root)"
            bad.append(f"{src}: in {where}, module {a} uses {b}, which leads back to {a}")
    bad += one_build()
    for line in bad:
        print(line)
    print(f"house-check: {len(bad)} problems" if bad else
          f"house-check: no circles, no file above {MAX_FILE} lines, no function above "
          f"{MAX_FN} lines, no room above {100 * MAX_ROOM:.0f}% of {total} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
