"""Apache Arrow interop: the public path of :mod:`bridge.interop.arrow`."""

from bridge.interop.arrow import *  # noqa: F403
from bridge.interop.arrow import __all__, __doc__  # noqa: F401
