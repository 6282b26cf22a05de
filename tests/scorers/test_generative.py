"""HFGenerativeScorer on tiny models of every supported family: Idefics3 and Gemma 3 (image-only),
LLaVA (single-image), Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Perception-LM, LLaVA-OneVision, InternVL and
SmolVLM2 (video)."""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl import VLMScoreTransform
from vlmrb_torchrl.scorers import HFGenerativeScorer, answer_token_ids, make_scorer, prompt_hash
from vlmrb_torchrl.scorers.generative import FAMILY_IMAGE_DEFAULTS, micro_batches
from vlmrb_torchrl.scorers.prompts import default_prompt

from . import tiny_vlms
from vlmrb_torchrl.testing import ScorerContract
from .tiny_vlms import noise_clips

pytestmark = pytest.mark.skipif(not tiny_vlms._has_transformers, reason="needs transformers and pillow")

#: for conftest: shared_scorer loads "hf:<dir>"; family_dir runs a test once per family
BACKEND = "hf"
FAMILIES = tiny_vlms.GENERATIVE_FAMILIES
#: the default tier runs Perception-LM (the paper's model), one Qwen, one image-only and LLaVA
SLOW_FAMILIES = ("llava_onevision", "internvl", "smolvlm", "qwen2_5_vl", "qwen3_vl", "gemma3")

#: every input mode each tiny family supports ("video" needs a video processor)
FAMILY_MODES = [
    pytest.param(family, mode, marks=[pytest.mark.slow] if family in SLOW_FAMILIES else [])
    for family in FAMILIES
    for mode in (("video", "images", "grid") if family in tiny_vlms.VIDEO_FAMILIES else ("images", "grid"))
]


# ------------------------------------------------------------------------------ contract
class TestIdefics3Contract(ScorerContract):
    family = "idefics3"  # conftest's _tiny_contract gives it make_scorer()


class TestLlavaContract(ScorerContract):
    family = "llava"


class TestQwen2VLContract(ScorerContract):
    family = "qwen2_vl"


class TestPerceptionLMContract(ScorerContract):
    family = "perception_lm"


@pytest.mark.slow
class TestLlavaOnevisionContract(ScorerContract):
    family = "llava_onevision"


@pytest.mark.slow
class TestInternVLContract(ScorerContract):
    family = "internvl"


@pytest.mark.slow
class TestSmolVLM2Contract(ScorerContract):
    family = "smolvlm"


@pytest.mark.slow
class TestQwen25VLContract(ScorerContract):
    family = "qwen2_5_vl"


@pytest.mark.slow
class TestQwen3VLContract(ScorerContract):
    family = "qwen3_vl"


@pytest.mark.slow
class TestGemma3Contract(ScorerContract):
    family = "gemma3"


# ------------------------------------------------------------------------------ behaviour
class TestHFGenerativeScorer:
    def test_loads_through_make_scorer(self, family_dir, shared_scorer):
        family, directory = family_dir
        scorer = shared_scorer(directory)
        assert isinstance(scorer, HFGenerativeScorer)
        assert scorer.model.config.model_type == family
        image_only = {"idefics3": "images", "gemma3": "images", "llava": "grid"}
        expected_mode = "video" if family in tiny_vlms.VIDEO_FAMILIES else image_only[family]
        assert scorer.input_mode == expected_mode
        assert scorer.prompt == default_prompt()
        assert make_scorer(str(directory)).input_mode == expected_mode  # bare directory: detected as generative

    def test_scores_deterministic_batched_equals_single(self, family_dir, shared_scorer):
        _, directory = family_dir
        scorer = shared_scorer(directory)
        clips = noise_clips()
        scores = scorer.score(clips)
        assert scores.shape == (4,) and scores.dtype == torch.float32
        assert ((scores > 0) & (scores < 1)).all()
        assert torch.equal(scores, scorer.score(clips))
        single = torch.cat([scorer.score(clips[i : i + 1]) for i in range(4)])
        torch.testing.assert_close(scores, single, atol=1e-5, rtol=0)
        micro = shared_scorer(directory, batch_size=3)  # micro-batches of 3 + 1, padded differently
        torch.testing.assert_close(micro.score(clips), scores, atol=1e-5, rtol=0)
        assert scores.unique().numel() > 1  # the frames reach the model

    def test_prompt_changes_scores(self, family_dir, shared_scorer):
        _, directory = family_dir
        clips = noise_clips()
        default = shared_scorer(directory).score(clips)
        other = shared_scorer(directory, prompt="Is it bright ?")
        assert other.prompt == "Is it bright ?"
        assert (other.score(clips) - default).abs().max() > 1e-4
        assert other.provenance["prompt_hash"] == prompt_hash("Is it bright ?")

    def test_padded_frames_are_ignored(self, family_dir, shared_scorer):
        _, directory = family_dir
        scorer = shared_scorer(directory)
        real = noise_clips(2, 2)
        padded = noise_clips(2, 4, seed=1)
        padded["pixels"][:, :2] = real["pixels"]
        padded["mask"][:, 2:] = False  # steps 2-3 are padding with other content
        torch.testing.assert_close(scorer.score(padded), scorer.score(real), atol=1e-5, rtol=0)

    def test_clips_of_different_lengths_in_one_batch(self, family_dir, shared_scorer):
        _, directory = family_dir
        scorer = shared_scorer(directory)
        clips = noise_clips(3, 3)
        clips["mask"][0, 1:] = False  # 1 real frame
        clips["mask"][1, 2:] = False  # 2 real frames
        single = torch.cat([scorer.score(clips[i : i + 1]) for i in range(3)])
        torch.testing.assert_close(scorer.score(clips), single, atol=1e-5, rtol=0)

    def test_max_frames_subsamples(self, family_dir, shared_scorer):
        _, directory = family_dir
        clips = noise_clips(3, 5)
        kept = clips[:, [0, 2, 4]]
        torch.testing.assert_close(
            shared_scorer(directory, max_frames=3).score(clips), shared_scorer(directory).score(kept), atol=1e-5, rtol=0
        )

    def test_provenance(self, family_dir, shared_scorer):
        family, directory = family_dir
        prov = shared_scorer(directory).provenance
        assert prov["backend"] == "hf" and prov["model"] == str(directory)
        assert prov["source"] == "local" and prov["model_type"] == family
        assert prov["dtype"] == "float32" and prov["max_frames"] is None
        assert prov["prompt_hash"] == prompt_hash(default_prompt())
        assert len(prov["weights_hash"]) == 16
        ids = lambda tokens: sorted(shared_scorer(directory).tokenizer.convert_tokens_to_ids(list(tokens)))  # noqa: E731
        assert prov["yes_token_ids"] == ids(tiny_vlms.YES_TOKENS)
        assert prov["no_token_ids"] == ids(tiny_vlms.NO_TOKENS)
        # a second load of the same directory reports the same weights hash
        assert make_scorer(f"hf:{directory}").provenance["weights_hash"] == prov["weights_hash"]

    def test_bfloat16(self, tiny_model_dir, shared_scorer):
        directory = tiny_model_dir("idefics3")
        clips = noise_clips()
        bf16 = make_scorer(f"hf:{directory}", dtype="bfloat16")
        assert bf16.model.dtype == torch.bfloat16 and bf16.provenance["dtype"] == "bfloat16"
        torch.testing.assert_close(bf16.score(clips), shared_scorer(directory).score(clips), atol=0.05, rtol=0)

    @pytest.mark.parametrize("mode", ["images", "grid"])
    def test_image_modes(self, tiny_model_dir, shared_scorer, mode):
        directory = tiny_model_dir("idefics3")
        clips = noise_clips()
        scorer = shared_scorer(directory, input_mode=mode)
        assert scorer.input_mode == mode and scorer.provenance["input_mode"] == mode
        scores = scorer.score(clips)
        assert scores.shape == (4,) and ((scores >= 0) & (scores <= 1)).all()

    def test_modes_differ(self, tiny_model_dir, shared_scorer):
        directory = tiny_model_dir("idefics3")
        clips = noise_clips()
        images = shared_scorer(directory, input_mode="images").score(clips)
        grid = shared_scorer(directory, input_mode="grid").score(clips)
        assert (images - grid).abs().max() > 1e-4

    def test_video_and_image_modes_on_a_video_model(self, tiny_model_dir, shared_scorer):
        directory = tiny_model_dir("qwen2_vl")
        clips = noise_clips()
        video = shared_scorer(directory).score(clips)
        images = shared_scorer(directory, input_mode="images").score(clips)
        assert (video - images).abs().max() > 1e-4

    def test_processor_kwargs(self, tiny_model_dir, shared_scorer):
        directory = tiny_model_dir("idefics3")
        clips = noise_clips()
        # the tiny Idefics3 processor resizes to 32 px; 16 px images give other scores
        small = make_scorer(f"hf:{directory}", processor_kwargs={"size": {"longest_edge": 16}})
        assert small.provenance["processor_kwargs"] == {"size": {"longest_edge": 16}}
        assert (small.score(clips) - shared_scorer(directory).score(clips)).abs().max() > 1e-4

    def test_video_needs_a_template_entry(self, tiny_model_dir, tmp_path):
        # a processor with a video processor but a chat template without video falls back to images
        target = tmp_path / "qwen_no_video"
        shutil.copytree(tiny_model_dir("qwen2_vl"), target)
        template = (target / "chat_template.jinja").read_text()
        (target / "chat_template.jinja").write_text(
            template.replace("{% elif c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>", "")
        )
        assert HFGenerativeScorer(str(target)).input_mode == "images"

    def test_video_mode_needs_a_video_processor(self, tiny_model_dir):
        with pytest.raises(ValueError, match="input_mode='video' but the processor .* has no video processor"):
            HFGenerativeScorer(str(tiny_model_dir("idefics3")), input_mode="video")

    def test_in_a_score_transform(self, tiny_model_dir, shared_scorer):
        # the packing path users take: flat [B*T] slices -> subsampled, resized (and tiled) frames
        scorer = shared_scorer(tiny_model_dir("llava"))
        pixels = noise_clips(2, 4, size=16)["pixels"].reshape(8, 16, 16, 3)
        for grid in (False, True):
            t = VLMScoreTransform(scorer, clip_len=4, frames=2, frame_size=8, grid=grid)
            out = t(TensorDict(pixels=pixels.clone(), batch_size=[8]))
            assert out["vlm_score"].shape == (8,)
            assert torch.equal(out["vlm_score"][:4], out["vlm_score"][0].expand(4))

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"input_mode": "gif"}, ValueError, r"input_mode must be one of \['auto', 'video', 'images', 'grid'\]"),
            ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1, got batch_size=0"),
            ({"max_frames": 0}, ValueError, "max_frames must be an int >= 1"),
            ({"answers": ("yes",)}, ValueError, "answers must be a pair"),
            ({"answers": "yes"}, ValueError, "answers must be a pair"),
            ({"dtype": "int8"}, ValueError, "dtype must be a floating torch dtype"),
            ({"dtype": torch.int64}, ValueError, "dtype must be a floating torch dtype"),
            ({"device": "gpu7"}, ValueError, "device must be a torch device"),
            ({"env_family": "doom"}, ValueError, r"Unknown env_family='doom'; valid values: \['generic'"),
            ({"prompt": "Does the agent {task}?"}, ValueError, "contains {task} but no task was given"),
            ({"system_prompt": 3}, TypeError, "system_prompt must be a str"),
            ({"processor_kwargs": [1]}, TypeError, "processor_kwargs must be a dict or None"),
        ],
    )
    def test_construction_errors(self, tiny_model_dir, kwargs, error, match):
        with pytest.raises(error, match=match):
            HFGenerativeScorer(str(tiny_model_dir("idefics3")), **kwargs)

    def test_answers_override_and_missing_answer(self, tiny_model_dir):
        directory = tiny_model_dir("idefics3")
        scorer = HFGenerativeScorer(str(directory), answers=("bright", "dark"))
        tok = scorer.tokenizer
        assert scorer.yes_token_ids == sorted(tok.convert_tokens_to_ids(["bright", "Ġbright"]))
        assert scorer.no_token_ids == sorted(tok.convert_tokens_to_ids(["dark", "Ġdark"]))
        with pytest.raises(ValueError, match="has no single-token spelling of 'maybe'; pass answers="):
            HFGenerativeScorer(str(directory), answers=("maybe", "no"))

    def test_chat_template_required(self, tiny_model_dir, tmp_path):
        target = tmp_path / "no_template"
        shutil.copytree(tiny_model_dir("idefics3"), target)
        (target / "chat_template.jinja").unlink()
        with pytest.raises(ValueError, match="has no chat template; pass chat_template="):
            HFGenerativeScorer(str(target))
        template = (
            "{% for m in messages %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>"
            "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endfor %}"
        )
        scorer = HFGenerativeScorer(str(target), chat_template=template, system_prompt="Is it bright ?")
        assert scorer.score(noise_clips()).shape == (4,)

    def test_not_a_generative_model(self, tiny_model_dir):
        with pytest.raises(
            ValueError, match="is a clip model, not an image-text-to-text model. .* make_scorer\\('clip:"
        ):
            make_scorer(f"hf:{tiny_model_dir('clip')}")

    def test_pickle_reloads(self, tiny_model_dir, shared_scorer):
        # AsyncScorer(backend="process") pickles the scorer: it travels as its arguments
        scorer = shared_scorer(tiny_model_dir("idefics3"), max_frames=2, prompt="Is it bright ?")
        blob = pickle.dumps(scorer)
        assert len(blob) < 10_000  # no weights in the pickle
        clone = pickle.loads(blob)
        assert clone is not scorer and clone.provenance == scorer.provenance
        clips = noise_clips()
        torch.testing.assert_close(clone.score(clips), scorer.score(clips), atol=1e-6, rtol=0)

    def test_repr(self, tiny_model_dir, shared_scorer):
        text = repr(shared_scorer(tiny_model_dir("idefics3")))
        assert text.startswith("HFGenerativeScorer(model=") and "input_mode='images'" in text


def mixed_lengths(steps: int = 4):
    """Clips of 1, 2, ``steps`` and 2 real frames (padding after them holds other content), the
    full-length one in the middle, so a batch mixes lengths and a length repeats."""
    clips = noise_clips(4, steps, seed=3)
    for b, real in enumerate((1, 2, steps, 2)):
        clips["mask"][b, real:] = False
    return clips


class TestFamilies:
    """Every tiny family in every input mode it supports: a padded clip and clips of different real
    lengths in one batch score as they do one by one."""

    @pytest.mark.parametrize("family, mode", FAMILY_MODES)
    def test_mixed_lengths_batched_equals_single(self, tiny_model_dir, shared_scorer, family, mode):
        scorer = shared_scorer(tiny_model_dir(family), input_mode=mode)
        clips = mixed_lengths()
        scores = scorer.score(clips)
        assert scores.shape == (4,) and ((scores > 0) & (scores < 1)).all()
        single = torch.cat([scorer.score(clips[i : i + 1]) for i in range(4)])
        torch.testing.assert_close(scores, single, atol=1e-5, rtol=0)
        # padded steps are never shown: the clip cut to its real frames scores the same
        torch.testing.assert_close(scorer.score(clips[1:2, :2]), scores[1:2], atol=1e-5, rtol=0)

    def test_video_micro_batches_group_by_length(self, tiny_model_dir, shared_scorer, monkeypatch):
        # a batch of clips of 1, 2, 4, 2 frames goes to the processor as one call per length
        scorer = shared_scorer(tiny_model_dir("perception_lm"), input_mode="video", batch_size=8)
        calls = []
        score_batch = scorer._score_batch
        monkeypatch.setattr(scorer, "_score_batch", lambda f, i: calls.append([len(c) for c in f]) or score_batch(f, i))
        scorer.score(mixed_lengths())
        assert calls == [[1], [2, 2], [4]]

    def test_micro_batches(self):
        assert micro_batches([2, 1, 2, 2, 1, 2], 2, by_length=True) == [[0, 2], [3, 5], [1, 4]]
        assert micro_batches([2, 1, 2], 8, by_length=False) == [[0, 1, 2]]
        assert micro_batches([], 4, by_length=True) == []

    def test_perception_lm_defaults_to_video(self, tiny_model_dir, shared_scorer):
        assert shared_scorer(tiny_model_dir("perception_lm")).input_mode == "video"

    def test_small_frame_defaults_one_tile(self, tiny_model_dir, shared_scorer):
        # Perception-LM's default tiling cuts a 12 px frame into a thumbnail + 4 tiles (tiny model: 32 px
        # tiles, at most 4); the family default shows it as one tile; processor_kwargs override it
        directory = tiny_model_dir("perception_lm")
        frames = [noise_clips(1, 2)["pixels"][0].numpy()]
        indices = [np.arange(2)]
        tiles = lambda scorer: scorer._inputs(frames, indices)["pixel_values"].shape[1]  # noqa: E731
        default = shared_scorer(directory, input_mode="images")
        assert default.image_defaults == {"vision_input_type": "vanilla"}
        assert default.provenance["image_defaults"] == {"vision_input_type": "vanilla"}
        assert tiles(default) == 1
        assert tiles(shared_scorer(directory, input_mode="images", family_defaults=False)) == 5
        override = shared_scorer(directory, input_mode="images", processor_kwargs={"vision_input_type": "thumb+tile"})
        assert tiles(override) == 5

    def test_family_defaults_table(self):
        assert FAMILY_IMAGE_DEFAULTS["smolvlm"] == {"do_image_splitting": False}
        assert FAMILY_IMAGE_DEFAULTS["internvl"] == {"crop_to_patches": False}

    def test_video_fps_sends_frame_times(self, tiny_model_dir, shared_scorer, monkeypatch):
        scorer = shared_scorer(tiny_model_dir("qwen2_vl"), video_fps=4.0, max_frames=2)
        seen = {}
        processor = scorer.processor

        class Spy:
            def __getattr__(self, name):
                return getattr(processor, name)

            def __call__(self, **kwargs):
                seen.update(kwargs)
                return processor(**kwargs)

        monkeypatch.setattr(scorer, "processor", Spy())
        clips = noise_clips(1, 5)
        clips["mask"][0, 4] = False  # real frames 0-3; max_frames=2 shows frames 0 and 3
        scorer.score(clips)
        (meta,) = seen["video_metadata"]
        assert meta["fps"] == 4.0 and meta["frames_indices"] == [0, 3] and meta["total_num_frames"] == 4
        assert scorer.provenance["video_fps"] == 4.0
        with pytest.raises(ValueError, match="video_fps must be a float > 0 or None"):
            HFGenerativeScorer(str(tiny_model_dir("qwen2_vl")), video_fps=0)


class TestThinking:
    # a thinking-only template (Qwen3-VL-Thinking style) opens the reasoning block in the generation
    # prompt; a hybrid one (Qwen3 style) reads enable_thinking
    FORCED = tiny_vlms._QWEN_TEMPLATE.replace(
        "<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant\n<think>\n{% endif %}"
    )
    HYBRID = tiny_vlms._QWEN_TEMPLATE.replace(
        "<|im_start|>assistant\n{% endif %}",
        "<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}"
        "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}",
    )

    def test_thinking_only_template_gets_an_empty_block(self, tiny_model_dir):
        directory = str(tiny_model_dir("qwen2_vl"))
        scorer = HFGenerativeScorer(directory, chat_template=self.FORCED)
        assert scorer._text(None).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        kept = HFGenerativeScorer(directory, chat_template=self.FORCED, enable_thinking=None)
        assert kept._text(None).endswith("<|im_start|>assistant\n<think>\n")
        assert scorer.provenance["enable_thinking"] is False and kept.provenance["enable_thinking"] is None

    def test_hybrid_template_reads_enable_thinking(self, tiny_model_dir):
        directory = str(tiny_model_dir("qwen2_vl"))
        off = HFGenerativeScorer(directory, chat_template=self.HYBRID)
        assert off._text(None).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        forced = HFGenerativeScorer(directory, chat_template=self.FORCED)
        torch.testing.assert_close(off.score(noise_clips()), forced.score(noise_clips()), atol=1e-6, rtol=0)
        on = HFGenerativeScorer(directory, chat_template=self.HYBRID, enable_thinking=True)
        assert on._text(None).endswith("<|im_start|>assistant\n<think>\n")

    def test_plain_template_unchanged(self, tiny_model_dir, shared_scorer):
        directory = tiny_model_dir("qwen2_vl")
        text = shared_scorer(directory)._text(None)
        assert text.endswith("<|im_start|>assistant\n") and "think" not in text
        with pytest.raises(TypeError, match="enable_thinking must be a bool or None"):
            HFGenerativeScorer(str(directory), enable_thinking="no")


@pytest.mark.slow
def test_qwen3_vl_prompt_carries_frame_times(tiny_model_dir):
    # Qwen3-VL writes each frame's time into the prompt: the clip's rate changes the scores
    directory = str(tiny_model_dir("qwen3_vl"))
    clips = noise_clips(2, 4)
    slow, fast = (HFGenerativeScorer(directory, video_fps=fps).score(clips) for fps in (0.5, 24.0))
    assert (slow - fast).abs().max() > 1e-4


class TestMissingExtras:
    @pytest.mark.parametrize(
        "module, message",
        [
            ("timm", "TimmWrapperModel requires the timm library but it was not found in your environment."),
            ("num2words", "Package `num2words` is required to run SmolVLM processor. Install it with `pip install`."),
        ],
    )
    def test_family_import_error_names_the_extra(self, monkeypatch, module, message):
        from vlmrb_torchrl.scorers import generative

        real = generative.importlib.util.find_spec
        monkeypatch.setattr(generative.importlib.util, "find_spec", lambda n: None if n == module else real(n))
        with pytest.raises(ImportError, match=rf"'org/plm' needs {module},.*pip install 'vlmrb-torchrl\[vlm\]'"):
            with generative._extra_hint("HFGenerativeScorer", "org/plm"):
                raise ImportError(message)
        with pytest.raises(ImportError, match="^No module named 'other'$"):  # anything else passes through
            with generative._extra_hint("HFGenerativeScorer", "org/plm"):
                raise ImportError("No module named 'other'")


class TestAnswerTokenIds:
    def test_byte_level_tokenizer(self):
        tok = tiny_vlms.build_tokenizer()
        for word, expected in (("yes", tiny_vlms.YES_TOKENS), ("no", tiny_vlms.NO_TOKENS)):
            ids = answer_token_ids(tok, word)
            assert ids == sorted(tok.convert_tokens_to_ids(list(expected)))
            assert sorted(tok.decode([i]) for i in ids) == sorted(t.replace("Ġ", " ") for t in expected)
        assert answer_token_ids(tok, "Yes") == answer_token_ids(tok, "yes")  # the case of the word does not matter
        assert answer_token_ids(tok, "maybe") == []  # unknown word -> <unk>: not a spelling
        assert tok.convert_tokens_to_ids("YES") == tok.unk_token_id  # 'YES' is not a single token here

    def test_sentencepiece_style_tokenizer(self):
        tok = tiny_vlms.build_metaspace_tokenizer()
        ids = answer_token_ids(tok, "yes")
        assert sorted(tok.convert_ids_to_tokens(ids)) == sorted(["▁yes", "▁Yes", "▁YES", "yes"])
        assert sorted(tok.convert_ids_to_tokens(answer_token_ids(tok, "no"))) == ["▁No", "▁no"]

    def test_bad_word(self):
        with pytest.raises(ValueError, match="non-empty str"):
            answer_token_ids(tiny_vlms.build_tokenizer(), " ")
