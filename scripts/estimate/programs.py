"""The programs gpumem estimate is checked on (scripts/estimate/run.sh):
small training and inference steps in plain torch, of the kinds of the
shared fixtures. Each is build() -> model (on the CPU), optimizer(model),
step(model, opt, i) for STEPS[name] steps; setup() runs first."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=8192, d=512, layers=6, heads=8, ctx=1024, ckpt=False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2
        self.ckpt = ckpt

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
        return self.head(self.ln(x))


def gpt_step(bs, seq, amp=None, accum=1):
    def step(model, opt, i):
        for _ in range(accum):
            x = torch.randint(0, 8192, (bs, seq), device="cuda")
            if amp:
                with torch.autocast("cuda", dtype=amp):
                    logits = model(x)
            else:
                logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), x.view(-1)) / accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def convnet():
    def blk(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                             nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
                         blk(64, 64, 1), blk(64, 128, 2), blk(128, 256, 2), blk(256, 512, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


def conv_step(bs, amp=None):
    def step(model, opt, i):
        x = torch.randn(bs, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (bs,), device="cuda")
        if amp:
            with torch.autocast("cuda", dtype=amp):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def generate_step(bs, prompt, new):
    @torch.no_grad()
    def step(model, opt, i):
        idx = torch.randint(0, 8192, (bs, prompt), device="cuda")
        for _ in range(new):  # no KV cache: the whole sequence each token, as a naive generate
            nxt = model(idx)[:, -1, :].argmax(-1, keepdim=True)
            idx = torch.cat([idx, nxt], dim=1)
    return step


def mlp():
    return nn.Sequential(nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 8192), nn.GELU(), nn.Linear(8192, 2048))


def mlp_step(model, opt, i):
    x = torch.randn(256, 2048, device="cuda")
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


adamw = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4)
adamw_fused = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
none = lambda m: None


def bf16(model):
    return model.to(torch.bfloat16)


def frac(f):
    def setup():
        torch.cuda.set_per_process_memory_fraction(f)
    return setup


# name: (build, optimizer, step, steps, setup, PYTORCH_CUDA_ALLOC_CONF)
PROGRAMS = {
    "mlp_adamw": (mlp, adamw, mlp_step, 3, None, ""),
    "gpt_fp32_adamw": (GPT, adamw, gpt_step(8, 512), 3, None, ""),
    "gpt_amp_bf16": (GPT, adamw, gpt_step(8, 512, amp=torch.bfloat16), 3, None, ""),
    "gpt_pure_bf16_fused": (lambda: bf16(GPT()), adamw_fused, gpt_step(8, 512), 3, None, ""),
    "gpt_grad_accum": (GPT, adamw, gpt_step(4, 512, accum=4), 2, None, ""),
    "gpt_checkpoint": (lambda: GPT(ckpt=True), adamw, gpt_step(8, 1024), 3, None, ""),
    "gpt_expandable": (GPT, adamw, gpt_step(8, 512), 3, None, "expandable_segments:True"),
    "gpt_seq1024_split": (GPT, adamw, gpt_step(4, 1024), 3, None, "max_split_size_mb:64"),
    "gpt_generate": (GPT, none, generate_step(4, 64, 32), 1, None, ""),
    "convnet_sgd": (convnet, sgd, conv_step(32), 3, None, ""),
    "convnet_amp_adamw": (convnet, adamw, conv_step(32, amp=torch.bfloat16), 3, None, ""),
    "gpt_fraction_oom": (GPT, adamw, gpt_step(8, 512), 3, frac(0.003), ""),
}
