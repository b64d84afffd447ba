"""The PyTorch GPT-2 model that whale-train is measured against: one
definition shared by train-vs-pytorch.py (single rank) and torch_gpt_dist.py
(DDP / FSDP / ZeroRedundancyOptimizer ranks), so both benchmarks compare
against exactly the same network.

Same architecture as whale-train's gpt presets: pre-LN blocks, fused qkv,
causal attention, GELU-tanh MLP of width 4d, final LayerNorm, output head
tied to the token embedding; fp32. The model's forward returns the mean
cross-entropy loss.

attn="manual" writes attention out (softmax of masked scores, what torch
1.x users run); attn="sdpa" calls F.scaled_dot_product_attention with
is_causal=True (torch >= 2.0: its fused flash/memory-efficient CPU kernels,
what a careful torch 2 user runs); attn="auto" takes sdpa where it exists.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def has_sdpa():
    return hasattr(F, "scaled_dot_product_attention")


def make_gpt(L, C, H, V, T, attn="manual"):
    """GPT with L blocks of width C, H heads, vocabulary V, context T.

    Returns (model, Block): the block class is what FSDP's
    transformer_auto_wrap_policy wraps one unit at a time."""

    if attn == "auto":
        attn = "sdpa" if has_sdpa() else "manual"
    if attn == "sdpa" and not has_sdpa():
        raise RuntimeError("torch %s has no scaled_dot_product_attention" % torch.__version__)
    sdpa = attn == "sdpa"

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            s.qkv, s.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            s.fc, s.mproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            # a plain attribute, not a buffer: DDP broadcasts buffers and
            # gloo has no bool broadcast; FSDP would shard/move it too
            s.mask = torch.tril(torch.ones(T, T, dtype=torch.bool))

        def forward(s, x):
            b, t, c = x.shape                      # x: [b, t, C]
            q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
            q = q.view(b, t, H, c // H).transpose(1, 2)   # [b, H, t, C/H]
            k = k.view(b, t, H, c // H).transpose(1, 2)
            v = v.view(b, t, H, c // H).transpose(1, 2)
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # [b, H, t, C/H]
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / (c // H) ** 0.5)   # [b, H, t, t]
                att = att.masked_fill(~s.mask[:t, :t], float("-inf")).softmax(-1)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(b, t, c)
            x = x + s.proj(y)
            return x + s.mproj(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(s):
            super().__init__()
            s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            s.h = nn.ModuleList([Block() for _ in range(L)])
            s.lnf = nn.LayerNorm(C)

        def forward(s, idx, tgt):                  # idx, tgt: [b, t] token ids
            x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
            for blk in s.h:
                x = blk(x)
            logits = s.lnf(x) @ s.wte.weight.t()   # [b, t, V]
            return F.cross_entropy(logits.view(-1, V), tgt.view(-1))

    return GPT(), Block
