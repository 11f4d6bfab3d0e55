# The memory API of the virtual card against PyTorch's allocator rules
# (docs/pytorch-allocator.md): requests round up to 512 B; up to 1 MiB
# they take 2 MiB small-pool segments, up to 10 MiB 20 MiB segments.
import torch

MiB = 1 << 20
assert torch.cuda.is_available() and torch.cuda.device_count() == 1
props = torch.cuda.get_device_properties(0)
total = props.total_memory
# the H200's usable bytes: its total less the CUDA context measured there
usable = total - 648871936
assert torch.cuda.mem_get_info() == (usable, total), torch.cuda.mem_get_info()
assert torch.cuda.memory_allocated() == 0 and torch.cuda.memory_reserved() == 0

a = torch.empty(1000, device="cuda")  # 4000 B -> 4096 B, a 2 MiB segment
assert torch.cuda.memory_allocated() == 4096, torch.cuda.memory_allocated()
assert torch.cuda.memory_reserved() == 2 * MiB
b = torch.empty(MiB // 4 + 1, device="cuda")  # 1 MiB + 4 B -> 1049088 B, a 20 MiB segment
assert torch.cuda.memory_allocated() == 4096 + 1049088
assert torch.cuda.memory_reserved() == 22 * MiB
c = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")  # fits the 20 MiB segment's rest
assert torch.cuda.memory_reserved() == 22 * MiB
assert torch.cuda.mem_get_info() == (usable - 22 * MiB, total)
del b, c
assert torch.cuda.memory_allocated() == 4096
assert torch.cuda.max_memory_allocated() == 4096 + 1049088 + 2 * MiB
torch.cuda.empty_cache()  # the 20 MiB segment is free: it goes back
assert torch.cuda.memory_reserved() == 2 * MiB
torch.cuda.reset_peak_memory_stats()
assert torch.cuda.max_memory_allocated() == 4096
s = torch.cuda.memory_stats()
assert s["num_device_alloc"] == 2 and s["num_device_free"] == 1, s
assert "PyTorch CUDA memory summary" in torch.cuda.memory_summary()
v = a[10:20]  # a view: no allocation
assert torch.cuda.memory_allocated() == 4096
del a
assert torch.cuda.memory_allocated() == 4096  # the view keeps the storage
del v
assert torch.cuda.memory_allocated() == 0
# what cannot be known (random values on the card): a stand-in
x = torch.randn(3, device="cuda").sum().item()
assert x == 0.0
assert torch.ones(3, device="cuda").sum().item() == 3.0  # known: no stand-in
s1 = torch.cuda.Stream()
with torch.cuda.stream(s1):
    assert torch.cuda.current_stream() == s1
torch.cuda.synchronize()
snap = torch.cuda.memory._snapshot()
assert snap["segments"][0]["total_size"] == 2 * MiB
print("memory api ok")
