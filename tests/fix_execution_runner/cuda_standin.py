"""Runs training scripts for the fix-execution tests (tests/test_fix_execution.py): a small CUDA
stand-in for CPU PyTorch, and a fork server that imports torch once and runs one script per
forked child.

The stand-in (`install(gpus)`) makes CPU torch look like a machine with `gpus` CUDA devices where
that matters to the rules' fixes, and keeps the device-index semantics they depend on:

- `torch.cuda.is_available()` is True and `device_count()` is `gpus`; `set_device`,
  `current_device`, `torch.cuda.device(i)` keep a current device, through the `torch._C` hooks
  the real functions call, so `set_device(torch.device("cuda"))` still raises torch's own
  ValueError (no index) and an index >= `gpus` raises "invalid device ordinal".
- `torch.device("cuda:1")` stays a CUDA device (scripts test `device.type == "cuda"`); tensors
  and modules placed on a CUDA device (`.to`, `.cuda`, `device=` of factory functions,
  `torch.load(map_location=...)`) land on the CPU after the index is checked. A module remembers
  the CUDA device it was moved to, so the DataParallel stand-in can refuse a module that is not
  on `device_ids[0]`, as DataParallel does.
- DataParallel calls its module directly (one process, no replicas); DistributedDataParallel
  checks `device_ids`/`output_device` and wraps the CPU module; `init_process_group` with NCCL
  uses gloo (world size 1 on 127.0.0.1, set up by the caller's environment).

With `gpus=0` nothing is patched: that is plain CPU PyTorch.

The server reads one JSON request a line on stdin ({"script", "cwd", "argv", "env", "gpus",
"timeout", "log"}), runs the script in a forked child (network refused except loopback, lines
of the script recorded) and answers one JSON line on stdout: {"outcome": "ok" | "error" |
"timeout" | "exit", "type", "message", "row", "lines" (rows that ran, per file of the
script's folder), "log"}.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import sys
import traceback

INVALID_ORDINAL = "CUDA error: invalid device ordinal"
NO_NETWORK = "network access refused by the fix-execution harness"


def install(gpus: int) -> None:
    if gpus <= 0:
        return
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.overrides import TorchFunctionMode

    current = {"index": 0}

    def checked(index: int) -> int:
        if not 0 <= index < gpus:
            raise RuntimeError(INVALID_ORDINAL)
        return index

    def cuda_index(value):
        """The CUDA index `value` names (None when it names no CUDA device)."""
        if isinstance(value, str) and value.startswith("cuda"):
            value = torch.device(value)
        if isinstance(value, torch.device) and value.type == "cuda":
            return checked(current["index"] if value.index is None else value.index)
        return None

    def cuda_device(device):
        """The device `.cuda(device)` means: the current one, an index, or a device."""
        if device is None:
            return torch.device("cuda")
        return torch.device("cuda", device) if isinstance(device, int) else device

    def set_current(index: int) -> None:
        current["index"] = checked(index)

    def exchange(index: int) -> int:
        previous = current["index"]
        if index >= 0:
            set_current(index)
        return previous

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: gpus
    torch.cuda.is_initialized = lambda: True
    torch.cuda._lazy_init = lambda: None
    torch._C._cuda_setDevice = set_current
    torch._C._cuda_getDevice = lambda: current["index"]
    torch._C._cuda_exchangeDevice = exchange
    torch._C._cuda_maybeExchangeDevice = exchange
    for name in ("synchronize", "empty_cache", "manual_seed", "manual_seed_all", "ipc_collect"):
        setattr(torch.cuda, name, lambda *args, **kwargs: None)
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        setattr(torch.cuda, name, lambda *args, **kwargs: 0)
    torch.cuda.reset_peak_memory_stats = lambda *args, **kwargs: None
    torch.cuda.get_device_name = lambda *args, **kwargs: "CUDA stand-in"
    torch.cuda.get_device_capability = lambda *args, **kwargs: (8, 0)
    torch.cuda.is_bf16_supported = lambda *args, **kwargs: True

    class Properties:
        name = "CUDA stand-in"
        major, minor = 8, 0
        total_memory = 16 << 30
        multi_processor_count = 80

    torch.cuda.get_device_properties = lambda *args, **kwargs: Properties()

    class CudaOnCpu(TorchFunctionMode):
        """Every CUDA placement checked, then made on the CPU."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.device:  # a CUDA device stays one; only placements move
                return func(*args, **kwargs)
            name = getattr(func, "__name__", "")
            if name == "cuda":
                device = args[1] if len(args) > 1 else kwargs.get("device")
                cuda_index(cuda_device(device))
                return args[0]
            if name == "pin_memory":
                return args[0]
            if name == "to" and len(args) > 1 and type(args[1]) is int:
                checked(args[1])
                args = (args[0], "cpu") + tuple(args[2:])
            args = tuple("cpu" if cuda_index(a) is not None else a for a in args)
            device = kwargs.get("device")
            if type(device) is int:  # an index names a CUDA device here
                checked(device)
                kwargs["device"] = "cpu"
            elif cuda_index(device) is not None:
                kwargs["device"] = "cpu"
            return func(*args, **kwargs)

    CudaOnCpu().__enter__()

    real_module_to = nn.Module.to

    def remember(module, index):
        for sub in module.modules():
            sub.__dict__["_standin_cuda_index"] = index

    def module_to(self, *args, **kwargs):
        if args and type(args[0]) is int:
            args = (torch.device("cuda", args[0]),) + args[1:]
        if type(kwargs.get("device")) is int:
            kwargs["device"] = torch.device("cuda", kwargs["device"])
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        result = real_module_to(self, *args, **kwargs)
        if device is not None:
            index = cuda_index(device)
            remember(self, index)
        return result

    def module_cuda(self, device=None):
        index = cuda_index(cuda_device(device))
        remember(self, index)
        return self

    nn.Module.to = module_to
    nn.Module.cuda = module_cuda

    real_load = torch.load

    def restore(storage, location):
        if location.startswith("cuda"):
            index = torch.device(location).index or 0
            if index >= gpus:
                raise RuntimeError(
                    f"Attempting to deserialize object on CUDA device {index} but "
                    f"torch.cuda.device_count() is {gpus}. Please use torch.load with "
                    "map_location to map your storages to an existing device."
                )
        return storage

    def load(*args, **kwargs):
        location = kwargs.get("map_location")
        if location is None:
            kwargs["map_location"] = restore
        elif cuda_index(location) is not None:
            kwargs["map_location"] = "cpu"
        return real_load(*args, **kwargs)

    torch.load = load

    def index_of(device) -> int:
        if isinstance(device, int):
            return checked(device)
        index = cuda_index(device)
        if index is None:
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return index

    class DataParallel(nn.DataParallel):
        def __init__(self, module, device_ids=None, output_device=None, dim=0):
            nn.Module.__init__(self)
            ids = list(range(gpus)) if device_ids is None else [index_of(d) for d in device_ids]
            self.module = module
            self.device_ids = ids
            self.dim = dim
            self.output_device = ids[0] if output_device is None else index_of(output_device)
            self.src_device_obj = torch.device("cuda", ids[0])
            if len(ids) == 1:
                self.module.to(self.src_device_obj)

        def forward(self, *inputs, **kwargs):
            index = self.module.__dict__.get("_standin_cuda_index")
            has_state = any(True for _ in self.module.parameters()) or any(
                True for _ in self.module.buffers()
            )
            if has_state and index != self.device_ids[0]:
                where = "cpu" if index is None else f"cuda:{index}"
                raise RuntimeError(
                    f"module must have its parameters and buffers on device "
                    f"{self.src_device_obj} (device_ids[0]) but found one of them on device: "
                    f"{where}"
                )
            return self.module(*inputs, **kwargs)

    real_ddp = nn.parallel.DistributedDataParallel

    class DistributedDataParallel(real_ddp):
        def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
            if device_ids is not None:
                if len(device_ids) != 1:
                    raise ValueError("device_ids can only be None or contain a single element.")
                index_of(device_ids[0])
            if output_device is not None:
                index_of(output_device)
            super().__init__(module, None, None, *args, **kwargs)

    nn.DataParallel = DataParallel
    nn.parallel.DataParallel = DataParallel
    nn.parallel.data_parallel.DataParallel = DataParallel
    nn.parallel.DistributedDataParallel = DistributedDataParallel
    nn.parallel.distributed.DistributedDataParallel = DistributedDataParallel

    real_init = dist.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        if isinstance(backend, str):
            backend = re.sub("nccl", "gloo", backend)
        device_id = kwargs.pop("device_id", None)
        if device_id is not None:
            index_of(device_id)
        return real_init(backend, *args, **kwargs)

    dist.init_process_group = init_process_group
    torch.distributed.distributed_c10d.init_process_group = init_process_group


def _refuse_network() -> None:
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def local(address) -> bool:
        if isinstance(address, (str, bytes)):
            return True  # a Unix socket
        host = address[0]
        return host in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or host.startswith("127.")

    def connect(self, address):
        if not local(address):
            raise OSError(NO_NETWORK)
        return real_connect(self, address)

    def connect_ex(self, address):
        if not local(address):
            raise OSError(NO_NETWORK)
        return real_connect_ex(self, address)

    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex


def _message_class(exc: BaseException, cwd: str) -> str:
    """The first line of the message with what differs between runs made constant."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text.replace(os.path.realpath(cwd), "<dir>").replace(cwd, "<dir>")
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    return text[:300]


def _run_child(request, report_fd: int) -> None:
    script = os.path.realpath(request["script"])
    cwd = request["cwd"]
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.chdir(cwd)
    os.environ.update(request["env"])
    sys.argv = [script] + list(request.get("argv", []))
    sys.path[0:0] = [os.path.dirname(script)]
    install(int(request["gpus"]))
    _refuse_network()
    folder = os.path.realpath(cwd) + os.sep
    lines = {}  # file under the script's folder -> rows that ran

    def trace(frame, event, arg):
        filename = frame.f_code.co_filename
        if not filename.startswith(folder):
            return None
        ran = lines.setdefault(filename[len(folder) :], set())

        def local(frame, event, arg):
            if event == "line":
                ran.add(frame.f_lineno)
            return local

        ran.add(frame.f_lineno)
        return local

    result = {"outcome": "ok", "type": "", "message": "", "row": 0}
    import runpy
    import threading

    sys.settrace(trace)
    threading.settrace(trace)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            result = {"outcome": "exit", "type": "SystemExit", "message": str(exc.code), "row": 0}
    except BaseException as exc:  # noqa: B902 - everything the script raises is the result
        rows = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == script]
        result = {
            "outcome": "error",
            "type": type(exc).__name__,
            "message": _message_class(exc, cwd),
            "row": rows[-1] if rows else 0,
        }
        traceback.print_exc()
    finally:
        sys.settrace(None)
        threading.settrace(None)
    result["lines"] = {name: sorted(rows) for name, rows in lines.items()}
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(report_fd, json.dumps(result).encode())
    os.close(report_fd)


def run_one(request) -> dict:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.setpgid(0, 0)
        code = 0
        try:
            _run_child(request, write_fd)
        except BaseException:  # noqa: B902 - the harness itself failed: say so
            traceback.print_exc()
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks = []
    timed_out = False
    timeout = float(request.get("timeout", 20))
    import time

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    if timed_out:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    try:  # worker processes the script started and left behind
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if timed_out:
        result = {"outcome": "timeout", "type": "", "message": f"{timeout:g} s", "row": 0}
        result["lines"] = {}
    elif chunks:
        result = json.loads(b"".join(chunks))
    else:
        code = os.waitstatus_to_exitcode(status)
        result = {"outcome": "exit", "type": "exit status", "message": str(code), "row": 0}
        result["lines"] = {}
    with open(request["log"], errors="replace") as handle:
        result["log"] = handle.read()[-4000:]
    return result


def _warm_up() -> None:
    """What most scripts import lazily on first use (the meta device alone pulls in sympy),
    done once here instead of in every child. One thread: the children are forked after this."""
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.optim.Adam(model.parameters())
    torch.optim.AdamW(model.parameters())
    for x, y in DataLoader(TensorDataset(torch.randn(4, 4), torch.tensor([0, 1, 0, 1])), 2):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    meta = nn.Linear(4, 2).to("meta")
    meta(torch.ones(3, 4, device="meta")).sum()


def serve() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch  # noqa: F401 - imported once here, shared by every forked child
    import torch.distributed  # noqa: F401
    import torch.nn  # noqa: F401
    import torch.utils.data  # noqa: F401

    _warm_up()
    out = sys.stdout
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        out.write(json.dumps(run_one(json.loads(line))) + "\n")
        out.flush()


if __name__ == "__main__":
    serve()
