"""DLPack conformance checks: the public path of :mod:`bridge.kit.conformance`."""

from bridge.kit.conformance import *  # noqa: F403
from bridge.kit.conformance import __all__, __doc__  # noqa: F401
