"""DLPack interop: the public path of :mod:`bridge.interop.dlpack`."""

from bridge.interop.dlpack import *  # noqa: F403
from bridge.interop.dlpack import __all__, __doc__  # noqa: F401
