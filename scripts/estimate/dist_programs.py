"""The several-rank programs gpumem estimate --nproc is checked on
(scripts/estimate/dist_run.sh): DDP, FSDP2 and ZeRO-style sharding of the
small models of programs.py, as torchrun scripts. Each is
wrap(model) -> model (after .cuda()), optimizer(model), steps; the step is
programs.py's."""
import torch
import torch.distributed as dist

import programs


def ddp(**kw):
    def wrap(model):
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[torch.cuda.current_device()], **kw)
    return wrap


def fsdp2(reshard=True):
    def wrap(model):
        from torch.distributed.fsdp import fully_shard
        for b in model.blocks:
            fully_shard(b, reshard_after_forward=reshard)
        fully_shard(model, reshard_after_forward=reshard)
        return model
    return wrap


def zero(model):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4)


def gpt():
    return programs.GPT(layers=4)


# name: (build, wrap, optimizer, step, steps)
PROGRAMS = {
    "ddp_mlp": (programs.mlp, ddp(), programs.adamw, programs.mlp_step, 3),
    "ddp_gpt": (gpt, ddp(), programs.adamw, programs.gpt_step(4, 256), 3),
    "ddp_gpt_bucket_view": (gpt, ddp(gradient_as_bucket_view=True), programs.adamw, programs.gpt_step(4, 256), 3),
    "fsdp2_gpt": (gpt, fsdp2(True), programs.adamw, programs.gpt_step(4, 256), 3),
    "fsdp2_gpt_keep": (gpt, fsdp2(False), programs.adamw, programs.gpt_step(4, 256), 3),
    "zero_gpt": (gpt, ddp(), zero, programs.gpt_step(4, 256), 3),
}
