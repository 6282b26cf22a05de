"""Prompt hashing for provenance. A leaf module: it imports nothing from the package."""

from __future__ import annotations

import hashlib

__all__ = ["prompt_hash"]


def prompt_hash(prompt: str) -> str:
    """Short, stable hash of a prompt (first 16 hex digits of its SHA-256), for provenance.

    Checkpoints store it and a resumed run compares it, so it must never change for a prompt.

    Examples:
        >>> prompt_hash("Does this clip show the agent opening the door?")
        '6729f0bfee97caac'
        >>> len(prompt_hash("")), prompt_hash("a") == prompt_hash("a"), prompt_hash("a") == prompt_hash("b")
        (16, True, False)
    """
    if not isinstance(prompt, str):
        raise TypeError(f"prompt_hash expects a str prompt, got {type(prompt).__name__}.")
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]
