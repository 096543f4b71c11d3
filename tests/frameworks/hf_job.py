"""Hugging Face jobs on gloo (CPU), models from a tiny config, no downloads, no annotation."""

from __future__ import annotations

from typing import Any

import torch

import commlens
from tests.frameworks.observe import profiled_ops

STEPS = 3
ACCUM = 2


def tiny_gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    return GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Random token rows; labels = inputs."""

    def __init__(self, n: int) -> None:
        gen = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 64, (n, 16), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def trainer_job(rank: int, world: int, out: str, work: str) -> dict[str, int]:
    """``Trainer`` with DDP (gloo) and gradient accumulation, logging every step."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import Trainer, TrainingArguments

    # No clock alignment: its send/recv ping-pong would be in the profiler's records.
    with commlens.capture(out, align_clocks=False):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            args = TrainingArguments(
                output_dir=work,
                use_cpu=True,
                ddp_backend="gloo",
                max_steps=STEPS,
                per_device_train_batch_size=2,
                gradient_accumulation_steps=ACCUM,
                logging_steps=1,
                save_strategy="no",
                report_to=[],
                disable_tqdm=True,
                dataloader_num_workers=0,
            )
            trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=Tokens(64))
            trainer.train()
        seen = profiled_ops(prof)
        torch.distributed.destroy_process_group()
    return seen


def accelerate_job(rank: int, world: int, out: str) -> dict[str, int]:
    """An ``accelerate`` loop: prepare, accumulate, backward, a gathered loss metric."""
    from accelerate import Accelerator
    from torch.profiler import ProfilerActivity, profile

    with commlens.capture(out, align_clocks=False):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            acc = Accelerator(cpu=True, gradient_accumulation_steps=ACCUM)
            model = tiny_gpt2()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            data = torch.utils.data.DataLoader(Tokens(8 * ACCUM * STEPS), batch_size=2)
            model, opt, data = acc.prepare(model, opt, data)
            for batch in data:
                with acc.accumulate(model):
                    loss = model(**batch).loss
                    acc.backward(loss)
                    opt.step()
                    opt.zero_grad()
                if acc.sync_gradients:
                    acc.gather(loss.detach()).mean()  # the logged metric, after the step
        seen = profiled_ops(prof)
        torch.distributed.destroy_process_group()
    return seen


def fsdp2_job(rank: int, world: int, out: str) -> dict[str, int]:
    """FSDP2 (``fully_shard``) over each GPT-2 block and the whole model."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.profiler import ProfilerActivity, profile

    with commlens.capture(out, align_clocks=False):
        dist.init_process_group("gloo")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model = tiny_gpt2()
            for block in model.transformer.h:
                fully_shard(block)
            fully_shard(model)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            data = Tokens(8)
            for step in range(STEPS):
                ids = data.ids[step * 2 : step * 2 + 2]
                model(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad()
        seen = profiled_ops(prof)
        dist.destroy_process_group()
    return seen
