# Values that never depended on data are known (docs/estimate.md, "values"):
# small tensors made from constants, and what is computed from them alone.
import torch

x = torch.zeros(4, device="cuda")
x += 1
assert x[0].item() == 1.0, x[0].item()
assert torch.arange(10, device="cuda")[-1].item() == 9
y = x[1:]  # a view, then a write with an unknown value: no longer known
x.add_(torch.randn(1000, 1000, device="cuda").sum())
assert y[0].item() == 0.0  # the stand-in
mask = torch.tensor([1, 1, 0], device="cuda")  # from the CPU: known
assert int(mask.sum()) == 2

# a generate loop as Hugging Face's: it stops when every sequence is done,
# by length or by a stop token; tokens are unknown, so a stop token is
# assumed absent and the loop runs to its length
w = torch.randn(64, 100, device="cuda")
ids = torch.randint(0, 100, (2, 5), device="cuda")
unfinished = torch.ones(2, dtype=torch.long, device="cuda")
eos = torch.tensor([7], device="cuda")
steps, max_len = 0, 5 + 12
while True:
    logits = torch.nn.functional.one_hot(ids[:, -1], 64).float() @ w
    nxt = logits.argmax(-1)
    ids = torch.cat([ids, nxt[:, None]], dim=1)
    steps += 1
    is_done = torch.full((2,), ids.shape[1] >= max_len, device="cuda", dtype=torch.bool)
    is_done = is_done | torch.isin(ids[:, -1:], eos).any(dim=-1)
    unfinished = unfinished & ~is_done
    if unfinished.max() == 0:
        break
assert steps == 12, steps
print("values ok")
