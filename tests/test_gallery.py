"""RunGallery: the best and worst clips over every scored batch of a run, labelled with score and step."""

import torch
from tensordict import TensorDict

from vlmrb_torchrl.scoring.clips import ClipBatch
from vlmrb_torchrl.recipes.gallery import RunGallery


def _batch(first_slot: int, n: int, generation: int, clip_len: int = 2) -> ClipBatch:
    """``n`` clips of ``clip_len`` steps + the outcome frame; clip b starts at slot first_slot + b and its
    frames are filled with its slot number."""
    slots = torch.arange(first_slot, first_slot + n)
    index = slots[:, None] + torch.arange(clip_len + 1)
    index[:, -1] = -1  # the outcome position is no step
    mask = index >= 0
    pixels = slots.to(torch.uint8).view(n, 1, 1, 1, 1).expand(n, clip_len + 1, 4, 4, 3).contiguous()
    clips = TensorDict({"pixels": pixels, "mask": mask, ("clip", "index"): index}, batch_size=[n, clip_len + 1])
    return ClipBatch(clips, torch.arange(n), slots, torch.full((n,), generation), "max")


def test_keeps_the_runs_extremes_across_batches_with_their_steps(tmp_path):
    gallery = RunGallery(2, capacity=100, clip_len=2)
    gallery.observe(_batch(0, 4, generation=1), torch.tensor([0.5, 0.9, 0.1, 0.6]))     # early clips
    gallery.observe(_batch(50, 4, generation=1), torch.tensor([0.7, 0.95, 0.4, 0.3]))
    gallery.observe(_batch(10, 4, generation=2), torch.tensor([0.5, 0.5, 0.5, 0.5]))   # after a wrap: step 110+
    assert [(round(k.score, 2), k.step) for k in gallery.top] == [(0.95, 52), (0.9, 2)]
    assert [(round(k.score, 2), k.step) for k in gallery.bottom] == [(0.1, 3), (0.3, 54)]
    assert gallery.top[0].frames.shape == (3, 4, 4, 3) and int(gallery.top[0].frames[0, 0, 0, 0]) == 51  # + outcome
    paths = gallery.write(tmp_path, prompt="is it progress?")
    # (these clips' frames are all alike: still images)
    assert [p.name for p in paths] == ["top_0_score0.95_step52.png", "top_1_score0.90_step2.png",
                                       "bottom_0_score0.10_step3.png", "bottom_1_score0.30_step54.png"]
    assert (tmp_path / "prompt.txt").read_text() == "is it progress?"


def test_ties_keep_a_uniform_sample_of_the_run_not_the_first_clips():
    """Binary scores: every clip ties; the kept ones are spread over the run, drawn at random."""
    firsts = []
    for seed in range(20):
        gallery = RunGallery(1, capacity=1000, clip_len=2, seed=seed)
        for start in range(0, 800, 8):
            gallery.observe(_batch(start, 8, generation=1), torch.zeros(8))
        firsts.append(gallery.bottom[0].step)
    assert len(set(firsts)) > 10 and max(firsts) > 400  # not always the run's first clip



def test_the_clips_kept_at_one_end_are_distinct():
    """issue 63: the top clips were near-duplicates (steps 507-510): overlapping clips of one moment."""
    gallery = RunGallery(3, capacity=1000, clip_len=2, min_gap=8)
    gallery.observe(_batch(500, 8, generation=1), torch.linspace(0.9, 0.8, 8))  # steps 501-508, best first
    gallery.observe(_batch(100, 4, generation=1), torch.tensor([0.1, 0.2, 0.7, 0.3]))  # steps 101-104
    # 502-508 are within 8 steps of 501, and 101, 102, 104 of 103: two distinct moments, not three look-alikes
    assert [(k.step, round(k.score, 2)) for k in gallery.top] == [(501, 0.9), (103, 0.7)]
    assert [k.step for k in gallery.bottom] == [101, 508]
    gallery.observe(_batch(300, 1, generation=1), torch.tensor([0.75]))  # a third moment takes the free place
    assert [k.step for k in gallery.top] == [501, 301, 103]


def test_a_clip_that_does_not_move_is_a_still_image(tmp_path):
    from PIL import Image

    gallery = RunGallery(1, capacity=100, clip_len=2)
    moving = _batch(0, 1, generation=1)
    moving.clips["pixels"][0, 1] = 200  # its second frame differs
    gallery.observe(moving, torch.tensor([0.9]))
    gallery.observe(_batch(50, 1, generation=1), torch.tensor([0.1]))  # every frame the same
    top, bottom = gallery.write(tmp_path)
    assert top.name == "top_0_score0.90_step1.gif" and Image.open(top).n_frames == 3
    assert bottom.name == "bottom_0_score0.10_step51.png" and not getattr(Image.open(bottom), "is_animated", False)
