"""The pytest plugin (entry point ``bridge``): the public path of :mod:`bridge.kit.plugin`."""

from bridge.kit.plugin import *  # noqa: F403
from bridge.kit.plugin import __all__, __doc__  # noqa: F401
