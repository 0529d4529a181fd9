"""groundswell-eval-demo: eval evaluators shipped as a third-party plugin (a test fixture)."""

from groundswell import NamedEvaluator, hookimpl


def _polite():
    from .checks import Polite

    return Polite()


def _word_limit(words=50):
    from .checks import WordLimit

    return WordLimit(words)


@hookimpl
def register_evaluators():
    return [
        NamedEvaluator("polite", _polite, "no rude words in the answer"),
        NamedEvaluator("word_limit", _word_limit, "at most N words"),
    ]
