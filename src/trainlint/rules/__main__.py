"""`python -m trainlint.rules`: rewrite rules/catalog.json from the rules on disk."""

import sys

from . import all_rules, catalog


def main() -> int:
    rules = all_rules()
    with open(catalog.CATALOG_PATH, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(catalog.render(rules))
    print(f"wrote {catalog.CATALOG_PATH} ({len(rules)} rules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
