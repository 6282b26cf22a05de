"""OpenAIScorer against a real HTTP server on 127.0.0.1 that fakes an OpenAI chat-completions endpoint
(``fake_openai.FakeServer``: deterministic logprobs computed from the images and prompt it receives)."""

from __future__ import annotations

import base64
import json
import math
import pickle
import threading
import time

import numpy as np
import pytest
import torch

from vlmrb_torchrl.scorers import OpenAIScorer, OpenAIScorerError, make_scorer, prompt_hash
from vlmrb_torchrl.scorers.openai import answer_probability, encode_png
from vlmrb_torchrl.scorers.prompts import default_prompt

from vlmrb_torchrl.testing import ScorerContract, make_clips
from .fake_openai import FakeServer, decode_png, expected_p

SECRET = "sk-test-not-a-real-key-1234"


@pytest.fixture
def server():
    srv = FakeServer()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def shared_server():
    srv = FakeServer()
    yield srv
    srv.close()


def brightness(clips) -> torch.Tensor:
    """The pixel value the fake sees in each clip's first frame (make_clips: clip b is all b * 10)."""
    return clips["pixels"][:, 0].float().mean((1, 2, 3))


# ------------------------------------------------------------------------------ contract
class TestOpenAIContract(ScorerContract):
    @pytest.fixture(autouse=True)
    def _server(self, shared_server):
        self.server = shared_server

    def make_scorer(self):
        return OpenAIScorer(self.server.url, "tiny-vlm", backoff=0.0)


# ------------------------------------------------------------------------------ behaviour
class TestOpenAIScorer:
    def test_request_format(self, server, monkeypatch):
        monkeypatch.setenv("VLMRB_TEST_API_KEY", SECRET)
        clips = make_clips(2, 3)
        clips["mask"][1, 2] = False
        scorer = OpenAIScorer(server.url, "tiny-vlm", api_key_env="VLMRB_TEST_API_KEY", top_logprobs=5)
        scorer.score(clips)
        assert len(server.requests) == 2
        by_pixel = sorted(server.requests, key=lambda r: r["body"]["messages"][0]["content"][0]["image_url"]["url"])
        for request in server.requests:
            assert request["path"] == "/v1/chat/completions"
            assert request["headers"]["Authorization"] == f"Bearer {SECRET}"
            body = request["body"]
            assert body["model"] == "tiny-vlm" and body["max_tokens"] == 1 and body["temperature"] == 0.0
            assert body["logprobs"] is True and body["top_logprobs"] == 5
            content = body["messages"][0]["content"]
            assert body["messages"][0]["role"] == "user"
            assert content[-1] == {"type": "text", "text": default_prompt()}
            for part in content[:-1]:
                assert part["type"] == "image_url" and part["image_url"]["url"].startswith("data:image/png;base64,")
        n_images = sorted(len(r["body"]["messages"][0]["content"]) - 1 for r in by_pixel)
        assert n_images == [2, 3]  # the padded step of clip 1 is not sent
        # the frames arrive intact
        sent = [
            decode_png(base64.b64decode(p["image_url"]["url"].split(",")[1]))
            for r in server.requests
            for p in r["body"]["messages"][0]["content"][:-1]
        ]
        assert all(img.shape == (6, 6, 3) for img in sent)
        assert sorted({int(img[0, 0, 0]) for img in sent}) == [0, 10]

    def test_scores(self, server):
        clips = make_clips(5, 2)
        scorer = OpenAIScorer(server.url, "tiny-vlm")
        scores = scorer.score(clips)
        want = torch.tensor([expected_p(v, scorer.prompt) for v in brightness(clips).tolist()])
        torch.testing.assert_close(scores, want, atol=1e-6, rtol=0)
        assert torch.equal(scores, scorer.score(clips))  # deterministic
        single = torch.cat([scorer.score(clips[i : i + 1]) for i in range(5)])
        torch.testing.assert_close(single, scores, atol=1e-7, rtol=0)
        bright = OpenAIScorer(server.url, "tiny-vlm", prompt="Is it bright ? Answer yes or no.")
        torch.testing.assert_close(bright.score(clips), want + 0.1, atol=1e-6, rtol=0)
        assert scorer.stats() == {"requests": 15, "retries": 0, "unparsed": 0, "token_only": 0}

    def test_concurrent_requests(self, server):
        server.delay = 0.05
        clips = make_clips(16, 1)
        scorer = OpenAIScorer(server.url, "tiny-vlm", max_concurrency=4)
        scorer.score(clips)
        assert 1 < server.max_in_flight <= 4
        scorer.close()
        scorer.close()  # idempotent; a later call starts a new pool
        assert scorer.score(clips[:2]).shape == (2,)

    def test_grid_and_max_frames(self, server):
        clips = make_clips(1, 5)
        OpenAIScorer(server.url, "tiny-vlm", input_mode="grid").score(clips)
        OpenAIScorer(server.url, "tiny-vlm", max_frames=2).score(clips)
        grid, sub = (r["body"]["messages"][0]["content"] for r in server.requests)
        assert len(grid) == 2 and len(sub) == 3
        image = decode_png(base64.b64decode(grid[0]["image_url"]["url"].split(",")[1]))
        assert image.shape == (18, 12, 3)  # 5 frames of 6x6 tiled 3 rows x 2 columns

    def test_system_prompt_and_extra_body(self, server):
        scorer = OpenAIScorer(server.url, "tiny-vlm", system_prompt="You judge clips.", extra_body={"top_k": -1})
        scorer.score(make_clips(1, 1))
        body = server.requests[0]["body"]
        assert body["messages"][0] == {"role": "system", "content": "You judge clips."}
        assert body["top_k"] == -1
        assert scorer.provenance["system_prompt_hash"] == prompt_hash("You judge clips.")

    def test_retries_on_500_and_429(self, server):
        server.script = [500, 503, 429]
        scorer = OpenAIScorer(server.url, "tiny-vlm", backoff=0.01)
        scores = scorer.score(make_clips(1, 1))
        assert scores.shape == (1,)
        assert len(server.requests) == 4 and scorer.stats()["retries"] == 3

    def test_retries_exhausted(self, server):
        server.script = [500] * 10
        scorer = OpenAIScorer(server.url, "tiny-vlm", max_retries=2, backoff=0.0)
        with pytest.raises(OpenAIScorerError, match=r"failed after 3 attempts .* last error: HTTP 500: scripted 500"):
            scorer.score(make_clips(1, 1))
        assert len(server.requests) == 3

    def test_retries_on_timeout(self, server):
        server.script = [("sleep", 1.0)]
        scorer = OpenAIScorer(server.url, "tiny-vlm", timeout=0.2, backoff=0.0)
        assert scorer.score(make_clips(1, 1)).shape == (1,)
        assert scorer.stats()["retries"] == 1 and len(server.requests) == 2  # the stalled attempt was given up

    def test_a_trickling_server_is_cut_off_at_the_whole_call_deadline(self, server):
        # one byte every 0.2 s: each read returns within any per-read timeout, the answer takes minutes
        server.script = [("trickle", 0.2)]
        scorer = OpenAIScorer(server.url, "tiny-vlm", timeout=1.0, max_retries=0)
        with pytest.raises(OpenAIScorerError, match=r"last error: TimeoutError: no complete answer within timeout=1 s"):
            scorer.score(make_clips(1, 1))
        payload = len(json.dumps(server.completion(server.requests[0]["body"])).encode())
        deadline = time.monotonic() + 30
        while server.in_flight and time.monotonic() < deadline:  # the server notices the hang-up at its next byte
            time.sleep(0.05)
        assert 0 < server.trickled < payload  # the client hung up long before the end

    def test_close_never_waits_on_a_server(self, server):
        server.delay = 600.0  # a server that never answers in time
        scorer = OpenAIScorer(server.url, "tiny-vlm", timeout=600.0, max_concurrency=2)
        errors = []

        def score():
            try:
                scorer.score(make_clips(6, 1))
            except OpenAIScorerError as err:
                errors.append(err)

        thread = threading.Thread(target=score, daemon=True)
        thread.start()
        while server.in_flight < 2:  # two requests under way, four queued
            time.sleep(0.01)
        scorer.close()
        thread.join(60)
        assert not thread.is_alive() and errors and "closed while" in str(errors[0])
        assert len(server.requests) == 2  # the queued requests were never sent

    @pytest.mark.parametrize("answer, match", [
        ({"choices": ["x"]}, r"unexpected response .*AttributeError"),
        ({"choices": [{"logprobs": {"content": [{"top_logprobs": {"Yes": -0.1}}]}}]},
         r"unexpected response .*top_logprobs is a dict"),
        ({"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "Yes", "logprob": "abc"}]}]}}]},
         r"malformed top_logprobs: logprob 'abc' of token 'Yes' is not a number"),
        ({"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "Yes", "logprob": 0.7}]}]}}]},
         r"malformed top_logprobs: logprob 0.7 of token 'Yes' is not a log-probability"),
        # issue 64: alternatives whose probabilities sum to more than 1 were accepted
        ({"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "Yes", "logprob": math.log(0.8)},
                                                                  {"token": "No", "logprob": math.log(0.7)}]}]}}]},
         r"malformed top_logprobs: the alternatives' probabilities sum to 1.5 > 1"),
        ({"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "Yes", "logprob": -0.1}]}]}}]},
         None),  # a one-entry list below 1 is fine
        ("[" * 50_000 + "]" * 50_000, r"returned invalid JSON"),  # nested too deep: one line, not a RecursionError
    ])
    def test_malformed_answers_are_named(self, server, answer, match):
        server.script = [("raw", answer) if isinstance(answer, str) else ("json", answer)]
        if match is None:
            assert OpenAIScorer(server.url, "tiny-vlm").score(make_clips(1, 1)).shape == (1,)
            return
        with pytest.raises(OpenAIScorerError, match=match):
            OpenAIScorer(server.url, "tiny-vlm").score(make_clips(1, 1))

    @pytest.mark.parametrize("target", ["other_server", "link_local"])
    def test_a_redirect_is_not_followed_and_the_key_stays_home(self, server, monkeypatch, target):
        # issue 64: a 302 to another host received "Authorization: Bearer $OPENAI_API_KEY", and a redirect to a
        # link-local metadata address was followed
        monkeypatch.setenv("VLMRB_TEST_API_KEY", SECRET)
        other = FakeServer()
        try:
            location = (other.url + "/chat/completions" if target == "other_server"
                        else "http://169.254.169.254/latest/meta-data/iam/security-credentials/")
            server.script = [("status", 302, {}, [("Location", location)])]
            scorer = OpenAIScorer(server.url, "tiny-vlm", api_key_env="VLMRB_TEST_API_KEY", backoff=0.0)
            with pytest.raises(OpenAIScorerError) as info:
                scorer.score(make_clips(1, 1))
            msg = str(info.value)
            assert f"was answered with HTTP 302, a redirect to {location}; OpenAIScorer follows no redirects" in msg
            assert SECRET not in msg and "\n" not in msg
            assert other.requests == [] and len(server.requests) == 1  # not followed, not retried
            assert scorer.stats()["retries"] == 0
        finally:
            other.close()

    def test_link_local_and_metadata_servers_are_refused(self, server, monkeypatch):
        for url in ("http://169.254.169.254/v1", "http://[fe80::1]:8000/v1", "http://metadata.google.internal/v1",
                    "http://[fd00:ec2::254]/v1"):
            with pytest.raises(ValueError, match="is a link-local or cloud metadata address, where instance "
                                                 "credentials live, not a scorer's server; pass allow_link_local"):
                OpenAIScorer(url, "m")
        assert OpenAIScorer("http://169.254.169.254/v1", "m", allow_link_local=True).base_url.startswith("http://169")
        # a name is checked where it resolves, at each connection: here 127.0.0.1 stands in for a metadata address
        from vlmrb_torchrl.scorers import openai as openai_module

        monkeypatch.setattr(openai_module, "link_local_or_metadata", lambda host: host == "127.0.0.1")
        scorer = OpenAIScorer(server.url.replace("127.0.0.1", "localhost"), "tiny-vlm", backoff=0.0)
        with pytest.raises(OpenAIScorerError, match="localhost resolved to 127.0.0.1, a link-local or cloud metadata "
                                                    "address, where instance credentials live; nothing was sent"):
            scorer.score(make_clips(1, 1))
        assert server.requests == []

    def test_a_huge_answer_is_refused_unread(self, server):
        # issue 64: a 200 MB answer was read whole (RSS +1.2 GB for one 2-clip call)
        answer = {"choices": [{"message": {"content": "x" * 3_000_000}}]}
        server.script = [("json", answer), ("chunked", answer)]
        scorer = OpenAIScorer(server.url, "tiny-vlm", max_response_bytes=1_000_000, backoff=0.0)
        with pytest.raises(OpenAIScorerError, match=r"POST .* answered with 3,000,0\d\d bytes, above "
                                                    r"max_response_bytes=1,000,000 .*raise max_response_bytes"):
            scorer.score(make_clips(1, 1))
        with pytest.raises(OpenAIScorerError, match=r"answered with more than 1,000,000 bytes"):  # no length given
            scorer.score(make_clips(1, 1))
        assert scorer.stats()["retries"] == 0
        with pytest.raises(ValueError, match="max_response_bytes must be an int >= 1024"):
            OpenAIScorer(server.url, "tiny-vlm", max_response_bytes=10)

    def test_an_unlikely_yes_is_not_a_yes(self, server):
        answer = {"choices": [{"message": {"content": "Sure"}, "logprobs": {"content": [{"token": "Sure", "top_logprobs": [
            {"token": "Sure", "logprob": -0.01}, {"token": "Yes", "logprob": -12.0}]}]}}]}
        server.script = [("json", answer)]
        scorer = OpenAIScorer(server.url, "tiny-vlm")
        with pytest.warns(RuntimeWarning, match="neither 'yes' nor 'no' is among the server's top_logprobs with"):
            assert scorer.score(make_clips(1, 1)).tolist() == [0.0]  # "Sure" decides: not yes
        assert scorer.stats()["unparsed"] == 1

    @pytest.mark.parametrize("retry_after", ["nan", "inf", "-inf", "Wed, 21 Oct 2015 07:28:00 GMT"])
    def test_a_bad_retry_after_falls_back_to_the_backoff(self, server, retry_after):
        server.script = [("status", 429, {"error": {"message": "slow down"}}, [("Retry-After", retry_after)])]
        scorer = OpenAIScorer(server.url, "tiny-vlm", backoff=0.01)
        assert scorer.score(make_clips(1, 1)).shape == (1,)
        assert scorer.stats()["retries"] == 1

    def test_unreachable_server(self):
        scorer = OpenAIScorer("http://127.0.0.1:9/v1", "m", max_retries=1, backoff=0.0, timeout=1.0)
        with pytest.raises(OpenAIScorerError, match="failed after 2 attempts"):
            scorer.score(make_clips(1, 1))

    @pytest.mark.parametrize(
        "status, match",
        [
            (400, r"rejected with HTTP 400: top_logprobs too large"),
            (401, r"rejected with HTTP 401: .*Check the API key in \$VLMRB_TEST_API_KEY"),
            (404, r"rejected with HTTP 404: .*should end with /v1"),
        ],
    )
    def test_client_errors_fail_at_once(self, server, monkeypatch, status, match):
        monkeypatch.setenv("VLMRB_TEST_API_KEY", SECRET)
        message = "top_logprobs too large" if status == 400 else "nope"
        server.script = [("status", status, {"error": {"message": message}})]
        scorer = OpenAIScorer(server.url, "tiny-vlm", api_key_env="VLMRB_TEST_API_KEY", backoff=0.0)
        with pytest.raises(OpenAIScorerError, match=match) as info:
            scorer.score(make_clips(1, 1))
        assert len(server.requests) == 1  # no retry
        assert SECRET not in str(info.value) and SECRET not in repr(info.value.__cause__)

    def test_api_key_never_shown(self, server, monkeypatch):
        monkeypatch.setenv("VLMRB_TEST_API_KEY", SECRET)
        scorer = OpenAIScorer(server.url, "tiny-vlm", api_key_env="VLMRB_TEST_API_KEY")
        assert SECRET not in repr(scorer) and SECRET not in json.dumps(scorer.provenance)
        assert SECRET not in str(vars(scorer).get("provenance"))
        monkeypatch.delenv("VLMRB_TEST_API_KEY")
        OpenAIScorer(server.url, "tiny-vlm", api_key_env="VLMRB_TEST_API_KEY").score(make_clips(1, 1))
        assert "Authorization" not in server.requests[-1]["headers"]

    def test_pickle(self, server, monkeypatch):
        monkeypatch.setenv("VLMRB_TEST_API_KEY", SECRET)
        scorer = OpenAIScorer(server.url, "tiny-vlm", api_key_env="VLMRB_TEST_API_KEY")
        scorer.score(make_clips(3, 1))  # starts the thread pool
        blob = pickle.dumps(scorer)
        assert SECRET.encode() not in blob  # the key is re-read from the environment
        clone = pickle.loads(blob)
        assert clone.provenance == scorer.provenance
        assert torch.equal(clone.score(make_clips(3, 1)), scorer.score(make_clips(3, 1)))
        assert server.requests[-1]["headers"]["Authorization"] == f"Bearer {SECRET}"

    def test_unparsed_answer(self, server):
        server.reply = "no_answer"
        scorer = OpenAIScorer(server.url, "tiny-vlm")
        with pytest.warns(RuntimeWarning, match="neither 'yes' nor 'no' is among the server's top_logprobs"):
            scores = scorer.score(make_clips(3, 1))
        assert scores.tolist() == [0.0, 0.0, 0.0] and scorer.stats()["unparsed"] == 3

    @pytest.mark.parametrize("reply", ["no_logprobs", "token_only"])
    def test_no_logprobs_is_an_error(self, server, reply):
        # a server that ignores logprobs would give 0/1 scores: VLM-RB would silently become uniform replay
        server.reply = reply
        scorer = OpenAIScorer(server.url, "tiny-vlm", backoff=0.0)
        with pytest.raises(OpenAIScorerError, match=r"returned no top_logprobs .* pass allow_token_only=True"):
            scorer.score(make_clips(2, 1))
        assert scorer.stats()["token_only"] == 0

    def test_token_only_opt_in(self, server):
        server.reply = "no_logprobs"
        clips = make_clips(3, 1)  # the fake's generated token is always "Yes"
        scorer = OpenAIScorer(server.url, "tiny-vlm", allow_token_only=True)
        with pytest.warns(RuntimeWarning, match="returns no top_logprobs; scoring from the generated token"):
            scores = scorer.score(clips)
        assert scores.tolist() == [1.0, 1.0, 1.0]
        assert scorer.stats() == {"requests": 3, "retries": 0, "unparsed": 0, "token_only": 3}
        assert scorer.provenance["allow_token_only"] is True

    def test_video_request(self, server):
        clips = make_clips(2, 3)
        clips["mask"][1, 2] = False
        scorer = OpenAIScorer(server.url, "tiny-vlm", input_mode="video")
        scores = scorer.score(clips)
        torch.testing.assert_close(
            scores, torch.tensor([expected_p(v, scorer.prompt) for v in brightness(clips).tolist()]), atol=1e-6, rtol=0
        )
        frames = {}
        for request in server.requests:
            content = request["body"]["messages"][0]["content"]
            assert [part["type"] for part in content] == ["video_url", "text"]
            header, _, data = content[0]["video_url"]["url"].partition(",")
            assert header == "data:video/jpeg;base64"
            video = [decode_png(base64.b64decode(part)) for part in data.split(",")]
            frames[int(video[0][0, 0, 0])] = video
        assert sorted((k, len(v)) for k, v in frames.items()) == [(0, 3), (10, 2)]  # padded step not sent
        assert all(f.shape == (6, 6, 3) for v in frames.values() for f in v)

    def test_enable_thinking(self, server):
        OpenAIScorer(server.url, "tiny-vlm").score(make_clips(1, 1))
        OpenAIScorer(server.url, "tiny-vlm", enable_thinking=None).score(make_clips(1, 1))
        first, second = (r["body"] for r in server.requests)
        assert first["chat_template_kwargs"] == {"enable_thinking": False}
        assert "chat_template_kwargs" not in second

    def test_several_servers_share_the_load(self, server):
        other = FakeServer()
        try:
            spec = f"openai:{server.url},{other.url}/#tiny-vlm"
            scorer = make_scorer(spec, max_concurrency=4)
            assert scorer.base_urls == (server.url, other.url)
            assert scorer.provenance["base_url"] == f"{server.url},{other.url}"
            clips = make_clips(8, 1)
            want = torch.tensor([expected_p(v, scorer.prompt) for v in brightness(clips).tolist()])
            torch.testing.assert_close(scorer.score(clips), want, atol=1e-6, rtol=0)
            assert len(server.requests) + len(other.requests) == 8
            assert len(server.requests) >= 2 and len(other.requests) >= 2
            # a slow server gets fewer requests: each goes to the server with the fewest in flight
            server.requests.clear()
            other.requests.clear()
            server.delay = 0.5
            scorer.score(make_clips(12, 1))
            assert len(other.requests) > len(server.requests)
        finally:
            other.close()

    def test_stats_reach_through_wrappers(self, server):
        from vlmrb_torchrl.scorers import CachedScorer, NoisyScorer, scorer_stats

        server.reply = "no_answer"
        scorer = OpenAIScorer(server.url, "tiny-vlm")
        wrapped = CachedScorer(NoisyScorer(scorer))
        with pytest.warns(RuntimeWarning):
            wrapped.score(make_clips(2, 1))
        assert scorer_stats(wrapped) == {"requests": 2.0, "retries": 0.0, "unparsed": 2.0, "token_only": 0.0,
                                         "score_cache_hits": 0.0, "score_cache_misses": 2.0, "score_cache_size": 2.0}

    def test_least_outstanding_choice(self):
        scorer = OpenAIScorer(["http://a/v1", "http://b/v1", "http://c/v1"], "m")
        assert [scorer._acquire() for _ in range(4)] == [0, 1, 2, 0]  # ties in turn
        scorer._release(1)
        assert scorer._acquire() == 1  # the only server with nothing in flight... and now [2, 1, 1]
        scorer._release(0)
        scorer._release(0)
        assert scorer._acquire() == 0

    def test_model_discovery(self, server):
        assert OpenAIScorer(server.url).model == "tiny-vlm"
        assert make_scorer(f"openai:{server.url}").model == "tiny-vlm"
        server.models = ["a", "b"]
        with pytest.raises(ValueError, match=r"serving exactly one model; .* lists \['a', 'b'\]"):
            OpenAIScorer(server.url)

    def test_make_scorer(self, server):
        scorer = make_scorer(f"openai:{server.url}#tiny-vlm", env_family="minigrid", task="open the door")
        assert isinstance(scorer, OpenAIScorer) and scorer.model == "tiny-vlm" and scorer.base_url == server.url
        assert scorer.prompt == default_prompt("minigrid", task="open the door")
        assert scorer.provenance == {
            "backend": "openai",
            "base_url": server.url,
            "model": "tiny-vlm",
            "prompt": scorer.prompt,
            "prompt_hash": prompt_hash(scorer.prompt),
            "system_prompt_hash": None,
            "input_mode": "images",
            "max_frames": None,
            "top_logprobs": 20,
            "answers": ["yes", "no"],
            "enable_thinking": False,
            "allow_token_only": False,
            "dtype": None,
        }
        assert scorer.score(make_clips(2, 2)).shape == (2,)

    @pytest.mark.parametrize(
        "args, kwargs, error, match",
        [
            (("localhost:8000/v1", "m"), {}, ValueError, "base_url must be an http"),
            (("http://x/v1", "m"), {"input_mode": "gif"}, ValueError,
             r"input_mode must be one of \['images', 'grid', 'video'\]"),
            (("http://x/v1,x:8000/v1", "m"), {}, ValueError, "base_url must be an http"),
            (([], "m"), {}, ValueError, "base_url must be an http"),
            (("http://x/v1", "m"), {"enable_thinking": "no"}, TypeError, "enable_thinking must be a bool or None"),
            (("http://x/v1", "m"), {"max_retries": -1}, ValueError, "max_retries must be an int >= 0"),
            (("http://x/v1", "m"), {"max_concurrency": 0}, ValueError, "max_concurrency must be an int >= 1"),
            (("http://x/v1", "m"), {"top_logprobs": 0}, ValueError, "top_logprobs must be an int >= 1"),
            (("http://x/v1", "m"), {"timeout": 0}, ValueError, "timeout must be > 0"),
            (("http://x/v1", "m"), {"backoff": -1.0}, ValueError, "backoff must be a finite float >= 0"),
            (("http://x/v1", "m"), {"max_frames": 0}, ValueError, "max_frames must be an int >= 1 or None"),
            (("http://x/v1", "m"), {"answers": ("yes",)}, ValueError, "answers must be a pair"),
            (("http://x/v1", "m"), {"extra_body": [1]}, TypeError, "extra_body must be a dict"),
            (("http://x/v1", ""), {}, ValueError, "model must be a non-empty str"),
        ],
    )
    def test_construction_errors(self, args, kwargs, error, match):
        with pytest.raises(error, match=match):
            OpenAIScorer(*args, **kwargs)

    def test_bad_spec(self):
        with pytest.raises(ValueError, match="spec is 'openai:<base_url>#<model>'"):
            make_scorer("openai:#model")


class TestHelpers:
    def test_encode_png_roundtrip(self):
        image = np.random.default_rng(0).integers(0, 256, (7, 5, 3), dtype=np.uint8)
        assert np.array_equal(decode_png(encode_png(image)), image)
        with pytest.raises(ValueError, match="RGB uint8"):
            encode_png(np.zeros((4, 4), dtype=np.uint8))

    def test_encode_png_is_a_valid_png(self):
        pil = pytest.importorskip("PIL.Image")
        import io

        image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
        decoded = np.asarray(pil.open(io.BytesIO(encode_png(image))).convert("RGB"))
        assert np.array_equal(decoded, image)

    @pytest.mark.parametrize(
        "tokens, expected",
        [
            ([("Yes", 0.3), ("No", 0.1)], 0.75),
            ([("Ġyes", 0.2), ("▁Yes", 0.2), (" NO", 0.4)], 0.5),
            ([("yes.", 0.5), ("Maybe", 0.5)], 1.0),
            # a missing answer has at most the least likely listed entry's probability (and what is left of 1)
            ([("no", 0.5), ("Maybe", 0.3), ("Sure", 0.01)], 0.01 / 0.51),
            ([("no", 0.999)], 0.0),  # (rounding: 1 - 0.999 left for "yes", the rest listed)
            ([("Sure", 0.99), ("yes", math.exp(-12))], None),  # "yes" at -12: no yes/no answer at all
            ([("Maybe", 1.0)], None),
            ([], None),
        ],
    )
    def test_answer_probability(self, tokens, expected):
        top = [{"token": t, "logprob": math.log(p)} for t, p in tokens]
        got = answer_probability(top)
        assert got == pytest.approx(expected, abs=2e-3) if expected is not None else got is None

    @pytest.mark.parametrize("logprob, match", [
        ("abc", "logprob 'abc' of token 'Yes' is not a number"),
        (None, "logprob None of token 'Yes' is not a number"),
        (0.5, "logprob 0.5 of token 'Yes' is not a log-probability"),
        (float("nan"), "logprob nan of token 'Yes' is not a log-probability"),
    ])
    def test_answer_probability_refuses_what_is_not_a_logprob(self, logprob, match):
        with pytest.raises(ValueError, match=match):
            answer_probability([{"token": "Yes", "logprob": logprob}, {"token": "No", "logprob": -1.0}])
