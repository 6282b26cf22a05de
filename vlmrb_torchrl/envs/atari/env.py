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
from torchrl._utils import seed_generator
from torchrl.envs import EnvBase

from vlmrb_torchrl._signature import init_signature
from vlmrb_torchrl.envs._base import done_spec, flag_spec, step_output

__all__ = [
    "ATARI_FRAME_VIEWS",
    "ATARI_PROMPTS",
    "ATARI_SCORE_BOXES",
    "GENERIC_ATARI_PROMPT",
    "AtariEnv",
    "BatchedAtariEnv",
    "atari_game_name",
    "atari_prompt",
    "make_atari_env",
    "scorer_frames",
]

_has_ale = importlib.util.find_spec("ale_py") is not None and importlib.util.find_spec("gymnasium") is not None

MISSING_ATARI = (
    "Atari environments need gymnasium and ale-py, which are not installed: pip install 'vlmrb-torchrl[atari]'"
)

#: Side of the agent's square grayscale observation (the DQN convention).
OBS_SIZE = 84

#: ALE's screen, ``(height, width)``, the same for every game.
ATARI_SCREEN = (210, 160)

_FLAG_KEYS = ("game_done", "terminated", "truncated", "done")

#: What the scorer's ``"pixels"`` show (the envs' ``frame_view=``): ``"screen"``, the whole 210x160 screen
#: squeezed to a square (what a person watching sees), or ``"score"``, the box of the screen holding the
#: agent's score (:data:`ATARI_SCORE_BOXES`) at a resolution where its digits can be read. A 64-px frame of
#: the whole screen draws a digit in ~3x2 pixels, too few for a small model to read (``builtin:atari``'s
#: held-out clip F1 was 0.43-0.47 on it); the score box shows the same digit in ~20x16 pixels.
ATARI_FRAME_VIEWS = ("screen", "score")

#: Where each game draws the agent's score: ``(top, left, side)`` of a square box of the native 210x160
#: screen holding its last two digits, found by writing scores into the RAM. Pong: the green (agent's)
#: points, rows 1-20, tens in columns 104-115, units in 116-127. Breakout: rows 5-14, tens in columns
#: 52-63, units in 68-79.
ATARI_SCORE_BOXES: dict[str, tuple[int, int, int]] = {"Pong": (0, 98, 32), "Breakout": (0, 48, 32)}

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


def resize_frames(images, size: int):
    """Resizes uint8 ``[..., H, W]`` or ``[..., H, W, 3]`` frames (NumPy or torch) to ``size`` x ``size``.

    Antialiased bilinear interpolation (a triangle filter as wide as the scale factor: Pillow's
    ``Image.BILINEAR``, within 1 of it), torch's vectorised uint8 kernel for channels-last RGB:
    ~0.03 ms per 210x160 screen on one thread, a whole batch in one call. Uses torch's intra-op
    threads (the recipes set one). Returns the type it was given.

    Examples:
        >>> import numpy as np
        >>> resize_frames(np.full((210, 160, 3), 200, dtype=np.uint8), 64).shape
        (64, 64, 3)
    """
    as_numpy = isinstance(images, np.ndarray)
    x = torch.as_tensor(images)
    if x.dtype != torch.uint8:
        raise TypeError(f"resize_frames expects uint8 frames, got {x.dtype}.")
    rgb = x.ndim >= 3 and x.shape[-1] == 3
    lead, (h, w) = (x.shape[:-3], x.shape[-3:-1]) if rgb else (x.shape[:-2], x.shape[-2:])
    # [n, C, H, W] views of the frames (RGB: channels-last memory, which the fast kernel reads as is)
    nchw = x.reshape(-1, h, w, 3).permute(0, 3, 1, 2) if rgb else x.reshape(-1, 1, h, w)
    out = torch.nn.functional.interpolate(nchw, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    out = out.permute(0, 2, 3, 1).reshape(*lead, size, size, 3) if rgb else out.reshape(*lead, size, size)
    out = out.contiguous()
    return out.numpy() if as_numpy else out


def scorer_frames(screens, size: int, *, frame_view: str = "screen", game: str | None = None):
    """The scorer's frames of uint8 ``[..., 210, 160, 3]`` RGB screens (NumPy or torch): ``[..., size, size, 3]``.

    ``frame_view="screen"``: the whole screen, resized by :func:`resize_frames`. ``"score"``: the square box
    of ``game``'s score (:data:`ATARI_SCORE_BOXES`), scaled to ``size`` by nearest-neighbour
    (``"nearest-exact"``: at 64 px each screen pixel becomes a 2x2 block, so digits stay sharp and no colour
    is invented). Returns the type it was given.

    Examples:
        >>> import numpy as np
        >>> screen = np.zeros((210, 160, 3), dtype=np.uint8)
        >>> screen[5:15, 68:80] = 255  # Breakout's units digit
        >>> crop = scorer_frames(screen, 64, frame_view="score", game="Breakout")
        >>> crop.shape, int(crop[10:30, 40:64].min()), int(crop[:10].max())  # (68-48)*2 = 40, 5*2 = 10
        ((64, 64, 3), 255, 0)
    """
    if frame_view == "screen":
        return resize_frames(screens, size)
    if frame_view != "score":
        raise ValueError(f"frame_view must be one of {ATARI_FRAME_VIEWS}, got frame_view={frame_view!r}.")
    if game not in ATARI_SCORE_BOXES:
        raise ValueError(f"frame_view='score' knows where {sorted(ATARI_SCORE_BOXES)} draw the score, not {game!r}; "
                         "use frame_view='screen'.")
    as_numpy = isinstance(screens, np.ndarray)
    top, left, side = ATARI_SCORE_BOXES[game]
    x = torch.as_tensor(screens)[..., top:top + side, left:left + side, :]
    lead = x.shape[:-3]
    nchw = x.reshape(-1, side, side, 3).permute(0, 3, 1, 2)
    out = torch.nn.functional.interpolate(nchw, size=(size, size), mode="nearest-exact")
    out = out.permute(0, 2, 3, 1).reshape(*lead, size, size, 3).contiguous()
    return out.numpy() if as_numpy else out


#: ALE's grayscale palette is the luminance ``round(0.2989 R + 0.5870 G + 0.1140 B)`` of its RGB one.
LUMINANCE = (0.2989, 0.5870, 0.1140)


def _check_args(owner: str, *, frame_size, frame_skip, noop_max, frame_stack, max_episode_steps, env_kwargs,
                env_id, frame_view) -> dict:
    """Checks the preprocessing arguments shared by :class:`AtariEnv` and :class:`BatchedAtariEnv`;
    returns a copy of ``env_kwargs``."""
    if frame_view not in ATARI_FRAME_VIEWS:
        raise ValueError(f"{owner}.frame_view must be one of {ATARI_FRAME_VIEWS}, got frame_view={frame_view!r}.")
    if frame_view == "score" and atari_game_name(env_id) not in ATARI_SCORE_BOXES:
        raise ValueError(f"{owner}: frame_view='score' knows where {sorted(ATARI_SCORE_BOXES)} draw the score, not "
                         f"{env_id!r}; use frame_view='screen'.")
    for name, value, low in (("frame_size", frame_size, 1), ("frame_skip", frame_skip, 1), ("noop_max", noop_max, 0),
                             ("frame_stack", frame_stack, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{owner}.{name} must be an int >= {low}, got {name}={value!r}.")
    if max_episode_steps is not None and (
        isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) or max_episode_steps < 1
    ):
        raise ValueError(
            f"{owner}.max_episode_steps must be None or an int >= 1, got max_episode_steps={max_episode_steps!r}."
        )
    env_kwargs = dict(env_kwargs or {})
    for key, instead in (("frameskip", "frame_skip"), ("render_mode", "render")):
        if key in env_kwargs:
            raise ValueError(f"{owner}.env_kwargs cannot set {key!r}; use the {instead}= argument instead.")
    return env_kwargs


def _set_specs(env: EnvBase, *, batch_shape: tuple[int, ...], n_actions: int) -> None:
    """The specs of :class:`AtariEnv` (``batch_shape=()``) and :class:`BatchedAtariEnv` (``(num_envs,)``)."""
    device = env.device
    flag = flag_spec(batch_shape, device)
    obs = {
        "observation": Bounded(0, 255, shape=(*batch_shape, env.frame_stack, OBS_SIZE, OBS_SIZE), dtype=torch.uint8,
                               device=device),
        "raw_reward": Unbounded(shape=(*batch_shape, 1), dtype=torch.float32, device=device),
        "progress_event": flag.clone(),
        "game_done": flag.clone(),
    }
    if env.from_pixels:
        obs["pixels"] = Bounded(0, 255, shape=(*batch_shape, env.frame_size, env.frame_size, 3), dtype=torch.uint8,
                                device=device)
    env.observation_spec = Composite(obs, shape=batch_shape, device=device)
    env.action_spec = Categorical(n=n_actions, shape=batch_shape, dtype=torch.int64, device=device)
    env.reward_spec = Unbounded(shape=(*batch_shape, 1), dtype=torch.float32, device=device)
    env.done_spec = done_spec(batch_shape, device)


@init_signature
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
        frame_view (str, optional): what ``"pixels"`` show (:data:`ATARI_FRAME_VIEWS`, :func:`scorer_frames`):
            ``"screen"`` (the whole screen) or ``"score"`` (the box of the agent's score, Pong and Breakout
            only: what ``builtin:atari`` reads). Defaults to ``"screen"``.
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
      in ALE's grayscale palette, resized from 210x160 to 84x84 (:func:`resize_frames`). After a reset all
      slots hold the reset frame. Divide by 255 in the network.
    - ``"pixels"`` (only if ``render=True``): uint8 ``[frame_size, frame_size, 3]``, the same
      max-pooled frame in RGB, resized the same way (the 210x160 screen is squeezed to a square), or, with
      ``frame_view="score"``, the box of that frame that holds the agent's score.
    - ``"reward"``: float32 ``[1]``: ``sign(raw_reward)`` if ``train`` else ``raw_reward``.
    - ``"raw_reward"``: float32 ``[1]``, the game's score change over the step (0 on reset).
    - ``"progress_event"``: bool ``[1]``, ``raw_reward > 0``: the player scored on this step
      (what ``oracle:atari`` reads).
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
        frame_view: str = "screen",
        frame_skip: int = 4,
        noop_max: int = 30,
        frame_stack: int = 4,
        max_episode_steps: int | None = 27_000,
        device: torch.device | str | None = "cpu",
        env_kwargs: dict | None = None,
    ) -> None:
        gymnasium, ale_py = _import_ale()
        env_kwargs = _check_args(type(self).__name__, frame_size=frame_size, frame_skip=frame_skip, noop_max=noop_max,
                                 frame_stack=frame_stack, max_episode_steps=max_episode_steps, env_kwargs=env_kwargs,
                                 env_id=env_id, frame_view=frame_view)
        super().__init__(device=device, batch_size=torch.Size([]))
        self.env_id = env_id
        # not ``self.train``: EnvBase is an nn.Module, whose train()/eval() must keep working
        self._train_mode = bool(train)
        self.from_pixels = bool(render)
        self.frame_size = frame_size
        self.frame_view = frame_view
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
        self._stack = np.zeros((frame_stack, OBS_SIZE, OBS_SIZE), dtype=np.uint8)
        self._pixels: np.ndarray | None = None
        self._pending_seed: int | None = None
        self._continue_game = False  # the last step lost a life (train mode): next reset is soft
        self._lives = 0
        self._game_steps = 0
        _set_specs(self, batch_shape=(), n_actions=len(self._action_set))
        if seed is not None:
            self.set_seed(seed)

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
        frame = resize_frames(gray, OBS_SIZE)
        pixels = None
        if self._rgb is not None:
            pixels = scorer_frames(np.maximum(self._rgb[0], self._rgb[1]), self.frame_size, frame_view=self.frame_view,
                                   game=atari_game_name(self.env_id))
        return frame, pixels

    def _output(self, reward: float | None, raw: float, game_done: bool, terminated: bool, truncated: bool):
        out = {"observation": torch.from_numpy(self._stack.copy()), "raw_reward": torch.tensor([raw], dtype=torch.float32),
               "progress_event": torch.tensor([raw > 0])}
        if self._pixels is not None:
            out["pixels"] = torch.from_numpy(self._pixels)
        return step_output(out, _FLAG_KEYS, [game_done, terminated, truncated, terminated or truncated], reward,
                           self.device)

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


@init_signature
class BatchedAtariEnv(EnvBase):
    """``num_envs`` copies of an ALE game stepped together by ale-py's ``AtariVectorEnv`` (C++ threads).

    One TorchRL env of ``batch_size=[num_envs]`` with the entries of :class:`AtariEnv` — the
    agent's uint8 ``[frame_stack, 84, 84]`` grayscale stack, the scorer's RGB ``"pixels"``, raw and
    clipped rewards, ``"progress_event"``, ``"game_done"`` — made from **one** max-pooled RGB
    screen per step: ale-py plays ``frame_skip`` frames per step in its worker threads and
    returns the pixel-wise maximum of the last two RGB screens; this env resizes it to the RGB
    ``"pixels"`` (:func:`resize_frames`, exactly as :class:`AtariEnv` resizes its max-pooled RGB
    screen) and to the grayscale frame (ALE's luminance of that screen resized to 84x84).

    The usual Atari preprocessing: up to ``noop_max - 1`` no-op frames after a game reset,
    ``frame_skip`` frames per step with max-pooling, sticky actions as the id registers them
    (``-v5``: ``repeat_action_probability=0.25``); ``train=True``: a lost life ends the episode
    (``terminated``) while the game goes on at the next reset, like baselines'
    ``EpisodicLifeEnv``, and ``"reward"`` is the sign of the raw reward; ``train=False``: episodes
    are whole games and rewards are raw (episodic returns are game scores). Done copies are
    reset through TorchRL's partial-reset protocol (``"_reset"``).

    Differences from :class:`AtariEnv` (the same game through gymnasium, one copy per env):
    the grayscale frame is the luminance of the max-pooled RGB screen rather than the maximum of
    two grayscale screens (they differ only on pixels where the two screens differ in colour);
    a game starts after ``U{0..noop_max-1}`` no-ops rather than ``U{1..noop_max}``; a reset after
    a lost life (``train=True``) restarts the stack from the current frame without playing a
    no-op step; and seeds drive ale-py's own generators, so a seed gives other games than
    :class:`AtariEnv` with that seed. ``"pixels"`` are identical for identical emulator states.

    Args:
        num_envs (int): game copies.
        env_id (str): a registered ALE id. Defaults to ``"ALE/Pong-v5"``.

    Keyword Args:
        seed, train, render, frame_size, frame_view, frame_skip, noop_max, frame_stack, max_episode_steps,
            device: as in :class:`AtariEnv` (the same for every copy; ``max_episode_steps``
            counts agent steps over a whole game, across lives).
        env_kwargs (dict, optional): ``repeat_action_probability`` and ``full_action_space``
            override the id's; other ``gymnasium.make`` arguments (``mode``, ``difficulty``)
            are not supported by ale-py's vector env: use :class:`AtariEnv` for them.
        num_threads (int, optional): ale-py worker threads. Defaults to ``None``: one per copy,
            at most one per CPU core.

    Examples:
        >>> import pytest; _ = pytest.importorskip("ale_py")  # (skips this example without ale-py)
        >>> env = BatchedAtariEnv(4, "ALE/Breakout-v5", seed=0)
        >>> rollout = env.rollout(3)
        >>> rollout.batch_size, rollout["next", "observation"].shape, rollout["next", "pixels"].shape
        (torch.Size([4, 3]), torch.Size([4, 3, 4, 84, 84]), torch.Size([4, 3, 64, 64, 3]))
        >>> env.action_names
        ['NOOP', 'FIRE', 'RIGHT', 'LEFT']
    """

    _has_frame_skip = True  # ale-py skips frames itself
    #: ale-py steps the copies in its own threads: a recipe's ``parallel=True`` keeps this class.
    steps_in_parallel = True

    #: ``env_kwargs`` the vector env accepts (everything else is the id's or this env's own arguments).
    VECTOR_ENV_KWARGS = ("repeat_action_probability", "full_action_space")

    def __init__(
        self,
        num_envs: int,
        env_id: str = "ALE/Pong-v5",
        *,
        seed: int | None = None,
        train: bool = True,
        render: bool = True,
        frame_size: int = 64,
        frame_view: str = "screen",
        frame_skip: int = 4,
        noop_max: int = 30,
        frame_stack: int = 4,
        max_episode_steps: int | None = 27_000,
        device: torch.device | str | None = "cpu",
        env_kwargs: dict | None = None,
        num_threads: int | None = None,
    ) -> None:
        gymnasium, _ = _import_ale()
        from ale_py.vector_env import AtariVectorEnv

        owner = type(self).__name__
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"{owner}.num_envs must be an int >= 1, got num_envs={num_envs!r}.")
        env_kwargs = _check_args(owner, frame_size=frame_size, frame_skip=frame_skip, noop_max=noop_max,
                                 frame_stack=frame_stack, max_episode_steps=max_episode_steps, env_kwargs=env_kwargs,
                                 env_id=env_id, frame_view=frame_view)
        unsupported = sorted(set(env_kwargs) - set(self.VECTOR_ENV_KWARGS))
        if unsupported:
            raise ValueError(f"{owner}.env_kwargs: {unsupported} not supported by ale-py's vector env (it takes "
                             f"{list(self.VECTOR_ENV_KWARGS)}); use AtariEnv for other gymnasium.make arguments.")
        if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                                        or num_threads < 1):
            raise ValueError(f"{owner}.num_threads must be None or an int >= 1, got num_threads={num_threads!r}.")
        try:
            spec = gymnasium.spec(env_id)
        except gymnasium.error.Error as err:
            raise ValueError(f"{owner} could not find env_id={env_id!r}: {err}. Pass a registered ALE id such as "
                             "'ALE/Pong-v5'.") from err
        game = spec.kwargs.get("game")
        if not str(spec.entry_point).startswith("ale_py") or game is None:
            raise ValueError(f"{owner} needs an ALE id such as 'ALE/Pong-v5', got env_id={env_id!r}.")
        options = {**spec.kwargs, **env_kwargs}
        if max_episode_steps is not None:
            max_frames = max_episode_steps * frame_skip
        else:  # the id's own limit (-v5: 108k frames); ids without one: none
            max_frames = options.get("max_num_frames_per_episode") or 2**31 - 1
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        self.env_id = env_id
        self.num_envs = num_envs
        self._train_mode = bool(train)
        self.from_pixels = bool(render)
        self.frame_size = frame_size
        self.frame_view = frame_view
        self.frame_skip = frame_skip
        self.noop_max = noop_max
        self.frame_stack = frame_stack
        self.max_episode_steps = max_episode_steps
        h, w = ATARI_SCREEN
        self._vec = AtariVectorEnv(
            game, num_envs, num_threads=num_threads or 0, frameskip=frame_skip, noop_max=noop_max,
            img_height=h, img_width=w, grayscale=False, stack_num=1, maxpool=True,
            repeat_action_probability=float(options.get("repeat_action_probability", 0.0)),
            full_action_space=bool(options.get("full_action_space", False)), max_num_frames_per_episode=max_frames,
            episodic_life=False, life_loss_info=False, reward_clipping=False, use_fire_reset=False,
            autoreset_mode="NextStep")
        self._action_names = [a.name for a in self._vec.ale.get_action_set()]
        self._luminance = torch.tensor(LUMINANCE, dtype=torch.float32)
        self._stack = torch.zeros(num_envs, frame_stack, OBS_SIZE, OBS_SIZE, dtype=torch.uint8)
        self._pixels = torch.zeros(num_envs, frame_size, frame_size, 3, dtype=torch.uint8) if render else None
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._continue_game = np.zeros(num_envs, dtype=bool)  # lost a life (train mode): the next reset is soft
        self._pending_seeds: np.ndarray | None = None
        self._started = False
        _set_specs(self, batch_shape=(num_envs,), n_actions=len(self._action_names))
        if seed is not None:
            self.set_seed(seed)

    # ------------------------------------------------------------ attributes
    @property
    def action_names(self) -> list[str]:
        """Names of the categorical actions, by index (e.g. ``['NOOP', 'FIRE', 'RIGHT', 'LEFT']``)."""
        return list(self._action_names)

    @property
    def train_mode(self) -> bool:
        """``True``: a lost life ends the episode and rewards are sign-clipped (the ``train`` argument)."""
        return self._train_mode

    @property
    def lives(self) -> list[int]:
        """Lives left in each copy's game."""
        return self._lives.tolist()

    @property
    def prompt(self) -> str:
        """The VLM progress prompt for this game (:func:`atari_prompt`)."""
        return atari_prompt(self.env_id)

    # ------------------------------------------------------------------ core
    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds the copies in turn as ``SerialEnv.set_seed`` seeds its envs (each copy gets the seed the
        previous one returned, reduced to ale-py's range) and returns the next seed. The seeds apply at
        each copy's next reset, which then restarts its game (a lost life included)."""
        if seed is None:
            self._pending_seeds = None
            return None
        seeds = []
        for _ in range(self.num_envs):
            seeds.append(int(seed) % (2**31 - 1))
            seed = int(seed) if static_seed else seed_generator(int(seed))
        self._pending_seeds = np.asarray(seeds, dtype=np.int64)
        return seed

    def _set_seed(self, seed: int | None) -> None:  # set_seed seeds the copies itself
        raise NotImplementedError

    def _frames(self, screens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[n, 210, 160, 3]`` max-pooled RGB screens -> grayscale ``[n, 84, 84]``, pixels ``[n, S, S, 3]``."""
        rgb = torch.from_numpy(screens)
        gray = (resize_frames(rgb, OBS_SIZE).float() @ self._luminance).round_().to(torch.uint8)
        pixels = scorer_frames(rgb, self.frame_size, frame_view=self.frame_view, game=atari_game_name(self.env_id)) \
            if self.from_pixels else None
        return gray, pixels

    def _output(self, raw: torch.Tensor, reward: torch.Tensor | None, flags: dict[str, np.ndarray]):
        n = self.num_envs
        out = {"observation": self._stack, "raw_reward": raw.reshape(n, 1), "progress_event": (raw > 0).reshape(n, 1)}
        out.update({key: torch.from_numpy(value).reshape(n, 1) for key, value in flags.items()})
        if reward is not None:
            out["reward"] = reward.reshape(n, 1)
        if self._pixels is not None:
            out["pixels"] = self._pixels
        # on the env's device: TorchRL would otherwise rebuild it with .to(device) when it nests it under "next"
        return TensorDict(out, batch_size=self.batch_size, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        reset = tensordict.get("_reset", None) if tensordict is not None else None
        which = np.ones(self.num_envs, dtype=bool) if reset is None or not self._started else \
            reset.reshape(self.num_envs).cpu().numpy().astype(bool)
        seeds = self._pending_seeds
        seeded = np.zeros(self.num_envs, dtype=bool) if seeds is None else seeds >= 0
        soft = which & self._continue_game & ~seeded  # after a lost life: the game goes on
        full = which & ~soft
        stack, pixels = self._stack.clone(), None if self._pixels is None else self._pixels.clone()
        if full.any():
            reset_seeds = np.full(int(full.sum()), -1, dtype=np.int64) if seeds is None else seeds[full]
            if full.all():
                screens, info = self._vec.reset(seed=reset_seeds)
            else:
                screens, info = self._vec.reset(seed=reset_seeds, options={"reset_mask": full})
            self._started = True
            self._lives[full] = info["lives"][full]
            gray, new_pixels = self._frames(screens[full, 0])
            stack[torch.from_numpy(full)] = gray.unsqueeze(1).expand(-1, self.frame_stack, -1, -1)
            if pixels is not None:
                pixels[torch.from_numpy(full)] = new_pixels
            if seeds is not None:
                seeds[full] = -1
        if soft.any():  # the stack restarts from the current frame
            mask = torch.from_numpy(soft)
            stack[mask] = stack[mask][:, -1:].expand(-1, self.frame_stack, -1, -1)
        self._continue_game[which] = False
        self._stack, self._pixels = stack, pixels
        no = np.zeros(self.num_envs, dtype=bool)
        # copies not reset keep their current data: TorchRL takes only the reset rows of this output
        return self._output(torch.zeros(self.num_envs), None, dict.fromkeys(_FLAG_KEYS, no))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = tensordict.get("action").reshape(self.num_envs).cpu().numpy().astype(np.int64)
        screens, raw, game_over, truncated, info = self._vec.step(actions)
        if not (info["env_id"] == np.arange(self.num_envs)).all():  # (the synchronous vector env keeps the order)
            order = np.argsort(info["env_id"])
            screens, raw, game_over, truncated = screens[order], raw[order], game_over[order], truncated[order]
            info = {key: value[order] for key, value in info.items()}
        lives = info["lives"].astype(np.int64)
        life_lost = (lives < self._lives) & (lives > 0)
        self._lives[:] = lives  # (in place: setting an attribute of a TorchRL env costs a Module.__setattr__)
        game_over = game_over.astype(bool)
        truncated = truncated.astype(bool) & ~game_over
        terminated = game_over | (life_lost if self._train_mode else False)
        # a reset after this step continues the game when it ended on a lost life alone
        self._continue_game[:] = life_lost & ~(game_over | truncated) if self._train_mode else False
        gray, pixels = self._frames(screens[:, 0])
        self._stack = torch.cat([self._stack[:, 1:], gray.unsqueeze(1)], dim=1)
        if pixels is not None:
            self._pixels = pixels
        raw_t = torch.from_numpy(raw.astype(np.float32))
        reward = torch.sign(raw_t) if self._train_mode else raw_t
        flags = {"game_done": game_over | truncated, "terminated": terminated, "truncated": truncated,
                 "done": terminated | truncated}
        return self._output(raw_t, reward, flags)

    def close(self, *, raise_if_closed: bool = True) -> None:
        vec = self.__dict__.pop("_vec", None)
        if vec is not None:
            vec.close()
        super().close(raise_if_closed=raise_if_closed)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_envs={self.num_envs}, env_id={self.env_id!r}, train={self._train_mode}, "
                f"render={self.from_pixels}, device={self.device})")


def make_atari_env(
    env_id: str = "ALE/Pong-v5",
    *,
    seed: int | None = None,
    train: bool = True,
    render: bool = True,
    frame_size: int = 64,
    frame_view: str = "screen",
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
        frame_view (str, optional): ``"screen"`` or ``"score"``: what ``"pixels"`` show (see
            :class:`AtariEnv`). Defaults to ``"screen"``.
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
        frame_view=frame_view,
        frame_skip=frame_skip,
        noop_max=noop_max,
        frame_stack=frame_stack,
        max_episode_steps=max_episode_steps,
        device=device,
        env_kwargs=env_kwargs,
    )
