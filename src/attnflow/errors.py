"""The one exception type attnflow raises for bad input.

Every message is a sentence a user can act on: what was expected, what was given.
The CLI prints it as one line and exits non-zero.
"""


class AttnflowError(ValueError):
    """Bad input or an impossible request, explained in one sentence."""


class AttnflowWarning(UserWarning):
    """Input attnflow can explain, but whose explanation may mislead (words the model does not know,
    an image far from what it was trained on), explained in one sentence. The CLI prints it as one
    ``attnflow: warning:`` line."""
