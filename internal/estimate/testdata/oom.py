# A card that is too small: the allocation that does not fit raises
# torch.OutOfMemoryError, which the script may catch.
import torch

x = torch.empty(30 << 20, dtype=torch.uint8, device="cuda")
try:
    y = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError as e:
    assert "Tried to allocate 100.00 MiB" in str(e), str(e)
    print("caught")
z = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")  # uncaught: the script dies here
