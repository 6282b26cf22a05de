"""The ``vlmrb`` command: ``vlmrb train dqn key=value ...``, ``vlmrb build-scorer minigrid|lift|atari|scene --out DIR``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from pathlib import Path

from vlmrb_torchrl.recipes.config import (
    QUICK_PRESETS,
    RENAMED_KEYS,
    ConfigError,
    DQNConfig,
    SACConfig,
    apply_overrides,
    code_loading_values,
    config_help,
    load_config_file,
    not_utf8,
    quick_preset,
    upgrade_keys,
)

RECIPES = {"dqn": DQNConfig, "sac": SACConfig}

#: What ``vlmrb train`` sets before TorchRL and transformers are imported, so that their INFO lines and progress
#: bars (TorchRL's "Initialized LazyTensorStorage ...", transformers' "Loading weights") stay out of the run's
#: progress bar; a value set in the environment is kept (``RL_LOGGING_LEVEL=INFO vlmrb train ...`` shows them).
QUIET_ENV = {"RL_LOGGING_LEVEL": "WARNING", "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def quiet_third_party() -> None:
    """Sets :data:`QUIET_ENV` where unset; TorchRL's logger follows it also when TorchRL is imported already."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    if "torchrl" in sys.modules:  # it read RL_LOGGING_LEVEL at import: an in-process caller imported it first
        import logging

        logging.getLogger("torchrl").setLevel(os.environ["RL_LOGGING_LEVEL"])

_DESCRIPTION = """VLM-guided experience replay (VLM-RB) for TorchRL.

Commands:
  vlmrb --version                                             print the package version
  vlmrb train dqn [--config FILE] [--quick] [key=value ...]   train double DQN (discrete actions: MiniGrid, Atari)
  vlmrb train sac [--config FILE] [--quick] [key=value ...]   train SAC (continuous: robosuite, OGBench Scene)
  vlmrb build-scorer NAME --out DIR [--frames N] [--steps N] [--seed S]
                              train a built-in scorer (NAME: vlmrb build-scorer --help lists them)

Run `vlmrb train dqn --help` / `vlmrb train sac --help` for every key."""


def _recipe_main(name: str):
    if name == "dqn":
        from vlmrb_torchrl.recipes.dqn import main

        return main
    if name == "sac":
        from vlmrb_torchrl.recipes.sac import main

        return main
    raise KeyError(name)


_EXAMPLES = {
    "dqn": "env=MiniGrid-DoorKey-6x6-v0 replay=vlm scorer=oracle:minigrid seed=1 total_frames=300000 output_dir=runs/x",
    "sac": "env=robosuite/Lift replay=vlm_td scorer=oracle:robosuite seed=1 total_frames=200000 output_dir=runs/x",
}


def _train_parser(name: str) -> argparse.ArgumentParser:
    cls = RECIPES[name]
    parser = argparse.ArgumentParser(
        prog=f"vlmrb train {name}",
        description=f"{cls.__doc__}\n\nOverrides are key=value pairs, applied after --config and --quick.\n"
                    f"Example: vlmrb train {name} " + _EXAMPLES[name],
        epilog="keys (default, help, type):\n" + config_help(cls),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="YAML/JSON file of key: value pairs")
    from vlmrb_torchrl.envs.family import families

    quick = "a complete small run (a few minutes on 2 CPU cores): " + json.dumps(QUICK_PRESETS[name])
    for family in families(name):  # a family's own preset (Atari's: short episodes, a small gallery)
        if family.quick_preset is not None:
            quick += f"; with env={family.example_id} and the other {family.title} ids: " + json.dumps(
                dict(family.quick_preset))
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    return parser


def _saved_config(resume: str) -> dict:
    """The ``config.json`` of the run ``resume=`` names (a run directory or one of its checkpoints)."""
    path = Path(resume)
    if not path.exists():
        raise ConfigError(f"resume={resume!r}: no such file or directory.")
    for run_dir in (path, path.parent.parent):  # <run>/ or <run>/checkpoints/step_<N>/
        if (run_dir / "config.json").exists():
            try:
                saved = json.loads((run_dir / "config.json").read_text())
            except (OSError, ValueError, RecursionError) as err:  # RecursionError: JSON nested too deep
                raise ConfigError(f"resume={resume!r}: cannot read {run_dir / 'config.json'} "
                                  f"({type(err).__name__}: {str(err)[:200]}).") from None
            if not isinstance(saved, dict):
                raise ConfigError(f"resume={resume!r}: {run_dir / 'config.json'} is not a run's config (a JSON "
                                  f"object of key: value pairs), got {type(saved).__name__}.")
            return saved
    raise ConfigError(f"resume={resume!r}: not a run directory or a checkpoint of one (no config.json in "
                      f"{path} or {path.parent.parent}).")


#: Keys of a saved config.json that describe where and how that run was started, not the run itself.
#: ``stop_at`` ends one chunk of a run: read back, it would stop the resumed run where the last chunk stopped.
#: ``scorer_checks`` is what the run's scorer checked and ``run_id`` which run wrote the directory (records the run
#: adds), not config keys.
_NOT_RESUMED = ("resume", "output_dir", "overwrite", "trust_checkpoint", "stop_at", "scorer_checks", "run_id")


def _check_saved_recipe(name: str, saved: dict, resume: str) -> None:
    """Refuses a saved config another recipe wrote (``vlmrb train dqn resume=<a SAC run>``), naming that recipe."""
    keys = {RENAMED_KEYS.get(k, k) for k in saved if k not in _NOT_RESUMED}  # an older run's names are known
    fields = {n: {f.name for f in dataclasses.fields(cls)} for n, cls in RECIPES.items()}
    unknown = sorted(keys - fields[name])
    if not unknown:
        return
    owner = next((n for n, known in fields.items() if n != name and keys <= known), None)
    if owner is not None:
        raise ConfigError(f"resume={resume!r} is a run of `vlmrb train {owner}` (its config has "
                          f"{', '.join(unknown[:4])}, which {name} has not): resume it with "
                          f"`vlmrb train {owner} resume={resume}`.")
    raise ConfigError(f"resume={resume!r}: its config.json has keys no recipe of this version knows "
                      f"({', '.join(unknown[:6])}): a run of another vlmrb version, or an edited file.")


def _check_saved_code(cfg, saved: dict, resume: str, given: set[str]) -> None:
    """Refuses a value read back from the run directory ``resume`` that loads code (a ``python:`` spec, ...:
    :func:`~vlmrb_torchrl.recipes.config.code_loading_values`), unless the user gave that key again
    (``given``: the command line's and the config file's keys) or passed ``trust_checkpoint=true``: a run
    directory someone else wrote must not choose code for this process to run."""
    if cfg.trust_checkpoint:
        return
    for key, why in code_loading_values({k: v for k, v in saved.items() if k not in _NOT_RESUMED}).items():
        if key not in given:
            value = json.dumps(saved[key]) if isinstance(saved[key], dict) else saved[key]
            raise ConfigError(f"resume={resume!r}: its config.json sets {key}={str(value)[:200]!r}, which {why}; a "
                              f"value read back from a run directory does not get to run code. Give {key}= again "
                              f"on the command line if it is yours, or pass trust_checkpoint=true if you trust "
                              f"where {resume} came from.")


def _finished_line(summary: dict) -> str:
    """What a finished run prints: its frames, and the last evaluation's success and return where there was one.

    Examples:
        >>> _finished_line({"env_steps": 3000, "eval_success": 0.9, "eval_return": 0.5})
        'finished 3000 frames; eval success 0.90, eval return 0.50'
        >>> _finished_line({"env_steps": 3000, "eval_success": float("nan"), "eval_return": 21.0})  # Atari
        'finished 3000 frames; eval return 21.00'
        >>> _finished_line({"env_steps": 3000})  # no evaluation ran
        'finished 3000 frames (no evaluation ran)'
    """
    parts = [f"eval {name} {summary[key]:.2f}" for key, name in (("eval_success", "success"), ("eval_return", "return"))
             if summary.get(key) is not None and not math.isnan(summary[key])]
    line = f"finished {summary['env_steps']} frames"
    return line + ("; " + ", ".join(parts) if parts else " (no evaluation ran)")


def build_config(name: str, args: argparse.Namespace):
    """Defaults <- resumed run's config <- --quick <- --config <- key=value overrides.

    ``--quick`` depends on the env the other sources give (:func:`~vlmrb_torchrl.recipes.config.quick_preset`):
    the config is built once without it to find the env.
    """
    cls = RECIPES[name]
    overrides = list(args.overrides)
    resume = next((o.split("=", 1)[1] for o in overrides if o.startswith("resume=")), None)
    saved = _saved_config(resume) if resume else None
    if saved is not None:
        _check_saved_recipe(name, saved, resume)
    given = {o.split("=", 1)[0].strip() for o in overrides if "=" in o}  # keys the user gives (and the file's)

    def build(preset: dict | None):
        cfg = cls()
        if saved is not None:
            # a run of an older version wrote some keys under their old names: read as the new ones, silently
            cfg = apply_overrides(cfg, {k: v for k, v in upgrade_keys(saved, quiet=True).items() if k not in _NOT_RESUMED})
        if preset:
            cfg = apply_overrides(cfg, preset)
        if args.config:
            try:
                from_file = load_config_file(args.config)
                given.update(from_file)
                cfg = apply_overrides(cfg, from_file)
            except ConfigError as err:
                msg = str(err)
                raise ConfigError(msg if msg.startswith("--config") else f"--config {args.config}: {msg}") from None
        return apply_overrides(cfg, overrides)

    cfg = build(None)
    if args.quick:
        cfg = build(quick_preset(name, cfg.env))
    if saved is not None:
        _check_saved_code(cfg, saved, resume, given)
    return cfg.validate()


def _build_scorer_parser() -> argparse.ArgumentParser:
    from vlmrb_torchrl.scorer_training import DOMAINS
    from vlmrb_torchrl.scorer_training.model import MODEL_SIZES

    parser = argparse.ArgumentParser(
        prog="vlmrb build-scorer",
        description="Train a small CLIP on frames of an environment captioned from the simulator's state, on one "
                    "CPU thread (or a GPU: --device), and save it (save_pretrained + tokenizer + processor + MODEL_CARD.md) so that "
                    "make_scorer('clip:DIR') loads it offline. The defaults rebuild the shipped builtin:NAME model "
                    "(minigrid: the family recipe, not yet shipped: see its model card; ~2 minutes with "
                    "--workers 15 --device cuda on 16 cores and an H200, 3-5 s a step on a shared CPU core; lift: ~25 "
                    "minutes of robosuite rendering + ~50 of training on a free core (lift_hand, builtin:lift's gripper-camera model: "
                    "~9 + ~35); atari: "
                    "~3 minutes of emulation + ~30 of training on a shared core; scene: ~45 minutes of OGBench rendering + ~30 of "
                    "training on 2 cores, 43 s + 2 minutes with --workers 15 --device cuda on 16 cores and an H200). Same "
                    "arguments, same seed: identical weights on the CPU. Defaults below are per environment.",
    )
    parser.add_argument("name", choices=sorted(DOMAINS),
                        help="which built-in scorer to train (lift_hand: the second model of builtin:lift)")
    parser.add_argument("--out", required=True, help="output directory")
    defaults = {name: DOMAINS[name]().default_config for name in sorted(DOMAINS)}  # each model's shipped recipe

    def per_model(field: str) -> str:  # (statement_texts None: every wording, 0 on the command line)
        return ", ".join(f"{name} {0 if getattr(cfg, field) is None else getattr(cfg, field)}"
                         for name, cfg in defaults.items())

    parser.add_argument("--frames", type=int, default=None, help=f"frames generated ({per_model('frames')})")
    parser.add_argument("--steps", type=int, default=None, help=f"training steps ({per_model('steps')})")
    parser.add_argument("--batch-size", type=int, default=None, help=f"frames per step ({per_model('batch_size')})")
    parser.add_argument("--seed", type=int, default=None, help="seed (default 0)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="stop training after this many minutes (the result then depends on the machine's speed)")
    parser.add_argument("--held-out-frames", type=int, default=None,
                        help=f"frames of held-out tasks for the transfer metrics ({per_model('held_out_frames')}; 0 = skip)")
    parser.add_argument("--size", default=None, choices=list(MODEL_SIZES),
                        help="model size (small: 8 px patches; fine: 4 px patches, 32 channels; atari: 16 px patches; "
                             "micro: for tests)")
    parser.add_argument("--lr", type=float, default=None, help="peak AdamW learning rate (default 2e-3)")
    parser.add_argument("--statement-texts", type=int, default=None,
                        help=f"statement wordings embedded per step besides the captions ({per_model('statement_texts')}; "
                             "0 = all of them)")
    parser.add_argument("--aux-weight", type=float, default=None,
                        help=f"weight of the image tower's auxiliary classification loss ({per_model('aux_weight')})")
    parser.add_argument("--device", default=None, choices=["cpu", "cuda", "auto"],
                        help="where the model trains (default cpu: one thread, byte-identical weights for a seed; "
                             "cuda: a GPU, recorded in training.json; auto: a GPU if torch sees one)")
    parser.add_argument("--augment", action=argparse.BooleanOptionalAction, default=None,
                        help="flip training frames by the domain's symmetries, their statements mapped (for "
                             + ", ".join(n for n in sorted(DOMAINS) if DOMAINS[n]().symmetries)
                             + ": the other domains' frames have an orientation)")
    parser.add_argument("--opposite-texts", type=int, default=None,
                        help="frames per step whose caption statement is paired with an opposite one as texts (for "
                             + ", ".join(n for n in sorted(DOMAINS) if DOMAINS[n]().opposites is not None)
                             + ": faces / does not face, ...; default 0)")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes that generate the frames (for "
                             + ", ".join(n for n in sorted(DOMAINS) if DOMAINS[n]().parallel)
                             + "; the frames do not depend on it)")
    parser.add_argument("--cache", default=None,
                        help="keep the generated training frames in this directory and reuse them for the next build "
                             "with the same --frames and --seed (not part of the recipe: the frames are the same)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into --out even when it holds files no earlier build wrote (files of the same "
                             "names are replaced); without it such a directory is refused")
    return parser


def build_scorer_main(argv: list[str]) -> int:
    """``vlmrb build-scorer minigrid|lift|atari|scene --out DIR ...``: see :func:`~vlmrb_torchrl.scorer_training.build_scorer`."""
    import dataclasses

    from vlmrb_torchrl.scorer_training import DOMAINS, build_scorer, get_domain

    args = _build_scorer_parser().parse_args(argv)
    domain = get_domain(args.name)
    given = {k: getattr(args, k) for k in ("frames", "steps", "batch_size", "seed", "minutes", "held_out_frames", "size",
                                           "lr", "statement_texts", "aux_weight", "device", "augment", "opposite_texts")
             if getattr(args, k) is not None}
    if given.get("lr", 1.0) <= 0 or given.get("statement_texts", 0) < 0 or given.get("opposite_texts", 0) < 0:
        print("vlmrb build-scorer: --lr must be > 0, --statement-texts and --opposite-texts >= 0", file=sys.stderr)
        return 2
    if given.get("statement_texts") == 0:
        given["statement_texts"] = None  # every statement's wording, every step
    given.setdefault("workers", args.workers)
    for name in ("frames", "steps", "batch_size", "workers"):
        if given.get(name, 1) < 1:
            print(f"vlmrb build-scorer: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    workers = given.pop("workers")
    if workers > 1 and not domain.parallel:
        takes = ", ".join(sorted(n for n, d in DOMAINS.items() if d().parallel))
        print(f"vlmrb build-scorer: --workers is for {takes} only ({args.name} generates its frames in one process)",
              file=sys.stderr)
        return 2
    cfg = dataclasses.replace(domain.default_config, **given)
    if cfg.opposite_texts and domain.opposites is None:
        print(f"vlmrb build-scorer: --opposite-texts is for "
              f"{', '.join(sorted(n for n, d in DOMAINS.items() if d().opposites is not None))} only", file=sys.stderr)
        return 2
    if cfg.augment and not domain.symmetries:
        print(f"vlmrb build-scorer: --augment is for {', '.join(sorted(n for n, d in DOMAINS.items() if d().symmetries))} "
              f"only ({args.name}'s frames have an orientation a flip would break)", file=sys.stderr)
        return 2
    if cfg.device != "cpu":
        from vlmrb_torchrl.scorer_training.train import resolve_device

        try:
            resolve_device(cfg.device)
        except ValueError as err:
            print(f"vlmrb build-scorer: --device: {err}", file=sys.stderr)
            return 2
    recorded = [a for i, a in enumerate(argv) if a not in ("--cache", "--overwrite")
                and (i == 0 or argv[i - 1] != "--cache")]
    command = "vlmrb build-scorer " + " ".join(a for a in recorded if not a.startswith("--cache="))  # not the recipe
    from vlmrb_torchrl.scorer_training.domains import FrameCacheError

    for name in ("out", "cache"):
        bad = not_utf8(getattr(args, name))
        if bad:
            print(f"vlmrb build-scorer: --{name} {bad}", file=sys.stderr)
            return 2
    try:
        build_scorer(domain, args.out, cfg, command=command, cache=args.cache, workers=workers,
                     overwrite=args.overwrite)
    except (FileExistsError, FrameCacheError) as err:  # --out not ours to write, a damaged --cache file
        print(f"vlmrb build-scorer: {err}", file=sys.stderr)
        return 2
    from vlmrb_torchrl.scorers.builtin import BUILTIN_PANEL_MODELS

    replaces = next((f"panel {dirs.index(args.name)} of builtin:{name}" for name, dirs in BUILTIN_PANEL_MODELS.items()
                     if args.name in dirs), f"builtin:{args.name}")
    print(f"load it with make_scorer('clip:{args.out}', prompt=..., negatives=[...]) or copy it over "
          f"vlmrb_torchrl/scorers/models/{args.name} to replace {replaces}")
    return 0


#: The values MuJoCo accepts for ``MUJOCO_GL`` on each system (``mujoco/gl_context.py``), read when MuJoCo is
#: imported — and TorchRL imports it whenever it is installed, so a bad value stops any run with MuJoCo's traceback.
_MUJOCO_GL_VALUES = {"Linux": ("glx", "egl", "osmesa"), "Windows": ("wgl",), "Darwin": ("cgl",)}


def _mujoco_gl_problem(value: str | None) -> str:
    """``""`` when ``value`` (``MUJOCO_GL``'s) is unset or one MuJoCo takes, else the one line saying what to set.

    Examples:
        >>> _mujoco_gl_problem(None), _mujoco_gl_problem("EGL"), _mujoco_gl_problem("glfw")
        ('', '', '')
    """
    import platform

    if value is None:
        return ""
    own = _MUJOCO_GL_VALUES.get(platform.system(), ())
    valid = ("disable", "disabled", "off", "false", "0", "enable", "enabled", "on", "true", "1", "glfw", "", *own)
    if value.lower().strip() in valid:
        return ""
    return (f"MUJOCO_GL={value!r} is not a MuJoCo rendering backend (MuJoCo reads it when it is imported, and TorchRL "
            f"imports it): set it to {', '.join(own + ('glfw',))}, or unset it.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C before a run started (a run's own Ctrl-C is answered in _main)
        command = " ".join(["vlmrb", *argv[:2]]) if argv[:1] == ["train"] else " ".join(["vlmrb", *argv[:1]])
        print(f"{command}: interrupted{' during start-up: nothing was written' if argv[:1] == ['train'] else ''}.",
              file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    # Bit-exact resume: Intel MKL (torch's CPU BLAS) otherwise picks kernels by memory alignment,
    # and reloaded tensors sit at other addresses. Read at MKL's first call, so set it first.
    os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
    problem = _mujoco_gl_problem(os.environ.get("MUJOCO_GL"))
    if argv[:1] in (["train"], ["build-scorer"]) and problem:
        print(f"vlmrb {' '.join(argv[:2]) if argv[0] == 'train' else argv[0]}: {problem}", file=sys.stderr)
        return 2
    if not argv or argv[0] in ("-h", "--help"):
        print(_DESCRIPTION)
        return 0
    if argv[0] in ("-V", "--version"):
        from vlmrb_torchrl import __version__

        print(f"vlmrb-torchrl {__version__}")
        return 0
    if argv[0] == "build-scorer":
        return build_scorer_main(argv[1:])
    if argv[0] != "train" or len(argv) < 2 or argv[1] not in RECIPES:
        if argv[0] == "train" and len(argv) >= 2 and argv[1] not in ("-h", "--help"):
            print(f"vlmrb: unknown recipe {argv[1]!r}; choose one of {sorted(RECIPES)}.", file=sys.stderr)
        else:
            print(_DESCRIPTION, file=sys.stderr if argv[0] != "train" else sys.stdout)
        return 2 if argv[0] != "train" or len(argv) >= 2 else 0
    name = argv[1]
    quiet_third_party()
    args = _train_parser(name).parse_intermixed_args(argv[2:])  # options may come between key=value pairs
    try:
        cfg = build_config(name, args)
    except ConfigError as err:
        print(f"vlmrb train {name}: {err}", file=sys.stderr)
        return 2
    from vlmrb_torchrl.recipes.checkpoint import CheckpointError, DivergedError

    try:
        summary = _recipe_main(name)(cfg)
    except ConfigError as err:  # found once the run starts: output_dir, resume=
        print(f"vlmrb train {name}: {err}", file=sys.stderr)
        return 2
    except (CheckpointError, DivergedError) as err:
        print(f"vlmrb train {name}: {err}", file=sys.stderr)
        return 1
    except RuntimeError as err:  # the scoring worker's failure: a scorer that reads what its clips lack is the config's
        from vlmrb_torchrl.scorers import ScorerInputError

        if not isinstance(err.__cause__, ScorerInputError):
            raise
        print(f"vlmrb train {name}: scorer={cfg.scorer!r}: {err.__cause__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # the recipe already said what was saved
        signum = getattr(err, "signum", 2)  # recipes.run_dir.Stopped carries the signal (SIGTERM: 15)
        print(f"vlmrb train {name}: {'interrupted' if signum == 2 else 'stopped by signal ' + str(signum)}.",
              file=sys.stderr)
        return 128 + signum
    print("\n" + _finished_line(summary))
    print(f"outputs: {summary['run_dir']} (summary.json, metrics.csv, tensorboard/, checkpoints/, gallery/, config.json)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
