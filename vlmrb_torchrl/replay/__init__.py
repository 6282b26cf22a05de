"""Scores -> samples: the replay side of VLM-RB.

- :mod:`~vlmrb_torchrl.replay.sampler`: :class:`~vlmrb_torchrl.VLMPrioritizedSampler`, TorchRL's
  ``Sampler`` API over per-slot VLM scores (its state in ``_slot_state``, its trees in ``_sumtree``,
  its argument checks in ``_sampler_args``);
- :mod:`~vlmrb_torchrl.replay.buffer`: :class:`~vlmrb_torchrl.VLMReplayBuffer` and
  :func:`~vlmrb_torchrl.make_vlm_replay_buffer`, the sampler fed by a clip stream and a scoring worker;
- :mod:`~vlmrb_torchrl.replay.ray_buffer`: the buffer served by TorchRL's ``RayReplayBuffer``.

The public names are importable from :mod:`vlmrb_torchrl` itself.
"""
