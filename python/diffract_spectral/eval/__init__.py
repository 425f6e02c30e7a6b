"""Evaluators that ship with diffract, for `diffract sweep ... --eval` (docs/evaluators.md):

    python -m diffract_spectral.eval clm-perplexity MODEL --text FILE     causal-LM perplexity on a text file
    python -m diffract_spectral.eval mlm-loss MODEL --text FILE           masked-LM loss (encoders), seeded masks
    python -m diffract_spectral.eval embedding-similarity MODEL --text FILE --reference DIR
                                                                 sentence-embedding agreement (encoders)
    python -m diffract_spectral.eval lm-eval MODEL --tasks T              runs lm-evaluation-harness, prints a metric
    python -m diffract_spectral.eval lm-eval-score RESULTS --task T       a metric of lm-eval's results JSON

Each prints one JSON line last, whose last number is its score (so both the sweep's last-number rule
and --score-key work). The model evaluators need torch and transformers; without them they exit 2 with
one line saying what to install. The same functions are importable (clm_perplexity, mlm_loss,
lm_eval_score) for in-process sweeps.
"""
from .errors import EvalError, MissingDependency
from .lm_harness import lm_eval_score, read_lm_eval_results


def clm_perplexity(*args, **kwargs):
    """Causal-LM perplexity of a model directory on a text (diffract.eval.clm.perplexity)."""
    from .clm import perplexity

    return perplexity(*args, **kwargs)


def embedding_similarity(*args, **kwargs):
    """Mean cosine similarity of sentence embeddings to a reference model's
    (diffract.eval.embedding.embedding_similarity)."""
    from .embedding import embedding_similarity as run

    return run(*args, **kwargs)


def mlm_loss(*args, **kwargs):
    """Masked-LM loss of an encoder model directory on a text (diffract.eval.mlm.masked_loss)."""
    from .mlm import masked_loss

    return masked_loss(*args, **kwargs)


__all__ = ["clm_perplexity", "mlm_loss", "embedding_similarity", "lm_eval_score", "read_lm_eval_results", "EvalError", "MissingDependency"]
