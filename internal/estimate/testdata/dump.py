# _dump_snapshot writes a snapshot gpumem replay reads; the argument is the path.
import sys
import torch

torch.cuda.memory._record_memory_history()
m = torch.nn.Linear(512, 512).cuda()
x = torch.randn(64, 512, device="cuda")
m(x).sum().backward()
torch.cuda.empty_cache()
torch.cuda.memory._dump_snapshot(sys.argv[1])
print("reserved peak", torch.cuda.max_memory_reserved())
