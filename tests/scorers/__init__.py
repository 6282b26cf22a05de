"""Tests of the scorer backends (HF generative, contrastive, OpenAI-compatible) and wrappers."""
