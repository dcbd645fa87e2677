"""The conformance kit: the interop matrix (:mod:`bridge.kit.matrix`), the
DLPack conformance rules and :func:`check` (:mod:`bridge.kit.conformance`),
the command line (:mod:`bridge.kit.cli`) and the pytest plugin
(:mod:`bridge.kit.plugin`). Nothing outside the kit imports it; ``import
bridge`` loads it only when ``bridge.check`` or one of these is used."""
