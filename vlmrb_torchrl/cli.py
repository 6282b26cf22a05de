"""The ``vlmrb`` command: ``vlmrb train dqn key=value ...``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from vlmrb_torchrl.recipes.config import (
    QUICK_PRESETS,
    ConfigError,
    DQNConfig,
    SACConfig,
    apply_overrides,
    config_help,
    load_config_file,
)

RECIPES = {"dqn": DQNConfig, "sac": SACConfig}

_DESCRIPTION = """VLM-guided experience replay (VLM-RB) for TorchRL.

Commands:
  vlmrb train dqn [--config FILE] [--quick] [key=value ...]   train double DQN (MiniGrid, Atari)
  vlmrb train sac [--config FILE] [--quick] [key=value ...]   train SAC (robosuite manipulation)

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
    parser.add_argument("--quick", action="store_true",
                        help="a complete small run (a few minutes on 2 CPU cores): " + json.dumps(QUICK_PRESETS[name]))
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
                return json.loads((run_dir / "config.json").read_text())
            except (OSError, ValueError) as err:
                raise ConfigError(f"resume={resume!r}: cannot read {run_dir / 'config.json'} ({err}).") from None
    raise ConfigError(f"resume={resume!r}: not a run directory or a checkpoint of one (no config.json in "
                      f"{path} or {path.parent.parent}).")


#: Keys of a saved config.json that describe where and how that run was started, not the run itself.
_NOT_RESUMED = ("resume", "output_dir", "overwrite")


def build_config(name: str, args: argparse.Namespace):
    """Defaults <- resumed run's config <- --quick <- --config <- key=value overrides."""
    cls = RECIPES[name]
    cfg = cls()
    overrides = list(args.overrides)
    resume = next((o.split("=", 1)[1] for o in overrides if o.startswith("resume=")), None)
    if resume:
        saved = _saved_config(resume)
        cfg = apply_overrides(cfg, {k: v for k, v in saved.items() if k not in _NOT_RESUMED})
    if args.quick:
        cfg = apply_overrides(cfg, QUICK_PRESETS[name])
    if args.config:
        try:
            cfg = apply_overrides(cfg, load_config_file(args.config))
        except ConfigError as err:
            msg = str(err)
            raise ConfigError(msg if msg.startswith("--config") else f"--config {args.config}: {msg}") from None
    cfg = apply_overrides(cfg, overrides)
    return cfg.validate()


def main(argv: list[str] | None = None) -> int:
    # Bit-exact resume: Intel MKL (torch's CPU BLAS) otherwise picks kernels by memory alignment,
    # and reloaded tensors sit at other addresses. Read at MKL's first call, so set it first.
    os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_DESCRIPTION)
        return 0
    if argv[0] != "train" or len(argv) < 2 or argv[1] not in RECIPES:
        if argv[0] == "train" and len(argv) >= 2 and argv[1] not in ("-h", "--help"):
            print(f"vlmrb: unknown recipe {argv[1]!r}; choose one of {sorted(RECIPES)}.", file=sys.stderr)
        else:
            print(_DESCRIPTION, file=sys.stderr if argv[0] != "train" else sys.stdout)
        return 2 if argv[0] != "train" or len(argv) >= 2 else 0
    name = argv[1]
    args = _train_parser(name).parse_intermixed_args(argv[2:])  # options may come between key=value pairs
    try:
        cfg = build_config(name, args)
    except ConfigError as err:
        print(f"vlmrb train {name}: {err}", file=sys.stderr)
        return 2
    from vlmrb_torchrl.recipes.run import CheckpointError

    try:
        summary = _recipe_main(name)(cfg)
    except ConfigError as err:  # found once the run starts: output_dir, resume=
        print(f"vlmrb train {name}: {err}", file=sys.stderr)
        return 2
    except CheckpointError as err:
        print(f"vlmrb train {name}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the recipe already said what was saved
        print(f"vlmrb train {name}: interrupted.", file=sys.stderr)
        return 130
    success = summary.get("eval_success")
    print(f"\nfinished {summary['env_steps']} frames; eval success {success:.2f}, eval return "
          f"{summary.get('eval_return', float('nan')):.2f}" if success is not None else "")
    print(f"outputs: {summary['run_dir']} (metrics.csv, tensorboard/, checkpoints/, gallery/, config.json)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
