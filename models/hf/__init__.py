"""Pretrained Hugging Face checkpoints as catalogue models: read without ``transformers``, never unpickled.

```python
from models.hf import load, plan
p = plan("path/to/folder")          # config.json + safetensors headers only: family, ModelConfig,
                                    # parameter count, bytes, notes; ConfigError for anything refused
ckpt = load("path/to/folder")       # Checkpoint: name, family, config, model (eval), tokenizer,
                                    # n_params, source, notes
ckpt.logits(ids, attention_mask=None, decoder_ids=None)   # (B, L, vocab)
ckpt.tokenizer.encode(text); ckpt.tokenizer.pieces(ids)    # readable tokens: "␣the", "↵", "##ing"
save_llama(model, cfg, "out/folder", tokenizer_json=byte_tokenizer_json())  # a catalogue Llama, written back
save_qwen3(...), save_olmo2(...)    # the same with a per-head / whole-projection query-key norm
save_gemma2(...), save_gemma3(...)  # a Gemma-shaped catalogue model (sandwich RMSNorm, GeGLU, embed_scale)
save_deepseek_v3(...)               # an MLA + moe_deepseek catalogue model (dense first layers: ':dense')
save_gpt_oss(...)                   # a gpt-oss-shaped one (sinks, clamped-SwiGLU experts, YaRN)
save_llama4(...)                    # chunked / NoPE layers, rms_rope q/k norm, moe_llama4 experts, :dense layers
```

Families (``FAMILIES``): ``gpt2``; ``llama`` (Llama, SmolLM, Mistral, Qwen2); ``qwen3``; ``olmo2``; ``gemma2``;
``gemma3`` (text-only ``gemma3_text``); ``deepseek_v3`` (MLA and DeepSeekMoE); ``qwen3_next`` (Gated DeltaNet
and gated attention layers, Qwen's MoE); ``gpt_oss`` (sinks, YaRN,
clamped-SwiGLU experts); ``llama4`` (``llama4_text``, and the language model of a multimodal ``llama4``);
``falcon_h1`` (attention and Mamba-2 side by side in every layer: ``parallel_hybrid``); ``mamba2`` (Mamba-2
state-space mixers); ``bert`` (masked-LM logits); ``t5`` (encoder-decoder). Each maps
``config.json`` onto catalogue choices and every tensor onto a catalogue parameter (``models/hf/<family>.py``);
what the catalogue cannot express is refused by name. The mapping table, what is refused and the parameter cap:
docs/checkpoints.md.
"""

from .byte_tokenizer import byte_tokenizer_json
from .export import save_gemma2, save_gemma3, save_gpt_oss, save_llama, save_olmo2, save_qwen3
from .export_deepseek import save_deepseek_v3
from .export_llama4 import save_llama4
from .loader import DEFAULT_MAX_PARAMS, FAMILIES, MODEL_TYPES, Checkpoint, Plan, load, plan
from .tokenizer import Tokenizer

__all__ = [
    "load",
    "plan",
    "Checkpoint",
    "Plan",
    "Tokenizer",
    "FAMILIES",
    "MODEL_TYPES",
    "DEFAULT_MAX_PARAMS",
    "save_llama",
    "save_qwen3",
    "save_olmo2",
    "save_gemma2",
    "save_gemma3",
    "save_deepseek_v3",
    "save_gpt_oss",
    "save_llama4",
    "byte_tokenizer_json",
]
