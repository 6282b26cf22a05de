"""Test-session setup shared by tests/ and the doctests in vlmrb_torchrl/."""

import os

# Intel MKL picks code paths by memory alignment unless told not to, so the same matrix product
# can differ in the last bits between a run and its resumed copy (tensors reloaded from a
# checkpoint sit at other addresses). MKL reads this once, at its first call: set it before any.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

# MuJoCo picks its OpenGL backend once, when it is first imported, and TorchRL imports it: whichever test module
# is collected first would decide it (a module that sets MUJOCO_GL after another imported torchrl got the default,
# which has no display here, and every later renderer in that process failed with "gladLoadGL error"). The test
# machines are headless: EGL (Mesa) for the whole session.
os.environ.setdefault("MUJOCO_GL", "egl")

# `make test` runs one pytest-xdist worker per core (-n 2 on the project's 2-core machines): torch's default of a
# thread per core in each worker oversubscribes them, and small ops then wait on each other (measured under load:
# the by-hand DoorKey example's test took 26 s with the default threads, 9 s with one). One thread a worker.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, "1")


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
