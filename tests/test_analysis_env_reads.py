"""analysis/parallel/parallel.py: Parallel.reads_env, which environment variables a file reads,
also through a helper of the file that looks up the names it is given."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.parallel.parallel import Parallel
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def reads_local_rank(code: str) -> bool:
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    return ctx.analysis(Parallel).reads_env("LOCAL_RANK")


READS = {
    "subscript": 'import os\nrank = int(os.environ["LOCAL_RANK"])\n',
    "get": 'import os\nrank = int(os.environ.get("LOCAL_RANK", 0))\n',
    "getenv": 'import os\nrank = int(os.getenv("LOCAL_RANK", "0"))\n',
    "membership": 'import os\nif "LOCAL_RANK" in os.environ:\n    pass\n',
    "names looked up in turn": """
        import os

        def env2int(names, default=-1):
            for name in names:
                value = int(os.environ.get(name, -1))
                if value >= 0:
                    return value
            return default

        rank = env2int(["OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"], 0)
        """,
    "one name handed to a reader": """
        import os

        def env_int(name, default):
            return int(os.environ[name]) if name in os.environ else default

        rank = env_int("LOCAL_RANK", 0)
        """,
}

NOT_READS = {
    "written": 'import os\nos.environ["LOCAL_RANK"] = "0"\n',
    "printed": 'print("set LOCAL_RANK before launching")\n',
    "names handed to a function that reads no environment": """
        import logging

        def show(names):
            for name in names:
                logging.info("launcher variable %s", name)

        show(["RANK", "LOCAL_RANK"])
        """,
    "names beside a helper that reads one fixed key": """
        import os

        def world_size(names):
            print(names)
            return int(os.environ.get("WORLD_SIZE", 1))

        size = world_size(["LOCAL_RANK"])
        """,
    "an imported helper (its body is not in this file)": """
        from launcher_utils import env2int

        rank = env2int(["OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"], 0)
        """,
}


@pytest.mark.parametrize("code", READS.values(), ids=list(READS))
def test_reads(code):
    assert reads_local_rank(code)


@pytest.mark.parametrize("code", NOT_READS.values(), ids=list(NOT_READS))
def test_does_not_read(code):
    assert not reads_local_rank(code)
