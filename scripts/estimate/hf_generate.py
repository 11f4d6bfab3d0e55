"""Hugging Face generate (greedy, a tiny GPT-2 built from its config, 20 new
tokens) with its peaks as JSON: for real on a GPU, and under gpumem estimate
(docs/estimate.md, "values that never depended on data"). Needs transformers.
usage: hf_generate.py"""
import json, torch
from transformers import GPT2Config, GPT2LMHeadModel
cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256)
torch.manual_seed(0)
m = GPT2LMHeadModel(cfg).cuda().eval()
x = torch.randint(0, 1000, (2, 16), device="cuda")
out = m.generate(x, max_new_tokens=20, do_sample=False, pad_token_id=0)
print(json.dumps({"shape": list(out.shape), "max_memory_allocated": torch.cuda.max_memory_allocated(),
                  "max_memory_reserved": torch.cuda.max_memory_reserved()}))
