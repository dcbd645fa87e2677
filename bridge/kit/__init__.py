"""The conformance kit: the interop matrix (:mod:`bridge.kit.matrix`), the
DLPack conformance rules and :func:`check` (:mod:`bridge.kit.conformance`),
the subprocess isolation both use (:mod:`bridge.kit.isolation`), the command
line (:mod:`bridge.kit.cli`) and the pytest plugin (:mod:`bridge.kit.plugin`).
``matrix`` and ``conformance`` are the public faces; each module docstring
names the ``matrix_*`` and ``conformance_*`` modules (and
:mod:`bridge.kit.capsules`) they are built from. Nothing outside the kit
imports it; ``import bridge`` loads it only when ``bridge.check`` or one of
these is used."""
