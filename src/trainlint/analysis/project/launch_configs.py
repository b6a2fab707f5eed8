"""What the project's launch configurations say about how it is run.

Accelerate takes its distributed setup from a YAML file (`accelerate launch --config_file
accelerate_config/fsdp_8gpu.yaml train.py`, as `accelerate config` writes it), whose
`distributed_type` names what Accelerate wraps the model in: `MULTI_GPU` (and `MULTI_NPU`,
`MULTI_XPU`, ...) builds DistributedDataParallel, so a `DistributedDataParallelKwargs` handler
reaches DDP there; `FSDP`, `DEEPSPEED` and `XLA` build their own wrappers and ignore it; `NO` runs
one process. A project that ships such files is run with them (its README and scripts name
them); one that ships none is run with whatever its user configured, which nobody can read.
"""

from __future__ import annotations

import re
from typing import Optional, Set

# `distributed_type: FSDP` at the top level of an Accelerate config (quoted or not).
_DISTRIBUTED_TYPE = re.compile(r"^distributed_type:[ \t]*['\"]?([A-Za-z_]+)", re.M)


def accelerate_distributed_types(project) -> Optional[Set[str]]:
    """The `distributed_type`s (upper case) of the Accelerate configs among the project's YAML
    files; None when it ships none, or its files cannot be read (flake8)."""
    if not project.complete:
        return None
    found: Set[str] = set()
    for _path, text in project.launch_config_texts():
        found.update(match.upper() for match in _DISTRIBUTED_TYPE.findall(text))
    return found or None


def accelerate_may_build_ddp(project) -> bool:
    """Can Accelerate wrap this project's model in DDP? No only when the project ships Accelerate
    configs and none of them asks for a multi-process DDP run (every one is FSDP, DeepSpeed,
    XLA or a single process)."""
    types = accelerate_distributed_types(project)
    return types is None or any(kind.startswith("MULTI_") for kind in types)
