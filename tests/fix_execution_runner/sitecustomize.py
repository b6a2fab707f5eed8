"""Installs the CUDA stand-in in the processes a script under test starts itself
(`torch.multiprocessing.spawn`, DataLoader workers started with "spawn"): the fix-execution
runner puts this folder on PYTHONPATH and sets TRAINLINT_FIX_EXEC_GPUS."""
import os

if os.environ.get("TRAINLINT_FIX_EXEC_GPUS"):
    import cuda_standin

    cuda_standin.install(int(os.environ["TRAINLINT_FIX_EXEC_GPUS"]))
