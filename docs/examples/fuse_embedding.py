"""The fuse step of docs/fixing-baked-sizes.md: the seed's ``fuse_embedding`` and two rewrites of it.

Each sample's ``[640, 256]`` row is its text up to where the image starts, the image's tokens, the rest of
its text, and zeros to the end. The original builds that row with ``torch.cat`` of slices whose sizes are
Python ints, so XLA sees each combination of sizes as another graph and compiles it again. The rewrites
pass the sizes as data (tensors on the device) and keep every shape fixed:

- :func:`fuse_gather`: one index tensor per batch (built on the host from the ints) and one ``gather``;
- :func:`fuse_masks`: the sizes as a small tensor, masks over the fixed maximum (``IMAGE_MAX`` image
  tokens, ``SEQ`` positions) and two matrix products that pick each position's row.

Run it (torch_xla on the CPU: ``PJRT_DEVICE=CPU python docs/examples/fuse_embedding.py --steps 12``) to see
the compiles of each version over the same random samples and that all three give the same rows; it prints
one JSON line. tests/e2e/test_fixing_baked_sizes_e2e.py runs it.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Sequence

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

SEQ = 640  # positions per fused row (the LLM's padded input)
HIDDEN = 256  # embedding width
IMAGE_MAX = 256  # image tokens at most
TEXT_MAX = SEQ - IMAGE_MAX  # text tokens at most
BATCH = 4

Sample = tuple[int, int, int]  # (image_start, image_tokens, text_length), Python ints per sample
Fuse = Callable[[torch.Tensor, torch.Tensor, Sequence[Sample]], torch.Tensor]


def fuse_embedding(image: torch.Tensor, text: torch.Tensor, samples: Sequence[Sample]) -> torch.Tensor:
    """The seed's pattern: slices sized by Python ints, so every new combination is a new graph.

    ``image``: ``[B, IMAGE_MAX, HIDDEN]``, ``text``: ``[B, TEXT_MAX, HIDDEN]``; the result:
    ``[B, SEQ, HIDDEN]``."""
    rows = []
    for b, (start, n_image, n_text) in enumerate(samples):
        pad = text.new_zeros(SEQ - n_image - n_text, HIDDEN)
        rows.append(torch.cat([text[b, :start], image[b, :n_image], text[b, start:n_text], pad]))
    return torch.stack(rows)


def gather_index(samples: Sequence[Sample]) -> torch.Tensor:
    """For each sample and position, the row it takes from ``[text; image; zero]`` (built on the host: the
    ints become data, not shapes)."""
    zero_row = TEXT_MAX + IMAGE_MAX
    index = torch.full((len(samples), SEQ), zero_row, dtype=torch.int64)
    for b, (start, n_image, n_text) in enumerate(samples):
        index[b, :start] = torch.arange(start)
        index[b, start : start + n_image] = TEXT_MAX + torch.arange(n_image)
        index[b, start + n_image : n_image + n_text] = torch.arange(start, n_text)
    return index


def fuse_gather(image: torch.Tensor, text: torch.Tensor, samples: Sequence[Sample]) -> torch.Tensor:
    """Fix 1: one ``gather`` from a fixed-size source by an index tensor; every shape is fixed."""
    zero = text.new_zeros(text.shape[0], 1, HIDDEN)
    source = torch.cat([text, image, zero], dim=1)  # [B, TEXT_MAX + IMAGE_MAX + 1, HIDDEN]
    index = gather_index(samples).to(text.device)
    return torch.gather(source, 1, index.unsqueeze(-1).expand(-1, -1, HIDDEN))


def fuse_masks(image: torch.Tensor, text: torch.Tensor, samples: Sequence[Sample]) -> torch.Tensor:
    """Fix 2: the sizes as a tensor, masks over the fixed maximum and one-hot products; every shape is fixed.

    Position ``p`` takes image token ``p - start`` while ``start <= p < start + n_image``, text token ``p``
    before the image and text token ``p - n_image`` after it (up to ``n_image + n_text``), else zeros."""
    sizes = torch.tensor(samples, dtype=torch.int64).to(text.device)  # [B, 3]
    start, n_image, n_text = (sizes[:, i, None, None] for i in range(3))  # each [B, 1, 1]
    p = torch.arange(SEQ, device=text.device)[None, :, None]  # [1, SEQ, 1]
    j_image = torch.arange(IMAGE_MAX, device=text.device)[None, None, :]
    j_text = torch.arange(TEXT_MAX, device=text.device)[None, None, :]
    in_image = (p >= start) & (p < start + n_image)
    pick_image = in_image & (j_image == p - start)  # [B, SEQ, IMAGE_MAX]
    before = (p < start) & (j_text == p)
    after = (p >= start + n_image) & (p < n_image + n_text) & (j_text == p - n_image)
    pick_text = before | after  # [B, SEQ, TEXT_MAX]
    return torch.bmm(pick_image.to(image.dtype), image) + torch.bmm(pick_text.to(text.dtype), text)


def random_samples(rng: random.Random) -> list[Sample]:
    """One batch of sizes, edge sizes included (an image at position 0, text that ends where it starts)."""
    samples = []
    for _ in range(BATCH):
        n_image = rng.randint(1, IMAGE_MAX)
        n_text = rng.randint(0, TEXT_MAX)
        start = rng.choice([0, n_text, rng.randint(0, n_text)])
        samples.append((start, n_image, n_text))
    return samples


def compiles() -> int:
    """Graphs compiled so far in this process (torch_xla's ``UncachedCompile`` counter)."""
    return int(met.counter_value("UncachedCompile") or 0)


def run(fuse: Fuse, batches: Sequence[Sequence[Sample]], seed: int) -> tuple[int, list[torch.Tensor]]:
    """Run ``fuse`` on each batch between two ``mark_step()``s, as the seed's loop does: the compiles it
    caused and its results (on the host)."""
    device = torch_xla.device()
    gen = torch.Generator().manual_seed(seed)
    image = torch.randn(BATCH, IMAGE_MAX, HIDDEN, generator=gen).to(device)
    text = torch.randn(BATCH, TEXT_MAX, HIDDEN, generator=gen).to(device)
    xm.mark_step()
    before = compiles()
    results = []
    for samples in batches:
        fused = fuse(image, text, samples)
        xm.mark_step()
        results.append(fused.cpu())
    return compiles() - before, results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="batches of 4 random samples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    batches = [random_samples(rng) for _ in range(args.steps)]
    compiled, expected = run(fuse_embedding, batches, args.seed)
    report: dict[str, object] = {
        "steps": args.steps,
        "size_combinations": len({tuple(batch) for batch in batches}),
        "fuse_embedding": {"compiles": compiled},
    }
    for fuse in (fuse_gather, fuse_masks):
        compiled, got = run(fuse, batches, args.seed)
        same = all(torch.allclose(g, e) for g, e in zip(got, expected, strict=True))
        report[fuse.__name__] = {"compiles": compiled, "same_values": same}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
