"""trainlint: a static analyzer for PyTorch training scripts."""

__version__ = "0.1.0"

# Where each rule's explanation lives on the web; `url` in JSON/SARIF output points here.
DOCS_URL = "https://github.com/trainlint/trainlint/blob/main/docs/rules.md"


def rule_url(code: str) -> str:
    return f"{DOCS_URL}#{code.lower()}"
