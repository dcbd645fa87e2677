"""The interop matrix: the public path of :mod:`bridge.kit.matrix`."""

from bridge.kit.matrix import *  # noqa: F403
from bridge.kit.matrix import __all__, __doc__  # noqa: F401
