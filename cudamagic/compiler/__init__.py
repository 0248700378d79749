"""The compile server (docs/architecture.md): the notebook's side (:mod:`.client`, :mod:`.wire`)
and the server's (:mod:`.server`, :mod:`.worker`)."""
