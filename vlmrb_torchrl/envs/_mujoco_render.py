"""Cheap offscreen MuJoCo frames: what a scorer's small frames do not need, switched off.

Offscreen rendering on a CPU (``MUJOCO_GL=egl`` with Mesa's software rasteriser) spends most of a
frame on effects a 64-pixel scorer frame does not need: reflections (a reflective floor or table
draws the scene a second time), shadows (one depth pass per light) and multisampling (4 samples
per pixel by default). Switched off, a robosuite Lift ``agentview`` frame cost 11 ms instead of
41 ms, an OGBench Scene frame 20 ms instead of 219 ms (``studies/benchmarks.md``: ms per frame per
camera, ``benchmarks/render_cost.py``). The image keeps every object and its colour; edges are
aliased and there are no shadows or reflections.

Two calls, for any MuJoCo renderer (robosuite's ``MjRenderContext``, ``mujoco.Renderer``,
dm_control's ``Physics.render``):

- :func:`fast_offscreen_model` before the rendering context is created (``MjrContext`` reads the
  model's multisampling and offscreen buffer size when it is made);
- :func:`disable_costly_effects` on the ``MjvScene`` the renderer draws (its flags persist across
  ``mjv_updateScene``).
"""

from __future__ import annotations

__all__ = ["COSTLY_SCENE_FLAGS", "fast_offscreen_model", "disable_costly_effects"]

#: ``mjtRndFlag`` names switched off by :func:`disable_costly_effects`.
COSTLY_SCENE_FLAGS = ("mjRND_REFLECTION", "mjRND_SHADOW")


def fast_offscreen_model(model, *, width: int, height: int) -> None:
    """No multisampling and an offscreen buffer of ``width`` x ``height`` (what the frames need) in ``model``
    (a ``mujoco.MjModel``). Takes effect for rendering contexts created afterwards.

    Examples:
        >>> import mujoco
        >>> model = mujoco.MjModel.from_xml_string("<mujoco><worldbody/></mujoco>")
        >>> fast_offscreen_model(model, width=64, height=64)
        >>> model.vis.quality.offsamples, model.vis.global_.offwidth, model.vis.global_.offheight
        (0, 64, 64)
    """
    model.vis.quality.offsamples = 0
    model.vis.global_.offwidth = int(width)
    model.vis.global_.offheight = int(height)


def disable_costly_effects(scene) -> None:
    """Switches reflections and shadows off in ``scene`` (a ``mujoco.MjvScene``).

    Examples:
        >>> import mujoco
        >>> model = mujoco.MjModel.from_xml_string("<mujoco><worldbody/></mujoco>")
        >>> scene = mujoco.MjvScene(model, maxgeom=10)
        >>> disable_costly_effects(scene)
        >>> scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION], scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW]
        (0, 0)
    """
    import mujoco

    for name in COSTLY_SCENE_FLAGS:
        scene.flags[getattr(mujoco.mjtRndFlag, name)] = 0
