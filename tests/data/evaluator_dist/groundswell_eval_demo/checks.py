"""The evaluators (imported only when a dataset names one)."""

from groundswell.evals import Evaluator, EvaluatorContext, Score

RUDE = ("stupid", "whatever")


class Polite(Evaluator):
    name = "polite"

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        found = [w for w in RUDE if w in ctx.output_text.lower()]
        return Score(0.0, False, f"rude: {', '.join(found)}") if found else Score(1.0, True)


class WordLimit(Evaluator):
    name = "word_limit"

    def __init__(self, words: int) -> None:
        self.words = words

    def evaluate(self, ctx: EvaluatorContext) -> bool:
        return len(ctx.output_text.split()) <= self.words
