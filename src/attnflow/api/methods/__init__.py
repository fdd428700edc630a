"""The functions behind the method registry (:mod:`attnflow.config.registry`): each takes a
:class:`~attnflow.config.registry.Context` and returns ``(layers, targets, sources)`` scores. See the
registry's docstring for how to add one."""
