#!/usr/bin/env python3
"""The house's limits, checked on the source tree (run by scripts/test.sh, a second):

1. No import circles between modules: within each crate, between its top-level modules
   (`crate::a` used in module b and `crate::b` in module a, directly or through others), and
   between sibling files of a folder module (`super::x`). Across crates Cargo forbids them.
2. No source file above 700 lines.
3. No function above 120 lines outside tests.

Comments, doc comments and `#[cfg(test)]` tails are left out; `*_tests.rs` files are tests.
Prints every violation and exits 1 if there is one.
"""
import os
import re
import sys

ROOTS = ["crates", "python/src", "tests"]
MAX_FILE, MAX_FN = 700, 120


def rust_files(root):
    for d, _, fs in os.walk(root):
        if "/target" in d:
            continue
        for f in sorted(fs):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def code_of(path):
    """The file's code without its test tail and without comment lines."""
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]"):
            lines = lines[:i]
            break
    return [l for l in lines if not l.strip().startswith("//")]


def long_functions(path):
    lines = code_of(path)
    out = []
    i = 0
    fn = re.compile(r"\s*(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)")
    while i < len(lines):
        m = fn.match(lines[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            depth += lines[j].count("{") - lines[j].count("}")
            started = started or "{" in lines[j]
            if started and depth <= 0:
                break
            if not started and lines[j].rstrip().endswith(";"):
                break
            j += 1
        if started and j - i + 1 > MAX_FN:
            out.append((m.group(5), j - i + 1))
        i += 1
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


def module_graphs(crate_src):
    """Top-level module graph of a crate, and sibling graphs of its folder modules."""
    top, siblings = {}, {}
    for path in rust_files(crate_src):
        if path.endswith("_tests.rs"):
            continue
        rel = os.path.relpath(path, crate_src)
        parts = rel[:-3].split("/")
        code = "\n".join(code_of(path))
        if parts[0] not in ("lib", "main"):
            for m in set(re.findall(r"crate::(\w+)", code)) - {parts[0]}:
                top.setdefault(parts[0], set()).add(m)
        if len(parts) >= 2 and parts[-1] != "mod":
            folder = "/".join(parts[:-1])
            here = {os.path.splitext(f)[0] for f in os.listdir(os.path.dirname(path))}
            for m in set(re.findall(r"super::(\w+)", code)) & here - {parts[-1], "mod"}:
                siblings.setdefault(folder, {}).setdefault(parts[-1], set()).add(m)
    return top, siblings


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    bad = []
    for root in ROOTS:
        for path in rust_files(root):
            n = sum(1 for _ in open(path, encoding="utf-8"))
            if n > MAX_FILE:
                bad.append(f"{path}: {n} lines (at most {MAX_FILE})")
            if root != "tests" and not path.endswith("_tests.rs"):
                for name, length in long_functions(path):
                    bad.append(f"{path}: fn {name} has {length} lines (at most {MAX_FN})")
    crates = [os.path.join("crates", c, "src") for c in sorted(os.listdir("crates"))]
    for src in crates + ["python/src"]:
        top, siblings = module_graphs(src)
        for a, b in cycles(top):
            bad.append(f"{src}: module {a} uses {b}, which leads back to {a}")
        for folder, graph in siblings.items():
            for a, b in cycles(graph):
                bad.append(f"{src}/{folder}: {a}.rs uses {b}.rs, which leads back to {a}.rs")
    for line in bad:
        print(line)
    print(f"house-check: {len(bad)} problems" if bad else "house-check: no circles, no file "
          f"above {MAX_FILE} lines, no function above {MAX_FN} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
