"""`python -m diffract_spectral.eval EVALUATOR ...`: the shipped evaluators as commands for `diffract sweep --eval`.
Each prints its result as one JSON line last (its score the line's last number); problems print one line
`diffract.eval: error: ...` on stderr and exit 2."""
from __future__ import annotations

import argparse
import json
import sys

from .errors import EvalError


def _common_model_options(p: argparse.ArgumentParser):
    p.add_argument("model", help="Hugging Face model directory ({model} in a sweep)")
    p.add_argument("--text", required=True, help="UTF-8 text file to score")
    p.add_argument("--max-tokens", type=int, help="score only the first N tokens of the text")
    p.add_argument("--max-length", type=int, help="window length (default: the model's context length)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    p.add_argument("--tokenizer", help="tokenizer directory or name when the model directory has none")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m diffract_spectral.eval", description=__doc__)
    sub = top.add_subparsers(dest="evaluator", required=True)
    clm = sub.add_parser("clm-perplexity", help="causal-LM perplexity on a text file")
    _common_model_options(clm)
    clm.add_argument("--stride", type=int, help="tokens each window advances (default: the window length)")
    clm.add_argument("--batch-size", type=int, default=1, help="windows per forward pass (default 1)")
    mlm = sub.add_parser("mlm-loss", help="masked-LM loss on a text file (encoder models)")
    _common_model_options(mlm)
    mlm.add_argument("--mask-prob", type=float, default=0.15, help="probability a token is masked (0.15)")
    mlm.add_argument("--seed", type=int, default=0, help="seed of the masked positions (0)")
    mlm.add_argument("--batch-size", type=int, default=8, help="chunks per forward pass (default 8)")
    emb = sub.add_parser("embedding-similarity",
                         help="mean cosine similarity of sentence embeddings to a reference model's")
    emb.add_argument("model", help="Hugging Face model directory ({model} in a sweep)")
    emb.add_argument("--text", required=True, help="UTF-8 text file, one sentence per line")
    emb.add_argument("--reference", required=True, help="the model to agree with (a sweep's unedited model)")
    emb.add_argument("--max-length", type=int, help="longest sentence in tokens (default: the model's limit)")
    emb.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass (default 32)")
    emb.add_argument("--device", default="cpu", help="torch device (default cpu)")
    emb.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    emb.add_argument("--tokenizer", help="tokenizer directory or name when the model directory has none")
    score = sub.add_parser("lm-eval-score", help="a metric from lm-evaluation-harness's results JSON")
    score.add_argument("results", help="results JSON, or the --output_path directory (newest results*.json)")
    score.add_argument("--task", help="task name (default: the only task)")
    score.add_argument("--metric", default="acc", help="metric, e.g. acc, acc_norm, exact_match,strict-match")
    run = sub.add_parser("lm-eval", help="run lm-evaluation-harness on a model and print one metric")
    run.add_argument("model", help="Hugging Face model directory ({model} in a sweep)")
    run.add_argument("--tasks", required=True, help="lm_eval --tasks")
    run.add_argument("--task", help="the task whose metric is the score (default: --tasks when one)")
    run.add_argument("--metric", default="acc", help="metric (default acc)")
    run.add_argument("--device", default="cpu")
    run.add_argument("--batch-size", default="1")
    run.add_argument("--limit", type=float, help="lm_eval --limit (examples per task)")
    run.add_argument("--num-fewshot", type=int)
    run.add_argument("--model-args", default="", help="more lm_eval --model_args, e.g. dtype=bfloat16")
    return top


def evaluate(args: argparse.Namespace, extra) -> dict:
    if args.evaluator == "clm-perplexity":
        from .clm import perplexity

        return perplexity(args.model, args.text, max_tokens=args.max_tokens, stride=args.stride,
                          max_length=args.max_length, batch_size=args.batch_size, device=args.device,
                          dtype=args.dtype, tokenizer=args.tokenizer)
    if args.evaluator == "mlm-loss":
        from .mlm import masked_loss

        return masked_loss(args.model, args.text, mask_prob=args.mask_prob, seed=args.seed,
                           max_tokens=args.max_tokens, max_length=args.max_length, batch_size=args.batch_size,
                           device=args.device, dtype=args.dtype, tokenizer=args.tokenizer)
    if args.evaluator == "embedding-similarity":
        from .embedding import embedding_similarity

        return embedding_similarity(args.model, args.text, reference=args.reference, max_length=args.max_length,
                                    batch_size=args.batch_size, device=args.device, dtype=args.dtype,
                                    tokenizer=args.tokenizer)
    from .lm_harness import lm_eval_score, run_lm_eval

    if args.evaluator == "lm-eval-score":
        return lm_eval_score(args.results, args.task, args.metric)
    return run_lm_eval(args.model, args.tasks, args.metric, args.task, args.device, args.batch_size,
                       args.limit, args.num_fewshot, args.model_args, extra)


def main(argv=None) -> int:
    p = parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:  # lm-eval: what follows `--` goes to lm_eval as is
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    args = p.parse_args(argv)
    if extra and args.evaluator != "lm-eval":
        p.error("arguments after -- are passed to lm_eval only")
    try:
        result = evaluate(args, extra)
    except EvalError as e:
        print(f"diffract.eval: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
