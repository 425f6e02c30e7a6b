"""The evaluators' two kinds of failure, both reported as one line with exit status 2 by __main__."""


class EvalError(ValueError):
    """A problem with the inputs: a model directory, text file, results file or option."""


class MissingDependency(EvalError):
    """A package the evaluator needs is not installed; the message says what to install."""
