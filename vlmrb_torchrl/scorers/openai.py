"""Scorer for OpenAI-compatible chat-completions servers (vLLM, SGLang, ...): P(yes) from logprobs.

``make_scorer("openai:<base_url>#<model>")`` builds an :class:`OpenAIScorer`. It needs only the
standard library (HTTP via :mod:`urllib`, PNG encoding via :mod:`zlib`), no client package.

Serving a model with vLLM on a GPU machine (see ``docs/scorers.md``)::

    vllm serve Qwen/Qwen2.5-VL-3B-Instruct --port 8000 --dtype bfloat16 --max-model-len 8192 \\
        --limit-mm-per-prompt '{"image": 8, "video": 0}' --max-logprobs 20

then ``make_scorer("openai:http://<gpu-host>:8000/v1#Qwen/Qwen2.5-VL-3B-Instruct")``; several
servers (one per GPU): ``"openai:http://a:8000/v1,http://b:8000/v1#<model>"``.
"""

from __future__ import annotations

import base64
import concurrent.futures
import functools
import http.client
import ipaddress
import json
import math
import numbers
import os
import socket
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
import weakref
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from vlmrb_torchrl.scorers._frames import FrameInput, grid_image
from vlmrb_torchrl.scorers._hashing import prompt_hash
from vlmrb_torchrl.scorers.base import check_clips, register_scorer, validate_scores
from vlmrb_torchrl.scorers.prompts import default_prompt, format_prompt

__all__ = ["OpenAIScorer", "OpenAIScorerError", "encode_png", "answer_probability", "INPUT_MODES",
           "link_local_or_metadata", "MAX_RESPONSE_BYTES"]

#: How a clip is sent: one ``image_url`` per frame, one tiled ``image_url``, or one ``video_url``
#: holding the frames (vLLM's ``data:video/jpeg;base64,<frame>,<frame>,...`` form).
INPUT_MODES = ("images", "grid", "video")

#: HTTP statuses worth retrying (timeouts, rate limits, server errors); other 4xx fail at once.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_MAX_BACKOFF = 30.0

#: Cloud metadata services outside the link-local ranges (AWS's IPv6 one, Alibaba Cloud's), and names of
#: metadata services: refused like link-local addresses unless ``allow_link_local=True``.
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")})
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata", "instance-data",
                            "instance-data.ec2.internal"})
#: What one answer may weigh by default (``max_response_bytes``): a one-token completion with 20 alternatives is
#: a few kB, a model listing a few more.
MAX_RESPONSE_BYTES = 4 << 20


def link_local_or_metadata(host: str) -> bool:
    """Whether ``host`` (an address or a name) is a link-local address (``169.254.0.0/16``, ``fe80::/10``, also
    IPv4-mapped) or a cloud metadata service, where a server of the scorer never is but an instance's
    credentials are.

    Examples:
        >>> [link_local_or_metadata(h) for h in ("169.254.169.254", "fe80::1", "::ffff:169.254.169.254",
        ...                                      "fd00:ec2::254", "metadata.google.internal")]
        [True, True, True, True, True]
        >>> [link_local_or_metadata(h) for h in ("127.0.0.1", "10.0.0.7", "::1", "gpu-host", "localhost")]
        [False, False, False, False, False]
    """
    name = host.strip("[]").split("%")[0]
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return name.lower().rstrip(".") in METADATA_HOSTS
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_link_local or address in METADATA_ADDRESSES


class OpenAIScorerError(RuntimeError):
    """A request to the chat-completions server failed (after retries, or with a non-retryable 4xx).

    The message names the request, the attempts and the last error. Raised by
    :meth:`OpenAIScorer.score`; in a replay buffer it stops the scoring worker unless the buffer
    skips failed calls (``on_scorer_error="skip"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> scorer = OpenAIScorer("http://127.0.0.1:9/v1", "my-model", max_retries=0, timeout=1.0)  # no server there
        >>> clips = TensorDict(pixels=torch.zeros(1, 2, 8, 8, 3, dtype=torch.uint8),
        ...                    mask=torch.ones(1, 2, dtype=torch.bool), batch_size=[1, 2])
        >>> try:
        ...     scorer.score(clips)
        ... except OpenAIScorerError as err:
        ...     print(err)
        OpenAIScorer: POST http://127.0.0.1:9/v1/chat/completions failed after 1 attempts (timeout=1 s); last error: ...
    """


class _Call:
    """One request's sockets and its whole-call deadline: when it passes (or the scorer closes), the
    sockets are shut down, which ends any read or write under way at once (a per-read socket timeout
    alone lets a server that trickles a byte now and then hold the call for ever)."""

    def __init__(self, seconds: float, *, allow_link_local: bool = False) -> None:
        self.allow_link_local = allow_link_local
        self._lock = threading.Lock()
        self._sockets: list = []
        self.expired = self.aborted = False
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True
        self._timer.start()

    def add(self, sock) -> None:
        with self._lock:
            self._sockets.append(sock)
            late = self.expired
        if late:
            self._shutdown([sock])

    def expire(self, *, aborted: bool = False) -> None:
        with self._lock:
            self.expired = True
            self.aborted = self.aborted or aborted
            sockets = list(self._sockets)
        self._shutdown(sockets)

    def finish(self) -> None:
        self._timer.cancel()

    @staticmethod
    def _shutdown(sockets) -> None:
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass


class _CallSockets:
    """A connection that hands its socket to its :class:`_Call` (mixed into http.client's classes)."""

    def __init__(self, *args, call: _Call, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._call = call

    def connect(self) -> None:
        super().connect()
        self._call.add(self.sock)
        peer = self.sock.getpeername()[0]  # the address the name resolved to: a name may point anywhere
        if not self._call.allow_link_local and link_local_or_metadata(peer):
            self.sock.close()
            raise OpenAIScorerError(f"OpenAIScorer: {self.host} resolved to {peer}, a link-local or cloud metadata "
                                    "address, where instance credentials live; nothing was sent. Pass "
                                    "allow_link_local=True if a scorer's server is really there.")


class _HTTPConnection(_CallSockets, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_CallSockets, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, call: _Call) -> None:
        super().__init__()
        self._call = call

    def http_open(self, req):
        return self.do_open(functools.partial(_HTTPConnection, call=self._call), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, call: _Call) -> None:
        super().__init__()
        self._call = call

    def https_open(self, req):
        return self.do_open(functools.partial(_HTTPSConnection, call=self._call), req, context=self._context)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: the request (and its ``Authorization`` header) goes to ``base_url``'s server only."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise OpenAIScorerError(f"OpenAIScorer: {req.get_method()} {req.full_url} was answered with HTTP {code}, a "
                                f"redirect to {newurl}; OpenAIScorer follows no redirects (the API key stays with "
                                "base_url's server): set base_url to where the server answers.")


def _read_capped(response, limit: int, what: str) -> bytes:
    """The body of ``response``, refused past ``limit`` bytes (by its Content-Length or as it arrives)."""
    declared = response.headers.get("Content-Length") or ""
    too_big = declared.isdigit() and int(declared) > limit
    data = b"" if too_big else response.read(limit + 1)
    if too_big or len(data) > limit:
        size = f"{int(declared):,} bytes" if too_big else f"more than {limit:,} bytes"
        raise OpenAIScorerError(f"OpenAIScorer: {what} answered with {size}, above max_response_bytes={limit:,} (a "
                                "one-token answer is a few kB): check base_url, or raise max_response_bytes.")
    return data


def _close_at_exit(ref: weakref.ref) -> None:
    # runs before concurrent.futures joins its pools at exit, which would otherwise wait for every queued request
    scorer = ref()
    if scorer is not None:
        scorer.close()


def encode_png(image: np.ndarray) -> bytes:
    """Encodes an RGB uint8 ``[H, W, 3]`` array as PNG bytes (standard library only).

    Examples:
        >>> import numpy as np
        >>> png = encode_png(np.zeros((2, 3, 3), dtype=np.uint8))
        >>> png[:8], len(png) > 50
        (b'\\x89PNG\\r\\n\\x1a\\n', True)
    """
    image = np.ascontiguousarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"encode_png expects RGB uint8 [H, W, 3], got dtype {image.dtype} and shape {image.shape}.")
    height, width, _ = image.shape
    raw = np.concatenate([np.zeros((height, 1), dtype=np.uint8), image.reshape(height, width * 3)], axis=1)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6))
        + chunk(b"IEND", b"")
    )


def _normalise_token(token: str) -> str:
    return token.replace("Ġ", " ").replace("▁", " ").strip().strip(".!,:;\"'").lower()


#: Below this probability of the two answers together, the first token is not a yes/no answer at all
#: (the model says something else): the score is not read from the logprobs (see ``answer_probability``).
MIN_ANSWER_MASS = 1e-3
# Log-probabilities a little above 0 are float rounding of a certain token; more is not a log-probability.
_LOGPROB_SLACK = 1e-4
# Alternatives whose probabilities sum to more than this are not one token's distribution (rounding stays far below).
_TOTAL_SLACK = 1.01


def _logprob(entry: Any) -> float:
    """An entry's ``logprob`` as a float <= 0; ``ValueError`` naming the entry otherwise."""
    if not isinstance(entry, dict):
        raise ValueError(f"a top_logprobs entry must be an object with 'token' and 'logprob', got {entry!r}")
    value = entry.get("logprob")
    try:
        logprob = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"logprob {value!r} of token {entry.get('token')!r} is not a number") from None
    if math.isnan(logprob) or logprob > _LOGPROB_SLACK:
        raise ValueError(f"logprob {value!r} of token {entry.get('token')!r} is not a log-probability (<= 0)")
    return min(logprob, 0.0)


def answer_probability(top_logprobs: Sequence[dict], answers: Sequence[str] = ("yes", "no")) -> float | None:
    """``P(yes) / (P(yes) + P(no))`` from a chat-completions ``top_logprobs`` list.

    Every entry whose token is a spelling of an answer (``"Yes"``, ``" yes"``, ``"YES"``,
    ``"Ġyes"``, ...) adds its probability to that answer. An answer missing from the list has at
    most the probability of the least likely entry listed (the list is the top-k), and at most
    what the listed entries leave of 1; that bound stands in for it: a missing "no" next to a
    likely "yes" gives a score near 1.
    Returns ``None`` when neither answer is among the entries, or when both together are less
    likely than :data:`MIN_ANSWER_MASS` (the model is not answering yes or no: "yes" at −12 with
    "no" absent is no evidence of "yes"). Raises ``ValueError`` on a logprob that is not a number
    ``<= 0``, and on alternatives whose probabilities sum to more than 1.

    Examples:
        >>> import math
        >>> top = [{"token": "Yes", "logprob": math.log(0.6)}, {"token": " yes", "logprob": math.log(0.1)},
        ...        {"token": "No", "logprob": math.log(0.1)}, {"token": "Maybe", "logprob": math.log(0.2)}]
        >>> round(answer_probability(top), 4)
        0.875
        >>> answer_probability([{"token": "Maybe", "logprob": 0.0}]) is None
        True
        >>> round(answer_probability([{"token": "Yes", "logprob": math.log(0.9)},
        ...                           {"token": "Maybe", "logprob": math.log(0.01)}]), 4)  # no <= 0.01
        0.989
        >>> answer_probability([{"token": "Sure", "logprob": -0.01}, {"token": "yes", "logprob": -12.0}]) is None
        True
    """
    positive, negative = (a.lower() for a in answers)
    mass = {positive: [], negative: []}
    listed = []
    for entry in top_logprobs:
        logprob = _logprob(entry)
        listed.append(logprob)
        token = _normalise_token(str(entry.get("token", "")))
        if token in mass:
            mass[token].append(logprob)
    listed_mass = float(torch.tensor(listed, dtype=torch.float64).exp().sum())
    if listed_mass > _TOTAL_SLACK:
        raise ValueError(f"the alternatives' probabilities sum to {listed_mass:.4g} > 1: not the log-probabilities "
                         "of one token's alternatives")
    if not mass[positive] and not mass[negative]:
        return None
    total = torch.logsumexp(torch.tensor(mass[positive] + mass[negative], dtype=torch.float64), 0)
    if float(total) < math.log(MIN_ANSWER_MASS):
        return None
    left = 1.0 - listed_mass
    # what an answer missing from the top-k can have at most
    floor = min(min(listed), math.log(left)) if left > 0 else -math.inf
    yes = torch.logsumexp(torch.tensor(mass[positive] or [floor], dtype=torch.float64), 0)
    no = torch.logsumexp(torch.tensor(mass[negative] or [floor], dtype=torch.float64), 0)
    return float(torch.sigmoid(yes - no))


class OpenAIScorer:
    """Scores clips through an OpenAI-compatible chat-completions endpoint (vLLM, SGLang, ...).

    Each clip becomes one request: its real frames as base64 PNG ``image_url`` data URLs (one per
    frame, or one tiled grid with ``input_mode="grid"``, or one ``video_url`` with
    ``input_mode="video"``) followed by the prompt, with ``max_tokens=1``, ``temperature=0``,
    ``logprobs=true`` and ``top_logprobs``. The score is ``P(yes) / (P(yes) + P(no))`` over the
    returned alternatives for the first token (every spelling of each answer counts, see
    :func:`answer_probability`). When neither answer is among them the generated token decides
    (1.0 for yes, else 0.0) and ``stats()["unparsed"]`` counts it. A response without
    alternatives (a server that ignores ``logprobs``) raises :class:`OpenAIScorerError`: scores
    read from the generated token alone are all 0 or 1, and VLM-RB quietly becomes uniform
    replay; ``allow_token_only=True`` accepts them (counted in ``stats()["token_only"]``).

    Requests run concurrently on a thread pool of ``max_concurrency`` workers, spread over the
    ``base_url`` servers: each request goes to the server with the fewest requests in flight
    (ties in turn). Timeouts,
    connection errors, 408/429 and 5xx responses are retried ``max_retries`` times with
    exponential backoff (``backoff * 2**attempt`` seconds, or the server's ``Retry-After``);
    other 4xx responses fail at once with the server's message. The API key is read from the
    environment variable ``api_key_env`` and sent as a bearer token to ``base_url``'s servers only:
    a redirect is not followed (it raises :class:`OpenAIScorerError` naming it), link-local and cloud
    metadata addresses are refused (``allow_link_local``), and the key never appears in ``repr``,
    provenance or error messages. An answer larger than ``max_response_bytes`` is refused unread.

    Args:
        base_url (str or list of str): the server's OpenAI base URL, e.g.
            ``"http://localhost:8000/v1"`` (requests go to ``<base_url>/chat/completions``);
            several servers of the same model as a list or comma-separated.
        model (str, optional): the served model name. ``None`` asks ``<base_url>/models`` and
            uses the only model served.

    Keyword Args:
        prompt, env_family, task: the yes/no question, as for
            :class:`~vlmrb_torchrl.scorers.HFGenerativeScorer`.
        frame_key, mask_key (NestedKey, optional): defaults ``"pixels"``, ``"mask"``.
        input_mode (str, optional): one of :data:`INPUT_MODES`. Defaults to ``"images"``.
            ``"video"`` sends one ``video_url`` ``data:video/jpeg;base64,<frame>,<frame>,...``
            (vLLM's form; the frames are PNGs, which vLLM decodes whatever the declared type).
        max_frames (int, optional): send at most this many evenly spaced real frames per clip
            (vLLM's ``--limit-mm-per-prompt`` must allow them). Defaults to ``None`` (all).
        api_key_env (str, optional): environment variable holding the API key; unset or empty
            sends no ``Authorization`` header. Defaults to ``"OPENAI_API_KEY"``.
        timeout (float, optional): seconds per request attempt, the whole call: connecting, sending
            and reading the answer (a server that trickles its answer is cut off then; each retry
            gets its own). Defaults to ``60``.
        max_retries (int, optional): retries after the first attempt. Defaults to ``3``.
        backoff (float, optional): first retry delay in seconds. Defaults to ``0.5``.
        max_concurrency (int, optional): concurrent requests. Defaults to ``8``.
        top_logprobs (int, optional): alternatives requested (vLLM's default cap is 20).
            Defaults to ``20``.
        answers (tuple of str, optional): positive and negative answers. Defaults to
            ``("yes", "no")``.
        system_prompt (str, optional): a system message before the question.
        extra_body (dict, optional): extra request fields (e.g. ``{"top_k": -1}`` or
            ``{"mm_processor_kwargs": {...}}``); they override the defaults.
        enable_thinking (bool, optional): sent as ``chat_template_kwargs={"enable_thinking": ...}``
            (vLLM, SGLang: Qwen3-style templates read it), so a thinking model answers at once.
            ``None`` sends nothing (servers that refuse unknown fields). Defaults to ``False``.
        allow_token_only (bool, optional): score a response without logprobs from its generated
            token (0 or 1) instead of raising. Defaults to ``False``.
        allow_link_local (bool, optional): allow servers at link-local or cloud metadata addresses
            (:func:`link_local_or_metadata`: ``169.254.169.254``, ``fe80::/10``, ...), refused by default
            in ``base_url`` and wherever a name resolves at connection time. Defaults to ``False``.
        max_response_bytes (int, optional): the most bytes one answer may have; a larger one raises
            :class:`OpenAIScorerError` before it is read whole. Defaults to :data:`MAX_RESPONSE_BYTES`
            (4 MiB).

    Attributes:
        provenance (dict): ``backend="openai"``, ``base_url`` (comma-separated when several),
            ``model``, ``prompt_hash``, ``input_mode``, ``max_frames``, ``top_logprobs``,
            ``answers``, ``enable_thinking``, ``allow_token_only``, ``dtype`` (``None``: decided
            by the server).

    Raises:
        ValueError: bad options; ``model=None`` and the server does not serve exactly one model.
        OpenAIScorerError: at scoring, a request failed after retries or got a 4xx, or the
            server returned no logprobs (without ``allow_token_only``).

    Examples:
        Building a scorer sends no request (naming the model); scoring needs the server:

        >>> scorer = OpenAIScorer("http://localhost:8000/v1", "Qwen/Qwen2.5-VL-3B-Instruct",
        ...                       env_family="minigrid", max_frames=8, max_concurrency=16)
        >>> scorer.provenance["backend"], scorer.provenance["model"]
        ('openai', 'Qwen/Qwen2.5-VL-3B-Instruct')
        >>> scorer.score(clips)  # doctest: +SKIP
        tensor([0.9241, 0.0311, ...])
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str | None = None,
        *,
        prompt: str | None = None,
        env_family: str = "generic",
        task: str | None = None,
        frame_key: NestedKey = "pixels",
        mask_key: NestedKey = "mask",
        input_mode: str = "images",
        max_frames: int | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_concurrency: int = 8,
        top_logprobs: int = 20,
        answers: Sequence[str] = ("yes", "no"),
        system_prompt: str | None = None,
        extra_body: dict | None = None,
        enable_thinking: bool | None = False,
        allow_token_only: bool = False,
        allow_link_local: bool = False,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        owner = type(self).__name__
        urls = base_url.split(",") if isinstance(base_url, str) else base_url
        urls = [u.strip() for u in urls] if isinstance(urls, (list, tuple)) else urls
        if (
            not isinstance(urls, list)
            or not urls
            or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls)
        ):
            raise ValueError(
                f"{owner}.base_url must be an http(s) URL such as 'http://localhost:8000/v1' (or several, as a list "
                f"or comma-separated), got base_url={base_url!r}."
            )
        self.prompt = default_prompt(env_family, task=task) if prompt is None else format_prompt(prompt, task)
        if input_mode not in INPUT_MODES:
            raise ValueError(f"{owner}.input_mode must be one of {list(INPUT_MODES)}, got input_mode={input_mode!r}.")
        if enable_thinking is not None and not isinstance(enable_thinking, bool):
            raise TypeError(f"{owner}.enable_thinking must be a bool or None, got {enable_thinking!r}.")
        for name, value, low in (
            ("max_retries", max_retries, 0),
            ("max_concurrency", max_concurrency, 1),
            ("top_logprobs", top_logprobs, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise ValueError(f"{owner}.{name} must be an int >= {low}, got {name}={value!r}.")
        if max_frames is not None and (
            isinstance(max_frames, bool) or not isinstance(max_frames, numbers.Integral) or max_frames < 1
        ):
            raise ValueError(f"{owner}.max_frames must be an int >= 1 or None, got max_frames={max_frames!r}.")
        for name, value in (("timeout", timeout), ("backoff", backoff)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{owner}.{name} must be a finite float >= 0, got {name}={value!r}.")
        if timeout == 0:
            raise ValueError(f"{owner}.timeout must be > 0 seconds, got timeout={timeout!r}.")
        if isinstance(answers, str) or len(answers) != 2 or not all(isinstance(a, str) and a.strip() for a in answers):
            raise ValueError(f"{owner}.answers must be a pair (positive, negative) of words, got answers={answers!r}.")
        if extra_body is not None and not isinstance(extra_body, dict):
            raise TypeError(f"{owner}.extra_body must be a dict or None, got {type(extra_body).__name__}.")
        if api_key_env is not None and not isinstance(api_key_env, str):
            raise TypeError(f"{owner}.api_key_env must be the name of an environment variable, got {api_key_env!r}.")
        self.base_urls = tuple(dict.fromkeys(u.rstrip("/") for u in urls))
        self.base_url = ",".join(self.base_urls)
        self.enable_thinking = enable_thinking
        self.allow_token_only = bool(allow_token_only)
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, numbers.Integral) \
                or max_response_bytes < 1024:
            raise ValueError(f"{owner}.max_response_bytes must be an int >= 1024, got {max_response_bytes!r}.")
        self.max_response_bytes = int(max_response_bytes)
        self.allow_link_local = bool(allow_link_local)
        for url in urls:
            host = urllib.parse.urlsplit(url).hostname or ""
            if not self.allow_link_local and link_local_or_metadata(host):
                raise ValueError(f"{owner}.base_url={url!r} is a link-local or cloud metadata address, where instance "
                                 "credentials live, not a scorer's server; pass allow_link_local=True if one is "
                                 "really there.")
        self.api_key_env = api_key_env
        self._api_key = os.environ.get(api_key_env, "") if api_key_env else ""
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_concurrency = int(max_concurrency)
        self.top_logprobs = int(top_logprobs)
        self.answers = (answers[0].strip(), answers[1].strip())
        self.system_prompt = system_prompt
        self.extra_body = dict(extra_body or {})
        self.input_mode = input_mode
        self.inputs = FrameInput(frame_key, mask_key, max_frames)
        self.max_frames = max_frames
        self.frame_key = frame_key
        self.mask_key = mask_key
        self.in_keys = self.inputs.in_keys
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._calls: set[_Call] = set()  # requests under way (close() cuts them off)
        self._stop = threading.Event()  # set by close(): retries and backoffs under way give up
        self._exit_hook = False
        self._stats = {"requests": 0, "retries": 0, "unparsed": 0, "token_only": 0}
        self._outstanding = [0] * len(self.base_urls)  # requests in flight, per server
        self._next_url = 0  # ties go to the servers in turn
        self._warned_unparsed = False
        self._warned_token_only = False
        self.model = model if model is not None else self._only_model()
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"{owner}.model must be a non-empty str (the served model name), got {model!r}.")
        self.name = f"{owner}({self.model}@{self.base_url})"
        self.provenance = {
            "backend": "openai",
            "base_url": self.base_url,
            "model": self.model,
            "prompt": self.prompt,
            "prompt_hash": prompt_hash(self.prompt),
            "system_prompt_hash": None if system_prompt is None else prompt_hash(system_prompt),
            "input_mode": input_mode,
            "max_frames": max_frames,
            "top_logprobs": self.top_logprobs,
            "answers": list(self.answers),
            "enable_thinking": enable_thinking,
            "allow_token_only": self.allow_token_only,
            "dtype": None,
        }

    # --------------------------------------------------------------------------------- HTTP
    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _acquire(self) -> int:
        """The server with the fewest requests in flight (ties in turn), now counting one more."""
        with self._lock:
            n = len(self.base_urls)
            best = min(range(n), key=lambda i: (self._outstanding[i], (i - self._next_url) % n))
            self._next_url = (best + 1) % n
            self._outstanding[best] += 1
            return best

    def _release(self, server: int) -> None:
        with self._lock:
            self._outstanding[server] -= 1

    def _request(self, method: str, path: str, body: dict | None = None, *, server: int | None = None) -> dict:
        """One JSON request with retries (each attempt to the least busy server unless ``server``
        is given); returns the decoded response."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        last_error = "no attempt made"
        url = f"{self.base_urls[server or 0]}/{path}"
        for attempt in range(self.max_retries + 1):
            if attempt:
                with self._lock:
                    self._stats["retries"] += 1
            delay = self.backoff * 2**attempt
            chosen = self._acquire() if server is None else None
            if chosen is not None:
                url = f"{self.base_urls[chosen]}/{path}"
            call = _Call(self.timeout, allow_link_local=self.allow_link_local)
            with self._lock:
                self._calls.add(call)
            try:
                request = urllib.request.Request(url, data=data, headers=self._headers(), method=method)
                opener = urllib.request.build_opener(_HTTPHandler(call), _HTTPSHandler(call), _NoRedirects())
                try:
                    with opener.open(request, timeout=self.timeout) as response:
                        payload = _read_capped(response, self.max_response_bytes, f"{method} {url}")
                except Exception:
                    if call.expired:  # the deadline (or close()) cut the call off: say so, not the symptom
                        raise TimeoutError(f"no complete answer within timeout={self.timeout:g} s") from None
                    raise
                finally:
                    call.finish()
                    with self._lock:
                        self._calls.discard(call)
                    if chosen is not None:
                        self._release(chosen)
                if call.expired:
                    raise TimeoutError(f"no complete answer within timeout={self.timeout:g} s")
                try:
                    return json.loads(payload)
                except (ValueError, RecursionError) as err:  # RecursionError: nested deeper than Python recurses
                    raise OpenAIScorerError(
                        f"{type(self).__name__}: {method} {url} returned invalid JSON: {payload[:200]!r}"
                    ) from err
            except urllib.error.HTTPError as err:
                detail = _error_detail(err)
                if err.code not in RETRY_STATUSES:
                    raise OpenAIScorerError(
                        f"{type(self).__name__}: {method} {url} was rejected with HTTP {err.code}: {detail}. "
                        + _hint(err.code, self.api_key_env)
                    ) from None
                last_error = f"HTTP {err.code}: {detail}"
                retry_after = _retry_after(err)
                if retry_after is not None:
                    delay = retry_after
            except (
                urllib.error.URLError,
                TimeoutError,
                ConnectionError,
                http.client.HTTPException,
            ) as err:
                reason = getattr(err, "reason", err)
                last_error = f"{type(reason).__name__}: {reason}"
                if call.aborted or self._stop.is_set():
                    raise OpenAIScorerError(f"{type(self).__name__}: closed while {method} {url} was under way.") from None
            if attempt < self.max_retries and self._stop.wait(min(delay, _MAX_BACKOFF)):
                raise OpenAIScorerError(f"{type(self).__name__}: closed while {method} {url} waited to retry.")
        raise OpenAIScorerError(
            f"{type(self).__name__}: {method} {url} failed after {self.max_retries + 1} attempts "
            f"(timeout={self.timeout:g} s); last error: {last_error}."
        )

    def _only_model(self) -> str:
        listing = self._request("GET", "models", server=0)
        names = [m.get("id") for m in listing.get("data", []) if isinstance(m, dict)]
        if len(names) != 1:
            raise ValueError(
                f"{type(self).__name__}: model=None needs a server serving exactly one model; "
                f"{self.base_urls[0]}/models lists {names}. Pass the model name (spec 'openai:<base_url>#<model>')."
            )
        return names[0]

    # ------------------------------------------------------------------------------ payload
    def _messages(self, frames: np.ndarray) -> list[dict]:
        def b64(image: np.ndarray) -> str:
            return base64.b64encode(encode_png(image)).decode("ascii")

        if self.input_mode == "video":
            # vLLM splits a video/jpeg data URL at the commas into frames and decodes each with PIL,
            # which reads PNG as well: lossless frames, no video codec needed on either side
            url = "data:video/jpeg;base64," + ",".join(b64(f) for f in frames)
            content = [{"type": "video_url", "video_url": {"url": url}}]
        else:
            images = [grid_image(frames)] if self.input_mode == "grid" else list(frames)
            content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(im)}} for im in images]
        content.append({"type": "text", "text": self.prompt})
        messages = [{"role": "user", "content": content}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def request_body(self, frames: np.ndarray) -> dict:
        """The chat-completions request for one clip's frames (RGB uint8 ``[T, H, W, 3]``)."""
        body = {
            "model": self.model,
            "messages": self._messages(frames),
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": True,
            "top_logprobs": self.top_logprobs,
        }
        if self.enable_thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        body.update(self.extra_body)
        return body

    def _score_one(self, frames: np.ndarray) -> float:
        response = self._request("POST", "chat/completions", self.request_body(frames))
        with self._lock:
            self._stats["requests"] += 1
        try:
            choice = response["choices"][0]
            content = ((choice.get("logprobs") or {}).get("content")) or []
            top = (content[0].get("top_logprobs") or []) if content else []
            if not isinstance(top, list):
                raise TypeError(f"top_logprobs is a {type(top).__name__}")
        except (KeyError, IndexError, TypeError, AttributeError) as err:
            raise OpenAIScorerError(
                f"{type(self).__name__}: unexpected response from {self.base_url}/chat/completions (expected "
                f"choices[0].logprobs.content[0].top_logprobs, a list of {{token, logprob}}; {type(err).__name__}: "
                f"{err}): {str(response)[:300]}"
            ) from None
        if not top:
            return self._token_only(choice, content)
        try:
            p = answer_probability(top, self.answers)
        except ValueError as err:
            raise OpenAIScorerError(f"{type(self).__name__}: the server at {self.base_url} sent malformed "
                                    f"top_logprobs: {err}: {str(top)[:300]}") from None
        if p is not None:
            return p
        with self._lock:
            self._stats["unparsed"] += 1
            warn = not self._warned_unparsed
            self._warned_unparsed = True
        text = _normalise_token(str((choice.get("message") or {}).get("content") or ""))
        if warn:
            warnings.warn(
                f"{type(self).__name__}: neither {self.answers[0]!r} nor {self.answers[1]!r} is among the server's "
                f"top_logprobs with probability >= {MIN_ANSWER_MASS:g} (first token {text!r}); scoring from the "
                "generated token. Check that the server returns logprobs and that the prompt asks for a yes/no answer.",
                RuntimeWarning,
                stacklevel=3,
            )
        return 1.0 if text == self.answers[0].lower() else 0.0

    def _token_only(self, choice: dict, content: list) -> float:
        """The score of a response without alternatives: an error unless ``allow_token_only``."""
        token = content[0].get("token") if content else (choice.get("message") or {}).get("content")
        if not self.allow_token_only:
            raise OpenAIScorerError(
                f"{type(self).__name__}: the server at {self.base_url} returned no top_logprobs (generated "
                f"{str(token)!r}), so P(yes) cannot be computed. Scores from the generated token alone are all 0 or 1 "
                "and VLM-RB turns into uniform replay. Serve the model with logprobs (vLLM: --max-logprobs >= "
                f"top_logprobs={self.top_logprobs}), or pass allow_token_only=True to accept 0/1 scores."
            )
        with self._lock:
            self._stats["token_only"] += 1
            warn = not self._warned_token_only
            self._warned_token_only = True
        if warn:
            warnings.warn(
                f"{type(self).__name__}: the server returns no top_logprobs; scoring from the generated token "
                "(0 or 1; allow_token_only=True). stats()['token_only'] counts these clips.",
                RuntimeWarning,
                stacklevel=3,
            )
        return 1.0 if _normalise_token(str(token or "")) == self.answers[0].lower() else 0.0

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.max_concurrency, thread_name_prefix="vlmrb-openai"
                )
                if not self._exit_hook:
                    try:  # threading's exit hooks run before concurrent.futures drains its pools
                        threading._register_atexit(_close_at_exit, weakref.ref(self))
                        self._exit_hook = True
                    except (AttributeError, RuntimeError):  # pragma: no cover - no hook API, or exiting already
                        pass
            return self._executor

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """P(yes) per clip from the server's logprobs: float32 ``[B]`` in ``[0, 1]``."""
        batch = check_clips(clips, self.in_keys, scorer=self)
        frames = self.inputs.frames(clips)
        self._stop.clear()  # a close() before this call is over
        if len(frames) <= 1:
            scores = [self._score_one(f) for f in frames]
        else:
            try:
                scores = list(self._pool().map(self._score_one, frames))
            except concurrent.futures.CancelledError:
                raise OpenAIScorerError(f"{type(self).__name__}: closed while scoring.") from None
        return validate_scores(torch.tensor(scores, dtype=torch.float32), batch, scorer=self)

    def stats(self) -> dict[str, int]:
        """Counters: successful ``requests``, ``retries`` made, ``unparsed`` answers (neither answer
        among the alternatives: scored from the generated token) and ``token_only`` answers (no
        alternatives at all, accepted with ``allow_token_only``)."""
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        """Stops at once, never waiting on a server: queued requests are cancelled, requests under way
        cut off (their sockets shut down), retries given up; a ``score`` call waiting on them raises
        :class:`OpenAIScorerError`. Also runs at interpreter exit. A later ``score`` starts anew."""
        with self._lock:
            executor, self._executor = self._executor, None
            calls = list(self._calls)
        self._stop.set()
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        for call in calls:
            call.expire(aborted=True)

    def __getstate__(self) -> dict:
        # no lock, no thread pool and no API key in a pickle: the key is re-read from the
        # environment when unpickled (e.g. in AsyncScorer's "process" backend)
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_lock", "_executor", "_api_key", "_calls", "_stop", "_exit_hook")}
        state["_stats"] = dict(self._stats)
        state["_outstanding"] = [0] * len(self.base_urls)  # nothing is in flight in the copy
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._outstanding = state.get("_outstanding") or [0] * len(self.base_urls)
        self._lock = threading.Lock()
        self._executor = None
        self._calls, self._stop, self._exit_hook = set(), threading.Event(), False
        self._api_key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""

    def __enter__(self) -> OpenAIScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, input_mode={self.input_mode!r}, "
            f"max_frames={self.max_frames}, max_concurrency={self.max_concurrency})"
        )


def _error_detail(err: urllib.error.HTTPError) -> str:
    try:
        body = err.read(64 << 10).decode("utf-8", "replace")  # a server's error message, not all it sends
    except Exception:  # noqa: BLE001
        return err.reason or "no details"
    try:
        parsed = json.loads(body)
        message = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        if isinstance(message, dict):
            message = message.get("message", message)
        body = str(message)[:500]
    except (ValueError, RecursionError):
        pass
    return body.strip()[:500] or str(err.reason)


def _retry_after(err: urllib.error.HTTPError) -> float | None:
    """The ``Retry-After`` seconds of a response, ``None`` when absent or not a finite number (``nan``,
    an HTTP date): the usual backoff applies then."""
    value = err.headers.get("Retry-After") if err.headers else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return max(seconds, 0.0) if seconds is not None and math.isfinite(seconds) else None


def _hint(code: int, api_key_env: str | None) -> str:
    if code in (401, 403):
        return (
            f"Check the API key in ${api_key_env}."
            if api_key_env
            else "The server wants an API key: pass api_key_env=."
        )
    if code == 404:
        return "Check base_url (it should end with /v1) and the model name (GET <base_url>/models lists them)."
    return (
        "Check the request options (model name, top_logprobs <= the server's --max-logprobs, image and video limits; "
        "a server that refuses chat_template_kwargs: enable_thinking=None)."
    )


def _make_openai(rest: str, **kwargs: Any) -> OpenAIScorer:
    base_url, _, model = rest.partition("#")
    if not base_url:
        raise ValueError(
            "An OpenAI-compatible scorer spec is 'openai:<base_url>#<model>', e.g. "
            f"'openai:http://localhost:8000/v1#Qwen/Qwen2.5-VL-3B-Instruct'; got 'openai:{rest}'."
        )
    return OpenAIScorer(base_url, model or kwargs.pop("model", None), **kwargs)


register_scorer("openai", _make_openai, form="openai:<base_url>#<model>", overwrite=True)
