"""asyncshim: libasyncshim.so and its launcher, installed with pip.

    LD_PRELOAD=$(asyncshim --print-library) ./app
    asyncshim --initial-pool-size 0 -- ./app
    asyncshim-ab -- ./app

library_path() gives the path of the preload library inside this package.
"""
import os

_PREFIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prefix")


def library_path():
    """The libasyncshim.so of this package, for LD_PRELOAD."""
    return os.path.join(_PREFIX, "lib", "libasyncshim.so")


def tool_path(name):
    """The installed script `name` (asyncshim, asyncshim-ab or asyncshim-replay) in this package."""
    return os.path.join(_PREFIX, "bin", name)
