"""Try gpumem_hooks' trainer callbacks on one GPU, with no download: a
tiny PyTorch Lightning module or a tiny Hugging Face GPT-2 built from a
config. A framework that is not installed is skipped, and said so.

    gpumem hooks OUTDIR/gpumem_hooks.py
    PYTHONPATH=OUTDIR python3 python/examples/callbacks_train.py OUTDIR lightning|hf

writes OUTDIR/pl[.rankR].step2.pickle and OUTDIR/pl[.rankR].end.pickle (hf.*
for the Hugging Face Trainer) and prints torch.cuda.max_memory_reserved():

    lightning max_memory_reserved 123456
"""

import os
import sys

import torch

import gpumem_hooks  # written by `gpumem hooks DIR/gpumem_hooks.py`, DIR on PYTHONPATH

out = sys.argv[1]


def lightning_run():
    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl
        except ImportError:
            print("lightning: not installed, skipped")
            return

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512))

        def training_step(self, batch, i):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(256, 512)), batch_size=32)
    cb = gpumem_hooks.lightning_callback(os.path.join(out, "pl.pickle"), steps=[2])
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_steps=4, callbacks=[cb], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Tiny(), data)
    print(f"lightning max_memory_reserved {torch.cuda.max_memory_reserved()}", flush=True)


def hf_run():
    try:
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    except ImportError:
        print("transformers: not installed, skipped")
        return
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=128))
    ids = torch.randint(0, 1000, (64, 128))
    data = [{"input_ids": r, "labels": r} for r in ids]
    args = TrainingArguments(output_dir=os.path.join(out, "hf_out"), max_steps=4, per_device_train_batch_size=8,
                             report_to=[], save_strategy="no", logging_strategy="no")
    cb = gpumem_hooks.hf_callback(os.path.join(out, "hf.pickle"), steps=[2])
    Trainer(model=model, args=args, train_dataset=data, callbacks=[cb]).train()
    print(f"hf max_memory_reserved {torch.cuda.max_memory_reserved()}", flush=True)


if __name__ == "__main__":
    {"lightning": lightning_run, "hf": hf_run}[sys.argv[2]]()
