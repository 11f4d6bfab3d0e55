# A module built on the CPU moves to the card with .cuda() and .to("cuda"),
# weights tied stay tied, and a training step runs.
import torch
import torch.nn as nn

emb = nn.Embedding(1000, 256)
head = nn.Linear(256, 1000, bias=False)
head.weight = emb.weight
m = nn.ModuleDict({"emb": emb, "head": head, "lin": nn.Linear(256, 256)})
m.cuda()
assert m["emb"].weight is m["head"].weight
assert m["lin"].weight.device.type == "cuda" and m["lin"].weight.is_cuda
params = list(m.parameters())
assert len(params) == 3, len(params)
# 1000*256*4 (tied) + 256*256*4 + 256*4, each rounded to 512
want = 1024000 + 262144 + 1024
assert torch.cuda.memory_allocated() == want, (torch.cuda.memory_allocated(), want)
m2 = nn.Linear(4, 4).to("cuda")
assert m2.weight.is_cuda
opt = torch.optim.AdamW(m.parameters())
x = torch.randint(0, 1000, (8, 16)).to("cuda")
loss = m["head"](m["lin"](m["emb"](x))).float().logsumexp(-1).mean()
loss.backward()
opt.step()
assert len(opt.state) == 3
print("to cuda ok")
