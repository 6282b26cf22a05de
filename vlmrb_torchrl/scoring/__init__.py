"""Clips -> scores: the scorer side of VLM-RB.

- :mod:`~vlmrb_torchrl.scoring.clips`: :class:`~vlmrb_torchrl.ClipSpec`, :class:`~vlmrb_torchrl.ClipStream`,
  :class:`~vlmrb_torchrl.ClipBatch` (which steps a clip holds, cut from collector batches);
- :mod:`~vlmrb_torchrl.scoring.transform`: :class:`~vlmrb_torchrl.VLMScoreTransform` (packs clips, calls the scorer);
- :mod:`~vlmrb_torchrl.scoring.clip_scoring`: :func:`~vlmrb_torchrl.make_clip_scoring`, the stream and
  transform that fit one scorer;
- :mod:`~vlmrb_torchrl.scoring.worker`: :class:`~vlmrb_torchrl.AsyncScorer` (thread and process backends);
- :mod:`~vlmrb_torchrl.scoring.backends`: backend name -> class, :func:`~vlmrb_torchrl.make_async_scorer`;
- :mod:`~vlmrb_torchrl.scoring.ray_pool`: the ``"ray"`` backend, a pool of Ray scorer actors.

The public names are importable from :mod:`vlmrb_torchrl` itself.
"""
