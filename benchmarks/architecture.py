"""The code's shape, measured: which top-level packages import which, how many lines name a
fine-tuning task, and the longest functions. Reads the working tree, or a git revision.

    python -m benchmarks.architecture [--rev 8506579] [--longest 5]

A code line names a task when, outside comments and docstrings, it holds one of the
reference study's task names as a string ("sst", "para", "sts") or in an identifier
(`sst_weight`, `para_dev`, `STS_...`). Counted in kerasbert/, pipelines/ and serving/.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys

PACKAGES = ("kerasbert", "pipelines", "serving", "benchmarks", "examples", "tests")
TASK_NAME = re.compile(r"""(["'](sst|para|sts)["'])|\b(sst|para|sts)_\w+|\w+_(sst|para|sts)\b""", re.IGNORECASE)


def files(rev: str | None) -> dict[str, str]:
    """path -> source of every tracked .py file at `rev` (None: the working tree's tracked files)."""
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev or "HEAD"] if rev else
                             ["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    sources = {}
    for path in listing:
        if path.endswith(".py") and path.split("/")[0] in PACKAGES:
            if rev:
                sources[path] = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True,
                                               check=True).stdout
            else:
                with open(path, encoding="utf-8") as f:
                    sources[path] = f.read()
    return sources


def import_graph(sources: dict[str, str]) -> dict[tuple[str, str], int]:
    """(from package, to package) -> number of import statements."""
    edges: dict[tuple[str, str], int] = {}
    for path, source in sources.items():
        here = path.split("/")[0]
        for node in ast.walk(ast.parse(source)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                there = name.split(".")[0]
                if there in PACKAGES and there != here:
                    edges[(here, there)] = edges.get((here, there), 0) + 1
    return edges


def docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def task_lines(sources: dict[str, str]) -> dict[str, int]:
    """Per file, the code lines (not comments or docstrings) that name a task."""
    counts = {}
    for path, source in sources.items():
        if path.split("/")[0] not in ("kerasbert", "pipelines", "serving"):
            continue
        skip = docstring_lines(ast.parse(source))
        count = sum(1 for number, line in enumerate(source.splitlines(), 1)
                    if number not in skip and TASK_NAME.search(line.split("#")[0]))
        if count:
            counts[path] = count
    return counts


def longest_functions(sources: dict[str, str], count: int) -> list[tuple[int, str]]:
    lengths = []
    for path, source in sources.items():
        if path.startswith("tests/"):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths.append((node.end_lineno - node.lineno + 1, f"{path}:{node.lineno} {node.name}"))
    return sorted(lengths, reverse=True)[:count]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.architecture", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", default=None, help="A git revision (default: the working tree).")
    parser.add_argument("--longest", type=int, default=5, help="How many of the longest functions to list.")
    args = parser.parse_args(argv)
    sources = files(args.rev)
    print(f"# {args.rev or 'working tree'}: {len(sources)} Python files")
    print("imports between top-level packages:")
    for (here, there), n in sorted(import_graph(sources).items()):
        print(f"  {here} -> {there}: {n}")
    counts = task_lines(sources)
    print(f"code lines naming a task (sst, para, sts) in kerasbert/, pipelines/, serving/: {sum(counts.values())} "
          f"in {len(counts)} files")
    for path, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"  {count:4d}  {path}")
    print("longest functions (lines, tests excluded):")
    for length, where in longest_functions(sources, args.longest):
        print(f"  {length:4d}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
