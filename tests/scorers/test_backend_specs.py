"""make_scorer spec forms for the VLM backends, model resolution (offline, local dirs, cache), lazy imports."""

from __future__ import annotations

import http.server
import importlib.util
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vlmrb_torchrl.scorers import (
    HFContrastiveScorer,
    HFGenerativeScorer,
    OpenAIScorer,
    _hf,
    make_scorer,
    registered_scorer_forms,
)

from . import tiny_vlms

ROOT = Path(__file__).resolve().parents[2]
FORMS = [
    "hf:<hub id or local dir>",
    "clip:<hub id or local dir>",
    "openai:<base_url>#<model>",
    "oracle:minigrid",
    "python:<module>:<callable>",
]
needs_transformers = pytest.mark.skipif(not tiny_vlms._has_transformers, reason="needs transformers and pillow")
needs_hub = pytest.mark.skipif(
    importlib.util.find_spec("huggingface_hub") is None, reason="needs huggingface_hub (comes with transformers)"
)


class TestSpecs:
    def test_forms_are_registered(self):
        assert set(FORMS) <= set(registered_scorer_forms())

    @pytest.mark.parametrize("spec", ["vlm:facebook/Perception-LM-1B", "gpt4", "clip", "/no/such/dir/anywhere"])
    def test_unknown_spec_lists_every_form(self, spec):
        with pytest.raises(ValueError, match=r"Unknown scorer spec") as info:
            make_scorer(spec)
        for form in FORMS:
            assert repr(form) in str(info.value)

    @pytest.mark.parametrize("spec", ["hf:", "clip:"])
    def test_empty_model(self, spec):
        with pytest.raises(ValueError, match=rf"spec is '{spec}<hub id or local dir>'"):
            make_scorer(spec)

    def test_bare_directory_without_config(self, tmp_path):
        with pytest.raises(ValueError, match="has no readable config.json") as info:
            make_scorer(str(tmp_path))
        assert "'hf:<hub id or local dir>'" in str(info.value)

    @needs_transformers
    @pytest.mark.parametrize(
        "family, cls",
        [
            ("clip", HFContrastiveScorer),
            ("siglip", HFContrastiveScorer),
            ("idefics3", HFGenerativeScorer),
            ("llava", HFGenerativeScorer),
        ],
    )
    def test_bare_directory_detection(self, tiny_model_dir, family, cls):
        directory = tiny_model_dir(family)
        assert _hf.detect_backend(directory) == ("clip" if cls is HFContrastiveScorer else "hf")
        assert isinstance(make_scorer(str(directory)), cls)

    def test_openai_spec_splits_on_hash(self):
        scorer = make_scorer("openai:http://127.0.0.1:9/v1#org/model-7B", max_retries=0)
        assert isinstance(scorer, OpenAIScorer)
        assert (scorer.base_url, scorer.model) == ("http://127.0.0.1:9/v1", "org/model-7B")


class TestModelResolution:
    @needs_transformers
    @pytest.mark.parametrize("prefix", ["hf", "clip"])
    def test_offline_missing_model_fails_fast(self, prefix):
        start = time.monotonic()
        with pytest.raises(FileNotFoundError) as info:
            make_scorer(f"{prefix}:not/a-real-model")
        elapsed = time.monotonic() - start
        message = str(info.value)
        assert "'not/a-real-model'" in message and "HF_HUB_OFFLINE=1" in message
        assert "local directory" in message and "make_scorer('hf:./a-real-model')" in message
        assert elapsed < 2.0, elapsed

    @needs_hub
    def test_local_files_only(self, monkeypatch):
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        with pytest.raises(FileNotFoundError, match="local_files_only=True forbids downloading it"):
            _hf.resolve_model("not/a-real-model", owner="X", local_files_only=True)

    @pytest.mark.parametrize("model", ["./no/such/dir", "/definitely/not/here", "~/nope/nope/nope"])
    def test_missing_path(self, model):
        with pytest.raises(FileNotFoundError, match=rf"model '{model}' is not a directory"):
            _hf.resolve_model(model, owner="HFGenerativeScorer")

    @needs_transformers
    def test_directory_without_config(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="has no config.json"):
            make_scorer(f"hf:{tmp_path}")

    def test_a_file_is_not_a_model(self, tmp_path):
        path = tmp_path / "weights.bin"
        path.write_bytes(b"x")
        with pytest.raises(FileNotFoundError, match="is not a directory"):
            _hf.resolve_model(str(path), owner="X")

    @needs_hub
    def test_is_offline_reads_the_environment(self, monkeypatch):
        assert _hf.is_offline()
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        assert not _hf.is_offline()
        monkeypatch.setenv("TRANSFORMERS_OFFLINE", "true")
        assert _hf.is_offline()

    @needs_hub
    def test_unreachable_hub_fails_fast(self, monkeypatch):
        # not offline, not cached, and the "Hub" is a closed port on this machine
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
        start = time.monotonic()
        with pytest.raises(
            FileNotFoundError, match=r"not in the local Hugging Face cache and the Hub at http://127.0.0.1:9"
        ):
            _hf.resolve_model("org/model", owner="HFGenerativeScorer", hub_timeout=1.0)
        assert time.monotonic() - start < 5.0

    @needs_hub
    def test_unknown_repository(self, monkeypatch):
        class NotFound(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                body = json.dumps({"error": "Repository not found"}).encode()
                self.send_response(404)
                self.send_header("X-Error-Code", "RepoNotFound")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            monkeypatch.delenv("HF_HUB_OFFLINE")
            monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
            monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{httpd.server_address[1]}")
            with pytest.raises(FileNotFoundError, match="'org/typo-model' .* was not found on the Hub"):
                _hf.resolve_model("org/typo-model", owner="HFGenerativeScorer", hub_timeout=2.0)
        finally:
            httpd.shutdown()
            httpd.server_close()

    @needs_transformers
    def test_hub_cache_offline(self, tiny_model_dir, tmp_path):
        # a Hub snapshot in a cache directory loads offline, with its commit as the revision
        commit = "0123456789abcdef0123456789abcdef01234567"
        repo = tmp_path / "models--tiny-org--tiny-clip"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(commit)
        snapshot = repo / "snapshots" / commit
        snapshot.parent.mkdir()
        import shutil

        shutil.copytree(tiny_model_dir("clip"), snapshot)
        scorer = make_scorer("clip:tiny-org/tiny-clip", cache_dir=str(tmp_path))
        assert scorer.provenance["source"] == "hub" and scorer.provenance["revision"] == commit
        assert scorer.provenance["weights_hash"] is None and scorer.provenance["model"] == "tiny-org/tiny-clip"


class TestWeightsFingerprint:
    def test_stable_and_sensitive(self, tmp_path):
        (tmp_path / "config.json").write_text('{"model_type": "clip"}')
        (tmp_path / "model.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b'{"a": 1}' + b"\x01" * 100)
        first = _hf.weights_fingerprint(tmp_path)
        assert len(first) == 16 and first == _hf.weights_fingerprint(tmp_path)
        (tmp_path / "model.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b'{"a": 1}' + b"\x02" * 100)
        second = _hf.weights_fingerprint(tmp_path)
        assert second != first
        (tmp_path / "tokenizer.json").write_text("{}")
        assert _hf.weights_fingerprint(tmp_path) != second

    def test_large_files_are_sampled(self, tmp_path):
        header = b'{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}'
        blob = len(header).to_bytes(8, "little") + header + b"\x00" * 4000
        (tmp_path / "model.safetensors").write_bytes(blob)
        small = _hf.weights_fingerprint(tmp_path, full_hash_below=100)  # header + tail path
        assert small != _hf.weights_fingerprint(tmp_path)
        assert small == _hf.weights_fingerprint(tmp_path, full_hash_below=100)


class TestDefaults:
    def test_device_dtype(self):
        device, dtype = _hf.default_device_dtype("cpu", None, owner="X")
        assert str(device) == "cpu" and str(dtype) == "torch.float32"
        assert str(_hf.default_device_dtype("cpu", "bf16", owner="X")[1]) == "torch.bfloat16"
        assert str(_hf.default_device_dtype("cpu", "torch.float16", owner="X")[1]) == "torch.float16"
        with pytest.raises(ValueError, match="X: dtype must be"):
            _hf.default_device_dtype("cpu", "float8", owner="X")

    def test_subsample_and_grid(self):
        from vlmrb_torchrl.scorers import _frames

        assert _frames.subsample(8, None) == list(range(8))
        assert _frames.subsample(8, 3) == [0, 4, 7]
        assert _frames.subsample(8, 1) == [7]
        import numpy as np

        frames = np.arange(5)[:, None, None, None].repeat(2, 1).repeat(2, 2).repeat(3, 3).astype(np.uint8)
        grid = _frames.grid_image(frames)
        assert grid.shape == (6, 4, 3) and grid.dtype == np.uint8 and grid.flags["C_CONTIGUOUS"]
        assert grid[::2, ::2, 0].tolist() == [[0, 1], [2, 3], [4, 0]]

    def test_grid_image_matches_the_transform_grid(self):
        # one tiling rule: the NumPy image a backend builds is the transform's grid=True image
        import torch
        from tensordict import TensorDict

        from vlmrb_torchrl import VLMScoreTransform
        from vlmrb_torchrl.scorers import _frames

        seen = []

        class Grab:
            in_keys, prompt, provenance = ["pixels", "mask"], "", {}

            def score(self, clips):
                seen.append(clips["pixels"][0, 0].numpy())
                return torch.zeros(clips.shape[0])

        frames = torch.randint(0, 255, (5, 3, 4, 3), dtype=torch.uint8)
        VLMScoreTransform(Grab(), clip_len=5, grid=True)(TensorDict(pixels=frames, batch_size=[5]))
        assert (seen[0] == _frames.grid_image(frames.numpy())).all()


class TestOptionalDependencies:
    def test_core_import_does_not_load_transformers_or_pil(self):
        code = (
            "import sys, vlmrb_torchrl, vlmrb_torchrl.scorers as s; s.registered_scorer_forms(); "
            "s.make_scorer('openai:http://127.0.0.1:9/v1#m'); print(' '.join(sys.modules))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
        top_level = {name.split(".")[0] for name in out.stdout.split()}
        assert not top_level & {"transformers", "PIL", "huggingface_hub"}

    @pytest.mark.parametrize("cls", [HFGenerativeScorer, HFContrastiveScorer])
    def test_missing_extra(self, monkeypatch, cls):
        real = importlib.util.find_spec

        def find_spec(name, *args):  # transformers missing, Pillow present (installed or not here)
            if name == "transformers":
                return None
            return object() if name == "PIL" else real(name, *args)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
        with pytest.raises(
            ImportError, match=rf"{cls.__name__} needs transformers: pip install 'vlmrb-torchrl\[vlm\]'"
        ):
            cls("some/model")
