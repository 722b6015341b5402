"""AdaRayError: the one base of the errors ada_ray reports to a user.

Each is a mistake or a failure the message explains on its own (it names the file, key, field or
resource and what was expected), so `ada-ray` prints it on one line and exits with the class's
`exit_code`: 2 for bad input (config, data, model files, a config the cluster cannot host), 1
for a run that could not go on (training, a dead actor). Anything else that escapes is a bug and keeps its traceback.
The subclasses also derive from the builtin they replace (ValueError, FileNotFoundError,
RuntimeError), so callers that catch those keep working. No imports: algo/ and the CLI may use it
without pulling in Ray.
"""


class AdaRayError(Exception):
    exit_code = 1


class InputError(AdaRayError):
    """Bad input: a config key, a dataset row, a model folder."""

    exit_code = 2
