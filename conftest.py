"""Test-session setup shared by tests/ and the doctests in vlmrb_torchrl/."""

import os

# Intel MKL picks code paths by memory alignment unless told not to, so the same matrix product
# can differ in the last bits between a run and its resumed copy (tensors reloaded from a
# checkpoint sit at other addresses). MKL reads this once, at its first call: set it before any.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
