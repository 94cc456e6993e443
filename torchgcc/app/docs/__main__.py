"""``python -m torchgcc.app.docs [--check]``: render README.md and docs/*.md from their templates (see
:mod:`torchgcc.app.docs`)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from torchgcc.app.docs import DocsError, checkout, render_all, stale_docs, unsourced_numbers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torchgcc.app.docs",
        description="Render README.md and docs/*.md from docs/templates/ and the committed results.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a doc differs from its rendering or a template has an unsourced number",
    )
    args = parser.parse_args(argv)
    try:
        root = checkout()
        unsourced = unsourced_numbers(root)
        for template, findings in unsourced.items():
            for finding in findings:
                print(
                    f"{template}:{finding.line}: measured number {finding.text!r} has no placeholder", file=sys.stderr
                )
        rendered = render_all(root)
    except DocsError as error:
        print(f"python -m torchgcc.app.docs: error: {error}", file=sys.stderr)
        return 1
    stale = stale_docs(root, rendered)
    if args.check:
        for target in stale:
            print(f"{target} differs from its template: run python -m torchgcc.app.docs", file=sys.stderr)
        return 1 if stale or unsourced else 0
    if unsourced:
        print("nothing written: give every measured number a placeholder", file=sys.stderr)
        return 1
    for doc in rendered:
        if doc.target in stale:
            (root / doc.target).write_text(doc.text)
            print(f"wrote {doc.target}")
    print(f"{len(rendered)} docs, {len(stale)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
