"""A Hugging Face ``Trainer`` job with DDP and gradient accumulation, untouched by commlens.

    commlens trace --out runs/hf -- torchrun --nproc_per_node 2 examples/hf_trainer.py

A 4-layer GPT-2 built from a config (nothing is downloaded) on random tokens,
gloo on CPU. Needs ``transformers`` (``pip install transformers accelerate``).
"""

from __future__ import annotations

import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Random token rows; the labels are the inputs."""

    def __init__(self, rows: int, seq_len: int, vocab: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (rows, seq_len), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def model_config() -> GPT2Config:
    """A 4-layer GPT-2 small enough for CPU ranks."""
    return GPT2Config(
        n_layer=4,
        n_embd=256,
        n_head=4,
        vocab_size=4096,
        n_positions=128,
        bos_token_id=0,
        eos_token_id=0,
    )


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    torch.manual_seed(0)
    config = model_config()
    with tempfile.TemporaryDirectory() as work:
        args = TrainingArguments(
            output_dir=work,
            use_cpu=True,
            ddp_backend="gloo",
            max_steps=steps,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
        )
        trainer = Trainer(
            model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens(512, 128, 4096)
        )
        trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
