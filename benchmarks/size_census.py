"""The package's size census: files past 400 lines and functions past 60, largest first.

Prints ONE JSON line for this checkout (or ``--root DIR``, another checkout): the number of
modules and lines, every module over ``--file-lines`` and every function or method over
``--function-lines`` (by their source span, decorators and docstring included).

    python benchmarks/size_census.py [--root DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def census(root: Path, file_lines: int, function_lines: int) -> dict:
    """Modules and functions of ``root/ripple_flwr`` past the given sizes."""
    package = root / "ripple_flwr"
    files, functions, total = [], [], 0
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        total += lines
        rel = str(path.relative_to(root))
        if lines > file_lines:
            files.append([rel, lines])
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                span = node.end_lineno - start + 1
                if span > function_lines:
                    functions.append([f"{rel}:{node.name}", span])
    return {
        "modules": len(list(package.rglob("*.py"))),
        "lines": total,
        f"files_over_{file_lines}": sorted(files, key=lambda f: -f[1]),
        f"functions_over_{function_lines}": sorted(functions, key=lambda f: -f[1]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to count")
    parser.add_argument("--file-lines", type=int, default=400)
    parser.add_argument("--function-lines", type=int, default=60)
    parser.add_argument("--json", type=Path, help="also write the line here")
    args = parser.parse_args(argv)
    line = json.dumps(census(args.root.resolve(), args.file_lines, args.function_lines))
    print(line)
    if args.json:
        args.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
