"""The model room: what attnflow knows of a Hugging Face model before it runs it.

- ``attnflow.hf.points``: the named hook points, the one way attnflow reaches into a user's model
  (receivers switched on in a scope, nothing left behind after it).
"""
