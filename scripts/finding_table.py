"""README.md's finding table, generated from the one finding table.

    .venv/bin/python scripts/finding_table.py           # print the table
    .venv/bin/python scripts/finding_table.py --check   # exit 1 when README.md's table differs
    .venv/bin/python scripts/finding_table.py --write   # rewrite README.md's table

The table is plugins/plugin_utils/audit/finding_types.py's ``markdown_table()``; README.md holds
it between ``README_BEGIN`` and ``README_END``. tests/unit/plugins/plugin_utils/audit/
test_finding_types.py fails when the two differ.
"""
import argparse
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "plugins", "plugin_utils", "audit", "finding_types.py")
README = os.path.join(ROOT, "README.md")


def load_table():
    spec = importlib.util.spec_from_file_location("finding_types", SOURCE)  # imports nothing of the collection
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def replaced(text, ft):
    begin, end = text.find(ft.README_BEGIN), text.find(ft.README_END)
    if begin < 0 or end < begin:
        raise SystemExit("README.md has no finding table between %r and %r" % (ft.README_BEGIN, ft.README_END))
    rest = text[end + len(ft.README_END):]
    return text[:begin] + ft.markdown_table() + (rest[1:] if rest.startswith("\n") else rest)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="exit 1 when README.md's table differs")
    group.add_argument("--write", action="store_true", help="rewrite README.md's table")
    args = parser.parse_args(argv)
    ft = load_table()
    if not (args.check or args.write):
        sys.stdout.write(ft.markdown_table())
        return 0
    with open(README, encoding="utf-8") as f:
        text = f.read()
    new = replaced(text, ft)
    if args.check:
        if new != text:
            sys.stderr.write("README.md's finding table differs from finding_types.py: run %s --write\n" % sys.argv[0])
            return 1
        return 0
    if new != text:
        tmp = README + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(new)
        os.replace(tmp, README)
    return 0


if __name__ == "__main__":
    sys.exit(main())
