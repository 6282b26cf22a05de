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
    assert [p.name for p in paths] == ["top_0_score0.95_step52.gif", "top_1_score0.90_step2.gif",
                                       "bottom_0_score0.10_step3.gif", "bottom_1_score0.30_step54.gif"]
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
