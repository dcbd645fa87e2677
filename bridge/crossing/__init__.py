"""The crossing layer: carrying a tensor from one library into another.

:mod:`bridge.crossing.capabilities` holds what each destination library can
hold, as data (one :class:`~bridge.crossing.capabilities.Holds` record each);
:mod:`bridge.crossing.destinations` names destinations and builds their
objects; :mod:`bridge.crossing.convert` is ``bridge.convert`` (the plan of
fixes and their making). The layer sits between interop and the kit: it
imports the core and interop, and the kit reads its table.
"""
