"""What the package ships is what loads: built-in model files checked against the digests shipped with the
package (issue 64: a logit_scale set to -5 moved builtin:minigrid's scores from 0.99 to 0.33 without a word), and
damaged weights of any local model named with the scorer."""

from __future__ import annotations

import shutil

import pytest

from vlmrb_torchrl.scorers import builtin, make_scorer
from vlmrb_torchrl.scorers._model_digests import BUILTIN_MODEL_DIGESTS

from . import tiny_vlms

pytestmark = pytest.mark.skipif(not tiny_vlms._has_transformers, reason="needs transformers and pillow")

MODELS = builtin._package_model_dir("minigrid", "minigrid").parent


def test_the_shipped_digests_are_those_of_the_shipped_files():
    found = {d.name: builtin.model_file_digests(d) for d in sorted(MODELS.iterdir()) if d.is_dir()}
    assert found == BUILTIN_MODEL_DIGESTS, (
        "the model files differ from vlmrb_torchrl/scorers/_model_digests.py: a rebuilt model shipped updates its "
        f"entries in the same commit; the files' digests are {found}")


@pytest.fixture
def models_copy(tmp_path, monkeypatch):
    """The package's model directories copied to ``tmp_path``, which the built-in scorers then read."""
    root = tmp_path / "models"
    shutil.copytree(MODELS, root)
    monkeypatch.setattr(builtin, "_package_model_dir", lambda directory, name: root / directory)
    monkeypatch.delenv(builtin.ALLOW_REBUILT_MODELS_ENV, raising=False)
    return root


def _set_logit_scale(path, value: float) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(path / "model.safetensors")
    weights["logit_scale"] = torch.full_like(weights["logit_scale"], value)
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})


def test_tampered_weights_are_refused_naming_the_model(models_copy, monkeypatch):
    _set_logit_scale(models_copy / "minigrid", -5.0)  # the probe's edit
    with pytest.raises(ValueError) as info:
        make_scorer("builtin:minigrid")
    msg = str(info.value)
    assert msg.startswith(f"builtin:minigrid: the model files in {models_copy / 'minigrid'} are not the ones this "
                          "version of vlmrb-torchrl ships (model.safetensors changed: SHA-256 mismatch)")
    assert "set VLMRB_ALLOW_REBUILT_MODELS=1 or pass allow_rebuilt=True" in msg and "\n" not in msg
    # the user's own rebuild: allowed by the argument or the environment, with a warning
    with pytest.warns(RuntimeWarning, match="builtin:minigrid: scoring with model files other than the ones this "
                                            "version ships .*a rebuild of your own"):
        scorer = make_scorer("builtin:minigrid", allow_rebuilt=True)
    assert scorer.logit_scale == pytest.approx(2.718281828 ** -5)
    monkeypatch.setenv(builtin.ALLOW_REBUILT_MODELS_ENV, "1")
    with pytest.warns(RuntimeWarning, match="scoring with model files other than"):
        make_scorer("builtin:minigrid")


@pytest.mark.parametrize("change, said", [
    ("truncate", "model.safetensors changed"),  # issue 64: a truncated file's error did not name the scorer
    ("delete", "tokenizer.json missing"),
    ("plant", "pytorch_model.bin not shipped"),
])
def test_damaged_missing_or_extra_files_are_refused(models_copy, change, said):
    path = models_copy / "lift_hand"  # the second panel of builtin:lift: every panel's model is checked
    if change == "truncate":
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif change == "delete":
        (path / "tokenizer.json").unlink()
    else:
        (path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(ValueError, match=f"^builtin:lift: the model files in {path} are not the ones .*\\({said}: "):
        make_scorer("builtin:lift")


def test_a_truncated_weights_file_of_a_local_model_names_the_scorer(tmp_path):
    path = tmp_path / "model"
    shutil.copytree(MODELS / "minigrid", path)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    for lazy in (False, True):
        with pytest.raises(ValueError, match=f"^HFContrastiveScorer\\({path}\\): the weights in {path} cannot be "
                                             "read \\(.*\\): a truncated or damaged file; download or build the "
                                             "model again.$"):
            make_scorer(f"clip:{path}", prompt="the door is open", negatives=["the door is closed"], lazy=lazy)
