"""Atari (ALE) environments for VLM-RB: DQN-preprocessed frames for the agent, RGB for the VLM.

The agent sees the standard DQN observation (84x84 grayscale, max-pool over the last two
frames of each frame-skip, a stack of the last 4), stored as uint8 to keep replay memory small;
the scorer sees a low-resolution RGB copy of the current game screen. Atari games have no
privileged success signal, so instead of a ``"success"`` flag this module provides per-game
progress prompts for the VLM (:data:`ATARI_PROMPTS`, :func:`atari_prompt`).

gymnasium and ale-py are optional dependencies, imported when an env is built:
``pip install 'vlmrb-torchrl[atari]'`` (ale-py ships the ROMs).
"""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

__all__ = [
    "ATARI_PROMPTS",
    "GENERIC_ATARI_PROMPT",
    "AtariEnv",
    "atari_game_name",
    "atari_prompt",
    "make_atari_env",
]

_has_ale = importlib.util.find_spec("ale_py") is not None and importlib.util.find_spec("gymnasium") is not None

MISSING_ATARI = (
    "Atari environments need gymnasium and ale-py, which are not installed: pip install 'vlmrb-torchrl[atari]'"
)

#: Side of the agent's square grayscale observation (the DQN convention).
OBS_SIZE = 84

#: Progress prompts for games with a clear semantic goal, keyed by ALE game name (the part of
#: ``"ALE/<Name>-v5"`` before the version). Each is a yes/no question about a short clip.
ATARI_PROMPTS: dict[str, str] = {
    "MontezumaRevenge": "Does the player pick up the key in this clip?",
    "Pong": "Does the green paddle on the right score a point by getting the ball past the opponent in this clip?",
    "Breakout": "Does the ball hit and break one or more bricks in this clip?",
    "Freeway": "Does the chicken make it all the way across the road in this clip?",
    "Pitfall": "Does the player collect a treasure or reach a new screen in this clip?",
    "Seaquest": "Does the submarine rescue a diver or destroy an enemy in this clip?",
    "SpaceInvaders": "Does the player's laser cannon shoot down an alien in this clip?",
    "MsPacman": "Does Ms. Pac-Man eat a power pellet, a ghost or a fruit in this clip?",
    "Qbert": "Does Q*bert hop onto a cube and change its color in this clip?",
    "Enduro": "Does the player's race car overtake other cars in this clip?",
    "Boxing": "Does the white boxer land a punch on the black boxer in this clip?",
    "Venture": "Does the player enter a room or collect a treasure in this clip?",
}

#: Prompt for games without an entry in :data:`ATARI_PROMPTS`.
GENERIC_ATARI_PROMPT = "Does this clip show the player making clear progress in the game?"

_NORMALIZED_PROMPTS = {name.lower(): prompt for name, prompt in ATARI_PROMPTS.items()}


def atari_game_name(env_id: str) -> str:
    """The bare game name of an Atari id: ``"ALE/Pong-v5"`` -> ``"Pong"``.

    Also accepts the legacy ``"PongNoFrameskip-v4"`` / ``"PongDeterministic-v4"`` forms and
    ALE ROM names (``"montezuma_revenge"`` -> ``"montezumarevenge"``, underscores removed).

    Examples:
        >>> atari_game_name("ALE/MontezumaRevenge-v5"), atari_game_name("BreakoutNoFrameskip-v4")
        ('MontezumaRevenge', 'Breakout')
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str such as 'ALE/Pong-v5', got env_id={env_id!r}.")
    name = env_id.rsplit("/", 1)[-1]
    name = re.sub(r"-v\d+$", "", name)
    name = re.sub(r"(NoFrameskip|Deterministic)$", "", name)
    return name.replace("_", "")


def atari_prompt(env_id: str) -> str:
    """The VLM progress prompt for an Atari game, or :data:`GENERIC_ATARI_PROMPT`.

    Args:
        env_id (str): a gymnasium id (``"ALE/Pong-v5"``, ``"PongNoFrameskip-v4"``) or a game
            name (``"Pong"``, ``"montezuma_revenge"``); matched case-insensitively.

    Returns:
        str: the entry of :data:`ATARI_PROMPTS` for that game, else the generic prompt.

    Examples:
        >>> atari_prompt("ALE/MontezumaRevenge-v5")
        'Does the player pick up the key in this clip?'
        >>> atari_prompt("ALE/Tennis-v5")
        'Does this clip show the player making clear progress in the game?'
    """
    return _NORMALIZED_PROMPTS.get(atari_game_name(env_id).lower(), GENERIC_ATARI_PROMPT)


def _import_ale():
    if not _has_ale:
        raise ImportError(MISSING_ATARI)
    import ale_py
    import gymnasium

    gymnasium.register_envs(ale_py)  # registers the ALE/* ids (idempotent)
    return gymnasium, ale_py


def area_resize_matrix(in_size: int, out_size: int) -> np.ndarray:
    """``[out_size, in_size]`` float32 matrix of area-averaging (box filter) weights.

    Row ``i`` averages the input interval ``[i * s, (i + 1) * s)``, ``s = in_size / out_size``,
    with fractional weights for partially covered pixels (OpenCV's ``INTER_AREA`` when
    shrinking). For upsampling it degrades to nearest-neighbour-like boxes. Rows sum to 1.

    Examples:
        >>> area_resize_matrix(4, 2)
        array([[0.5, 0.5, 0. , 0. ],
               [0. , 0. , 0.5, 0.5]], dtype=float32)
    """
    scale = in_size / out_size
    edges = np.arange(out_size + 1, dtype=np.float64) * scale
    lo, hi = edges[:-1, None], edges[1:, None]
    pix = np.arange(in_size, dtype=np.float64)[None, :]
    overlap = np.clip(np.minimum(hi, pix + 1) - np.maximum(lo, pix), 0.0, None)
    return (overlap / overlap.sum(axis=1, keepdims=True)).astype(np.float32)


class _AreaResize:
    """Area-averaging resize of ``[H, W]`` or ``[H, W, C]`` uint8 images.

    Same result as ``rows @ image @ cols.T`` with the :func:`area_resize_matrix` weights, but
    computed from each output pixel's few (<= 4 for Atari sizes) input taps with numpy gathers:
    no BLAS call, so no thread-pool contention when many envs step in parallel processes
    (a dense 84x210 @ 210x160 matmul took 10-50 ms instead of 60 us on a loaded 2-core box).
    """

    def __init__(self, in_hw: tuple[int, int], out_hw: tuple[int, int]) -> None:
        self.in_hw = tuple(in_hw)
        self.row_idx, row_w = self._taps(in_hw[0], out_hw[0])  # [oh, K]
        self.col_idx, col_w = self._taps(in_hw[1], out_hw[1])  # [ow, K]
        self.row_w = row_w[:, :, None]  # broadcast over W * C
        self.col_w = col_w[None, :, :, None]  # broadcast over oh and C

    @staticmethod
    def _taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
        weights = area_resize_matrix(in_size, out_size)
        k = int((weights > 0).sum(axis=1).max())
        idx = np.zeros((out_size, k), dtype=np.int64)
        w = np.zeros((out_size, k), dtype=np.float32)
        for i, row in enumerate(weights):
            nz = np.flatnonzero(row)
            idx[i, : len(nz)] = nz
            idx[i, len(nz) :] = nz[-1]  # padding taps get weight 0
            w[i, : len(nz)] = row[nz]
        return idx, w

    def __call__(self, image: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        x = image.reshape(h, -1).astype(np.float32)  # [H, W * C]
        y = (x[self.row_idx] * self.row_w).sum(axis=1)  # [oh, W * C]
        y = y.reshape(y.shape[0], w, -1)  # [oh, W, C]
        z = (y[:, self.col_idx] * self.col_w).sum(axis=2)  # [oh, ow, C]
        z = z.reshape(z.shape[0], z.shape[1], *image.shape[2:])
        return np.clip(np.rint(z), 0, 255).astype(np.uint8)


class AtariEnv(EnvBase):
    """TorchRL environment for an ALE game with DQN preprocessing and RGB frames for a VLM.

    Equivalent to gymnasium's ``AtariPreprocessing(noop_max, frame_skip, screen_size=84,
    terminal_on_life_loss=train)`` + ``FrameStackObservation(frame_stack)`` on
    ``gym.make(env_id, frameskip=1)``, plus reward clipping in training mode, re-implemented on
    the raw ALE interface because (1) gymnasium's wrapper needs OpenCV, which is not a
    dependency, (2) its ``terminal_on_life_loss`` restarts the *whole game* after every lost
    life, and (3) the RGB frame for the VLM and the unclipped reward must come from the same
    step. Each agent step repeats the action for ``frame_skip`` emulator frames (sticky actions
    of ``-v5`` ids stay on: ``repeat_action_probability=0.25``) and sums their rewards.

    Args:
        env_id (str): a registered ALE id. Defaults to ``"ALE/Pong-v5"``.

    Keyword Args:
        seed (int, optional): seed of the first reset (see :meth:`set_seed`). Defaults to ``None``.
        train (bool, optional): training mode: a lost life ends the episode (``terminated``,
            the game itself goes on at the next reset, like baselines' ``EpisodicLifeEnv``)
            and ``"reward"`` is the sign of the raw reward. ``False``: full games, raw rewards.
            Defaults to ``True``.
        render (bool, optional): write ``"pixels"`` every step. Defaults to ``True``.
        frame_size (int, optional): side of the square RGB ``"pixels"`` frame. Defaults to ``64``.
        frame_skip (int, optional): emulator frames per agent step. Defaults to ``4``.
        noop_max (int, optional): a full reset plays ``U{1..noop_max}`` no-op frames (``0``: none).
            Defaults to ``30``.
        frame_stack (int, optional): number of stacked grayscale frames. Defaults to ``4``.
        max_episode_steps (int, optional): truncate a game after this many agent steps (counted
            over the whole game, across lives); ``27_000`` = the usual 108k emulator frames.
            ``None``: only ALE's own limit (``max_num_frames_per_episode``, 108k frames for
            ``-v5``). Defaults to ``27_000``.
        device (torch.device, optional): device of the specs and outputs. Defaults to ``"cpu"``.
        env_kwargs (dict, optional): extra keyword arguments for ``gymnasium.make`` (e.g.
            ``{"repeat_action_probability": 0.0}``, ``{"mode": 1, "difficulty": 0}``).
            Defaults to ``None``.

    Entries written (all with ``batch_size=[]``; under ``"next"`` after a step):

    - ``"observation"``: uint8 ``[frame_stack, 84, 84]``, oldest frame first. Each frame is the
      pixel-wise max of the last two emulator frames of the step (removes sprite flicker),
      in ALE's grayscale palette, area-averaged from 210x160 to 84x84. After a reset all
      slots hold the reset frame. Divide by 255 in the network.
    - ``"pixels"`` (only if ``render=True``): uint8 ``[frame_size, frame_size, 3]``, the same
      max-pooled frame in RGB, area-averaged (the 210x160 screen is squeezed to a square).
    - ``"reward"``: float32 ``[1]``: ``sign(raw_reward)`` if ``train`` else ``raw_reward``.
    - ``"raw_reward"``: float32 ``[1]``, the game's score change over the step (0 on reset).
    - ``"game_done"``: bool ``[1]``, the whole game ended on this step (game over or time
      limit). With ``train=False`` it equals ``"done"``; with ``train=True`` ``"done"`` also
      fires on every lost life, so sum ``"raw_reward"`` up to ``"game_done"`` for real scores.
    - ``"done"``, ``"terminated"``, ``"truncated"``: bool ``[1]``. Game over (and, if ``train``,
      a lost life) is ``terminated``; time limits are ``truncated``.

    The action is categorical (int64 scalar) over the game's minimal action set (see
    :attr:`action_names`; ``-v5`` ids use the minimal set unless
    ``env_kwargs={"full_action_space": True}``), usable as is by
    :class:`~torchrl.modules.QValueActor` and :class:`~torchrl.objectives.DQNLoss`.

    There is no ``"success"`` entry: use :func:`atari_prompt` for the VLM's question.
    See :func:`make_atari_env` for examples.

    .. note:: Unlike TorchRL's Atari recipe (``EndOfLifeTransform`` + a loss reading
        ``"end-of-life"``), the life-loss boundary *is* the episode boundary in training mode,
        so any TorchRL loss, value estimator and slice sampler see it without extra keys.
        A reset that follows a lost life continues the game with one no-op step; any other
        reset (after game over, truncation, at start, after :meth:`set_seed`) restarts it.

    Examples:
        >>> env = AtariEnv("ALE/Pong-v5", seed=0, train=False)
        >>> td = env.rollout(4)  # random actions
        >>> td["observation"].shape, td["next", "pixels"].shape  # 4 stacked 84x84 frames; RGB for the VLM
        (torch.Size([4, 4, 84, 84]), torch.Size([4, 64, 64, 3]))
        >>> env.action_names[:3]
        ['NOOP', 'FIRE', 'RIGHT']
        >>> env.close()
    """

    # frame skipping happens in _step: keep EnvBase from wrapping the env in a FrameSkipTransform
    _has_frame_skip = True

    def __init__(
        self,
        env_id: str = "ALE/Pong-v5",
        *,
        seed: int | None = None,
        train: bool = True,
        render: bool = True,
        frame_size: int = 64,
        frame_skip: int = 4,
        noop_max: int = 30,
        frame_stack: int = 4,
        max_episode_steps: int | None = 27_000,
        device: torch.device | str | None = "cpu",
        env_kwargs: dict | None = None,
    ) -> None:
        gymnasium, ale_py = _import_ale()
        for name, value, low in (
            ("frame_size", frame_size, 1),
            ("frame_skip", frame_skip, 1),
            ("noop_max", noop_max, 0),
            ("frame_stack", frame_stack, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"AtariEnv.{name} must be an int >= {low}, got {name}={value!r}.")
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) or max_episode_steps < 1
        ):
            raise ValueError(
                f"AtariEnv.max_episode_steps must be None or an int >= 1, got max_episode_steps={max_episode_steps!r}."
            )
        env_kwargs = dict(env_kwargs or {})
        for key, instead in (("frameskip", "frame_skip"), ("render_mode", "render")):
            if key in env_kwargs:
                raise ValueError(f"AtariEnv.env_kwargs cannot set {key!r}; use the {instead}= argument instead.")
        super().__init__(device=device, batch_size=torch.Size([]))
        self.env_id = env_id
        # not ``self.train``: EnvBase is an nn.Module, whose train()/eval() must keep working
        self._train_mode = bool(train)
        self.from_pixels = bool(render)
        self.frame_size = frame_size
        self.frame_skip = frame_skip
        self.noop_max = noop_max
        self.frame_stack = frame_stack
        self.max_episode_steps = max_episode_steps
        self._env_kwargs = env_kwargs
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner per env
        try:
            self._gym_env = gymnasium.make(env_id, frameskip=1, **self._env_kwargs)
        except gymnasium.error.Error as err:
            raise ValueError(
                f"AtariEnv could not make env_id={env_id!r}: {err}. Pass a registered ALE id such as 'ALE/Pong-v5'."
            ) from err
        except TypeError as err:  # non-ALE ids reject frameskip=
            raise ValueError(f"AtariEnv needs an ALE id such as 'ALE/Pong-v5', got env_id={env_id!r}: {err}") from err
        aenv = self._gym_env.unwrapped
        if not isinstance(aenv, ale_py.AtariEnv):
            self._gym_env.close()
            raise ValueError(f"AtariEnv needs an ALE id such as 'ALE/Pong-v5', got env_id={env_id!r}.")
        self._aenv = aenv
        self._ale = aenv.ale
        action_set = getattr(aenv, "_action_set", None)
        self._action_set = list(action_set if action_set is not None else self._ale.getMinimalActionSet())
        self._noop = self._action_set[0]  # NOOP is the first action of every ALE action set
        h, w = self._ale.getScreenDims()
        self._gray = np.zeros((2, h, w), dtype=np.uint8)  # [last, second to last] emulator frame
        self._rgb = np.zeros((2, h, w, 3), dtype=np.uint8) if self.from_pixels else None
        self._gray_resize = _AreaResize((h, w), (OBS_SIZE, OBS_SIZE))
        self._rgb_resize = _AreaResize((h, w), (frame_size, frame_size)) if self.from_pixels else None
        self._stack = np.zeros((frame_stack, OBS_SIZE, OBS_SIZE), dtype=np.uint8)
        self._pixels: np.ndarray | None = None
        self._pending_seed: int | None = None
        self._continue_game = False  # the last step lost a life (train mode): next reset is soft
        self._lives = 0
        self._game_steps = 0
        self._make_specs()
        if seed is not None:
            self.set_seed(seed)

    # ------------------------------------------------------------------ specs
    def _make_specs(self) -> None:
        flag = Categorical(n=2, shape=(1,), dtype=torch.bool, device=self.device)
        obs = {
            "observation": Bounded(
                0, 255, shape=(self.frame_stack, OBS_SIZE, OBS_SIZE), dtype=torch.uint8, device=self.device
            ),
            "raw_reward": Unbounded(shape=(1,), dtype=torch.float32, device=self.device),
            "game_done": flag.clone(),
        }
        if self.from_pixels:
            obs["pixels"] = Bounded(
                0, 255, shape=(self.frame_size, self.frame_size, 3), dtype=torch.uint8, device=self.device
            )
        self.observation_spec = Composite(obs, shape=(), device=self.device)
        self.action_spec = Categorical(n=len(self._action_set), shape=(), dtype=torch.int64, device=self.device)
        self.reward_spec = Unbounded(shape=(1,), dtype=torch.float32, device=self.device)
        self.done_spec = Composite(
            done=flag.clone(), terminated=flag.clone(), truncated=flag.clone(), shape=(), device=self.device
        )

    # ------------------------------------------------------------ attributes
    @property
    def action_names(self) -> list[str]:
        """Names of the categorical actions, by index (e.g. ``['NOOP', 'FIRE', 'RIGHT', 'LEFT']``)."""
        return list(self._aenv.get_action_meanings())

    @property
    def train_mode(self) -> bool:
        """``True``: a lost life ends the episode and rewards are sign-clipped (the ``train`` argument)."""
        return self._train_mode

    @property
    def lives(self) -> int:
        """Lives left in the current game."""
        return int(self._ale.lives())

    @property
    def prompt(self) -> str:
        """The VLM progress prompt for this game (:func:`atari_prompt`)."""
        return atari_prompt(self.env_id)

    @property
    def unwrapped(self):
        """The raw ``ale_py.AtariEnv`` (its ``.ale`` is the ``ALEInterface``)."""
        return self._aenv

    # ------------------------------------------------------------------ core
    def _set_seed(self, seed: int | None) -> None:
        # applied at the next reset: it reseeds ALE (sticky actions) and the no-op RNG and
        # restarts the game; later resets continue the seeded streams deterministically.
        self._pending_seed = None if seed is None else int(seed)

    def _grab(self, slot: int) -> None:
        self._ale.getScreenGrayscale(self._gray[slot])
        if self._rgb is not None:
            self._ale.getScreenRGB(self._rgb[slot])

    def _play(self, action) -> float:
        """Repeats ``action`` for ``frame_skip`` frames; grabs the last two screens. Returns the reward."""
        ale = self._ale
        reward = 0.0
        skip = self.frame_skip
        for t in range(skip):
            reward += ale.act(action)
            if ale.game_over():  # game over or ALE's frame limit: the skip stops here
                self._grab(0)
                self._gray[1] = self._gray[0]
                if self._rgb is not None:
                    self._rgb[1] = self._rgb[0]
                return reward
            if t == skip - 2:
                self._grab(1)
            elif t == skip - 1:
                self._grab(0)
        if skip == 1:
            self._gray[1] = self._gray[0]
            if self._rgb is not None:
                self._rgb[1] = self._rgb[0]
        return reward

    def _full_reset(self) -> None:
        seed, self._pending_seed = self._pending_seed, None
        aenv, ale = self._aenv, self._ale
        aenv.reset(seed=seed)
        noops = int(aenv.np_random.integers(1, self.noop_max + 1)) if self.noop_max > 0 else 0
        for _ in range(noops):
            ale.act(self._noop)
            if ale.game_over():
                ale.reset_game()
        self._grab(0)
        self._gray[1] = self._gray[0]
        if self._rgb is not None:
            self._rgb[1] = self._rgb[0]
        self._game_steps = 0

    def _frames(self) -> tuple[np.ndarray, np.ndarray | None]:
        gray = np.maximum(self._gray[0], self._gray[1])
        frame = self._gray_resize(gray)
        pixels = None
        if self._rgb is not None:
            pixels = self._rgb_resize(np.maximum(self._rgb[0], self._rgb[1]))
        return frame, pixels

    def _output(self, reward: float | None, raw: float, game_done: bool, terminated: bool, truncated: bool):
        out = {
            "observation": torch.from_numpy(self._stack.copy()),
            "raw_reward": torch.tensor([raw], dtype=torch.float32),
            "game_done": torch.tensor([game_done]),
            "terminated": torch.tensor([terminated]),
            "truncated": torch.tensor([truncated]),
            "done": torch.tensor([terminated or truncated]),
        }
        if reward is not None:
            out["reward"] = torch.tensor([reward], dtype=torch.float32)
        if self._pixels is not None:
            out["pixels"] = torch.from_numpy(self._pixels)
        td = TensorDict(out, batch_size=torch.Size([]))
        return td if self.device is None or self.device.type == "cpu" else td.to(self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        if self._continue_game and self._pending_seed is None:
            # after a lost life (train mode): keep playing the same game, as EpisodicLifeEnv does
            # (the no-op step counts toward the time limit; its reward, almost always 0, is dropped)
            self._play(self._noop)
            self._game_steps += 1
            if self._ale.game_over():
                self._full_reset()
        else:
            self._full_reset()
        self._continue_game = False
        self._lives = int(self._ale.lives())
        frame, self._pixels = self._frames()
        self._stack[:] = frame
        return self._output(None, 0.0, False, False, False)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = int(tensordict.get("action"))
        raw = self._play(self._action_set[action])
        ale = self._ale
        self._game_steps += 1
        game_over = bool(ale.game_over(with_truncation=False))
        truncated = bool(ale.game_truncated()) and not game_over
        if self.max_episode_steps is not None and self._game_steps >= self.max_episode_steps and not game_over:
            truncated = True
        lives = int(ale.lives())
        life_lost = lives < self._lives
        self._lives = lives
        terminated = game_over or (self._train_mode and life_lost)
        # a reset after this step continues the game only if it ended on a lost life alone
        self._continue_game = self._train_mode and life_lost and not (game_over or truncated)
        frame, self._pixels = self._frames()
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = frame
        reward = float(np.sign(raw)) if self._train_mode else raw
        return self._output(reward, raw, game_over or truncated, terminated, truncated)

    def close(self, *, raise_if_closed: bool = True) -> None:
        gym_env = self.__dict__.get("_gym_env")
        if gym_env is not None:
            gym_env.close()
        super().close(raise_if_closed=raise_if_closed)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env_id={self.env_id!r}, train={self._train_mode}, "
            f"render={self.from_pixels}, device={self.device})"
        )


def make_atari_env(
    env_id: str = "ALE/Pong-v5",
    *,
    seed: int | None = None,
    train: bool = True,
    render: bool = True,
    frame_size: int = 64,
    frame_skip: int = 4,
    noop_max: int = 30,
    frame_stack: int = 4,
    max_episode_steps: int | None = 27_000,
    device: torch.device | str | None = "cpu",
    env_kwargs: dict | None = None,
) -> AtariEnv:
    """Builds an :class:`AtariEnv`: uint8 DQN frame stacks for the agent, RGB frames for the VLM.

    A module-level function, so ``functools.partial(make_atari_env, env_id, seed=...)`` is a
    picklable factory for :class:`~torchrl.envs.ParallelEnv` and
    :class:`~torchrl.collectors.Collector`. No transforms are added; compose
    ``StepCounter``/``RewardSum``/``InitTracker`` yourself when a recipe needs them
    (``RewardSum(in_keys=["raw_reward"], out_keys=["episode_raw_reward"])`` for game scores).

    Args:
        env_id (str): a registered ALE id. Defaults to ``"ALE/Pong-v5"``.

    Keyword Args:
        seed (int, optional): seed of the first reset. Defaults to ``None``.
        train (bool, optional): end episodes on a lost life and clip rewards to their sign;
            ``False`` for evaluation (full games, raw rewards). Defaults to ``True``.
        render (bool, optional): write ``"pixels"`` (RGB uint8) every step. Defaults to ``True``.
        frame_size (int, optional): side of the square ``"pixels"`` frame. Defaults to ``64``.
        frame_skip (int, optional): emulator frames per agent step. Defaults to ``4``.
        noop_max (int, optional): maximum number of no-op frames after a reset. Defaults to ``30``.
        frame_stack (int, optional): stacked 84x84 grayscale frames. Defaults to ``4``.
        max_episode_steps (int, optional): time limit in agent steps per game (reported as
            ``truncated``). Defaults to ``27_000``.
        device (torch.device, optional): device of the outputs. Defaults to ``"cpu"``.
        env_kwargs (dict, optional): extra ``gymnasium.make`` keyword arguments.

    Returns:
        AtariEnv: see its docstring for the entries written.

    Raises:
        ImportError: gymnasium/ale-py missing (``pip install 'vlmrb-torchrl[atari]'``).
        ValueError: unknown or non-ALE ``env_id``, or a bad integer argument.

    Examples:
        >>> import pytest; _ = pytest.importorskip("ale_py")  # (skips this example without ale-py)
        >>> env = make_atari_env("ALE/Breakout-v5", seed=0)
        >>> td = env.rollout(3)
        >>> td["next", "observation"].shape, td["next", "observation"].dtype
        (torch.Size([3, 4, 84, 84]), torch.uint8)
        >>> td["next", "pixels"].shape, env.action_names
        (torch.Size([3, 64, 64, 3]), ['NOOP', 'FIRE', 'RIGHT', 'LEFT'])
        >>> env.prompt
        'Does the ball hit and break one or more bricks in this clip?'
    """
    return AtariEnv(
        env_id,
        seed=seed,
        train=train,
        render=render,
        frame_size=frame_size,
        frame_skip=frame_skip,
        noop_max=noop_max,
        frame_stack=frame_stack,
        max_episode_steps=max_episode_steps,
        device=device,
        env_kwargs=env_kwargs,
    )
