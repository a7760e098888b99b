"""Load time and forward time of realistic-size pretrained checkpoints, read through ``models.hf``.

``python -m benchmarks.checkpoint_load [--models smollm-135m gpt2-124m ...] [--tokens 128] [--json out.json]``
builds each model with random weights in ``transformers`` (its real config: SmolLM-135M's sizes,
GPT-2 small's, ...; nothing is downloaded), saves it with ``save_pretrained`` to a temporary folder
(deleted afterwards), then measures ``models.hf.load`` (config, headers, mapping checks, allocation,
reading every tensor) and the median forward of one sequence of ``--tokens`` tokens, on the catalogue
model and on ``transformers``' own model, with the same threads. The parameter cap
``models.hf.DEFAULT_MAX_PARAMS`` is chosen from these figures (a 128-token forward well under a
second on 2 cores). Needs ``transformers`` (requirements-dev). Ends with the ``machine:`` line.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time

import torch

from kernels.tools.busy import BusyWatch
from kernels.tools.measure import median_ms

MODELS = {
    "smollm-135m": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            vocab_size=49152,
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            max_position_embeddings=2048,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
        ),
    ),
    "gpt2-124m": ("GPT2Config", "GPT2LMHeadModel", dict()),
    "qwen2-like-200m": (
        "Qwen2Config",
        "Qwen2ForCausalLM",  # at the cap: the largest served by default
        dict(
            vocab_size=32000,
            hidden_size=768,
            intermediate_size=2816,
            num_hidden_layers=20,
            num_attention_heads=12,
            num_key_value_heads=4,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
        ),
    ),
    "bert-base": ("BertConfig", "BertForMaskedLM", dict()),
    "t5-small": ("T5Config", "T5ForConditionalGeneration", dict(decoder_start_token_id=0)),
}


def run(name: str, tokens: int, repeats: int) -> dict:
    import transformers

    from models.hf import load

    config_cls, model_cls, fields = MODELS[name]
    torch.manual_seed(0)
    hf = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**fields)).eval()
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as folder:
        hf.save_pretrained(folder, safe_serialization=True)
        t0 = time.perf_counter()
        ckpt = load(folder, max_params=10**10)
        load_s = time.perf_counter() - t0
    ids = torch.randint(0, ckpt.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    enc_dec = ckpt.config.architecture == "encoder_decoder"
    with torch.no_grad():
        ours = median_ms(lambda: ckpt.logits(ids, decoder_ids=ids if enc_dec else None), repeats=repeats)
        theirs = median_ms(
            lambda: hf(input_ids=ids, decoder_input_ids=ids) if enc_dec else hf(input_ids=ids), repeats=repeats
        )
        want = hf(input_ids=ids, decoder_input_ids=ids).logits if enc_dec else hf(input_ids=ids).logits
        err = float((ckpt.logits(ids, decoder_ids=ids if enc_dec else None) - want).abs().max() / want.abs().max())
    out = dict(
        model=name,
        family=ckpt.family,
        params=ckpt.n_params,
        load_s=load_s,
        forward_ms=ours,
        transformers_forward_ms=theirs,
        rel_err=err,
        tokens=tokens,
        threads=torch.get_num_threads(),
    )
    return out


def agreement(seeds: int = 3) -> dict:
    """``{family: max relative logits error}`` of the tests' tiny models against ``transformers``: each
    saved as one file and as shards, ``seeds`` random batches of 2 x 16 tokens, with and without padding."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models" / "hf"))
    from hf_models import FAMILIES, VOCAB, make

    from models.hf import load

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max())

    out = {}
    for family in FAMILIES:
        errs = []
        for shard in (None, "20KB"):
            with tempfile.TemporaryDirectory(prefix="ckpt-agree-") as folder:
                hf = make(family, folder, max_shard_size=shard)
                ckpt = load(folder)
                enc_dec = ckpt.config.architecture == "encoder_decoder"
                for seed in range(seeds):
                    g = torch.Generator().manual_seed(seed)
                    ids = torch.randint(1, VOCAB, (2, 16), generator=g)
                    tgt = torch.randint(1, VOCAB, (2, 9), generator=g)
                    mask = torch.ones_like(ids)
                    mask[1, 9:] = 0
                    padded = ids.masked_fill(mask == 0, 0)
                    with torch.no_grad():
                        if enc_dec:
                            errs.append(
                                rel(ckpt.logits(ids, decoder_ids=tgt), hf(input_ids=ids, decoder_input_ids=tgt).logits)
                            )
                            errs.append(
                                rel(
                                    ckpt.logits(padded, mask, tgt),
                                    hf(input_ids=padded, attention_mask=mask, decoder_input_ids=tgt).logits,
                                )
                            )
                        else:
                            errs.append(rel(ckpt.logits(ids), hf(input_ids=ids).logits))
                            real = mask.bool()
                            errs.append(
                                rel(
                                    ckpt.logits(padded, mask)[real],
                                    hf(input_ids=padded, attention_mask=mask).logits[real],
                                )
                            )
        out[family] = max(errs)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.checkpoint_load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=["smollm-135m", "gpt2-124m"], choices=list(MODELS))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="write the rows as JSON to this path")
    ap.add_argument(
        "--agreement",
        action="store_true",
        help="also print each family's largest relative logits error on the tests' tiny models",
    )
    args = ap.parse_args(argv)
    if args.agreement:
        print("| family (tiny test model) | max relative logits error vs transformers (float32) |\n|---|---|")
        for family, err in agreement().items():
            print(f"| {family} | {err:.1e} |", flush=True)
    rows = []
    print(
        f"| model | family | parameters | load (s) | forward {args.tokens} tokens (ms) | transformers (ms) "
        "| max rel. logits error |"
    )
    print("|---|---|---|---|---|---|---|")
    with BusyWatch() as watch:
        for name in args.models:
            r = run(name, args.tokens, args.repeats)
            gc.collect()  # the previous model's memory back before the next is built
            rows.append(r)
            print(
                f"| {name} | {r['family']} | {r['params'] / 1e6:.1f} M | {r['load_s']:.2f} | {r['forward_ms']:.0f} "
                f"| {r['transformers_forward_ms']:.0f} | {r['rel_err']:.1e} |",
                flush=True,
            )
    print(f"torch threads: {torch.get_num_threads()}; {watch.note()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
