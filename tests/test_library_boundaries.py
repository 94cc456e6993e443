"""The library (``torchgcc/`` outside ``torchgcc/app``) leaves the command line's concerns to the application: no
``print``, ``signal.signal``, ``sys.exit`` or ``argparse`` outside ``__main__.py`` entry points, no error message
naming a ``--flag``, and diagnostics through the ``torchgcc`` loggers, silent unless a program configures them."""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

import torchgcc

LIBRARY = Path(torchgcc.__file__).parent
FLAG = re.compile(r"(?:^|[\s`'\"(])--[a-z]")


def library_modules() -> list[Path]:
    return sorted(
        path
        for path in LIBRARY.rglob("*.py")
        if path.relative_to(LIBRARY).parts[0] != "app" and path.name != "__main__.py"
    )


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def violations(path: Path) -> list[str]:
    """Every command-line concern in one module, as ``path:line: what``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "print":
                found.append(f"{where}: print(")
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if (func.value.id, func.attr) in (("signal", "signal"), ("sys", "exit")):
                    found.append(f"{where}: {func.value.id}.{func.attr}(")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names:
                found.append(f"{where}: import argparse")
        if isinstance(node, ast.Raise) and node.exc is not None:
            found += [f"{where}: error names a flag: {text!r}" for text in _strings(node.exc) if FLAG.search(text)]
    return found


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The check itself, on a module that does everything the library must not."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import argparse, signal, sys\n"
        "print('x')\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "sys.exit(1)\n"
        "raise ValueError(f'{3} is too many: pass a smaller --store-chunk-mb')\n"
        "raise ValueError('chunk_bytes must be positive; x--y is not a flag')\n"
    )
    found = sorted(line.split(": ", 1)[1] for line in violations(bad))
    assert found == [
        "error names a flag: ' is too many: pass a smaller --store-chunk-mb'",
        "import argparse",
        "print(",
        "signal.signal(",
        "sys.exit(",
    ]


def test_the_library_has_no_command_line_concerns():
    modules = library_modules()
    assert len(modules) > 50 and not any(p.relative_to(LIBRARY).parts[0] == "app" for p in modules)
    assert [v for path in modules for v in violations(path)] == []


def test_the_torchgcc_logger_is_silent_until_a_program_configures_it():
    logger = logging.getLogger("torchgcc")
    assert any(isinstance(handler, logging.NullHandler) for handler in logger.handlers)
    assert logging.getLogger("torchgcc.distributed").parent is logger
