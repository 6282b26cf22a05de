"""Hydra configs of the sampler, the scoring transform and the one-call buffer, as TorchRL's own (issue 63)."""

import inspect

import pytest

pytest.importorskip("hydra")

from hydra.core.config_store import ConfigStore  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from vlmrb_torchrl import VLMPrioritizedSampler, VLMReplayBuffer, VLMScoreTransform  # noqa: E402
from vlmrb_torchrl.configs import (  # noqa: E402
    ClipSpecConfig,
    ScorerConfig,
    VLMPrioritizedSamplerConfig,
    VLMReplayBufferConfig,
    VLMScoreTransformConfig,
)


def _through_yaml(node):
    """What a user's YAML file gives: no tuples, no Python objects."""
    return OmegaConf.create(OmegaConf.to_yaml(OmegaConf.structured(node)))


def test_configs_are_stored_in_torchrls_groups():
    repo = ConfigStore.instance().repo
    assert "vlm_prioritized.yaml" in repo["sampler"] and "prioritized.yaml" in repo["sampler"]  # beside TorchRL's
    assert "vlm_score.yaml" in repo["transform"] and "vlm.yaml" in repo["replay_buffer"]
    sampler = instantiate(repo["sampler"]["vlm_prioritized.yaml"].node, max_capacity=100)
    assert isinstance(sampler, VLMPrioritizedSampler) and sampler.lambda_max == 0.5  # the sampler's own default


def test_the_sampler_config_has_every_argument_with_its_default():
    fields = OmegaConf.structured(VLMPrioritizedSamplerConfig)
    for name, parameter in inspect.signature(VLMPrioritizedSampler).parameters.items():
        expected = "???" if parameter.default is parameter.empty else parameter.default
        assert OmegaConf.to_container(fields)[name] == expected, name
    sampler = instantiate(_through_yaml(VLMPrioritizedSamplerConfig(max_capacity=64, lambda_max=0.3, threshold=0.2)))
    assert (sampler.lambda_max, sampler.threshold) == (0.3, 0.2)


def test_the_buffer_and_the_transform_instantiate_from_yaml_with_nested_keys():
    rb = instantiate(_through_yaml(VLMReplayBufferConfig(capacity=64, scorer=ScorerConfig(spec="oracle:minigrid"),
                                                         clip_spec=ClipSpecConfig(clip_len=4), batch_size=8)),
                     _convert_="all")
    try:
        assert isinstance(rb, VLMReplayBuffer) and isinstance(rb.sampler, VLMPrioritizedSampler)
        assert rb.clip_stream.traj_key == ("collector", "traj_ids") and rb.clip_stream.spec.clip_len == 4
    finally:
        rb.async_scorer.close()
    transform = instantiate(_through_yaml(VLMScoreTransformConfig(
        scorer=ScorerConfig(spec="oracle:minigrid"), clip_len=4, in_keys=[["next", "progress_event"]])),
        _convert_="all")
    assert isinstance(transform, VLMScoreTransform) and transform.in_keys == [("next", "progress_event")]
